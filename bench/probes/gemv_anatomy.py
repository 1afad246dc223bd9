"""Probe: where a decode GEMV's ~6.8 us goes, when its 2.9 MB of weights need ~0.7 us at the read ceiling.
A lead for the decode ladder, not a ledger row (bench/GPU-PROBES.md keeps the result).

Session 12's L2 probe found that the 48B's small Q4_K GEMVs are only 10% faster with their weights in the L2, so
memory does not bind them. This probe separates what a kernel of that size costs from what the GEMV adds. Every
variant runs 80 kernels in one CUDA graph replay (the median of the replays):
  nop        an empty kernel: the launch floor inside a graph
  read       one streaming read of each GEMV's weight bytes (16 KiB per program, summed so the loads are kept): what
             any kernel reading that many bytes costs. A GEMV cannot beat it
  read_hot   the same over one set's weights (14 MB, L2-resident)
  gemv       linear=triton_lastblock on the same weights (DRAM), and gemv_hot (L2)
  read_set   one read kernel over a whole set's bytes at once (5 weights, 14 MB, 16 launches instead of 80): what
             fusing a token's independent GEMVs into one launch could approach
  rowwarp    linear=cupy_rowwarp on the same weights (session 13's GEMV: a row's loads at once), and rowwarp_hot (L2):
             with read and read_hot, how much of its time is the decode's arithmetic rather than its bytes (where
             cupy is installed)
If read is close to gemv, a kernel of this size costs that much whatever it does, and only fewer launches (fusion,
a persistent kernel) can help. If read is far below gemv, the GEMV's own structure (the Q4_K decode chain, the
split-K combine) is the target.

    python bench/probes/gemv_anatomy.py --out probe.json
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
        print("gemv_anatomy probe: needs a CUDA device", file=sys.stderr)
        return 2

    import triton
    import triton.language as tl
    from sparkops_triton import linear
    from sparkops_triton._tune import _TOKEN_Q4K, _linear_workload
    from sparkops_triton._workloads import time_thunks as graph_time

    @triton.jit
    def _nop(x_ptr):
        pass

    @triton.jit
    def _read(w_ptr, out_ptr, n_words, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        w = tl.load(w_ptr + offs, mask=offs < n_words, other=0)  # [BLOCK] int32 words of the weight
        tl.store(out_ptr + tl.program_id(0), tl.sum(w, axis=0))

    block = 4096  # int32 words: 16 KiB a program
    sink = torch.empty(1 << 16, dtype=torch.int32, device="cuda")

    def read(buf: torch.Tensor):
        words = buf.view(torch.int32)
        return lambda: _read[(triton.cdiv(words.numel(), block),)](words, sink, words.numel(), BLOCK=block)

    shapes, qtype, copies = _TOKEN_Q4K
    _, sets, _, _ = _linear_workload(shapes, qtype, copies)
    seq = [(x.to(torch.bfloat16), w) for ws, xs in sets for x, w in zip(xs, ws)]  # [80]
    hot = [(x.to(torch.bfloat16), w) for _ in range(copies) for x, w in zip(sets[0][1], sets[0][0])]
    n = len(seq)
    weight_bytes = sum(w.raw.numel() for _, w in seq)
    set_bufs = [torch.cat([w.raw.flatten() for w in ws]) for ws, _ in sets]  # [16] of 14 MB, contiguous
    variants = {
        "nop": [lambda: _nop[(1,)](sink)] * n,
        "read": [read(w.raw) for _, w in seq],
        "read_hot": [read(w.raw) for _, w in hot],
        "gemv": [lambda x=x, w=w: linear.linear_lastblock(x, w) for x, w in seq],
        "gemv_hot": [lambda x=x, w=w: linear.linear_lastblock(x, w) for x, w in hot],
        "read_set": [read(b) for b in set_bufs],
    }
    try:
        from sparkops_cupy.linear import linear_rowwarp
    except ImportError as e:  # the cupy plugin needs cupy; the other variants do not
        print(f"gemv_anatomy probe: no cupy_rowwarp variants ({e})", file=sys.stderr)
    else:
        variants["rowwarp"] = [lambda x=x, w=w: linear_rowwarp(x, w) for x, w in seq]
        variants["rowwarp_hot"] = [lambda x=x, w=w: linear_rowwarp(x, w) for x, w in hot]
    results = {"kernels": n, "weight_mb": weight_bytes / 1e6, "shapes": shapes, "variants": {}}
    for label, thunks in variants.items():
        us = graph_time(thunks, args.replays)
        per = us / len(thunks)
        frac = weight_bytes / (us * 1e-6) / 4.04e12 if label != "nop" else 0.0
        results["variants"][label] = {"us_per_round": us, "launches": len(thunks), "us_per_launch": per,
                                      "read_fraction": frac}
        print(f"{label:9s} {us:9.1f} us a round of {len(thunks):3d} launches, {per:6.2f} us each"
              + (f", {100 * frac:5.1f}% of 4.04 TB/s over the round's {weight_bytes / 1e6:.0f} MB" if frac else ""),
              flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
