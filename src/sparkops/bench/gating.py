"""The correctness gate the scoreboard runs before it times anything.

`gate(...)` runs the project's model-level gate (`sparkops.gate.model_gate.model_check`: KL(ref ||
cand) and top-1 per depth against the pinned reference, verdict at the worst depth) on the same
weights, registry, device and activation dtype that will be timed, and returns a `GateVerdict`.
A failing verdict makes the harness refuse to time, print or record anything (seed, lecture 10: a
"speedup" that reads the wrong rows is faster, and wrong).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckFailed


class GateRefused(CheckFailed):
    """The model gate failed (or could not run): no figure may be printed or recorded."""

    def __init__(self, message: str, verdict: "GateVerdict | None" = None, label: str | None = None):
        super().__init__(message)
        self.verdict = verdict
        self.label = label


@dataclass
class GateVerdict:
    passed: bool
    registry: str
    summary: str
    report: str
    variant: str = "fp32"
    rule: str = ""
    worst_depth: int | None = None
    worst_kl: float | None = None
    worst_top1: float | None = None
    depths: list[int] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "registry": self.registry, "variant": self.variant, "rule": self.rule,
                "worst_depth": self.worst_depth, "worst_kl": self.worst_kl, "worst_top1": self.worst_top1,
                "depths": self.depths, "summary": self.summary, "routing": self.details.get("routing")}


def registry_variant(registry: str | Path, device: str) -> str:
    """The loosest claim variant among what the registry runs on `device` ('fp32', 'bf16', 'act_q8')."""
    from ..gate.check import resolve_claim
    from ..gate.tolerances import loosest
    from ..plugins import load_catalog
    from ..registry.file import Registry
    from ..registry.plan import make_plan

    catalog = load_catalog()
    plan = make_plan(Registry.load(registry), catalog, device, verify_checks=False)
    plan.require()
    return loosest([resolve_claim(i, catalog)[1] for e in plan.entries.values() for i in e.all_runs])


def default_dtype(registry: str | Path, device: str) -> torch.dtype:
    """The activation dtype the gate would judge a registry in: bfloat16 for a bf16 registry, else float32."""
    return torch.bfloat16 if registry_variant(registry, device) == "bf16" else torch.float32


def gate(weights: Any, registry: str | Path, *, device: str, dtype: torch.dtype, depths: tuple[int, ...] | None,
         golden: str | Path | None = None, cache_dtype: torch.dtype | None = None) -> GateVerdict:
    """Run the model gate for one registry; never raises for a failing model (the verdict says so)."""
    from ..gate.model_gate import model_check
    from ..registry.file import Registry

    reg = Registry.load(registry)
    golden_reg = Registry.load(golden) if golden else None
    try:
        out = model_check(weights.config.name, reg, device=device, depths=depths, dtype=dtype, weights=weights,
                          golden=golden_reg, cache_dtype=cache_dtype)
    except CheckFailed as exc:  # the registry cannot even run: that is a failed gate, with its reason
        return GateVerdict(False, str(registry), f"model gate could not run under {registry}: {exc}", str(exc))
    from .provenance import display_path

    w = out.worst
    return GateVerdict(
        passed=out.passed, registry=display_path(registry), summary=out.summary, report=out.report, variant=out.variant,
        rule=str(out.rule), worst_depth=w.depth if w else None, worst_kl=w.kl_max if w else None,
        worst_top1=w.top1 if w else None, depths=[r.depth for r in out.depths],
        details={"golden": str(golden) if golden else "float64 NumPy reference", "unproven": out.unproven,
                 "routing": out.routing.as_json() if out.routing else None})
