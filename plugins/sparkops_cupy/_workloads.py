"""Decode-shaped workloads at Kimi-Linear-48B-A3B sizes, and honest GPU timing for any implementation.

Used by tests/backends/test_cupy_timing.py (prints GB/s per op) and bench/test_bench_cupy.py (the
cupy, triton and torch implementations of the same op side by side). Backend-agnostic: a workload
is a list of argument sets in the op contract's order, so any implementation of the op can be timed.

Honesty rules (anchors section 6):
  - real random data (GGUF blocks drawn by `random_blocks`, activations from a normal generator),
    never zeros or constants;
  - several argument sets rotated call after call, together several times the 50 MB L2, so no call
    finds its weights, cache or state already on chip;
  - device time from CUDA events around many calls replayed from one captured CUDA graph (the
    engine's situation: per-call launch cost ~1 us); where an implementation cannot be captured,
    eager calls are timed instead and the result says so;
  - bytes are the fewest the op must move (each weight, cache row and state value once), so the
    bandwidth figure can only under-state the kernel, and is reported against the measured 4.04 TB/s.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.config import ModelConfig, load_preset
from sparkops.errors import BadInput
from sparkops.gguf.quants import random_blocks
from sparkops.kvcache import FP8, to_cache
from sparkops.ops import get_contract
from sparkops.qweight import QWeight

#: measured read bandwidth of the H200 this project is measured on (anchors section 1)
BANDWIDTH = 4.04e12
#: rotate argument sets until they hold at least this many bytes (3x the H200's 50 MB L2)
ROTATE_BYTES = 3 * 50 * 2**20
MAX_SETS = 32


@dataclass
class Workload:
    op: str
    label: str
    build: Callable[[torch.device, int], tuple[list[dict[str, Any]], int]]  # (argument sets, bytes per call)
    target: str = ""  # the goal for this shape, in words ("" = none stated)


@dataclass
class Timing:
    seconds: float  # median device time per call
    spread: float  # (p75 - p25) / median of the per-replay figures
    mode: str  # "graph" or "eager (why)"
    bytes: int
    sets: int
    calls: int = 1  # calls per run()
    run: Callable[[], None] | None = field(default=None, repr=False)  # the timed work (a graph replay)

    @property
    def bandwidth(self) -> float:
        return self.bytes / self.seconds

    @property
    def fraction(self) -> float:
        return self.bandwidth / BANDWIDTH


# ---- argument builders ----------------------------------------------------------------------------------

def _qweight(rng: np.random.Generator, shape: tuple[int, ...], qtype: Q, device: torch.device, std: float,
             name: str) -> QWeight:
    raw = random_blocks(rng, shape, qtype, std)
    if qtype == Q.BF16:
        t = torch.from_numpy(raw.view(np.int16).copy()).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.ascontiguousarray(raw))
    return QWeight(t.to(device), qtype, shape, name)


def _randn(g: torch.Generator, *shape: int, std: float = 1.0, dtype=torch.float32, device=None) -> torch.Tensor:
    return (torch.randn(*shape, generator=g) * std).to(dtype=dtype, device=device)


def _sets_for(per_set_bytes: int) -> int:
    return max(2, min(MAX_SETS, math.ceil(ROTATE_BYTES / max(1, per_set_bytes))))


def linear_workload(qtype: Q, out_f: int, in_f: int, what: str, target: str = "",
                    dtype: torch.dtype = torch.float32) -> Workload:
    def build(device: torch.device, seed: int):
        rng = np.random.default_rng(seed)
        g = torch.Generator().manual_seed(seed)
        one = _qweight(rng, (out_f, in_f), qtype, device, 0.02, what)
        n = _sets_for(one.nbytes)
        sets = [dict(x=_randn(g, 1, in_f, dtype=dtype, device=device),
                     weight=one if i == 0 else _qweight(rng, (out_f, in_f), qtype, device, 0.02, what))
                for i in range(n)]
        return sets, one.nbytes + dtype.itemsize * (in_f + out_f)

    act = "" if dtype == torch.float32 else f" {str(dtype).removeprefix('torch.')}"
    return Workload("linear", f"{what} {qtype.name} [{out_f}x{in_f}] T=1{act}", build, target)


def rmsnorm_workload(d: int, what: str) -> Workload:
    def build(device: torch.device, seed: int):
        g = torch.Generator().manual_seed(seed)
        sets = [dict(x=_randn(g, 1, d, std=3.0, device=device), weight=_randn(g, d, device=device), eps=1e-5)
                for _ in range(MAX_SETS)]
        return sets, 3 * 4 * d

    return Workload("rmsnorm", f"{what} [1x{d}]", build)


def quantize_act_workload(d: int) -> Workload:
    def build(device: torch.device, seed: int):
        g = torch.Generator().manual_seed(seed)
        return [dict(x=_randn(g, 1, d, std=3.0, device=device)) for _ in range(MAX_SETS)], 4 * d + d + d // 8

    return Workload("quantize_act", f"x [1x{d}]", build)


def kda_workload(cfg: ModelConfig) -> Workload:
    h, d = cfg.kda_heads, cfg.kda_head_dim
    state_bytes = h * d * d * 4

    def build(device: torch.device, seed: int):
        g = torch.Generator().manual_seed(seed)
        sets = []
        for _ in range(_sets_for(state_bytes)):  # one state per KDA layer-like slot
            sets.append(dict(q=_randn(g, 1, h, d, device=device), k=_randn(g, 1, h, d, device=device),
                             v=_randn(g, 1, h, d, device=device), g=_randn(g, 1, h, d, device=device),
                             beta=_randn(g, 1, h, device=device),
                             a=-torch.exp(torch.rand(h, generator=g) * 2 - 1).to(device),
                             dt_bias=_randn(g, h * d, std=0.5, device=device),
                             state=_randn(g, h, d, d, std=0.1, device=device), scale=d ** -0.5, l2_eps=1e-6))
        return sets, 2 * state_bytes + 4 * 5 * h * d

    return Workload("kda", f"decode step H={h} D={d} (state {2 * state_bytes / 2**20:.0f} MiB r+w)", build,
                    "within 2x of the state-bytes roofline")


def attention_workload(cfg: ModelConfig, context: int, pos: int | None = None,
                       cache_dtype: torch.dtype = torch.bfloat16) -> Workload:
    """One token's MLA decode over a cache of `context` rows (bf16, or float8_e4m3fn: the same random rows rounded as
    the engine rounds them, kvcache.to_cache), the token at `pos` (default the last row: every row in use). A smaller
    `pos` is a short context in a long cache, as the step has at d = 0."""
    pos = context - 1 if pos is None else pos
    if not 0 <= pos < context:
        raise BadInput(f"attention_workload: pos {pos} is not a row of a {context}-row cache (0 .. {context - 1})")
    if cache_dtype not in (torch.bfloat16, FP8):
        raise BadInput(f"attention_workload: cache_dtype {cache_dtype}: bfloat16 or float8_e4m3fn")
    n, dn, r, lkv, dv = cfg.mla_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.kv_lora_rank, cfg.v_head_dim
    row, size = lkv + r, cache_dtype.itemsize
    cache_bytes = context * row * size
    read_bytes = (pos + 1) * row * size  # the cache rows a call reads
    weight_bytes = 2 * n * dn * lkv * 4

    def build(device: torch.device, seed: int):
        g = torch.Generator().manual_seed(seed)
        sets = []
        for _ in range(_sets_for(read_bytes + weight_bytes)):
            cache = to_cache(torch.randn(context, row, generator=g, dtype=torch.float32), cache_dtype).to(device)
            sets.append(dict(q=_randn(g, 1, n, dn + r, dtype=torch.bfloat16, device=device),
                             latent=to_cache(_randn(g, 1, row, dtype=torch.bfloat16, device=device), cache_dtype),
                             cache=cache, pos=torch.tensor([pos], dtype=torch.int64, device=device),
                             w_uk=_randn(g, n, dn, lkv, std=lkv ** -0.5, device=device),
                             w_uv=_randn(g, n, dv, lkv, std=lkv ** -0.5, device=device), scale=(dn + r) ** -0.5))
        return sets, read_bytes + weight_bytes + 2 * (n * (dn + r) + n * dv) + size * row

    name = "bf16" if cache_dtype == torch.bfloat16 else "fp8"
    target = "split-K decode >= 70% of 4.04 TB/s" if context >= 131072 and pos == context - 1 else ""
    label = (f"MLA decode L={context} {name} cache ({cache_bytes / 2**20:.0f} MiB)" if pos == context - 1 else
             f"MLA decode at pos {pos} of a {context}-row {name} cache")
    return Workload("attention", label, build, target)


def moe_workload(cfg: ModelConfig, qtype: Q, dtype: torch.dtype = torch.float32) -> Workload:
    d, f, e, k, fs = (cfg.hidden_size, cfg.moe_intermediate_size, cfg.n_experts, cfg.n_experts_per_token,
                      cfg.moe_intermediate_size * cfg.n_shared_experts)

    def build(device: torch.device, seed: int):
        rng = np.random.default_rng(seed)
        g = torch.Generator().manual_seed(seed)
        std = d ** -0.5
        w = dict(w_gate=_qweight(rng, (e, f, d), qtype, device, std, "gate_exps"),
                 w_up=_qweight(rng, (e, f, d), qtype, device, std, "up_exps"),
                 w_down=_qweight(rng, (e, d, f), qtype, device, f ** -0.5, "down_exps"),
                 s_gate=_qweight(rng, (fs, d), qtype, device, std, "gate_shexp"),
                 s_up=_qweight(rng, (fs, d), qtype, device, std, "up_shexp"),
                 s_down=_qweight(rng, (d, fs), qtype, device, fs ** -0.5, "down_shexp"))
        per_expert = (w["w_gate"].nbytes + w["w_up"].nbytes + w["w_down"].nbytes) // e
        shared = w["s_gate"].nbytes + w["s_up"].nbytes + w["s_down"].nbytes
        sets = []
        for _ in range(MAX_SETS):  # a different token, routed to different experts, every call
            ids = torch.randperm(e, generator=g)[:k].reshape(1, k).to(device)
            sets.append(dict(x=_randn(g, 1, d, dtype=dtype, device=device),
                             weights=(torch.rand(1, k, generator=g) + 0.1).to(device), ids=ids, **w))
        return sets, k * per_expert + shared + dtype.itemsize * 2 * d

    act = "" if dtype == torch.float32 else f" {str(dtype).removeprefix('torch.')}"
    return Workload("moe_experts", f"{qtype.name} E={e} top-{k} + shared, one token{act}", build)


def router_workload(cfg: ModelConfig, dtype: torch.dtype = torch.float32) -> Workload:
    """One token through an MoE layer's router: the float32 [E, D] weight (2.4 MB at 48B sizes), a set a layer."""
    d, e = cfg.hidden_size, cfg.n_experts

    def build(device: torch.device, seed: int):
        g = torch.Generator().manual_seed(seed)
        sets = [dict(x=_randn(g, 1, d, dtype=dtype, device=device),
                     weight=_randn(g, e, d, std=d ** -0.5, device=device), bias=_randn(g, e, std=0.1, device=device),
                     top_k=cfg.n_experts_per_token, n_group=cfg.n_group, topk_group=cfg.topk_group,
                     scale=cfg.routed_scaling_factor, renorm_eps=cfg.router_renorm_eps)
                for _ in range(_sets_for(4 * e * d))]
        return sets, 4 * e * d + 4 * e + dtype.itemsize * d + 12 * cfg.n_experts_per_token

    act = "" if dtype == torch.float32 else f" {str(dtype).removeprefix('torch.')}"
    return Workload("moe_router", f"router [{e}x{d}] float32, top-{cfg.n_experts_per_token}, one token{act}", build)


def workloads(cfg: ModelConfig | None = None) -> list[Workload]:
    """Every decode-path workload at the 48B's sizes."""
    cfg = cfg or load_preset("kimi-linear-48b-a3b")
    d, v, ff = cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size
    p = cfg.kda_heads * cfg.kda_head_dim
    gemv = ">= 70% of 4.04 TB/s"
    out = [quantize_act_workload(d), rmsnorm_workload(d, "block norm"), rmsnorm_workload(cfg.kv_lora_rank, "kv norm")]
    for qt in (Q.Q4_K, Q.IQ1_S):
        out += [linear_workload(qt, p, d, "kda q_proj", gemv), linear_workload(qt, d, ff, "dense down", gemv),
                linear_workload(qt, v, d, "lm_head-size", gemv)]
    out += [linear_workload(Q.Q6_K, v, d, "lm_head"), linear_workload(Q.Q8_0, p, d, "kda q_proj")]
    out += [kda_workload(cfg)]
    out += [attention_workload(cfg, n) for n in (4096, 32768, 131072)]
    out += [moe_workload(cfg, Q.Q4_K), moe_workload(cfg, Q.IQ1_S)]
    out += [router_workload(cfg, torch.bfloat16)]
    return out


# ---- timing --------------------------------------------------------------------------------------------

def _positional(op: str, s: dict[str, Any]) -> list[Any]:
    return [s[n] for n in get_contract(op).param_names]


def time_op(op: str, fn: Callable[..., Any], sets: list[dict[str, Any]], nbytes: int, *, calls: int = 64,
            replays: int = 15, warmup: int = 3, graph: bool = True) -> Timing:
    """Median device time per call of fn over the rotating argument sets (CUDA graph replay by default)."""
    args = [_positional(op, s) for s in sets]
    calls = max(calls, len(args))
    for a in args:  # compile, upload tables, allocate: nothing of this belongs in the figure
        fn(*a)
    torch.cuda.synchronize()
    mode = "graph"
    if graph:
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for i in range(calls):
                    fn(*args[i % len(args)])
            run = g.replay
        except Exception as exc:  # noqa: BLE001 - not capturable: time it eagerly and say so
            torch.cuda.synchronize()
            mode = f"eager ({type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''})"
            run = None
    else:
        mode, run = "eager", None
    if run is None:
        def run():
            for i in range(calls):
                fn(*args[i % len(args)])
    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) / 1e3 / calls)
    med = statistics.median(per_call)
    q = statistics.quantiles(per_call, n=4) if len(per_call) > 1 else [med, med, med]
    return Timing(med, (q[2] - q[0]) / med, mode, nbytes, len(sets), calls, run)


def profile_kernels(run: Callable[[], None]) -> list[tuple[str, float, float]]:
    """The kernels one call of `run` (a Timing's graph replay) put on the device: (name, start, end) in µs on the
    profiler's clock (CUPTI's device timestamps), for sparkops.bench.perop_kernels.summarize."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return [(e.name, float(e.time_range.start), float(e.time_range.end))
            for e in prof.events() if e.device_type == DeviceType.CUDA]


def describe(t: Timing) -> str:
    return (f"{t.seconds * 1e6:9.2f} us  {t.bandwidth / 1e9:8.1f} GB/s  {100 * t.fraction:5.1f}% of 4.04 TB/s  "
            f"(+-{100 * t.spread:.0f}%, {t.sets} sets, {t.mode})")
