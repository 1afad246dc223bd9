"""Probe: do a decode step's small Q4_K GEMVs run faster when the next GEMV's weights are prefetched into the L2
while the current one runs? A lead for the decode ladder, not a ledger row (bench/GPU-PROBES.md keeps the result).

Why: at d=0 the 48B decode step's 117 linears take 1.00 ms (session 9's diagnosis) for ~0.26 ms of bytes: each
GEMV reads 2-14 MB at 5-30% of the read ceiling, so the memory system idles at every kernel's start and tail. If a
GEMV over L2-resident weights is much faster than one over DRAM (the "hot" bound below), a prefetch issued one kernel
ahead could move most of the step's weight traffic off its critical path; if hot is no faster, the kernels' own
structure binds and prefetching cannot help.

What it times, each variant captured once as a CUDA graph and replayed (CUDA events, median of the replays):
  plain    80 GEMVs (5 shapes of one token's Q4_K linears x 16 sets, 224 MB: beyond the 50 MB L2) in order
  next1    the same, each GEMV preceded by a prefetch kernel for the next GEMV's weights
  next2    the same, prefetching two GEMVs ahead
  hot      one set's 5 GEMVs 16 times over (14 MB: the weights stay in the L2) - the bound prefetching aims at
  pf_only  the 80 prefetch kernels alone (their launch cost inside a graph)
for linear=triton_lastblock (the decode registries' Q4_K GEMV) and linear=triton.

    python bench/probes/l2_prefetch.py --out probe.json
"""

from __future__ import annotations

import argparse
import json
import sys

import torch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--replays", type=int, default=30)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("l2_prefetch probe: needs a CUDA device", file=sys.stderr)
        return 2

    from sparkops_cupy.l2_prefetch import prefetch
    from sparkops_triton import linear
    from sparkops_triton._tune import _TOKEN_Q4K, _linear_workload
    from sparkops_triton._workloads import time_thunks as graph_time

    shapes, qtype, copies = _TOKEN_Q4K
    _, sets, _, _ = _linear_workload(shapes, qtype, copies)
    seq = [(x.to(torch.bfloat16), w) for ws, xs in sets for x, w in zip(xs, ws)]  # [80] (x [1, IN], weight)
    hot = [(x.to(torch.bfloat16), w) for _ in range(copies) for x, w in zip(sets[0][1], sets[0][0])]
    weight_bytes = sum(w.raw.numel() for _, w in seq)
    n = len(seq)
    results = {"gemvs": n, "weight_mb": weight_bytes / 1e6, "shapes": shapes, "variants": {}}

    def gemvs(impl, pairs, ahead: int | None):
        thunks = []
        for i, (x, w) in enumerate(pairs):
            if ahead is not None and i + ahead < len(pairs):
                nxt = pairs[i + ahead][1].raw
                thunks.append(lambda t=nxt: prefetch(t))
            thunks.append(lambda x=x, w=w: impl(x, w))
        return thunks

    # the prefetch must not change any value: the GEMVs' outputs with and without it, bit for bit
    for impl_name, impl in (("triton_lastblock", linear.linear_lastblock), ("triton", linear.linear)):
        want = [impl(x, w) for x, w in seq[:5]]
        got = []
        for i, (x, w) in enumerate(seq[:5]):
            prefetch(seq[i + 1][1].raw)
            got.append(impl(x, w))
        torch.cuda.synchronize()
        assert all(torch.equal(a, b) for a, b in zip(want, got)), f"{impl_name}: a prefetch changed a result"
        row = {}
        for label, pairs, ahead in (("plain", seq, None), ("next1", seq, 1), ("next2", seq, 2), ("hot", hot, None)):
            us = graph_time(gemvs(impl, pairs, ahead), args.replays)
            row[label] = {"us_per_round": us, "us_per_gemv": us / n,
                          "read_fraction": weight_bytes / (us * 1e-6) / 4.04e12}
            print(f"{impl_name:17s} {label:6s} {us:9.1f} us a round, {us / n:6.2f} us a GEMV, "
                  f"{100 * row[label]['read_fraction']:5.1f}% of 4.04 TB/s", flush=True)
        results["variants"][impl_name] = row
    pf = graph_time([lambda t=w.raw: prefetch(t) for _, w in seq], args.replays)
    results["pf_only_us_per_round"] = pf
    print(f"prefetch kernels alone: {pf:.1f} us a round of {n}, {pf / n:.2f} us each", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
