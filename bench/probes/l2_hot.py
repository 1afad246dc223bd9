"""Probe: how much faster do the decode step's kernels run when their weights are already in the L2? A lead for the
decode ladder, not a ledger row (bench/GPU-PROBES.md keeps what it showed).

Why. Session 12 (bench/GPU-PROBES.md) asked this of the Triton GEMVs of the time and found ~10%: their own structure
bound them, so faster bytes could not help. The kernels the step runs now are other kernels: the Q8 GEMV reads a
KDA layer's merged q|k|v weight (15.9 MB) at ~43% of the read ceiling, the Q8 gate/up and down at ~40-50%, the router
at ~13% (sessions 29-33). Each requests all of its bytes in one wave and dots them as they land. If they run much
faster from the L2, a weight that is known ahead of time (every dense projection, the router, the shared expert) can
be streamed into the L2 on a third stream while the step is in one of its latency-bound stretches (the router's
tail, the short conv and the recurrence, the norms: the DRAM idles there), and that kernel then starts on hot bytes.
If hot is no faster, that lead is closed before anything is built for it.

What it times, for each kernel the step now runs (the implementations of cuda-s39-q8-tall.toml), with the harness
the per-op records use (sparkops_cupy._workloads.time_op: a CUDA graph of 64 calls replayed, CUDA events, median):
  cold   argument sets rotated call after call, together more than 3x the 50 MB L2 (the per-op records' rule)
  hot    the first set only, every call: its weights stay in the L2 (the whole expert set, ~36 MB, too)
The outputs of a hot call and of the same set's cold call are compared bit for bit (the L2 changes time, no value).

    python3 bench/probes/l2_hot.py --out probe.json [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import sys

#: name -> (op, the implementation's module and function in sparkops_cupy, what it is): the step's kernels, cuda-s39
KERNELS = {
    "kda_qkv": ("linear", "linear:linear_rowwarp_pdl_q8_tall", "KDA merged q|k|v GEMV, Q4_K [3P x D] (Q8 tall form)"),
    "kda_o_proj": ("linear", "linear:linear_rowwarp_pdl_q8_tall", "KDA o_proj GEMV, Q4_K [D x P] (float warp form)"),
    "mla_q": ("linear", "linear:linear_rowwarp_pdl_q8_tall", "MLA q GEMV, Q4_K [N*(Dn+R) x D] (Q8 tall form)"),
    "experts": ("moe_experts", "moe_experts:moe_experts_rowwarp_pdl_q8_pairs_ld",
                "MoE gate/up + down, Q4_K, 8 routed + shared (the step's pair)"),
    "router": ("moe_router", "moe_router:moe_router_rowwarp_pdl_sorted", "router logits and top-8, float32 [E x D]"),
}


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="l2_hot.py", description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--only", action="append", metavar="NAME", help=f"time this kernel alone ({', '.join(KERNELS)})")
    ap.add_argument("--replays", type=int, default=30, help="graph replays a figure (the median is kept)")
    args = ap.parse_args(argv)
    unknown = [n for n in args.only or () if n not in KERNELS]
    if unknown:
        ap.exit(2, f"l2_hot probe: no kernel named {', '.join(map(repr, unknown))}; the names are "
                   f"{', '.join(KERNELS)}\n")
    if args.replays < 3:
        ap.exit(2, "l2_hot probe: --replays must be at least 3 (a median of fewer says little)\n")
    return args


def workload(name: str, cfg):
    """The kernel's argument sets at the 48B's sizes, bf16 activations as the step's."""
    import torch
    from gguf import GGMLQuantizationType as Q
    from sparkops_cupy._workloads import linear_workload, moe_workload, router_workload

    d, p = cfg.hidden_size, cfg.kda_heads * cfg.kda_head_dim
    bf16 = torch.bfloat16
    return {
        "kda_qkv": lambda: linear_workload(Q.Q4_K, 3 * p, d, "kda q|k|v", dtype=bf16),
        "kda_o_proj": lambda: linear_workload(Q.Q4_K, d, p, "kda o_proj", dtype=bf16),
        "mla_q": lambda: linear_workload(Q.Q4_K, cfg.mla_heads * cfg.qk_head_dim, d, "mla q", dtype=bf16),
        "experts": lambda: moe_workload(cfg, Q.Q4_K, bf16),
        "router": lambda: router_workload(cfg, bf16),
    }[name]()


def _same(a, b) -> bool:
    import torch

    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return torch.equal(a, b)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    if not torch.cuda.is_available():
        print("l2_hot probe: needs a CUDA device", file=sys.stderr)
        return 2
    import importlib

    from sparkops.config import load_preset
    from sparkops_cupy._workloads import _positional, describe, time_op

    cfg = load_preset("kimi-linear-48b-a3b")
    dev = torch.device("cuda", torch.cuda.current_device())
    results = {"device": torch.cuda.get_device_name(dev), "kernels": {}}
    for name in args.only or KERNELS:
        op, where, what = KERNELS[name]
        module, fn_name = where.split(":")
        fn = getattr(importlib.import_module(f"sparkops_cupy.{module}"), fn_name)
        sets, nbytes = workload(name, cfg).build(dev, 0)
        first = _positional(op, sets[0])
        want = fn(*first)  # set 0 after the others' loads below: cold
        cold = time_op(op, fn, sets, nbytes, replays=args.replays)
        hot = time_op(op, fn, sets[:1], nbytes, replays=args.replays)
        got = fn(*first)  # set 0 hot
        torch.cuda.synchronize()
        same = _same(want, got)
        row = {"what": what, "implementation": f"sparkops_cupy.{where}", "mb": nbytes / 1e6, "sets_cold": len(sets),
               "cold_us": cold.seconds * 1e6, "hot_us": hot.seconds * 1e6, "hot_over_cold": hot.seconds / cold.seconds,
               "cold_spread": cold.spread, "hot_spread": hot.spread, "same_bits": same}
        results["kernels"][name] = row
        print(f"{name:11s} cold {describe(cold)}", flush=True)
        print(f"{'':11s} hot  {describe(hot)}", flush=True)
        print(f"{'':11s} hot / cold {row['hot_over_cold']:.3f}; the same bits hot and cold: {same}", flush=True)
        del sets
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all(r["same_bits"] for r in results["kernels"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
