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
        out = {"passed": self.passed, "registry": self.registry, "variant": self.variant, "rule": self.rule,
               "worst_depth": self.worst_depth, "worst_kl": self.worst_kl, "worst_top1": self.worst_top1,
               "depths": self.depths, "summary": self.summary, "routing": self.details.get("routing")}
        if self.details.get("reused"):
            out["reused"] = self.details["reused"]
        return out


def registry_variant(registry: str | Path, device: str) -> str:
    """The loosest claim variant among what the registry runs on `device` ('fp32', 'bf16', 'act_q8', 'fp8_cache')."""
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
    from ..gate.tolerances import activation_dtype

    return activation_dtype(registry_variant(registry, device))


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


# -- reusing a verdict (bench --reuse-gate) -----------------------------------------------------------------------
# A model gate of the 48B costs ~70 s on the H200, and a two-arm bench with a fill registry runs three: the fill
# registry and arm A are usually the ones the previous rung already gated. With --reuse-gate a passing verdict is
# kept on this machine under the sha256 of everything it judged, and given back only when all of it is the same:
# the model file (path, size, mtime), the registry (path and bytes: selections, check records, [engine] options), the
# golden's, the gate depths, the activation and cache dtypes, the device, torch, and the code (sparkops' and its
# built-in plugins' sources, and the source hash of every implementation the registries run). A failing verdict is
# never kept. The verdict given back says when it was made, and the bench row records that.

VERDICTS = "gate-verdicts"


def verdict_key(model_file: str | Path | None, registry: str | Path, *, device: str, dtype: torch.dtype,
                depths: tuple[int, ...] | None, golden: str | Path | None,
                cache_dtype: torch.dtype | None) -> tuple[str, dict[str, Any]] | None:
    """(sha256, what it covers) of one gate's inputs, or None when they cannot be pinned (weights not from a
    file)."""
    import hashlib
    import json

    from . import provenance

    if model_file is None or not Path(model_file).is_file():
        return None
    st = Path(model_file).stat()
    regs = [Path(registry)] + ([Path(golden)] if golden else [])
    inputs = {
        "model": {"path": str(Path(model_file).resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns},
        "registry": {"path": str(Path(registry).resolve()), "sha256": hashlib.sha256(Path(registry).read_bytes()).hexdigest()},
        "golden": hashlib.sha256(Path(golden).read_bytes()).hexdigest() if golden else None,
        "depths": list(depths) if depths is not None else None, "dtype": str(dtype),
        "cache_dtype": str(cache_dtype) if cache_dtype is not None else None,
        "device": provenance.device_name(device), "torch": torch.__version__,
        "code": provenance.code_digest(), "package": _package_digest(),
        "implementations": _implementation_hashes(regs, device),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest(), inputs


def _package_digest() -> str:
    """The code digest of the installed sparkops package's own sources (the engine, the gate): the checkout's does
    not see them when sparkops is installed from a wheel rather than from this tree."""
    import sparkops

    from .provenance import code_digest

    return code_digest(Path(sparkops.__file__).parent, ("**/*.py",))


def _implementation_hashes(registries: list[Path], device: str) -> dict[str, str]:
    """{op=impl: source hash} of everything the registries run on `device` (a plugin outside this tree too)."""
    from ..gate.records import source_hash
    from ..plugins import load_catalog
    from ..registry.file import Registry
    from ..registry.plan import make_plan

    catalog = load_catalog()
    out = {}
    for reg in registries:
        plan = make_plan(Registry.load(reg), catalog, device, verify_checks=False)
        for entry in plan.entries.values():
            for impl in entry.all_runs:
                out[impl.key] = source_hash(impl)
    return out


def _verdict_file(key: str) -> Path:
    from ..paths import cache_dir

    return cache_dir() / VERDICTS / f"{key}.json"


def load_verdict(key: str) -> GateVerdict | None:
    """The passing verdict kept under `key`, marked reused (with when it was made), or None."""
    import json

    f = _verdict_file(key)
    if not f.is_file():
        return None
    try:
        doc = json.loads(f.read_text())
        v = GateVerdict(**doc["verdict"])
    except (ValueError, KeyError, TypeError):
        return None  # a damaged entry is no verdict: the gate runs again (and rewrites it)
    if not v.passed:
        return None
    v.details = {**v.details, "reused": {"gated_at": doc.get("gated_at"), "key": key}}
    return v


def store_verdict(key: str, inputs: dict[str, Any], verdict: GateVerdict) -> None:
    """Keep a passing verdict under `key` (written whole or not at all)."""
    from dataclasses import asdict

    import json

    from ..atomic import write_atomic
    from .provenance import now

    if not verdict.passed:
        return
    f = _verdict_file(key)
    f.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(f, json.dumps({"gated_at": now(), "inputs": inputs, "verdict": asdict(verdict)}, indent=1,
                               default=str))
