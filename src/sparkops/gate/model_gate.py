"""The model-level gate: the whole model under a candidate registry against the pinned reference.

For each checked depth d, the engine is reset, the seeded prompt's first d tokens are prefilled in
one forward, and a few more tokens are decoded one by one; the logits of every one of those
positions are compared with the golden run's: KL(ref || cand) from float64 softmaxes, and top-1
agreement (a disagreement is excused only where the reference's best two logits nearly tie). A
depth passes when its worst position's KL, its mean KL and its top-1 agreement are all within the
model row of the tolerance table for the registry's loosest claim; the verdict is the worst depth's. The candidate runs under poisoning, so an output
an op leaves unwritten shows up as NaN logits.

The golden run is the reference registry (every op's NumPy reference) in float64; for the pinned
model it must itself agree with reference.lock, so "against the reference" means against the pin.
A selection claiming bit-identity is also proven at model level: the model is run again with the
claimed-equal implementation in its place, and every logit must be the same bytes.

Expert routing is pinned to the golden run's choices (gate/routing.py says why and how): the candidate's
router must choose a top-k of its own scores, and where its choice differs from the golden's - a near tie
that flipped - the golden's experts are used, so that the logits compare numbers with numbers instead of
the model's sensitivity to one flipped decision. Flips are counted and reported; `free_routing` turns it off.

Op-level check records are not required here (this gate judges the composition, and is how a
candidate registry is evaluated before anything is swapped in); the report lists the selections
that still lack a valid record, which the engine will refuse until `sparkops swap` proves them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import BadInput
from ..ops import OP_NAMES, get_contract
from ..registry.file import Registry
from ..registry.plan import Plan, make_plan
from .metrics import kl_and_top1
from .poison import poisoned
from .routing import Pinning, RoutingReport, n_moe_layers, recording, replaying
from .tolerances import ModelRule, activation_dtype, loosest, model_rule_for, router_tie

#: depths checked by default, per preset. k3-nano: KDA prefill chunks are 64 tokens (spec 3.4), so a
#: single token, one short of a chunk, exactly one chunk, one past it and two chunks plus one; every
#: forward runs both layer kinds (KKKM). Larger models take their depths as arguments.
DEFAULT_DEPTHS = {"k3-nano": (1, 63, 64, 65, 129)}
DECODE_STEPS = 3
PROMPT_SEED = 20260801
MAX_DEPTH = 131072


def prompt_tokens(vocab: int, n: int, seed: int = PROMPT_SEED) -> list[int]:
    """The seeded prompt: n token ids drawn uniformly from the vocabulary (never a constant).

    Drawn in blocks of 1024 with their own seeds, so a shorter prompt is a prefix of a longer one.
    """
    blocks = [np.random.default_rng([seed, b]).integers(0, vocab, 1024) for b in range((n + 1023) // 1024)]
    return [int(t) for t in np.concatenate(blocks)[:n]] if blocks else []


def parse_depths(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        depths = tuple(sorted({int(x) for x in str(text).replace(",", " ").split()}))
    except ValueError:
        raise BadInput(f"--depths '{text}': give positive integers, e.g. --depths 1,63,64,65,4096") from None
    if not depths or depths[0] < 1 or depths[-1] > MAX_DEPTH:
        raise BadInput(f"--depths '{text}': each depth must lie in 1..{MAX_DEPTH}")
    return depths


def default_depths(model_name: str) -> tuple[int, ...]:
    if model_name not in DEFAULT_DEPTHS:
        raise BadInput(f"model '{model_name}' has no default depths; pass --depths (e.g. --depths 1,4096,32768,131072)")
    return DEFAULT_DEPTHS[model_name]


# -- running the model -------------------------------------------------------------------------------
def run_depths(engine: Any, tokens: list[int], depths: tuple[int, ...], decode_steps: int, *,
               captured: bool = False, pinning: Pinning | None = None, label: str = "") -> dict[int, torch.Tensor]:
    """{depth: logits [depth + decode_steps, V] float64 on the CPU}, one fresh sequence per depth.

    captured=True decodes through the engine's DecodeStep - the unit that generation replays as one
    CUDA graph - captured on CUDA (its eager body elsewhere), teacher-forced with the pinned tokens, so
    the gate judges the step that actually runs, not only eager calls.
    pinning: the routing pin the engine's moe_router goes through (told where each depth's sequence starts).
    label: when given, each depth's run is announced on stderr and its time reported (a golden run on the NumPy
    reference takes minutes to hours at the 48B's depths: the user sees which run is going and how fast).
    """
    import sys
    import time

    out = {}
    for d in depths:
        t0 = time.perf_counter()
        if label:
            print(f"model gate: {label}: depth {d} ({d} tokens prefilled, {decode_steps} decoded) ...",
                  file=sys.stderr, flush=True)
        if d + decode_steps > len(tokens):
            raise BadInput(f"depth {d} + {decode_steps} decode steps needs {d + decode_steps} prompt tokens, "
                           f"only {len(tokens)} are pinned")
        engine.reset()
        if pinning is not None:
            pinning.start(d)
        rows = [engine.prefill(torch.tensor(tokens[:d], dtype=torch.int64))]  # [d, V]
        if captured and decode_steps:
            rows += _captured_decode(engine, tokens[d:d + decode_steps])
        else:
            for j in range(decode_steps):
                rows.append(engine.decode(torch.tensor([tokens[d + j]], dtype=torch.int64)))  # [1, V]
        out[d] = torch.cat([r.detach().to("cpu", torch.float64) for r in rows])
        if label:
            print(f"model gate: {label}: depth {d} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr,
                  flush=True)
    return out


#: decode steps a capture runs (and undoes) before recording the graph
CAPTURE_WARMUP = 2


def _captured_decode(engine: Any, tokens: list[int]) -> list[torch.Tensor]:
    from ..engine.decode_step import DecodeStep

    step = DecodeStep(engine)
    if engine.device.type == "cuda":
        step.capture(warmup=CAPTURE_WARMUP)
    rows = []
    for t in tokens:
        step.token.fill_(int(t))  # teacher forcing: the pinned token, not the sampled one
        step()
        rows.append(step.logits.float().clone())  # [1, V]; a graph-owned buffer, copied before the next replay
    return rows


def reference_registry() -> Registry:
    """Every op on its NumPy reference (CPU): the golden registry."""
    reg = Registry.empty(Path("<reference>"))
    for op in OP_NAMES:
        reg.set(op, "cpu", get_contract(op).reference)
    return reg


def _engine(weights: Any, plan: Plan, max_context: int, dtype: torch.dtype,
            cache_dtype: torch.dtype | None = None) -> Any:
    from ..dispatch import Ops
    from ..engine import Engine

    return Engine(weights, Ops(plan), max_context=max_context, dtype=dtype, cache_dtype=cache_dtype)


_GOLDEN: dict[tuple, torch.Tensor] = {}
_TAPES: dict[tuple, list] = {}  # the golden run's expert choices per depth (RoutingPin.tape entries)


def golden_logits(weights: Any, digest: str, tokens: list[int], depths: tuple[int, ...], decode_steps: int,
                  catalog: Any, golden: Registry | None = None, device: str = "cpu",
                  tapes: dict[int, list] | None = None) -> dict[int, torch.Tensor]:
    """The golden run, cached per process and per depth: the reference registry in float64 on the CPU,
    or a `golden` registry (whose selections must all hold valid check records) in float32 on `device`.
    `tapes`, if given, receives each depth's recorded expert choices (models with MoE layers)."""
    which = (str(golden.path), device) if golden is not None else ("<reference>", "cpu")
    keys = {d: (digest, tuple(tokens[:d + decode_steps]), d, decode_steps, which) for d in depths}
    missing = tuple(d for d in depths if keys[d] not in _GOLDEN)
    if missing:
        if golden is None:
            _announce_reference_golden(weights, missing, decode_steps)
            plan, dtype = make_plan(reference_registry(), catalog, "cpu", verify_checks=False), torch.float64
        else:
            plan, dtype = make_plan(golden, catalog, device, verify_checks=True), torch.float32
        eng = _engine(weights, plan, max(missing) + decode_steps, dtype)
        rec = recording(eng.ops, weights)
        label = ("golden run on the float64 NumPy reference (CPU; --golden-registry runs a proven registry on the "
                 "device instead)" if golden is None else f"golden run under {golden.path} on {device}")
        for d, rows in run_depths(eng, tokens, missing, decode_steps, pinning=rec, label=label).items():
            _GOLDEN[keys[d]] = rows
            if rec.pin is not None:
                _TAPES[keys[d]] = rec.pin.tape[d]
    if tapes is not None:
        tapes.update({d: _TAPES[keys[d]] for d in depths if keys[d] in _TAPES})
    return {d: _GOLDEN[keys[d]] for d in depths}


def _announce_reference_golden(weights: Any, depths: tuple[int, ...], decode_steps: int) -> None:
    """Say on stderr, before it starts, what a golden run on the float64 NumPy reference will cost: its FLOPs (the
    cost model's, from the loaded weights) over a float64 matmul rate measured here, a lower bound on its time (the
    reference runs op by op, slower than one large matmul). A 48B gate at depth 16384 is hours; the line names
    --golden-registry, the proven registry on the device that such a model needs."""
    import sys
    import time

    from ..bench.costs import token_cost

    try:
        flops = sum(token_cost(weights.config, "prefill", tokens=max(d, 1), weights=weights).flops * d
                    + decode_steps * token_cost(weights.config, "decode", depth=d, weights=weights).flops
                    for d in depths)
    except Exception:  # noqa: BLE001 - a model the cost model cannot price: say nothing rather than guess
        return
    a = torch.rand(384, 384, dtype=torch.float64)
    a @ a  # warm (thread pool, caches): the rate must not be understated, or the bound would not be one
    t0 = time.perf_counter()
    for _ in range(4):
        a @ a
    rate = 4 * 2 * 384 ** 3 / max(time.perf_counter() - t0, 1e-9)
    seconds = flops / rate
    when = f"{seconds:.2g} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else \
        f"{seconds / 3600:.1f} h"
    print(f"model gate: the golden run on the float64 NumPy reference (CPU): {flops / 1e12:.3g} TFLOP at ~"
          f"{rate / 1e9:.3g} GFLOP/s (a float64 matmul here) - at least {when}; --golden-registry FILE runs a proven "
          f"registry on the device instead", file=sys.stderr, flush=True)


# -- judging --------------------------------------------------------------------------------------
@dataclass
class DepthResult:
    depth: int
    positions: int
    kl_max: float
    kl_mean: float
    top1: float  # fraction of positions whose argmax agrees (near-ties excused)
    worst_position: int
    passed: bool


def judge_depths(ref: dict[int, torch.Tensor], cand: dict[int, torch.Tensor], rule: ModelRule) -> list[DepthResult]:
    results = []
    for d in sorted(ref):
        kl, agree = kl_and_top1(ref[d], cand[d], rule.tie)
        worst = int(np.argmax(kl))
        kl_max = float(kl[worst])
        top1 = float(agree.mean())
        kl_mean = float(np.mean(kl))
        results.append(DepthResult(d, len(kl), kl_max, kl_mean, top1, worst,
                                   kl_max <= rule.kl_max and kl_mean <= rule.kl_mean_max and top1 >= rule.top1_min))
    return results


def worst_depth(results: list[DepthResult]) -> DepthResult | None:
    """The depth that decides the verdict: a failing one first, then the largest KL, then the lowest top-1."""
    return max(results, key=lambda r: (not r.passed, r.kl_max, -r.top1), default=None)


@dataclass
class BitIdentity:
    op: str
    impl: str
    target: str
    passed: bool
    detail: str


@dataclass
class ModelOutcome:
    model: str
    registry: str
    device: str
    variant: str
    rule: ModelRule
    depths: list[DepthResult]
    bit_identity: list[BitIdentity] = field(default_factory=list)
    unproven: list[str] = field(default_factory=list)  # selections the engine would refuse (no valid record)
    lock_problems: list[str] = field(default_factory=list)  # the golden run disagrees with reference.lock
    selections: dict[str, str] = field(default_factory=dict)
    error: str | None = None  # the candidate raised instead of producing logits
    routing: RoutingReport | None = None  # what the candidate's routers did under the golden's pin

    @property
    def worst(self) -> DepthResult | None:
        return worst_depth(self.depths)

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.depths) and all(r.passed for r in self.depths) and \
            all(b.passed for b in self.bit_identity) and not self.lock_problems and \
            (self.routing is None or self.routing.passed)

    @property
    def summary(self) -> str:
        w = self.worst
        if self.error:
            return f"model {self.model} under {self.registry} on {self.device}: the candidate failed to run: {self.error}"
        if w is None:
            return f"model {self.model} under {self.registry}: no depth checked - a check of nothing is a failure"
        verdict = "PASS" if self.passed else "FAIL"
        routing = "" if self.routing is None or self.routing.passed else \
            f"; {self.routing.inconsistent} routing decision(s) not a top-k of the router's own scores"
        return (f"model {self.model} under {self.registry} on {self.device} ({self.variant}): worst depth {w.depth}: "
                f"KL {w.kl_max:.3g} (limit {self.rule.kl_max:g}), top-1 {w.top1:.3f} (min {self.rule.top1_min:g})"
                f"{routing}: {verdict}")

    @property
    def report(self) -> str:
        lines = [self.summary]
        for r in self.depths:
            mark = "ok" if r.passed else "FAIL"
            lines.append(f"  depth {r.depth:>6}: {r.positions} positions, KL max {r.kl_max:.3g} (at position "
                         f"{r.worst_position}), mean {r.kl_mean:.3g}, top-1 {r.top1:.3f} {mark}")
        if "[engine]" in self.selections:
            lines.append(f"  engine: {self.selections['[engine]']} (the registry's [engine] options)")
        if self.routing is not None:
            lines.append(f"  {self.routing.line()}")
        for b in self.bit_identity:
            mark = "ok" if b.passed else "FAIL"
            lines.append(f"  bit-identity {b.op}={b.impl} vs {b.target}: {b.detail} {mark}")
        for p in self.lock_problems:
            lines.append(f"  golden run vs reference.lock: {p}")
        for u in self.unproven:
            lines.append(f"  note: {u}")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {"model": self.model, "registry": self.registry, "device": self.device, "variant": self.variant,
                "rule": self.rule.pinned(), "passed": self.passed,
                "worst_depth": dataclasses.asdict(self.worst) if self.worst else None,
                "depths": [dataclasses.asdict(r) for r in self.depths],
                "bit_identity": [dataclasses.asdict(b) for b in self.bit_identity],
                "lock_problems": self.lock_problems, "unproven": self.unproven, "selections": self.selections,
                "routing": self.routing.as_json() if self.routing else None, "error": self.error}


def model_check(model: str, registry: Registry, *, device: str = "cpu", depths: tuple[int, ...] | None = None,
                decode_steps: int = DECODE_STEPS, catalog: Any = None, dtype: torch.dtype | None = None,
                golden: Registry | None = None, weights: Any = None, captured: bool = False,
                cache_dtype: torch.dtype | None = None, free_routing: bool = False) -> ModelOutcome:
    """Run the model under `registry` at every depth and judge it against the golden run.

    Routing is pinned to the golden's choices (gate/routing.py) unless `free_routing`, the step is
    `captured` (a CUDA graph cannot take them per step) or the model has no MoE layers."""
    from ..engine import load_model
    from ..plugins import load_catalog
    from . import lockref
    from .digests import weights_digest

    if device == "cuda" and not torch.cuda.is_available():
        raise BadInput("--device cuda was asked for, but this machine has no CUDA device; use --device cpu")
    catalog = catalog or load_catalog()
    weights = weights if weights is not None else load_model(model)
    name = weights.config.name
    pins = lockref.model_pins()
    if pins is not None and pins.get("preset") == name:
        digest = weights_digest(weights)  # every byte: the pinned model is small
    else:  # a large model: the reader's sampled digest of its file identifies it (hashing 28 GB would take minutes)
        digest = str(weights.metadata.get("weight_digest") or f"{name}@{id(weights)}")
    pinned = pins is not None and pins.get("weights_digest") == digest
    depths = depths or (tuple(pins["depths"]) if pinned else default_depths(name))
    if max(depths) + decode_steps > weights.config.context_length:
        raise BadInput(f"depth {max(depths)} + {decode_steps} decode steps exceeds {name}'s context of "
                       f"{weights.config.context_length}")
    tokens = list(pins["prompt_tokens"]) if pinned and len(pins["prompt_tokens"]) >= max(depths) + decode_steps \
        else prompt_tokens(weights.config.vocab_size, max(depths) + decode_steps)
    plan = make_plan(registry, catalog, device, verify_checks=False)
    plan.require()
    runs = {op: e.runs for op, e in plan.entries.items()}
    variants = [_variant(i, catalog) for e in plan.entries.values() for i in e.all_runs]  # per-type ones too
    if dtype == torch.bfloat16 or cache_dtype in (torch.bfloat16, torch.float16):
        variants.append("bf16")  # 16-bit activations or a 16-bit MLA cache: judged by the bf16 rule
    variant = loosest(variants)
    rule = model_rule_for(variant)
    cand_dtype = dtype or activation_dtype(variant)  # an fp8 cache comes with its attention's claim, fp8_cache
    tapes: dict[int, list] = {}
    ref = golden_logits(weights, digest, tokens, depths, decode_steps, catalog, golden, device, tapes=tapes)
    lock_problems = lockref.check_golden(pins, ref, tokens, decode_steps) if pinned and golden is None else []
    outcome = ModelOutcome(model=name, registry=str(registry.path), device=device, variant=variant, rule=rule,
                           depths=[], lock_problems=lock_problems,
                           selections={op: i.key + "".join(f"; {t}: {x.name}"
                                                           for t, x in plan.entries[op].by_type.items())
                                       for op, i in runs.items()})
    if plan.engine_on:  # the graph differs from the plain one too: the report says how
        outcome.selections["[engine]"] = ", ".join(plan.engine_on)
    checked = make_plan(registry, catalog, device, verify_checks=True)
    outcome.unproven = [f"{op}: {e.error}" for op, e in checked.entries.items() if e.error]
    max_context = max(depths) + decode_steps + (CAPTURE_WARMUP if captured else 0)
    why_free = ("asked for (--free-routing)" if free_routing else
                "the captured step replays one launch sequence and cannot take the golden's choices" if captured else
                "the model has no MoE layers" if not n_moe_layers(weights) else "")
    tie = router_tie(variant)

    def make(a_plan: Plan) -> tuple[Any, Pinning]:
        """An engine for `a_plan`, its moe_router through a fresh replay of the golden's choices."""
        eng = _engine(weights, a_plan, max_context, cand_dtype, cache_dtype)
        pins = Pinning(None, replay=True) if why_free else replaying(eng.ops, n_moe_layers(weights), tapes, tie)
        return eng, pins

    try:
        eng, pins = make(plan)
        with poisoned():
            cand = run_depths(eng, tokens, depths, decode_steps, captured=captured, pinning=pins,
                              label=f"candidate under {registry.path} on {device}")
        outcome.routing = pins.pin.finish() if pins.pin else RoutingReport(pinned=False, why_free=why_free)
        outcome.depths = judge_depths(ref, cand, rule)
        outcome.bit_identity = _bit_identity(plan, catalog, cand, tokens, depths, decode_steps, make)
    except Exception as exc:  # noqa: BLE001 - a candidate that crashes fails the gate, with why
        outcome.error = f"{type(exc).__name__}: {exc}"
    return outcome


def _variant(impl: Any, catalog: Any) -> str | None:
    from .check import resolve_claim

    return resolve_claim(impl, catalog)[1]


def _bit_identity(plan: Plan, catalog, cand, tokens, depths, decode_steps, make) -> list[BitIdentity]:
    """For every selection claiming bit-identity: the logits with its target in its place must be equal bytes.

    First one rerun with every claim's target in place at once (`make(plan)` gives the engine and its routing pin,
    the same pin as the candidate's). If all the claims hold, the joint swap leaves every logit's bytes as they were,
    and equal bytes there prove every claim on these inputs: only two claims' differences cancelling to the byte in
    every logit at every depth could hide one. When the bytes differ, each claim is rerun alone, so that the verdict
    names the one that is false. Why joint first: the 48B's steps hold eight or nine such claims, and one rerun each
    (~23 s at depths 1, 64, 4096) was ~210 s of every bench's gate (session 24), silent in the log."""
    out, swaps = [], []
    claims = [(op, None, entry.runs) for op, entry in plan.entries.items()] + \
        [(op, t, i) for op, entry in plan.entries.items() for t, i in entry.by_type.items()]
    for op, qtype, impl in claims:  # qtype: a per-type selection ([ops.OP.DEVICE.by_type.TYPE])
        if impl is None or impl.claim.kind != "bit_identical":
            continue
        target = catalog.get(op, impl.claim.to)
        if qtype is not None and plan.device not in target.devices:
            out.append(BitIdentity(op, f"{impl.name} ({qtype})", target.name, False,
                                   f"its target {target.key} cannot run natively on {plan.device}"))
            continue
        swaps.append((op, qtype, impl, target))

    def swapped(chosen) -> Plan:
        """The plan with the targets of the `chosen` claims in place of their implementations."""
        entries = dict(plan.entries)
        for op, qtype, _, target in chosen:
            entry = entries[op]
            if qtype is None:
                trip = plan.device == "cuda" and "cuda" not in target.devices
                entries[op] = dataclasses.replace(entry, runs=target, round_trip=trip)
            else:
                entries[op] = dataclasses.replace(entry, by_type={**entry.by_type, qtype: target})
        return dataclasses.replace(plan, entries=entries)

    def differing(chosen, label: str) -> dict[int, int]:
        """{depth: positions whose logits' bytes differ from the candidate's} with the `chosen` targets in place."""
        eng, pins = make(swapped(chosen))
        with poisoned():
            other = run_depths(eng, tokens, depths, decode_steps, pinning=pins, label=label)
        differ = {d: int((cand[d].view(torch.int64) != other[d].view(torch.int64)).any(dim=-1).sum())
                  for d in depths}
        return {d: n for d, n in differ.items() if n}

    def shown(qtype, impl) -> str:
        return impl.name + (f" ({qtype})" if qtype else "")

    before = ""
    if len(swaps) > 1:
        if not differing(swaps, f"bit-identity, all {len(swaps)} claims' targets in place at once"):
            return out + [BitIdentity(op, shown(qtype, impl), target.name, True,
                                      f"every logit the same bytes (one rerun with all {len(swaps)} claims' targets "
                                      "in place)") for op, qtype, impl, target in swaps]
        before = "the joint rerun differed, so each claim was rerun alone: "
    for op, qtype, impl, target in swaps:
        bad = differing([(op, qtype, impl, target)], f"bit-identity, {op}={shown(qtype, impl)} vs {target.name}")
        detail = "every logit the same bytes" if not bad else \
            "logits differ at " + ", ".join(f"depth {d} ({n} positions)" for d, n in bad.items())
        out.append(BitIdentity(op, shown(qtype, impl), target.name, not bad, before + detail))
    return out
