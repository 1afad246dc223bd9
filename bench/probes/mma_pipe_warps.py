"""Probe: does the pipelined tensor-core GEMV (cupy_mma's "pipe" form) gain from more warps an SM?
A lead for the decode ladder, not a ledger row (bench/GPU-PROBES.md keeps what it showed).

Session 14's Nsight Compute runs: every tensor-core form issues an instruction every ~2 cycles a scheduler with ~4.5
warps resident and ~1.1 eligible: neither DRAM (20-26%) nor the SM (45-50%) is near its ceiling, so the warps wait on
one another's dependency chains. The grid sets the warps an SM (12288 x 2304 in 16-row tiles at 4 warps: 23 an SM).
This times the pipe form at the 48B's decode shapes with 4, 8 and 16 warps a tile forced (mma_pipe_warps chooses
by the grid), in one CUDA graph each, beside the tile form and cupy_rowwarp, bf16 activations: if 16 warps a tile
beats 4 at 12288 rows, occupancy binds and a finer split of K is the next form; if not, the decode's instruction
chain does.

    python3 bench/probes/mma_pipe_warps.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the timings (us a call) as JSON here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("mma_pipe_warps probe: needs a CUDA device", file=sys.stderr)
        return 2
    from gguf import GGMLQuantizationType as Q
    from sparkops_cupy import linear as cl
    from sparkops_cupy._runtime import DTYPE_CODE, cuda_device
    from sparkops_cupy._weights import kernel_weight
    from sparkops_cupy._workloads import linear_workload, time_op

    def forced(form, warps=None):
        def call(x, weight):
            dev = cuda_device("linear", x=x)
            y = torch.empty((1, weight.shape[0]), dtype=x.dtype, device=dev)
            kw = kernel_weight("linear", "weight", weight, dev)
            if warps is None:
                cl.launch_mma(x, DTYPE_CODE[x.dtype], kw, weight.shape[0], weight.shape[1], y, form)
            else:
                chosen = cl.mma_pipe_warps
                cl.mma_pipe_warps = lambda n, k, sms: warps
                try:
                    cl.launch_mma(x, DTYPE_CODE[x.dtype], kw, weight.shape[0], weight.shape[1], y, form)
                finally:
                    cl.mma_pipe_warps = chosen
            return y
        return call

    impls = {"rowwarp": cl.linear_rowwarp, "mma tile": forced("tile")}
    impls.update({f"pipe {w}": forced("pipe", w) for w in (4, 8, 16)})
    shapes = [(12288, 2304), (6720, 2304), (2304, 4096), (18432, 2304), (2304, 9216)]
    out = {}
    for n, k in shapes:
        w = linear_workload(Q.Q4_K, n, k, f"{n}x{k}", dtype=torch.bfloat16)
        sets, nbytes = w.build(torch.device("cuda"), 5)
        row = {}
        for name, fn in impls.items():
            if name.startswith("pipe") and int(name.split()[1]) > max(4, k // 256):
                continue  # more warps than super-blocks
            row[name] = time_op("linear", fn, sets, nbytes).seconds * 1e6
        out[f"{n}x{k}"] = row
        print(f"{n:6d}x{k:<5d} " + "  ".join(f"{name} {us:6.2f} us" for name, us in row.items()), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
