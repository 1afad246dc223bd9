"""`sparkops diagnose`: which ceiling binds a decode step, with a number per ceiling (seed, lecture 03).

For one model at one depth:
  paper     bytes and FLOPs per token from the config and the weights' quant types (`costs.py`);
            works with no weights at all (`--paper`, e.g. the 2.8T preset);
  ceilings  measured here: read bandwidth, matmul rate, launch latency eager and in a CUDA graph
            (`ceilings.py`); on paper, the anchors' H200 figures (scaled by --gpus, collectives ignored);
  profile   one engine at the depth (filled and verified like the scoreboard does), decode steps timed:
            wall time per token; kernels launched per token (torch.profiler's CUDA kernels on a GPU,
            op calls through the Ops object on the CPU); device-busy time (kernel time on a GPU, time
            inside the ops on the CPU) against wall time;
  verdict   the binding ceiling - launch overhead (the device idles between launches), occupancy (the
            device is busy but far below the roofline), bandwidth or compute (at the roofline) or
            collectives (multi-device: none here) - and the predicted gain of lifting it.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch

from ..config import ModelConfig
from ..weights import ModelWeights
from . import ceilings as ceil
from . import depth as dep
from .costs import TokenCost, token_cost
from .roofline import point as roofline_point
from .timing import RegionTimer, sync

#: below this share of wall time on the device, the host (Python, launches) is what the step waits on
BUSY_LAUNCH_BOUND = 0.5
#: within this factor of the roofline floor, the device-busy time is at the roofline
AT_ROOFLINE = 1.5


@dataclass
class StepProfile:
    wall_s: float  # median seconds per decode token
    busy_s: float  # seconds per token the device (or the ops, on CPU) was busy
    kernels: int  # kernels (CUDA) or op calls (CPU) per token
    by_op: dict[str, dict[str, float]] = field(default_factory=dict)  # op -> calls, seconds per token
    how: str = ""
    # CUDA: kernel name -> launches, seconds per token, the most time first (TOP_KERNELS of them)
    by_kernel: dict[str, dict[str, float]] = field(default_factory=dict)
    graph_wall_s: float | None = None  # CUDA: median seconds per token replaying the step as one graph
    graph_error: str | None = None  # why the step could not be captured (the eager figures still stand)
    #: calls a token that selected implementations handed on by their stated policies (dispatch.Ops.passed)
    passed: dict[str, float] = field(default_factory=dict)

    @property
    def busy_fraction(self) -> float:
        return self.busy_s / self.wall_s if self.wall_s else float("nan")


@dataclass
class Diagnosis:
    model: str
    mix: str
    depth: int
    device: str
    ceilings: ceil.Ceilings
    decode: TokenCost
    prefill: TokenCost
    gpus: int = 1
    profile: StepProfile | None = None
    paper: bool = False
    verdict: dict[str, Any] = field(default_factory=dict)
    memory_bytes: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "mix": self.mix, "depth": self.depth, "device": self.device, "gpus": self.gpus,
                "paper": self.paper, "ceilings": self.ceilings.as_dict(), "decode": self.decode.as_dict(),
                "prefill": self.prefill.as_dict(), "memory_bytes": self.memory_bytes,
                "profile": None if self.profile is None else {
                    "wall_s": self.profile.wall_s, "busy_s": self.profile.busy_s, "kernels": self.profile.kernels,
                    "busy_fraction": self.profile.busy_fraction, "by_op": self.profile.by_op, "how": self.profile.how,
                    "by_kernel": self.profile.by_kernel},
                "verdict": self.verdict}


def scaled(c: ceil.Ceilings, gpus: int) -> ceil.Ceilings:
    """Ceilings of `gpus` devices in perfect tensor parallel (collectives ignored: an upper bound)."""
    if gpus == 1:
        return c
    return ceil.Ceilings(f"{gpus} x {c.device}", c.read_bandwidth * gpus, c.copy_bandwidth * gpus,
                         c.matmul_flops * gpus, c.matmul_dtype, c.launch_eager_s, c.launch_graph_s, c.buffer_bytes)


# -- profiling one decode step ---------------------------------------------------------------------
#: the profiler range each op call runs in on CUDA (its kernels' device time is summed under it)
RANGE = "sparkops.op."


class _CountingOps:
    """Wraps an engine's Ops: counts calls and host time inside each op (CPU: the 'busy' time); on CUDA each
    call also runs in a profiler range named RANGE + op, so the device time of its kernels can be summed.

    A call of an op a registry selects per weight type (`registry.file.TYPED_OPS`: linear) is counted under
    "op@TYPE" (linear@Q6_K), its range named so too: `profile_ops` adds them up per op and keeps each type's share
    (what a per-type change, `swap linear@Q6_K=...`, acts on)."""

    def __init__(self, ops: Any, device: str):
        self._ops, self._device = ops, device
        self.calls: Counter[str] = Counter()
        self.seconds: dict[str, float] = defaultdict(float)
        from ..ops import OP_NAMES

        for name in OP_NAMES:
            setattr(self, name, self._wrap(name, getattr(ops, name)))

    def _wrap(self, name: str, fn: Any) -> Any:
        from ..registry.file import typed_weight_type

        type_of = typed_weight_type(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            qtype = type_of(args, kwargs) if type_of else None
            key = f"{name}@{qtype}" if qtype else name
            self.calls[key] += 1
            t0 = time.perf_counter()
            if self._device == "cuda":
                with torch.profiler.record_function(RANGE + key):
                    out = fn(*args, **kwargs)
            else:
                out = fn(*args, **kwargs)
            self.seconds[key] += time.perf_counter() - t0
            return out

        return call

    def __getattr__(self, item: str) -> Any:
        return getattr(self._ops, item)


def profile_decode(engine: Any, depth: int, steps: int, seed: int, device: str, filler: Any = None) -> StepProfile:
    """Wall, busy and kernel count per decode token at `depth` (engine filled and verified here; by a copy of
    `filler`'s state when given: an engine on a faster registry that prefills the context instead)."""
    snap, toks = filled(engine, depth, steps, seed, filler)

    def decode_all() -> None:
        for i in range(steps):
            engine.decode(toks[i:i + 1])

    from ..dispatch import passed_of, passed_per_step

    before = passed_of(engine.ops)
    snap.restore()
    decode_all()  # warm-up
    passed = passed_per_step(before, passed_of(engine.ops), steps)
    walls = []
    for _ in range(3):
        snap.restore()
        with RegionTimer(device) as t:
            decode_all()
        walls.append(t.seconds / steps)
    wall = statistics.median(walls)

    kernels, busy, by_op, how, by_kernel = profile_ops(engine, snap, decode_all, device, steps)
    # busy per token: the device time of the kernels themselves, which profiling does not stretch (the
    # profiled run's wall does stretch: scaling busy by its share of that wall undercounts it), capped at
    # the clean wall
    prof = StepProfile(wall, min(busy, wall), round(kernels), by_op, how, by_kernel, passed=passed)
    if device == "cuda":
        try:
            prof.graph_wall_s = _graph_wall(engine, snap, toks, steps)
        except Exception as exc:  # noqa: BLE001 - shown in the verdict, never hidden
            prof.graph_error = f"{type(exc).__name__}: {exc}"
    return prof


def filled(engine: Any, depth: int, need: int, seed: int, filler: Any = None, chunk: int = 2048) -> tuple[Any, Any]:
    """The engine at a verified context of `depth` seeded random tokens (prefilled in chunks by itself, or by
    `filler`, an engine on a faster registry, whose state it copies), room for `need` more: (a snapshot of that
    state, the `need` tokens that follow, on the engine's device)."""
    engine.reset()
    prompt = dep.random_tokens(depth + need, engine.config.vocab_size, seed)  # [D + need], never constant
    src = engine if filler is None else filler
    src.reset()
    dep.fill(src, prompt[:depth], chunk)  # chunks: the same cache, bounded activations
    if filler is not None:  # an fp8 cache from a filler on another: its rows rounded (engines(), a stated policy)
        engine.state.copy_from(filler.state, round_cache=filler.state.cache_dtype != engine.state.cache_dtype)
    dep.verify_depth(engine, depth, fresh=True, need=need)
    return dep.Snapshot(engine), prompt[depth:].to(engine.device)


def engines(weights: ModelWeights, registry: Any, fill_registry: Any, *, device: str, dtype: torch.dtype,
            cache_dtype: torch.dtype | None, max_context: int) -> tuple[Any, Any]:
    """(the diagnosed engine, the filler engine or None) sharing one copy of the weights on `device`. A diagnosed
    engine on an fp8 cache whose filler's attention reads none takes the filler's rows (in the activation dtype)
    rounded to fp8, as the bench's fills do (harness.Filler): a stated policy, said on stderr."""
    import sys

    from ..engine import Engine
    from ..engine.loading import make_ops
    from ..kvcache import attention_claims_fp8, is_fp8

    on_device = weights if weights.embed.device.type == device else weights.to(device)
    engine = Engine(on_device, make_ops(device, registry), max_context=max_context, dtype=dtype,
                    cache_dtype=cache_dtype)
    filler = None
    if fill_registry:
        ops = make_ops(device, fill_registry)
        fill_cache = engine.state.cache_dtype
        if is_fp8(fill_cache) and not attention_claims_fp8(ops.plan):
            fill_cache = dtype
            print(f"diagnose: fill: {fill_registry}'s attention reads no fp8 cache; the diagnosed engine takes its "
                  f"fill with every cache row rounded to float8_e4m3fn (kvcache.to_cache)", file=sys.stderr, flush=True)
        filler = Engine(on_device, ops, max_context=max_context, dtype=dtype, cache_dtype=fill_cache)
    return engine, filler


#: the kernels a diagnosis lists by name (the most device time first)
TOP_KERNELS = 16


def kernel_label(name: str, width: int = 120) -> str:
    """A kernel's name cut to `width` characters for tables and the ledger, still one label per kernel: templated
    kernels (torch's elementwise ones) often share their first hundred characters, so a cut name ends in a digest
    of the whole one."""
    if len(name) <= width:
        return name
    return name[:width - 10] + "~" + hashlib.sha1(name.encode()).hexdigest()[:9]


def profile_ops(engine: Any, snap: Any, work: Any, device: str, per: int) -> tuple[float, float, dict, str, dict]:
    """One profiled run of `work` (the engine's state restored from `snap` first), divided by `per` (tokens, or
    chunks): (kernels, busy seconds, {op: calls, seconds and on CUDA kernels}, how it was counted, {kernel name:
    launches, seconds} of the TOP_KERNELS that took the most time). CUDA: the device time of each op's kernels
    (torch.profiler); CPU: the host time inside each op, and no kernels."""
    real_ops = engine.ops
    counting = _CountingOps(real_ops, device)
    engine.ops = counting
    launched: dict[str, int] = {}
    by_name: dict[str, tuple[float, int]] = {}
    try:
        snap.restore()
        if device == "cuda":
            kernels, busy, by_name, device_by_op = _cuda_kernels(work)
            # device time, not the host's launch time; and the kernels each op launched
            counting.seconds = defaultdict(float, {op: v[0] for op, v in device_by_op.items()})
            launched = {op: v[1] for op, v in device_by_op.items()}
            how = ("torch.profiler: the kernels inside each op's device-side range and their summed device time "
                   "(range spans not counted as work)")
        else:
            work()
            kernels, busy = sum(counting.calls.values()), sum(counting.seconds.values())
            how = "op calls through the Ops object; busy = time inside the ops (the rest is the Python graph)"
    finally:
        engine.ops = real_ops
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:TOP_KERNELS]
    by_kernel = {kernel_label(name): {"launches": n / per, "seconds": sec / per} for name, (sec, n) in top}
    return (kernels / per, busy / per, by_op_of(counting.calls, counting.seconds, launched, per, device), how,
            by_kernel)


def by_op_of(calls: Counter[str], seconds: dict[str, float], launched: dict[str, int], per: int,
             device: str) -> dict[str, dict[str, Any]]:
    """{op: calls, seconds (and on CUDA kernels) per token or chunk}, most time first; the calls counted under
    "op@TYPE" are added into their op, which keeps each type's own figures under "by_type"."""
    by_op: dict[str, dict[str, Any]] = {}
    for key in calls:
        op, _, qtype = key.partition("@")
        x = {"calls": calls[key] / per, "seconds": seconds.get(key, 0.0) / per}
        if device == "cuda":
            x["kernels"] = launched.get(key, 0) / per  # the rest of the step's kernels are the graph's glue
        total = by_op.setdefault(op, {k: 0.0 for k in x})
        for k, v in x.items():
            total[k] += v
        if qtype:
            total.setdefault("by_type", {})[qtype] = x
    for x in by_op.values():
        if "by_type" in x:
            x["by_type"] = dict(sorted(x["by_type"].items(), key=lambda kv: -kv[1]["seconds"]))
    return dict(sorted(by_op.items(), key=lambda kv: -kv[1]["seconds"]))


def _graph_wall(engine: Any, snap: Any, toks: Any, steps: int) -> float:
    """Median seconds per token when the decode step replays as one CUDA graph (teacher-forced)."""
    from ..engine.decode_step import DecodeStep

    snap.restore()
    step = DecodeStep(engine)
    step.capture()  # leaves the state as the snapshot has it
    walls = []
    for _ in range(4):  # the first round warms up
        snap.restore()
        with RegionTimer("cuda") as t:
            step.forced(toks)
        walls.append(t.seconds / steps)
    return statistics.median(walls[1:])


def _kernels_under(e: Any) -> int:
    """Kernels launched by a CPU profiler event and everything it called (the CPU tree: the fallback when the
    trace has no device-side spans of the op ranges)."""
    return sum(1 for k in getattr(e, "kernels", ()) if not _is_copy(str(getattr(k, "name", "")))) \
        + sum(_kernels_under(c) for c in getattr(e, "cpu_children", ()))


def _on_device(e: Any) -> bool:
    return str(getattr(e, "device_type", "")).endswith("CUDA")


def _is_copy(name: str) -> bool:
    return name.startswith(("Memcpy", "Memset"))


def _union_seconds(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by the union of (start_us, end_us) intervals: work on several streams counts once."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total / 1e6


def tally(events: Any) -> tuple[int, float, dict[str, tuple[float, int]], dict[str, tuple[float, int]]]:
    """(kernels launched, seconds the device was busy, by kernel name: (seconds, launches), by op: (device seconds,
    kernels))
    from a torch.profiler trace's events.

    The device's own work is its kernels, copies and memsets. Each op range (RANGE + op) also appears on the
    device as a user-annotation span from its first kernel's start to its last kernel's end: such a span is no
    work (counting it as a kernel, or its length as busy time, counts the op's kernels and the gaps between them
    a second time). Each kernel belongs to the innermost op span it lies in, which holds for kernels launched
    by aten, Triton or CuPy alike; the CPU tree (`_kernels_under`) links only the launches the profiler saw
    through the runtime API, so it is the fallback where a trace has no device-side spans."""
    work: list[tuple[float, float, str]] = []
    spans: list[tuple[float, float, str]] = []
    cpu_ranges: list[Any] = []
    for e in events:
        name = str(e.name)
        if _on_device(e):
            if name.startswith(RANGE):
                spans.append((e.time_range.start, e.time_range.end, name[len(RANGE):]))
            elif not getattr(e, "is_user_annotation", False):
                work.append((e.time_range.start, e.time_range.end, name))
        elif name.startswith(RANGE):
            cpu_ranges.append(e)
    count = sum(1 for *_, n in work if not _is_copy(n))
    busy = _union_seconds([(a, b) for a, b, _ in work])
    by_name: dict[str, tuple[float, int]] = {}
    for a, b, n in work:
        sec, k = by_name.get(n, (0.0, 0))
        by_name[n] = (sec + (b - a) / 1e6, k + 1)
    by_op: dict[str, tuple[float, int]] = {}
    if spans:
        spans.sort(key=lambda x: (x[0], -x[1]))
        starts = [a for a, _, _ in spans]
        parent, open_ = [-1] * len(spans), []  # the innermost span holding each span (-1: none)
        for j, (_, b, _) in enumerate(spans):
            while open_ and spans[open_[-1]][1] < b:
                open_.pop()
            parent[j] = open_[-1] if open_ else -1
            open_.append(j)
        for a, b, n in work:
            mid = (a + b) / 2
            # the latest-starting span at the kernel, else up its chain of enclosing spans: the innermost holder
            i = bisect.bisect_right(starts, mid) - 1
            while i >= 0 and spans[i][1] < mid:
                i = parent[i]
            if i < 0:
                continue  # between the ops: the graph's own glue
            s, k = by_op.get(spans[i][2], (0.0, 0))
            by_op[spans[i][2]] = (s + (b - a) / 1e6, k + (0 if _is_copy(n) else 1))
    else:
        for e in cpu_ranges:
            us = getattr(e, "device_time_total", None)
            s, k = by_op.get(e.name[len(RANGE):], (0.0, 0))
            by_op[e.name[len(RANGE):]] = (s + (us if us is not None else e.cuda_time_total) / 1e6, k + _kernels_under(e))
    return count, busy, dict(by_name), by_op


def _cuda_kernels(fn: Any) -> tuple[int, float, dict[str, tuple[float, int]], dict[str, tuple[float, int]]]:
    """`tally` of one profiled run of `fn` on CUDA."""
    from torch.profiler import ProfilerActivity, profile

    sync("cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        sync("cuda")
    return tally(prof.events())


# -- the verdict -----------------------------------------------------------------------------------
def verdict(d: Diagnosis) -> dict[str, Any]:
    """The binding ceiling with a number per ceiling and the predicted gain of lifting it."""
    c, cost = d.ceilings, d.decode
    t_bw = cost.bytes / c.read_bandwidth
    t_fl = cost.flops / c.matmul_flops
    floor = max(t_bw, t_fl)
    at = "bandwidth" if t_bw >= t_fl else "compute"
    out: dict[str, Any] = {
        "roofline_tok_s": 1 / floor, "time_bandwidth_s": t_bw, "time_compute_s": t_fl, "roofline_bound": at,
        "collectives": "none: one device" if d.gpus == 1 else
        f"ignored on paper ({d.gpus} devices assumed in perfect tensor parallel: an upper bound)",
    }
    p = d.profile
    if p is None:
        out.update(binding=at, predicted_gain=None,
                   why=f"on paper the best a token can do is {1 / floor:.4g} tok/s, {at}-bound "
                       f"({cost.bytes / 1e9:.4g} GB and {cost.flops / 1e9:.4g} GFLOP per token); measure a real "
                       f"step (without --paper) to see which ceiling actually binds")
        return out
    if p.passed:  # what the figures include: calls the selected implementations handed on (stated policies)
        out["passed"] = dict(p.passed)
    graph = c.launch_graph_s if c.launch_graph_s is not None else None
    launch_eager = p.kernels * (c.launch_eager_s or 0.0)
    launch_graph = p.kernels * graph if graph is not None else None
    achieved_bw = cost.bytes / p.busy_s if p.busy_s else 0.0
    out.update({
        "wall_s": p.wall_s, "busy_s": p.busy_s, "busy_fraction": p.busy_fraction, "kernels_per_token": p.kernels,
        "launch_eager_s": launch_eager, "launch_graph_s": launch_graph, "measured_tok_s": 1 / p.wall_s,
        "fraction_of_roofline": floor / p.wall_s, "busy_bandwidth": achieved_bw,
        "busy_fraction_of_peak_bandwidth": achieved_bw / c.read_bandwidth,
    })
    if p.busy_s < 0.9 * t_bw:
        out["warning"] = (f"the kernels' device time ({1e3 * p.busy_s:.3g} ms) is below the bandwidth floor "
                          f"({1e3 * t_bw:.3g} ms): the profile missed kernels, or the cost model counts bytes the "
                          f"step does not read; do not trust the busy figures")
    if p.graph_wall_s is not None:
        gw = p.graph_wall_s
        kernels_bind = p.busy_s >= 0.8 * gw
        after = ("bandwidth" if p.busy_s <= AT_ROOFLINE * floor else "occupancy") if kernels_bind else "launch overhead"
        out.update(graph_wall_s=gw, graph_tok_s=1 / gw, graph_fraction_of_roofline=floor / gw,
                   graph_binding=after, graph_predicted_gain=max(1.0, gw / floor),
                   graph_why=f"replayed as one CUDA graph the step takes {1e3 * gw:.3g} ms ({1 / gw:.4g} tok/s, "
                             f"{100 * floor / gw:.1f}% of the roofline); the kernels are busy {1e3 * p.busy_s:.3g} ms "
                             f"of it, so " + (
                                 f"the kernels bind: they reach {100 * t_bw / p.busy_s:.0f}% of the bandwidth floor"
                                 if kernels_bind else "launches still bind (gaps between kernels inside the graph)"))
    elif p.graph_error:
        out.update(graph_error=p.graph_error)
    if p.busy_fraction < BUSY_LAUNCH_BOUND:
        target = max(p.busy_s, launch_graph or 0.0, floor)
        out.update(binding="launch overhead",
                   predicted_gain=max(1.0, p.wall_s / target),
                   why=f"the device is busy {100 * p.busy_fraction:.0f}% of the step: {p.kernels} launches per token "
                       f"from Python cost ~{1e3 * launch_eager:.3g} ms at {1e6 * (c.launch_eager_s or 0):.3g} us each; "
                       f"replayed from one CUDA graph they would cost "
                       f"{'~%.3g ms' % (1e3 * launch_graph) if launch_graph is not None else 'next to nothing'}. "
                       f"Lifting it (a graph-resident step) leaves the busy time: {p.wall_s * 1e3:.3g} -> "
                       f"{target * 1e3:.3g} ms per token")
    elif p.busy_s <= AT_ROOFLINE * floor:
        out.update(binding=at, predicted_gain=max(1.0, p.wall_s / floor),
                   why=f"the step is busy {100 * p.busy_fraction:.0f}% of the time and within {AT_ROOFLINE}x of the "
                       f"{at} floor ({1e3 * floor:.3g} ms): only fewer bytes (a smaller quant, a smaller cache) "
                       f"or fewer FLOPs move it")
    else:
        out.update(binding="occupancy", predicted_gain=max(1.0, p.wall_s / (p.wall_s - p.busy_s + floor)),
                   why=f"the device is busy {100 * p.busy_fraction:.0f}% of the step but reaches only "
                       f"{100 * achieved_bw / c.read_bandwidth:.1f}% of the measured bandwidth while busy: kernels "
                       f"that do not fill the chip (grids, split-K / split-context). At the roofline the busy "
                       f"time would drop {1e3 * p.busy_s:.3g} -> {1e3 * floor:.3g} ms")
    return out


# -- entry points ----------------------------------------------------------------------------------
def on_paper(config: ModelConfig, mix: str, depth: int, *, prefill_tokens: int = 32768, gpus: int = 1,
             ceilings: ceil.Ceilings | None = None) -> Diagnosis:
    from ..gguf.mix import quant_mix_bytes

    c = scaled(ceilings or ceil.H200_ANCHORS, gpus)
    d = Diagnosis(config.name, mix, depth, c.device, c, token_cost(config, "decode", depth=depth, mix=mix),
                  token_cost(config, "prefill", tokens=prefill_tokens, mix=mix), gpus=gpus, paper=True,
                  memory_bytes=float(quant_mix_bytes(config, mix)["total"]))
    d.verdict = verdict(d)
    return d


def measured(weights: ModelWeights, registry: Any, depth: int, *, device: str, dtype: torch.dtype,
             steps: int = 8, seed: int = 0, prefill_tokens: int = 32768, ceiling_bytes: int | None = None,
             matmul_n: int | None = None, fill_registry: Any = None,
             cache_dtype: torch.dtype | None = None) -> Diagnosis:
    from .harness import model_info

    c = ceil.measure(device, nbytes=ceiling_bytes, matmul_n=matmul_n, working_set=weights.nbytes)
    engine, filler = engines(weights, registry, fill_registry, device=device, dtype=dtype, cache_dtype=cache_dtype,
                             max_context=depth + steps)
    prof = profile_decode(engine, depth, steps, seed, device, filler)
    del filler
    elsize = dep.mla_caches(engine)[0][1].element_size()
    info = model_info(weights)
    d = Diagnosis(info["name"], info["mix"], depth, device, c,
                  token_cost(weights.config, "decode", depth=depth, weights=weights, cache_elsize=elsize),
                  token_cost(weights.config, "prefill", tokens=prefill_tokens, weights=weights, cache_elsize=elsize),
                  profile=prof, memory_bytes=float(weights.nbytes))
    d.verdict = verdict(d)
    return d


def roofline_points(d: Diagnosis, depths: tuple[int, ...] = (0, 4096, 32768, 131072)) -> list[dict[str, Any]]:
    """The measured points (eager, and replayed as one CUDA graph where it was) and, for context, each depth's
    decode ceiling and the prefill's."""
    pts = []
    if d.profile is not None:
        eager = "" if d.profile.graph_wall_s is None else " (eager)"
        rp = roofline_point(1 / d.profile.wall_s, d.decode, d.ceilings)
        pts.append({"label": f"measured decode d={d.depth}{eager}", "intensity": rp.intensity,
                    "achieved_flops": rp.achieved_flops})
        if d.profile.graph_wall_s:  # the same step replayed as one CUDA graph: what the bench times
            rp = roofline_point(1 / d.profile.graph_wall_s, d.decode, d.ceilings)
            pts.append({"label": f"measured decode d={d.depth} (one CUDA graph)", "intensity": rp.intensity,
                        "achieved_flops": rp.achieved_flops})
    cfg = _config_of(d)
    if cfg is not None:
        for L in depths:
            cost = token_cost(cfg, "decode", depth=L, mix=d.mix) if d.paper else None
            if cost is None:
                continue
            rp = roofline_point(1.0, cost, d.ceilings)
            pts.append({"label": f"ceiling decode d={L}", "intensity": cost.intensity,
                        "achieved_flops": rp.ceiling_rate * cost.flops})
    rp = roofline_point(1.0, d.prefill, d.ceilings)
    pts.append({"label": f"ceiling prefill {d.prefill.tokens}", "intensity": d.prefill.intensity,
                "achieved_flops": rp.ceiling_rate * d.prefill.flops})
    return [p for p in pts if p["intensity"] and math.isfinite(p["intensity"]) and p["achieved_flops"] > 0]


def _config_of(d: Diagnosis) -> ModelConfig | None:
    from ..config import load_preset
    from ..errors import SparkopsError

    try:
        return load_preset(d.model)
    except SparkopsError:
        return None
