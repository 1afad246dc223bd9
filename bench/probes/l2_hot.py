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

What it times, for each kernel the step now runs (the implementations of cuda-s55-stack.toml), with the harness
the per-op records use (sparkops_cupy._workloads.time_op: a CUDA graph of 64 calls replayed, CUDA events, median):
  cold   argument sets rotated call after call, together more than 3x the 50 MB L2 (the per-op records' rule)
  hot    the first set only, every call: its weights stay in the L2 (the whole expert set, ~36 MB, too)
The outputs of a hot call and of the same set's cold call are compared bit for bit (the L2 changes time, no value).

Then the placement the lead needs (session 43), a MoE layer's chain and the next KDA layer's first GEMV, each link on
rotated sets: router -> experts -> q|k|v, 32 chains a graph. Timed plain, and with the q|k|v weight (15.9 MB) asked
into the L2 (sparkops_cupy.l2_prefetch, bulk prefetches) on a side stream forked at the router's start and joined
before the GEMV, at 8, 33 and 132 blocks. The experts read ~36 MB a call through the L2 at the default priority
between the prefetch and the GEMV, so the chain says at once what the prefetch's lines survive and what its stream
takes from the experts'. A chain with a gain near the GEMV's cold - hot above is the lead; none closes it.

    python3 bench/probes/l2_hot.py --out probe.json [--only NAME ...] [--no-chain]
"""

from __future__ import annotations

import argparse
import json
import sys

#: name -> (op, the implementation's module and function in sparkops_cupy, what it is): the step's kernels, cuda-s55
#: (linear@Q4_K=cupy_rowwarp_pdl_q8_tall_xr: the Q8 tall form for q|k|v and MLA q, the xr warp form for the o_proj)
GEMV = "linear:linear_rowwarp_pdl_q8_tall_xr"
KERNELS = {
    "kda_qkv": ("linear", GEMV, "KDA merged q|k|v GEMV, Q4_K [3P x D] (Q8 tall form)"),
    "kda_o_proj": ("linear", GEMV, "KDA o_proj GEMV, Q4_K [D x P] (xr warp form)"),
    "mla_q": ("linear", GEMV, "MLA q GEMV, Q4_K [N*(Dn+R) x D] (Q8 tall form)"),
    "experts": ("moe_experts", "moe_experts:moe_experts_rowwarp_pdl_q8_pairs_l2pf",
                "MoE gate/up + down, Q4_K, 8 routed + shared (the step's l2pf pair)"),
    "router": ("moe_router", "moe_router:moe_router_rowwarp_pdl", "router logits and top-8, float32 [E x D]"),
}
#: the chain's prefetch launches: blocks of 128 threads (8 is l2_prefetch's default for a large tensor; 33 a
#: quarter and 132 all of an H100's SMs)
CHAIN_BLOCKS = (8, 33, 132)
CHAIN_CALLS = 32


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="l2_hot.py", description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--only", action="append", metavar="NAME", help=f"time this kernel alone ({', '.join(KERNELS)})")
    ap.add_argument("--replays", type=int, default=30, help="graph replays a figure (the median is kept)")
    ap.add_argument("--no-chain", action="store_true", help="leave out the router -> experts -> q|k|v chain")
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


def _impl(name: str):
    import importlib

    module, fn_name = KERNELS[name][1].split(":")
    return getattr(importlib.import_module(f"sparkops_cupy.{module}"), fn_name)


def chain(cfg, dev, replays: int) -> dict:
    """The MoE layer's router -> experts, then the next KDA layer's q|k|v GEMV, CHAIN_CALLS chains a CUDA graph on
    rotated sets; plain and with the GEMV's weight prefetched on a side stream from the router's start. Median µs a
    chain, and each prefetching form's output against the plain one's (bit for bit)."""
    import statistics

    import torch
    from sparkops_cupy._workloads import _positional
    from sparkops_cupy.l2_prefetch import prefetch

    parts = {}
    for name in ("router", "experts", "kda_qkv"):
        sets, _ = workload(name, cfg).build(dev, 1)
        parts[name] = (_impl(name), [_positional(KERNELS[name][0], s) for s in sets], sets)
    router, experts, qkv = (parts[n] for n in ("router", "experts", "kda_qkv"))
    side = torch.cuda.Stream(device=dev)
    out = torch.empty(CHAIN_CALLS, 3 * cfg.kda_heads * cfg.kda_head_dim, device=dev, dtype=torch.float32)

    def record(blocks: int | None) -> None:
        main = torch.cuda.current_stream(dev)
        for i in range(CHAIN_CALLS):
            w = qkv[2][i % len(qkv[2])]["weight"].raw
            router[0](*router[1][i % len(router[1])])
            if blocks:
                side.wait_stream(main)
                with torch.cuda.stream(side):
                    prefetch(w, blocks=blocks)
            experts[0](*experts[1][i % len(experts[1])])
            if blocks:
                main.wait_stream(side)
            out[i].copy_(qkv[0](*qkv[1][i % len(qkv[1])]).reshape(-1).float())

    rows, want = {}, None
    for blocks in (None, *CHAIN_BLOCKS):
        record(blocks)  # compile and load outside the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            record(blocks)
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        got = out.clone()
        want = got if want is None else want
        per = []
        for _ in range(replays):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            per.append(a.elapsed_time(b) * 1e3 / CHAIN_CALLS)
        key = "plain" if blocks is None else f"prefetch_{blocks}"
        med = statistics.median(per)
        q = statistics.quantiles(per, n=4)
        rows[key] = {"us": med, "spread": (q[2] - q[0]) / med, "same_bits": bool(torch.equal(got, want))}
        gain = "" if blocks is None else f"  gain {rows['plain']['us'] - med:+6.2f} us a chain"
        print(f"chain {key:12s} {med:8.2f} us a chain (+-{100 * rows[key]['spread']:.0f}%){gain}; "
              f"the plain chain's bits: {rows[key]['same_bits']}", flush=True)
        del g
    return {"calls": CHAIN_CALLS, "what": "router -> experts -> kda q|k|v, the GEMV's weight prefetched on a side "
            "stream forked at the router's start (blocks of 128 threads)", "forms": rows}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    if not torch.cuda.is_available():
        print("l2_hot probe: needs a CUDA device", file=sys.stderr)
        return 2
    from sparkops.config import load_preset
    from sparkops_cupy._workloads import _positional, describe, time_op

    cfg = load_preset("kimi-linear-48b-a3b")
    dev = torch.device("cuda", torch.cuda.current_device())
    results = {"device": torch.cuda.get_device_name(dev), "kernels": {}}
    for name in args.only or KERNELS:
        op, where, what = KERNELS[name]
        fn = _impl(name)
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
    if not args.no_chain:
        results["chain"] = chain(cfg, dev, args.replays)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    same = [r["same_bits"] for r in results["kernels"].values()]
    same += [r["same_bits"] for r in results.get("chain", {}).get("forms", {}).values()]
    return 0 if all(same) else 1


if __name__ == "__main__":
    raise SystemExit(main())
