"""The interleaved A/B harness: same box, same process, same weights, ABAB..., gate first.

    run = run_bench(request, weights)        # raises instead of returning a figure it cannot stand behind

Order of events, and why:
  1. the model gate runs on every registry to be timed (same weights, device, dtype); one failure
     and nothing is timed or printed (GateRefused; the CLI records the refusal itself, a ledger row
     with the verdict and no figure);
  2. the machine's ceilings are measured (bandwidth, matmul rate) for the roofline refusal;
  3. one Engine per registry, all sharing ONE weights object on the device (no second copy, no
     difference in placement between A and B), caches sized from the request - never a constant;
  4. per depth: each engine is filled with the same seeded random prompt and `verify_depth` proves
     the caches hold exactly D tokens; warm-up rounds (ABAB, untimed) then timed rounds (ABAB),
     each decode round restored to depth D first, so every round times steps D..D+N-1;
  5. after timing: the lengths must be D+N, the context rows unchanged (fingerprint), and no figure
     may exceed 100% of the roofline (AboveCeiling); a prefill's result must not depend on the chunk it
     was timed in (chunking.prove: the timed chunks against a size the gate proved, by the gate's rule).
A peer (llama-bench) joins each round after the sparkops arms: A, B, peer, A, B, peer, ...

With a fill registry (gated like the arms), the context up to each depth is prefilled once by an engine
on that registry and its whole state copied into every arm (same cache dtype), instead of each arm
prefilling it: a baseline too slow to prefill 131072 tokens itself can still be timed at that depth.
The timed work is unchanged (the arms' own decode steps or prefill), and the depth proof runs on each
arm's copy.

An arm named in `graph` decodes through the engine's DecodeStep captured as one CUDA graph (capture
happens after the depth proof, at depth D, and leaves the state as it was); each step is teacher-forced
with the same token as the eager arm (one device-to-device copy into the step's input, then one
replay), so the two arms do the same work, the graph arm's sampling included on top.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from ..dispatch import passed_of, passed_per_step
from ..engine import Engine
from ..engine.loading import make_ops
from ..errors import BadInput
from ..kvcache import attention_claims_fp8, is_fp8, registry_cache_dtype
from ..weights import ModelWeights, MoEWeights
from . import ceilings as ceil
from . import depth as dep
from . import chunking, gating, peer as peer_mod, provenance
from .costs import TokenCost, token_cost
from .roofline import point as roofline_point, refuse_above_ceiling
from .timing import RegionTimer, Spread, pair_ratios, sync, tier_of_pairs

PHASES = ("decode", "prefill")
#: default chunk of the untimed fills (llama.cpp's ubatch in anchors section 2)
FILL_CHUNK = 2048
#: device classes on which a decode step can be captured (tests add "cpu" to run the rounds' logic eagerly)
GRAPH_DEVICES = ("cuda",)
_DTYPES = {"float32": torch.float32, "f32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "f16": torch.float16}


def parse_dtype(text: str | None, option: str = "--dtype") -> torch.dtype | None:
    if text in (None, "auto"):
        return None
    if text not in _DTYPES:
        raise BadInput(f"{option} {text}: use auto, float32, bfloat16 or float16")
    return _DTYPES[text]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


@dataclass
class BenchRequest:
    phase: str  # "decode" | "prefill"
    depths: tuple[int, ...]  # decode: context depths; prefill: context cached before the prompt
    tokens: int  # decode: steps timed per round; prefill: prompt length
    registries: list[tuple[str, Path]]  # [("A", path)] or [("A", a), ("B", b)]
    repeats: int = 5
    warmup: int = 1
    seed: int = 0
    device: str = "cpu"
    dtype: torch.dtype | None = None  # None: each registry's gate dtype (bf16 registries in bfloat16)
    chunk: int | None = None  # prefill in chunks of this many tokens (fills and the timed prefill)
    gate_depths: tuple[int, ...] | None = None
    gate_golden: Path | None = None
    peer: peer_mod.PeerSpec | None = None
    peer_gguf: Path | None = None
    ceiling_bytes: int | None = None  # bandwidth micro-benchmark size (default: far beyond any cache)
    matmul_n: int | None = None
    graph: tuple[str, ...] = ()  # arms whose decode steps replay one captured CUDA graph per token
    fill_registry: Path | None = None  # fills the context to each depth once; every arm gets a copy of that state
    # the MLA cache's dtype: one for every arm, or per arm ({"A": float32, "B": bfloat16}); None: the
    # arm's activation dtype
    cache_dtype: torch.dtype | dict[str, torch.dtype] | None = None
    # reuse a passing model-gate verdict kept on this machine for exactly the same inputs (gating.verdict_key;
    # the model file, registries' bytes, golden, depths, dtypes, device, code); the row records the reuse
    reuse_gates: bool = False

    def validate(self, config) -> None:
        if self.phase not in PHASES:
            raise BadInput(f"unknown phase '{self.phase}'; use one of {', '.join(PHASES)}")
        if not self.depths or any(d < 0 for d in self.depths):
            raise BadInput("--depth: give one or more depths >= 0, e.g. --depth 0,4096,32768")
        if self.tokens < 1:
            raise BadInput("--tokens must be at least 1")
        if self.repeats < 1 or self.warmup < 0:
            raise BadInput("--repeats must be >= 1 and --warmup >= 0")
        if not 1 <= len(self.registries) <= 2:
            raise BadInput("one registry, or two with --vs")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise BadInput("--device cuda was asked for, but this machine has no CUDA device; use --device cpu")
        need = self.max_context
        if need > config.context_length:
            raise BadInput(f"depth {max(self.depths)} + {self.tokens} tokens = {need} exceeds {config.name}'s context "
                           f"length {config.context_length}")
        labels = [label for label, _ in self.registries]
        for label in self.graph:
            if label not in labels:
                raise BadInput(f"--graph {label}: no such arm (the arms are {', '.join(labels)})")
        if self.graph and self.phase != "decode":
            raise BadInput("--graph applies to decode only (a prefill is one forward per chunk, not a step to replay)")
        if self.graph and self.device not in GRAPH_DEVICES:
            raise BadInput(f"--graph needs --device cuda: a decode step is captured as a CUDA graph "
                           f"(this run is on {self.device})")
        if self.peer is not None and self.peer_gguf is None:
            raise BadInput("--peer needs the model as a GGUF file (the peer runs the same file); "
                           "pass --model FILE.gguf")

    def cache_dtype_of(self, label: str) -> torch.dtype | None:
        if isinstance(self.cache_dtype, dict):
            return self.cache_dtype.get(label)
        return self.cache_dtype

    @property
    def fill_chunk(self) -> int:
        """Chunk of the untimed fills up to a depth: --chunk, else FILL_CHUNK (a 131072-token context filled
        in one forward would need the whole prompt's activations at once; chunks give the same cache)."""
        return self.chunk or FILL_CHUNK

    @property
    def prompt_length(self) -> int:
        """Tokens of the seeded prompt: the deepest context plus the timed tokens."""
        return max(self.depths) + self.tokens

    @property
    def max_context(self) -> int:
        """The cache size this request needs (every timed token has its row; nothing hard-coded): a prefill's
        arms also decode the chunk proof's steps after the prompt."""
        return self.prompt_length + (chunking.CHECK_STEPS if self.phase == "prefill" else 0)


@dataclass
class ArmFigures:
    label: str
    registry: str
    dtype: str
    rates: list[float]  # tokens/s, one per timed round
    proof: dict[str, Any]
    roofline: dict[str, Any] = field(default_factory=dict)
    selections: dict[str, str] = field(default_factory=dict)  # op -> the implementation that ran (a path is not enough)
    mode: str = "eager"  # "eager": one call per op per step; "graph": one CUDA graph replay per step
    cache_dtype: str = ""  # the MLA cache's dtype this arm ran with
    chunking: dict[str, Any] = field(default_factory=dict)  # prefill: the chunk proof (chunking.ChunkProof)
    #: calls a step (decode) or a timed prefill (prefill) that selected implementations handed on by their stated
    #: policies: "op=impl -> what (why)": calls (dispatch.Ops.passed). Shown and recorded: a slow path a policy
    #: takes is part of what was timed
    passed: dict[str, float] = field(default_factory=dict)

    @property
    def spread(self) -> Spread:
        return Spread.of(self.rates)

    @property
    def median(self) -> float:
        return self.spread.median


@dataclass
class Point:
    phase: str
    depth: int
    tokens: int
    arms: dict[str, ArmFigures]
    order: list[str]  # who ran, in order, over the timed rounds ("A", "B", "peer")
    warmup_order: list[str]
    cost: TokenCost
    peer_rates: list[float] = field(default_factory=list)
    peer_figures: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ratios(self) -> list[float] | None:
        if "B" not in self.arms:
            return None
        return pair_ratios(self.arms["A"].rates, self.arms["B"].rates)

    @property
    def tier(self) -> str | None:
        r = self.ratios
        return tier_of_pairs(r) if r else None

    @property
    def where(self) -> str:
        if self.phase == "decode":
            return f"decode at depth {self.depth} (steps {self.depth}..{self.depth + self.tokens - 1})"
        return f"prefill of {self.tokens} tokens" + (f" after {self.depth} cached" if self.depth else "")


@dataclass
class BenchRun:
    request: BenchRequest
    model: dict[str, Any]  # name, mix, path
    env: dict[str, Any]
    gates: dict[str, gating.GateVerdict]
    ceilings: ceil.Ceilings
    points: list[Point]
    command: str = ""


#: what the harness calls to gate a registry (tests replace it to prove refusal)
GATE: Callable[..., gating.GateVerdict] = gating.gate


def model_info(weights: ModelWeights, source: str | Path | None = None) -> dict[str, Any]:
    meta = weights.metadata or {}
    return {"name": weights.config.name, "mix": str(meta.get("quant_mix") or "unknown"),
            "path": str(meta.get("path") or source or "(in memory)")}


def run_bench(req: BenchRequest, weights: ModelWeights, *, command: str = "",
              source: str | Path | None = None) -> BenchRun:
    """Gate, then time, then check; see the module docstring. Raises rather than return a doubtful figure."""
    req.validate(weights.config)
    env = provenance.environment(req.device)
    dtypes = {label: req.dtype or gating.default_dtype(path, req.device) for label, path in req.registries}
    # what is gated: each arm as it will be timed, and the fill registry as it will run - once per kind of
    # state it fills (the arms' activation and cache dtypes), since it fills the caches the arms then read
    # the cache dtype each arm runs with: asked for, or auto (fp8 where the registry's attention claims fp8_cache)
    caches = {label: registry_cache_dtype(path, req.device, dtypes[label], req.cache_dtype_of(label))
              for label, path in req.registries}
    gated = [(label, path, dtypes[label], caches[label]) for label, path in req.registries]
    if req.fill_registry:
        kinds = sorted({(dtypes[label], caches[label]) for label, _ in req.registries}, key=str)
        # an fp8 kind whose fill registry reads no fp8 cache fills in the activation dtype, rounded (Filler)
        fills = sorted({(dt, registry_cache_dtype(req.fill_registry, req.device, dt, None) if is_fp8(ct) else ct)
                        for dt, ct in kinds}, key=str)
        gated += [("fill" if len(fills) == 1 else f"fill ({dtype_name(dt)}, {dtype_name(ct)} cache)",
                   req.fill_registry, dt, ct) for dt, ct in fills]

    said = _PhaseClock()
    # the weights go to the device once: the gate's engines and the timed ones all share this copy
    on_device = weights if weights.embed.device.type == req.device else weights.to(req.device)
    said("the weights to the device")

    # 1. the gate, on exactly what will be timed
    gates = {}
    model_file = (weights.metadata or {}).get("path") or source
    for label, path, dtype, cache_dtype in gated:
        keyed = gating.verdict_key(model_file, path, device=req.device, dtype=dtype, depths=req.gate_depths,
                                   golden=req.gate_golden, cache_dtype=cache_dtype) if req.reuse_gates else None
        verdict = gating.load_verdict(keyed[0]) if keyed else None
        kept = verdict is not None
        if verdict is None:
            verdict = GATE(on_device, path, device=req.device, dtype=dtype, depths=req.gate_depths,
                           golden=req.gate_golden, cache_dtype=cache_dtype)
            if keyed:
                gating.store_verdict(*keyed, verdict)
        if not verdict.passed:
            raise gating.GateRefused(f"registry {label} ({path}) failed the model gate, so nothing was timed:\n"
                                     f"{verdict.report}", verdict, label)
        gates[label] = verdict
        said(f"gate {label}" + (" (a kept verdict)" if kept else ""))

    # 2. the ceilings
    ceilings = _ceilings(req, weights.nbytes)
    said("the ceilings")

    # 3. engines sharing one weights object on the device
    engines = {label: Engine(on_device, make_ops(req.device, path), max_context=req.max_context, dtype=dtypes[label],
                             cache_dtype=caches[label]) for label, path in req.registries}
    prompt = dep.random_tokens(req.prompt_length, weights.config.vocab_size, req.seed)  # [max(depths) + tokens]
    filler = Filler(req, on_device, {_state_kind(e) for e in engines.values()})
    said("the engines")

    # 4. per depth: fill, prove, warm up, time ABAB, check
    points = []
    for d in req.depths:
        if req.phase == "decode":
            points.append(_decode_point(req, engines, prompt, d, dtypes, filler))
        else:
            points.append(_prefill_point(req, engines, prompt, d, dtypes, filler, gates))
        said(f"depth {d} (fill, proof, warm-up, rounds)")

    # 5. the roofline refusal: no round of any arm may beat the ceiling (each arm's own cache dtype)
    for p in points:
        for arm in p.arms.values():
            elsize = dep.mla_caches(engines[arm.label])[0][1].element_size()
            cost = token_cost(weights.config, req.phase, tokens=p.tokens, depth=p.depth, weights=weights,
                              cache_elsize=elsize)
            refuse_above_ceiling(roofline_point(max(arm.rates), cost, ceilings), f"registry {arm.label}, {p.where}")
            arm.roofline = roofline_point(arm.median, cost, ceilings).as_dict()
            if arm.label == "A" or p.cost is None:
                p.cost = cost
    env["clocks_after"] = provenance.clocks(req.device)
    return BenchRun(req, model_info(weights, source), env, gates, ceilings, points, command)


class _PhaseClock:
    """Says on stderr how long each phase of a bench took since the one before ("bench: the engines: 4.2 s"): where a
    pair's minutes go (GPU session 23's first pair on a fresh machine took 386 s, its log no clue of where), so that a
    GPU session can plan its calls by phase. Nothing of it enters a figure or the ledger."""

    def __init__(self):
        self.t = time.perf_counter()

    def __call__(self, what: str) -> None:
        now = time.perf_counter()
        print(f"bench: {what}: {now - self.t:.1f} s", file=sys.stderr, flush=True)
        self.t = now


def selections(engine: Engine) -> dict[str, str]:
    """What each op ran in this engine (fallbacks marked): the registry file can change, this cannot."""
    plan = getattr(engine.ops, "plan", None)
    if plan is None:
        return {}
    out = {op: e.describe_runs() for op, e in plan.entries.items() if e.runs}
    side = getattr(engine, "side", None)
    applied = (getattr(engine, "fused", None) is not None or side is not None
               or getattr(engine, "fuse_kda_norm", False) or getattr(engine, "fuse_kda_gates", False)
               or getattr(engine, "fuse_router_norm", False) or getattr(engine, "fuse_conv_kda", False)
               or getattr(engine, "fuse_moe_norm", False) or getattr(engine, "fuse_oproj_norm", False)
               or bool(getattr(engine, "shared_side", None)))
    if plan.engine_on and applied:  # the graph differs too
        on = list(plan.engine_on)
        if side is not None:  # how many KDA layers fork (a layer whose fused group mixes gates with q/k/v does not)
            kda = sum(layer.kind == "kda" for layer in engine.model.layers)
            on[on.index("side_stream")] = f"side_stream ({len(engine.side_layers)} of {kda} KDA layers)"
        if "shared_expert_side" in on:  # how many MoE layers run their shared expert there
            moe = sum(isinstance(layer.ffn, MoEWeights) for layer in engine.model.layers)
            on[on.index("shared_expert_side")] = \
                f"shared_expert_side ({len(getattr(engine, 'shared_side', {}))} of {moe} MoE layers)"
        out["[engine]"] = ", ".join(on)
    return out


def _ceilings(req: BenchRequest, working_set: int) -> ceil.Ceilings:
    return ceil.measure(req.device, nbytes=req.ceiling_bytes, matmul_n=req.matmul_n, working_set=working_set,
                        launch=False)


def _peer_round(req: BenchRequest, point: Point) -> None:
    fig = peer_mod.run(req.peer, req.peer_gguf, req.phase, point.depth, point.tokens)
    point.order.append("peer")
    point.peer_rates.append(fig.avg_ts)
    point.peer_figures.append(fig.as_dict())


def _state_kind(engine: Engine) -> tuple[torch.dtype, torch.dtype]:
    """(activation dtype, MLA cache dtype): engines of one kind can take each other's state."""
    return engine.dtype, engine.state.cache_dtype


class Filler:
    """Brings an arm's engine to depth D: by its own prefill, or by copying the state of one engine on the
    fill registry (one per activation and cache dtype), filled once per depth.

    An arm with an fp8 cache whose fill registry's attention is not proven on one (claim fp8_cache) takes the state of
    a fill in the activation dtype with every cache row rounded to fp8 as the engine rounds one (kvcache.to_cache): a
    stated policy, said on stderr. The context only has to be real rows at depth D for the timing; what an fp8 cache
    does to the model is the gate's to judge, and the gate runs its own prefills."""

    def __init__(self, req: BenchRequest, weights: ModelWeights, kinds: set[tuple[torch.dtype, torch.dtype]]):
        self.req = req
        self.engines: dict[tuple[torch.dtype, torch.dtype], Engine] = {}
        if req.fill_registry:
            for dt, ct in kinds:
                ops = make_ops(req.device, req.fill_registry)
                rounded = is_fp8(ct) and not attention_claims_fp8(ops.plan)
                if rounded:
                    print(f"bench: fill: {req.fill_registry}'s attention reads no fp8 cache; the fp8 arms take its "
                          f"{dtype_name(dt)} fill with every cache row rounded to float8_e4m3fn (kvcache.to_cache)",
                          file=sys.stderr, flush=True)
                self.engines[(dt, ct)] = Engine(weights, ops, max_context=req.max_context, dtype=dt,
                                                cache_dtype=dt if rounded else ct)
        self.at: dict[tuple[torch.dtype, torch.dtype], int] = {}

    def fill(self, eng: Engine, prompt: torch.Tensor, d: int) -> None:
        eng.reset()
        kind = _state_kind(eng)
        src = self.engines.get(kind)
        if src is None:
            dep.fill(eng, prompt[:d], self.req.fill_chunk)
            return
        if self.at.get(kind) != d:
            src.reset()
            dep.fill(src, prompt[:d], self.req.fill_chunk)
            dep.verify_depth(src, d, fresh=True)
            self.at[kind] = d
        eng.state.copy_from(src.state, round_cache=src.state.cache_dtype != eng.state.cache_dtype)


def _decode_point(req: BenchRequest, engines: dict[str, Engine], prompt: torch.Tensor, d: int,
                  dtypes: dict[str, torch.dtype], filler: Filler) -> Point:
    n = req.tokens
    steps = dep.random_tokens(n, next(iter(engines.values())).config.vocab_size, req.seed + 1).to(req.device)  # [N]
    proofs, snaps, graphs = {}, {}, {}
    for label, eng in engines.items():
        filler.fill(eng, prompt, d)
        proofs[label] = dep.verify_depth(eng, d, fresh=True, need=n)
        snaps[label] = dep.Snapshot(eng)
        if label in req.graph:
            graphs[label] = capture_step(eng)  # at depth D; the state is left as the snapshot has it
    point = Point("decode", d, n, {}, [], [], cost=None)  # type: ignore[arg-type]
    rates: dict[str, list[float]] = {label: [] for label in engines}
    passed_before = {label: passed_of(eng.ops) for label, eng in engines.items()}

    def one_round(label: str, timed: bool) -> None:
        eng = engines[label]
        snaps[label].restore()
        sync(req.device)
        step = graphs.get(label)
        with RegionTimer(req.device) as t:
            if step is None:
                for i in range(n):
                    eng.decode(steps[i:i + 1])
            else:
                step.forced(steps)  # teacher-forced: the eager arm's tokens, each one graph replay
        if timed:
            rates[label].append(n / t.seconds)
            point.order.append(label)
        else:
            point.warmup_order.append(label)

    _abab(req, engines, point, one_round)
    rounds = req.warmup + req.repeats
    for label, eng in engines.items():
        dep.verify_depth(eng, d + n, fresh=False)
        dep.check_fingerprint(eng, proofs[label])
        # replays run no Python: a graph arm's capture counted one step
        passed = graphs[label].passed if label in graphs else \
            passed_per_step(passed_before[label], passed_of(eng.ops), n * rounds)
        point.arms[label] = ArmFigures(label, provenance.display_path(dict(req.registries)[label]),
                                       dtype_name(dtypes[label]), rates[label], proofs[label].as_dict(),
                                       selections=selections(eng), mode="graph" if label in graphs else "eager",
                                       cache_dtype=dtype_name(eng.state.cache_dtype), passed=passed)
    return point


def capture_step(engine: Engine):
    """The engine's decode step, captured as one CUDA graph at the engine's current state."""
    from ..engine.decode_step import DecodeStep

    step = DecodeStep(engine)
    step.capture()
    return step


def _abab(req: BenchRequest, engines: dict[str, Engine], point: Point, one_round) -> None:
    """Warm-up rounds, then timed rounds alternating the arms (A B A B ...), the peer after each pair."""
    for _ in range(req.warmup):
        for label in engines:
            one_round(label, timed=False)
    for _ in range(req.repeats):
        for label in engines:
            one_round(label, timed=True)
        if req.peer is not None:
            _peer_round(req, point)


def _prefill_point(req: BenchRequest, engines: dict[str, Engine], prompt: torch.Tensor, d: int,
                   dtypes: dict[str, torch.dtype], filler: Filler, gates: dict[str, gating.GateVerdict]) -> Point:
    t_len = req.tokens
    point = Point("prefill", d, t_len, {}, [], [], cost=None)  # type: ignore[arg-type]
    rates: dict[str, list[float]] = {label: [] for label in engines}
    proofs: dict[str, dict] = {}
    passed: dict[str, dict[str, float]] = {}

    def one_round(label: str, timed: bool) -> None:
        eng = engines[label]
        filler.fill(eng, prompt, d)
        dep.verify_depth(eng, d, fresh=True, need=t_len)
        sync(req.device)
        before = passed_of(eng.ops)
        with RegionTimer(req.device) as t:
            dep.fill(eng, prompt[d:d + t_len], req.chunk)
        proof = dep.verify_depth(eng, d + t_len, fresh=True)
        if timed:
            rates[label].append(t_len / t.seconds)
            point.order.append(label)
            proofs[label] = proof.as_dict()
            passed[label] = passed_per_step(before, passed_of(eng.ops), 1)  # calls in one timed prefill
        else:
            point.warmup_order.append(label)

    _abab(req, engines, point, one_round)
    steps = dep.random_tokens(chunking.CHECK_STEPS, next(iter(engines.values())).config.vocab_size,
                              req.seed + 2).to(req.device)  # [S]
    for label, eng in engines.items():
        chunks = _chunk_proof(req, eng, prompt, d, steps, filler, gates[label], label)
        point.arms[label] = ArmFigures(label, provenance.display_path(dict(req.registries)[label]),
                                       dtype_name(dtypes[label]), rates[label], proofs[label],
                                       selections=selections(eng), cache_dtype=dtype_name(eng.state.cache_dtype),
                                       chunking=chunks.as_dict(), passed=passed.get(label, {}))
    return point


def _chunk_proof(req: BenchRequest, eng: Engine, prompt: torch.Tensor, d: int, steps: torch.Tensor,
                 filler: Filler, gate: gating.GateVerdict, label: str) -> chunking.ChunkProof:
    """The arm's prefill of the timed prompt, in the timed chunks and in a size the gate proved, judged by the
    gate's model rule for the arm's claim; raises ChunkDependence when they differ beyond it."""
    from ..gate.tolerances import model_rule_for, router_tie

    rule = model_rule_for(gate.variant)
    proof = chunking.prove(eng, lambda: filler.fill(eng, prompt, d), prompt[d:d + req.tokens], steps, req.chunk,
                           gate.depths or (), rule, router_tie(gate.variant))
    if not proof.passed:
        raise chunking.ChunkDependence(
            f"registry {gate.registry}: the prefill of {req.tokens} tokens"
            + (f" after {d} cached" if d else "") + f" gives different logits in chunks of {proof.timed_chunk} "
            f"and of {proof.reference_chunk} (KL max {proof.kl_max:.3g}, mean {proof.kl_mean:.3g}, top-1 "
            f"{proof.top1:.3f}; the gate's rule: {proof.rule}; {proof.routing}), so no figure was recorded. With "
            f"routing pinned to the reference chunking, an implementation is wrong at the timed chunk's shapes (or "
            f"its error grows with them): time with --chunk {proof.reference_chunk} (a size the gate proved), and "
            f"find the op with the GPU tests of the registry's implementations, which run them at the 48B's shapes "
            f"(`pytest -m gpu tests/backends`)", label=label, proof=proof)
    return proof
