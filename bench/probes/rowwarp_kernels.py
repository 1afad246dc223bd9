"""Probe: one launch of each decode GEMV form at the 48B's two largest decode projections, for a profiler to read.
A lead for the decode ladder, not a ledger row (bench/GPU-PROBES.md keeps what it showed).

Session 13's row-warp GEMVs (`linear=cupy_rowwarp`) reach ~30% of the read ceiling on the tall projections. By the
disassembly they issue ~6.5 instructions a weight, which accounts for about half of their time. Copying every weight
byte into shared memory first (the "copy" form) bought only ~5%, so waiting on DRAM round trips is not the other
half either. Hardware counters can say what is: issue-slot use, stall reasons, achieved occupancy, DRAM throughput.
This script makes the launches for Nsight Compute, without a CUDA graph (ncu profiles kernels one by one):

    ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \\
        --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats \\
        -k regex:"rowwarp|rowoct|rowcp|rowstg|rowhc|_mma|_gemv_kernel|_read_kernel" \\
        python3 bench/probes/rowwarp_kernels.py

Stage `probe_ncu` of bench/gpu_suite.sh runs that when ncu is on the machine, skipping the warm-up launches
(`--launch-skip 24`: with the default shapes each pass makes 24 launches: the 7 row-warp forms, the half form
(cupy_rowhalf's kernel, session 15), the 2 tensor-core forms, Triton's GEMV and a plain read of the same bytes, per
shape).
Each kernel runs once in the warm-up pass (compilation, the arrival counters), then once measured, on random Q4_K
weights and bf16 activations.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch


def shapes(text: str) -> list[tuple[int, int]]:
    """--shapes: OUTxIN pairs, comma-separated; IN a multiple of 256 (a Q4_K super-block)."""
    out = []
    for part in text.split(","):
        try:
            out_f, in_f = (int(v) for v in part.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{part}' is not OUTxIN, e.g. 12288x2304") from None
        if out_f < 1 or in_f < 256 or in_f % 256:
            raise argparse.ArgumentTypeError(f"'{part}': OUT must be positive and IN a multiple of 256 (Q4_K)")
        out.append((out_f, in_f))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", type=shapes, default="12288x2304,2304x4096",
                    help="OUTxIN of each weight (Q4_K), comma-separated")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("rowwarp_kernels probe: needs a CUDA device", file=sys.stderr)
        return 2
    import triton
    from _passes import streaming_read, warm_then_measured
    from gguf import GGMLQuantizationType as Q
    from sparkops_cupy import linear as cl
    from sparkops_cupy._runtime import DTYPE_CODE
    from sparkops_cupy._weights import kernel_weight
    from sparkops_triton.linear import linear_lastblock

    from sparkops.gguf.quants import random_blocks
    from sparkops.qweight import QWeight

    dev = torch.device("cuda", torch.cuda.current_device())  # an index: weights compare devices exactly

    _read_kernel = streaming_read()

    sink = torch.empty(1 << 16, dtype=torch.int32, device=dev)  # a word per program (16 KiB each)
    rng = np.random.default_rng(0)
    g = torch.Generator().manual_seed(0)
    calls = []
    for out_f, in_f in args.shapes:
        shape = f"{out_f}x{in_f}"
        raw = torch.from_numpy(np.ascontiguousarray(random_blocks(rng, (out_f, in_f), Q.Q4_K, 0.02))).to(dev)
        w = QWeight(raw, Q.Q4_K, (out_f, in_f), f"w{out_f}x{in_f}")
        x = torch.randn(1, in_f, generator=g).to(dev, torch.bfloat16)
        kw = kernel_weight("linear", "weight", w, dev)
        for form in cl.ROWWARP_FORMS:
            y = torch.empty((1, out_f), dtype=x.dtype, device=dev)
            calls.append((f"{shape} {form}", lambda x=x, kw=kw, y=y, f=form, n=out_f, k=in_f:
                          cl.launch_rowwarp(x, DTYPE_CODE[x.dtype], kw, n, k, y, f)))
        y = torch.empty((1, out_f), dtype=x.dtype, device=dev)
        calls.append((f"{shape} half", lambda x=x, kw=kw, y=y, n=out_f, k=in_f:
                      cl.launch_rowhc(x, DTYPE_CODE[x.dtype], kw, n, k, y)))
        for form in cl.MMA_FORMS:
            y = torch.empty((1, out_f), dtype=x.dtype, device=dev)
            calls.append((f"{shape} mma {form}", lambda x=x, kw=kw, y=y, f=form, n=out_f, k=in_f:
                          cl.launch_mma(x, DTYPE_CODE[x.dtype], kw, n, k, y, f)))
        calls.append((f"{shape} triton_lastblock", lambda x=x, w=w: linear_lastblock(x, w)))
        words = w.raw.view(torch.int32).reshape(-1)
        calls.append((f"{shape} read", lambda words=words: _read_kernel[(triton.cdiv(words.numel(), 4096),)](
            words, sink, words.numel(), BLOCK=4096)))
    warm_then_measured(calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
