"""`sparkops diagnose --prefill-chunk C`: where one prefill chunk's time goes, per op, against the ceilings.

The decode diagnosis profiles one token; prefill is a different regime (thousands of tokens per forward, GEMMs on
tensor cores, attention over the chunk and the history), so it gets its own profile: the context is filled to
depth D, then one chunk of C new tokens (positions D .. D+C-1) is timed (median of 3, state restored each time)
and profiled once per op. Each op's time is set against its FLOPs where the cost model has them (linears and
experts, MLA attention, KDA), so the table says which op is far from the tensor cores' rate and by how much.
Issue #10's prefill target (>= 40k tok/s at 32768) is a compute problem: this is its diagnosis.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from ..weights import ModelWeights
from . import ceilings as ceil
from . import depth as dep
from .costs import TokenCost, token_cost
from .diagnose import engines, filled, profile_ops
from .timing import RegionTimer

#: the cost model's FLOP classes and the ops that do that work
FLOP_CLASS_OPS = {"linears": ("linear", "moe_experts"), "mla_attention": ("attention",), "kda": ("kda",)}


@dataclass
class PrefillDiagnosis:
    model: str
    mix: str
    depth: int  # rows cached before the chunk
    chunk: int  # new tokens in the timed forward
    device: str
    ceilings: ceil.Ceilings
    cost: TokenCost  # per token of the chunk, after `depth`
    wall_s: float  # median seconds per chunk
    busy_s: float  # device (CUDA) or in-op (CPU) seconds per chunk
    kernels: float  # per chunk (op calls on the CPU)
    by_op: dict[str, dict[str, float]] = field(default_factory=dict)
    how: str = ""
    verdict: dict[str, Any] = field(default_factory=dict)
    by_kernel: dict[str, dict[str, float]] = field(default_factory=dict)  # CUDA: the top kernels by device time

    @property
    def tok_s(self) -> float:
        return self.chunk / self.wall_s

    def as_dict(self) -> dict[str, Any]:
        return {"phase": "prefill", "model": self.model, "mix": self.mix, "depth": self.depth, "chunk": self.chunk,
                "device": self.device, "ceilings": self.ceilings.as_dict(), "cost": self.cost.as_dict(),
                "profile": {"wall_s": self.wall_s, "busy_s": self.busy_s, "kernels": self.kernels,
                            "tok_s": self.tok_s, "by_op": self.by_op, "how": self.how, "by_kernel": self.by_kernel},
                "verdict": self.verdict}


def profile_chunk(engine: Any, depth: int, chunk: int, seed: int, device: str, filler: Any = None,
                  fill_chunk: int = 2048) -> tuple[float, float, float, dict, str]:
    """(wall, busy, kernels, by_op, how, by_kernel) of one prefill chunk of `chunk` tokens after a verified context of `depth`
    (filled here, or copied from `filler`, an engine on a faster registry)."""
    snap, toks = filled(engine, depth, chunk, seed, filler, fill_chunk)  # toks [C]

    def forward() -> None:
        engine.prefill(toks, last_only=True)

    snap.restore()
    forward()  # warm-up (compiles, autotunes, allocates)
    walls = []
    for _ in range(3):
        snap.restore()
        with RegionTimer(device) as t:
            forward()
        walls.append(t.seconds)
    wall = statistics.median(walls)
    dep.verify_depth(engine, depth + chunk, fresh=False)  # the timed forward really appended C rows
    kernels, busy, by_op, how, by_kernel = profile_ops(engine, snap, forward, device, 1)
    return wall, min(busy, wall), kernels, by_op, how, by_kernel


def verdict(d: PrefillDiagnosis) -> dict[str, Any]:
    """The chunk against its floors, each FLOP class's achieved rate, and what binds."""
    c, cost = d.ceilings, d.cost
    t_fl = cost.flops * d.chunk / c.matmul_flops
    t_bw = cost.bytes * d.chunk / c.read_bandwidth
    floor = max(t_fl, t_bw)
    classes = {}
    for cls, ops in FLOP_CLASS_OPS.items():
        secs = sum(d.by_op.get(op, {}).get("seconds", 0.0) for op in ops)
        flops = cost.flops_by_class.get(cls, 0.0) * d.chunk
        if secs > 0 and flops > 0:
            classes[cls] = {"ops": list(ops), "seconds": secs, "flops": flops, "flops_per_s": flops / secs,
                            "share_of_matmul_ceiling": flops / secs / c.matmul_flops,
                            "share_of_busy": secs / d.busy_s if d.busy_s else float("nan")}
    busy_fraction = d.busy_s / d.wall_s if d.wall_s else float("nan")
    out: dict[str, Any] = {
        "roofline_tok_s": d.chunk / floor, "time_compute_s": t_fl, "time_bandwidth_s": t_bw,
        "roofline_bound": "compute" if t_fl >= t_bw else "bandwidth", "measured_tok_s": d.tok_s,
        "fraction_of_roofline": floor / d.wall_s, "busy_fraction": busy_fraction, "flop_classes": classes,
    }
    if busy_fraction < 0.5:
        out.update(binding="host", predicted_gain=d.wall_s / max(d.busy_s, floor),
                   why=f"the device is busy {100 * busy_fraction:.0f}% of the chunk: the host (launches, Python, "
                       f"synchronizations) binds; lifting it leaves the busy time {1e3 * d.busy_s:.4g} ms")
        return out
    worst = max(classes.items(), key=lambda kv: kv[1]["seconds"], default=None)
    gain = d.wall_s / floor
    if worst is None:
        out.update(binding="kernels", predicted_gain=gain,
                   why=f"the kernels bind ({100 * floor / d.wall_s:.2g}% of the roofline); no op did FLOPs the cost "
                       f"model counts")
        return out
    cls, x = worst
    out.update(binding="kernels", predicted_gain=gain, slowest_class=cls,
               why=f"the kernels bind at {100 * floor / d.wall_s:.2g}% of the roofline; the most time goes to "
                   f"{cls} ({'/'.join(x['ops'])}: {1e3 * x['seconds']:.4g} ms, {100 * x['share_of_busy']:.0f}% of "
                   f"busy) at {x['flops_per_s'] / 1e12:.3g} TFLOP/s, {100 * x['share_of_matmul_ceiling']:.2g}% of "
                   f"the matmul ceiling")
    return out


def measured(weights: ModelWeights, registry: Any, depth: int, chunk: int, *, device: str, dtype: torch.dtype,
             seed: int = 0, ceiling_bytes: int | None = None, matmul_n: int | None = None,
             fill_registry: Any = None, cache_dtype: torch.dtype | None = None) -> PrefillDiagnosis:
    from .harness import model_info

    c = ceil.measure(device, nbytes=ceiling_bytes, matmul_n=matmul_n, working_set=weights.nbytes, launch=False)
    engine, filler = engines(weights, registry, fill_registry, device=device, dtype=dtype, cache_dtype=cache_dtype,
                             max_context=depth + chunk)
    wall, busy, kernels, by_op, how, by_kernel = profile_chunk(engine, depth, chunk, seed, device, filler)
    del filler
    elsize = dep.mla_caches(engine)[0][1].element_size()
    info = model_info(weights)
    d = PrefillDiagnosis(info["name"], info["mix"], depth, chunk, device, c,
                         token_cost(weights.config, "prefill", tokens=chunk, depth=depth, weights=weights,
                                    cache_elsize=elsize),
                         wall, busy, kernels, by_op, how, by_kernel=by_kernel)
    d.verdict = verdict(d)
    return d
