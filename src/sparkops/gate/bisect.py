"""Which selection makes a registry fail the model gate.

    suspects = bisect_registry("FILE.gguf", candidate, base, device="cuda", golden=base)

A registry that fails the model gate names no culprit: every op feeds every later one. Here each op
where the candidate's selection differs from the base registry's is tried alone, on top of the base,
under the same model gate (same weights, depths, golden run); the ops whose single swap fails are
the suspects. Interactions (two selections that pass alone and fail together) show up as "every op
passes alone" while the whole registry fails: the report says so rather than blame an op.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from ..ops import OP_NAMES
from ..registry.file import Registry
from .model_gate import ModelOutcome, model_check


@dataclass
class Trial:
    op: str
    impl: str
    base_impl: str | None
    outcome: ModelOutcome

    @property
    def passed(self) -> bool:
        return self.outcome.passed


def differing(candidate: Registry, base: Registry, device: str) -> list[tuple[str, str, str | None]]:
    """(op, candidate impl, base impl) for every op the two registries select differently on `device`; a per-type
    selection the candidate makes differently is its own suspect, named "op@TYPE"."""
    out = []
    for op in OP_NAMES:
        c, b = candidate.selection(op, device), base.selection(op, device)
        if c is not None and (b is None or c.impl != b.impl):
            out.append((op, c.impl, b.impl if b else None))
        ct, bt = candidate.type_selections(op, device), base.type_selections(op, device)
        for qtype, sel in ct.items():
            if qtype not in bt or bt[qtype].impl != sel.impl:
                out.append((f"{op}@{qtype}", sel.impl, bt[qtype].impl if qtype in bt else None))
    return out


def one_swap(base: Registry, op: str, device: str, impl: str) -> Registry:
    """The base registry with one selection replaced, "op@TYPE" a per-type one (in memory; nothing is written)."""
    reg = Registry(base.path, copy.deepcopy(base.doc), base.text())
    name, _, qtype = op.partition("@")
    if qtype:
        reg.set_type(name, device, qtype, impl)
    else:
        reg.set(name, device, impl)
    return reg


def bisect_registry(model: str, candidate: Registry, base: Registry, *, device: str, weights: Any = None,
                    golden: Registry | None = None, **gate_args: Any) -> list[Trial]:
    """One model gate per differing op, each op alone on top of `base`; the weights are loaded once."""
    from ..engine import load_model

    weights = weights if weights is not None else load_model(model)
    if weights.embed.device.type != device:
        weights = weights.to(device)  # once, for every trial
    trials = []
    for op, impl, base_impl in differing(candidate, base, device):
        out = model_check(model, one_swap(base, op, device, impl), device=device, weights=weights, golden=golden,
                          **gate_args)
        trials.append(Trial(op, impl, base_impl, out))
    return trials
