"""The 48B model's shapes for this plugin's ops, and an honest timer: what the GPU tests and bench/ use.

Honest means (anchors.md section 6): real random data, never zeros; argument sets rotated so their
bytes are several times the 50 MB L2 (so the timing is of memory, not cache); the bytes counted are
the fewest the op must move (the shared MLA latent once, the KDA state read + written); CUDA-graph
replay for decode steps (a decode step is replayed as a graph in the engine), CUDA events around many
calls, the median of several replays.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable

import torch

L2_BYTES = 50 * 2**20
PEAK_BYTES_PER_S = 4.04e12  # measured read bandwidth of the H200 (anchors.md section 1)

# Kimi-Linear-48B sizes (spec section 1)
HIDDEN, KDA_HEADS, KDA_DIM, CONV = 2304, 32, 128, 4
MLA_HEADS, NOPE, ROPE, LKV, VDIM = 32, 128, 64, 512, 128
EXPERTS, TOP_K, VOCAB = 256, 8, 163840


@dataclass
class Timing:
    us: float  # median device time per call
    nbytes: int  # bytes the call must move at least
    mode: str  # "graph" or "eager"

    @property
    def gbps(self) -> float:
        return self.nbytes / (self.us * 1e-6) / 1e9

    @property
    def fraction(self) -> float:
        return self.nbytes / (self.us * 1e-6) / PEAK_BYTES_PER_S

    def __str__(self) -> str:
        return (f"{self.us:9.2f} us  {self.gbps:8.1f} GB/s  {100 * self.fraction:5.1f}% of 4.04 TB/s  "
                f"({self.nbytes / 2**20:.2f} MiB, {self.mode})")


def sets_for(one_set_bytes: int, at_least: int = 2, cap: int = 64) -> int:
    """How many argument sets make the rotation ~3x the L2."""
    return max(at_least, min(cap, -(-3 * L2_BYTES // max(1, one_set_bytes))))


def time_calls(fn: Callable[..., Any], arg_sets: list[tuple], nbytes: int, graph: bool = True,
               replays: int = 20, calls_per_set: int = 1) -> Timing:
    """Median device time of one call of fn over the rotating argument sets (graph replay or eager)."""
    calls = [a for a in arg_sets for _ in range(calls_per_set)]
    for a in calls[: max(2, len(arg_sets))]:  # compile and warm up outside the timing (and the capture)
        fn(*a)
    torch.cuda.synchronize()
    mode = "eager"
    run = None
    if graph:
        try:
            g = torch.cuda.CUDAGraph()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for a in calls:  # one eager pass on the side stream, as capture requires
                    fn(*a)
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(g):
                for a in calls:
                    fn(*a)
            run, mode = g.replay, "graph"
        except Exception:  # noqa: BLE001 - reported as mode "eager"; the GPU tests assert "graph" where it matters
            run = None
    if run is None:
        def run():
            for a in calls:
                fn(*a)
    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(calls))
    return Timing(statistics.median(times), nbytes, mode)


def time_thunks(thunks: list[Callable[[], Any]], replays: int = 30) -> float:
    """Median microseconds of one replay of a sequence of calls captured as one CUDA graph (time_calls over
    argument-free calls: the probes' mixed sequences, e.g. a prefetch launch before each GEMV). Refuses to fall back
    to eager timing: a probe's question is about a graph replay."""
    timing = time_calls(lambda thunk: thunk(), [(t,) for t in thunks], 0, graph=True, replays=replays)
    if timing.mode != "graph":
        raise RuntimeError("these calls could not be captured in a CUDA graph; time_thunks times graph replays only")
    return timing.us * len(thunks)


def _rand(gen: torch.Generator, *shape: int, std: float = 1.0, dtype=torch.bfloat16, device="cuda") -> torch.Tensor:
    return (torch.randn(*shape, generator=gen, device=device, dtype=torch.float32) * std).to(dtype)


def graph_round(fn: Callable[..., Any], sets: list[tuple], graph: bool) -> tuple[Callable[[], None], int, str]:
    """(round, calls per round, "graph" | "eager"): one call per argument set, then a synchronize.

    With graph=True the calls are captured once in a CUDA graph and a round replays it (how the engine
    runs a decode step); an implementation that cannot be captured is timed eagerly and says so.
    """
    for args in sets[:2]:  # compile / warm up outside the capture
        fn(*args)
    torch.cuda.synchronize()
    if graph:
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for args in sets:
                    fn(*args)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for args in sets:
                    fn(*args)

            def replay() -> None:
                g.replay()
                torch.cuda.synchronize()

            return replay, len(sets), "graph"
        except Exception:  # noqa: BLE001 - not capturable: timed eagerly, and the mode says so
            torch.cuda.synchronize()

    def eager() -> None:
        for args in sets:
            fn(*args)
        torch.cuda.synchronize()

    return eager, len(sets), "eager"


# ---- argument builders: (argument sets, bytes per call) ----

def kda_args(t: int, n_sets: int | None = None, seed: int = 0, act=torch.bfloat16):
    """kda at 48B sizes, T tokens; state [32, 128, 128] float32. Bytes: q,k,v,g,beta in, o out, state r+w."""
    h, d = KDA_HEADS, KDA_DIM
    esz = torch.finfo(act).bits // 8
    nbytes = 5 * t * h * d * esz + t * h * esz + 2 * h * d * d * 4
    n_sets = n_sets or sets_for(nbytes)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    sets = []
    for _ in range(n_sets):
        a = -torch.exp(torch.rand(h, generator=gen, device="cuda") * 2 - 1)
        sets.append((_rand(gen, t, h, d, dtype=act), _rand(gen, t, h, d, dtype=act), _rand(gen, t, h, d, dtype=act),
                     _rand(gen, t, h, d, dtype=act), _rand(gen, t, h, std=2.0, dtype=act), a,
                     _rand(gen, h * d, std=0.5, dtype=torch.float32),
                     _rand(gen, h, d, d, std=0.05, dtype=torch.float32), d ** -0.5, 1e-6))
    return sets, nbytes


def kda_norm_args(t: int, n_sets: int | None = None, seed: int = 0, act=torch.bfloat16):
    """kda_norm at 48B sizes: kda_args' sets, each with an output gate [T, 32, 128] and the norm's gain [128] (float32)
    after them. Bytes: kda's, plus the gate read (the output is kda's o, normed in place of it)."""
    h, d = KDA_HEADS, KDA_DIM
    esz = torch.finfo(act).bits // 8
    core, nbytes = kda_args(t, n_sets, seed, act)
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    sets = [(*c, _rand(gen, t, h, d, std=2.0, dtype=act), _rand(gen, d, dtype=torch.float32), 1e-5) for c in core]
    return sets, nbytes + t * h * d * esz + d * 4


def conv_kda_norm_args(t: int, n_sets: int | None = None, seed: int = 0, act=torch.bfloat16):
    """short_conv_kda_norm at 48B sizes, in its argument order: kda_norm_args' sets with q, k, v replaced by the raw
    projected q|k|v row [T, 3P], the merged taps [3P, 4] and the window [3, 3P] (float32; one each a set, as each layer
    has its own). Bytes: kda_norm's (x's read stands for q/k/v's), the taps, the window read and written."""
    h, d = KDA_HEADS, KDA_DIM
    c = 3 * h * d
    core, nbytes = kda_norm_args(t, n_sets, seed, act)
    gen = torch.Generator(device="cuda").manual_seed(seed + 3)
    sets = [(_rand(gen, t, c, std=2.0, dtype=act), _rand(gen, c, CONV, std=0.5, dtype=torch.float32),
             _rand(gen, CONV - 1, c, std=2.0, dtype=torch.float32), *rest) for _q, _k, _v, *rest in core]
    return sets, nbytes + c * CONV * 4 + 2 * (CONV - 1) * c * 4


def kda_lowrank_norm_args(t: int, n_sets: int | None = None, seed: int = 0, act=torch.bfloat16):
    """kda_lowrank_norm at 48B sizes, in its argument order: kda_norm_args' sets with the decay logits and the gate
    replaced by f_a's and g_a's codes [T, 128] and the two F16 up-projections [4096, 128] (one pair a set, as each layer
    has its own). Bytes: kda's without g, the codes, both weights."""
    from sparkops.qweight import QWeight
    from gguf import GGMLQuantizationType

    h, d = KDA_HEADS, KDA_DIM
    p = d  # the low rank is the head dim on Kimi-Linear
    esz = torch.finfo(act).bits // 8
    core, nbytes = kda_norm_args(t, n_sets, seed, act)
    gen = torch.Generator(device="cuda").manual_seed(seed + 2)

    def up(std):
        return QWeight(_rand(gen, h * d, p, std=std / p ** 0.5, dtype=torch.float16), GGMLQuantizationType.F16,
                       (h * d, p), name="up")

    sets = []
    for q, k, v, _g, beta, a, dtb, state, scale, l2_eps, _gate, weight, eps in core:
        sets.append((q, k, v, _rand(gen, t, p, dtype=act), up(1.0), beta, a, dtb, state, scale, l2_eps,
                     _rand(gen, t, p, dtype=act), up(2.0), weight, eps))
    return sets, nbytes - 2 * t * h * d * esz + 2 * t * p * esz + 2 * h * d * p * 2


def attention_args(t: int, context: int, n_sets: int | None = None, seed: int = 0, act=torch.bfloat16):
    """attention at 48B sizes: T new tokens after `context` cached ones (cache holds context + T rows).

    Bytes: the cache rows read once (shared latent, 576 bf16 per row) + w_uk + w_uv (float32) + q, out.
    """
    n, wrow = MLA_HEADS, LKV + ROPE
    esz = torch.finfo(act).bits // 8
    nbytes = (context + t) * wrow * esz + 2 * n * NOPE * LKV * 4 + t * n * (NOPE + ROPE + VDIM) * esz
    n_sets = n_sets or sets_for(nbytes, at_least=1, cap=16)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    w_uk = _rand(gen, n, NOPE, LKV, std=LKV ** -0.5, dtype=torch.float32)
    w_uv = _rand(gen, n, VDIM, LKV, std=LKV ** -0.5, dtype=torch.float32)
    sets = []
    for _ in range(n_sets):
        cache = _rand(gen, context + t, wrow, dtype=act)
        sets.append((_rand(gen, t, n, NOPE + ROPE, dtype=act), _rand(gen, t, wrow, dtype=act), cache,
                     torch.tensor([context], device="cuda"), w_uk, w_uv, (NOPE + ROPE) ** -0.5))
    return sets, nbytes


def norm_args(op: str, t: int, n_sets: int | None = None, seed: int = 0, act=torch.bfloat16):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    esz = torch.finfo(act).bits // 8
    if op == "rmsnorm":
        nbytes = 2 * t * HIDDEN * esz + HIDDEN * 4
        make = lambda: (_rand(gen, t, HIDDEN, std=3.0, dtype=act), _rand(gen, HIDDEN, dtype=torch.float32), 1e-5)
    elif op == "add_rmsnorm":
        nbytes = 4 * t * HIDDEN * esz + HIDDEN * 4
        make = lambda: (_rand(gen, t, HIDDEN, dtype=act), _rand(gen, t, HIDDEN, std=3.0, dtype=act),
                        _rand(gen, HIDDEN, dtype=torch.float32), 1e-5)
    else:
        nbytes = 3 * t * KDA_HEADS * KDA_DIM * esz + KDA_DIM * 4
        make = lambda: (_rand(gen, t, KDA_HEADS, KDA_DIM, std=2.0, dtype=act),
                        _rand(gen, t, KDA_HEADS, KDA_DIM, std=2.0, dtype=act), _rand(gen, KDA_DIM, dtype=torch.float32),
                        1e-5)
    return [make() for _ in range(n_sets or sets_for(nbytes))], nbytes


def short_conv_args(t: int, n_sets: int | None = None, seed: int = 0, act=torch.bfloat16):
    c = KDA_HEADS * KDA_DIM
    esz = torch.finfo(act).bits // 8
    nbytes = 2 * t * c * esz + c * CONV * 4 + 2 * (CONV - 1) * c * 4
    gen = torch.Generator(device="cuda").manual_seed(seed)
    make = lambda: (_rand(gen, t, c, std=2.0, dtype=act), _rand(gen, c, CONV, std=0.5, dtype=torch.float32),
                    _rand(gen, CONV - 1, c, dtype=torch.float32))
    return [make() for _ in range(n_sets or sets_for(nbytes))], nbytes


def router_args(t: int, n_sets: int | None = None, seed: int = 0, act=torch.bfloat16):
    esz = torch.finfo(act).bits // 8
    nbytes = t * HIDDEN * esz + EXPERTS * HIDDEN * 4 + EXPERTS * 4 + t * TOP_K * 12
    gen = torch.Generator(device="cuda").manual_seed(seed)
    make = lambda: (_rand(gen, t, HIDDEN, dtype=act), _rand(gen, EXPERTS, HIDDEN, std=HIDDEN ** -0.5,
                                                            dtype=torch.float32),
                    _rand(gen, EXPERTS, std=0.1, dtype=torch.float32), TOP_K, 1, 1, 2.446, 1e-20)
    return [make() for _ in range(n_sets or sets_for(nbytes))], nbytes


def sample_args(temperature: float, top_k: int, top_p: float, rows: int = 1, n_sets: int | None = None,
                seed: int = 0):
    nbytes = rows * VOCAB * 4
    gen = torch.Generator(device="cuda").manual_seed(seed)
    make = lambda: (_rand(gen, rows, VOCAB, std=3.0, dtype=torch.float32), temperature, top_k, top_p, 7,
                    torch.tensor([3], device="cuda"))
    return [make() for _ in range(n_sets or sets_for(nbytes))], nbytes


def expert_stack_args(n_sets: int = 2, seed: int = 0):
    """One 48B expert weight stack, Q4_K [256, 1024, 2304] (~340 MB of blocks, random real blocks), for the
    whole-weight decode to bf16: (raw, qtype, grid, k) per set. Bytes: the blocks read plus the bf16 written."""
    import numpy as np

    from sparkops.gguf.quants import random_blocks

    from .linear import Q4_K

    shape = (EXPERTS, 1024, HIDDEN)
    rng = np.random.default_rng(seed)
    sets = [(torch.from_numpy(random_blocks(rng, shape, int(Q4_K.value), HIDDEN ** -0.5)).to("cuda"), int(Q4_K.value),
             torch.empty(1, device="cuda"), HIDDEN) for _ in range(n_sets)]
    nbytes = sets[0][0].numel() + EXPERTS * 1024 * HIDDEN * 2
    return sets, nbytes
