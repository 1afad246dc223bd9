"""The model gate for a sharded run: N ranks against the single-process engine on the same weights.

Same positions and the same judgement as `gate.model_gate`: for every depth a fresh sequence is
prefilled in one forward and decoded a few tokens; KL(single || sharded) and top-1 agreement of
every position's logits, judged by MODEL_RULES for the registry's loosest claim and reported at
the worst depth. The reference is the single-process Engine under the same registry and dtype
(so what is judged is the sharding alone: the split weights, the reduce points, the dispatch).
The ranks run under poisoning, like any candidate. A run that raises is a failed gate with the
reason, never a crash of the caller. Expert routing is pinned to the single process's choices as in the
single-device gate (gate/routing.py): every rank replays the same choices, its routers must choose a
top-k of their own scores, and flips (near ties that an all-reduce's summation order tipped) are counted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from ..gate.model_gate import DECODE_STEPS, DepthResult, judge_depths, prompt_tokens, run_depths, worst_depth
from ..gate.routing import RoutingReport, recording
from ..gate.tolerances import ModelRule, loosest, model_rule_for, router_tie
from .launch import PoolSpec, ShardedPool
from .worker import dtype_of


@dataclass
class ShardedOutcome:
    model: str
    world: int
    device: str
    backend: str
    variant: str
    rule: ModelRule
    placement: str
    depths: list[DepthResult] = field(default_factory=list)
    error: str | None = None
    routing: RoutingReport | None = None  # rank 0's routers under the single process's pin

    @property
    def worst(self) -> DepthResult | None:
        return worst_depth(self.depths)

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.depths) and all(d.passed for d in self.depths) and \
            (self.routing is None or self.routing.passed)

    @property
    def summary(self) -> str:
        head = f"{self.model} over {self.world} ranks ({self.backend} on {self.device}, {self.placement})"
        if self.error:
            return f"{head}: the sharded run failed: {self.error}"
        w = self.worst
        if w is None:
            return f"{head}: no depth checked - a check of nothing is a failure"
        verdict = "PASS" if self.passed else "FAIL"
        routing = f"; {self.routing.line()}" if self.routing is not None and self.routing.pinned else ""
        return (f"{head} vs one process: worst depth {w.depth}: KL {w.kl_max:.3g} (limit {self.rule.kl_max:g}), "
                f"top-1 {w.top1:.3f} (min {self.rule.top1_min:g}){routing}: {verdict}")

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "world": self.world, "device": self.device, "backend": self.backend,
                "variant": self.variant, "rule": self.rule.pinned(), "placement": self.placement,
                "passed": self.passed, "error": self.error, "summary": self.summary,
                "worst_depth": asdict(self.worst) if self.worst else None,
                "depths": [asdict(d) for d in self.depths],
                "routing": self.routing.as_json() if self.routing is not None else None}


def registry_variant(registry: str | None, device: str) -> str:
    """The loosest claim variant of the registry's selections on `device` (what the gate judges by)."""
    from ..gate.check import resolve_claim
    from ..paths import default_registry
    from ..plugins import load_catalog
    from ..registry.file import Registry
    from ..registry.plan import make_plan

    catalog = load_catalog()
    plan = make_plan(Registry.load(registry or default_registry()), catalog, device, verify_checks=False)
    return loosest([resolve_claim(i, catalog)[1] for e in plan.entries.values() for i in e.all_runs])


def single_process_weights(spec: PoolSpec, device: str):
    """The whole model the ranks' shards were cut from (or drawn as), for the one-process reference."""
    src = spec.source
    if src.kind == "synth":
        from ..synth import synth_weights

        return synth_weights(src.name, src.mix, src.seed)
    if src.kind == "ondevice":
        from ..config import load_preset
        from .ondevice_synth import synth_full

        return synth_full(load_preset(src.name), src.mix, src.seed, torch.device(device))
    if src.kind == "gguf":
        from ..gguf.reader import load_gguf

        return load_gguf(src.name)
    from ..engine import load_model

    return load_model(src.name)


def sharded_check(spec: PoolSpec, depths: tuple[int, ...], *, decode_steps: int = DECODE_STEPS,
                  pool: ShardedPool | None = None) -> ShardedOutcome:
    """Judge `spec`'s sharded run against one process (see the module docstring)."""
    from ..engine import Engine
    from ..engine.loading import make_ops

    variant = registry_variant(spec.registry, spec.device)
    if spec.dtype in ("bfloat16", "bf16"):
        variant = loosest([variant, "bf16"])
    rule = model_rule_for(variant)
    weights = single_process_weights(spec, spec.device)
    tokens = prompt_tokens(weights.config.vocab_size, max(depths) + decode_steps)
    placement = f"dispatch={spec.placement.dispatch}" + \
        (f", LATE reduce at {'+'.join(sorted(spec.placement.late))}" if spec.placement.late else "")
    out = ShardedOutcome(weights.config.name, spec.world, spec.device, spec.resolved_backend, variant, rule, placement)
    ops = make_ops(spec.device, spec.registry)
    single = Engine(weights, ops, max_context=max(depths) + decode_steps, dtype=dtype_of(spec.dtype),
                    cache_dtype=dtype_of(spec.cache_dtype))
    rec = recording(single.ops, weights)
    ref = run_depths(single, tokens, depths, decode_steps, pinning=rec)
    tape = rec.pin.tape if rec.pin is not None else None
    del single
    own = pool is None
    try:
        if own:
            pool = ShardedPool(spec)
        else:
            pool.call("configure", spec.placement)
        got = pool.call("run_depths", tokens, list(depths), decode_steps, True, tape,
                        router_tie(variant))[0]
        out.routing = RoutingReport.from_json(got["routing"]) if got["routing"] else \
            RoutingReport(pinned=False, why_free="the model has no MoE layers")
        out.depths = judge_depths(ref, {d: torch.from_numpy(v) for d, v in got["logits"].items()}, rule)
    except Exception as exc:  # noqa: BLE001 - a sharded run that crashes fails the gate, with why
        out.error = f"{type(exc).__name__}: {exc}"
    finally:
        if own and pool is not None:
            pool.close()
    return out
