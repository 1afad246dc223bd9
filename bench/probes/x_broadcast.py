"""Probe: what it costs every block of a decode GEMV's grid to read the same activation vector from the L2.
A lead for the decode ladder, not a ledger row (bench/GPU-PROBES.md keeps the result).

Session 17's Nsight Compute source page of the copy-form GEMV (12288 x 2304, 768 blocks) put a quarter of its warps'
stall samples on the first use of x, and still 17% once x was requested before the weights (copy2x), which did not
make the kernel faster. One reading: all 768 blocks read the same 4.6 KB at the same moment, so the few L2 slices that
hold those 36 lines serve ~28k requests each in turn. This probe times that alone. Each variant is 24 launches of one
kernel in one CUDA graph replay (the median of the replays), every program reading K bf16 values and storing their sum:
  nop       an empty kernel of the same grid: the launch floor
  same      every program reads the same K values (the GEMV's x)
  distinct  program p reads its own K values (p * K ..: the same bytes in total, no two programs on one line), all
            L2-resident after the first replay
If same is well above distinct at the GEMV's grids, the shared read is a cost of its own, and a form that reads x
once per SM (a persistent grid, or a cluster sharing one read through distributed shared memory) has something to
win. If the two agree, the x stall is the L2's latency under load, not contention.

    python bench/probes/x_broadcast.py --out probe.json
"""

from __future__ import annotations

import argparse
import json
import sys

import torch


def grids(text: str) -> list[int]:
    """'132,768' -> [132, 768]: each a grid of at least one program."""
    try:
        out = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}': a comma-separated list of program counts, e.g. 132,768")
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"'{text}': every grid needs at least one program")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--grids", type=grids, default="132,264,528,768,1152,1536",
                    help="program counts (768: the copy form's grid at 12288 rows; 132: one a SM)")
    ap.add_argument("--ks", type=grids, default="2304,4096", help="activations a program reads")
    ap.add_argument("--replays", type=int, default=30)
    args = ap.parse_args(argv)
    if args.replays < 1:
        ap.error("--replays must be at least 1")
    if not torch.cuda.is_available():
        print("x_broadcast probe: needs a CUDA device", file=sys.stderr)
        return 2

    import triton
    import triton.language as tl
    from sparkops_triton._workloads import time_thunks as graph_time

    @triton.jit
    def _nop(x_ptr):
        pass

    @triton.jit
    def _read_x(x_ptr, out_ptr, K, STRIDE, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        v = tl.load(x_ptr + tl.program_id(0) * STRIDE + offs, mask=offs < K, other=0.0)  # [BLOCK] bf16
        tl.store(out_ptr + tl.program_id(0), tl.sum(v.to(tl.float32), axis=0))

    launches = 24
    gen = torch.Generator(device="cuda").manual_seed(0)
    results: dict = {"launches": launches, "replays": args.replays, "variants": {}}
    for k in args.ks:
        block = triton.next_power_of_2(k)
        for g in args.grids:
            buf = torch.randn(g * k, generator=gen, device="cuda").to(torch.bfloat16)  # [G * K], random: never zeros
            sink = torch.empty(g, dtype=torch.float32, device="cuda")
            row = {}
            for label, stride in (("same", 0), ("distinct", k)):
                def thunk(s=stride, b=buf, o=sink, g=g, k=k, block=block):
                    _read_x[(g,)](b, o, k, s, BLOCK=block)

                row[label] = graph_time([thunk] * launches, args.replays) / launches
                if label == "same":  # the sums must be every program's read of x, not stale or zero
                    want = buf[:k].float().sum()
                    if not torch.allclose(sink, want.expand(g), rtol=1e-3, atol=1e-2):
                        raise RuntimeError(f"x_broadcast: K={k} G={g}: a program's sum is not x's")
            row["nop"] = graph_time([lambda g=g, o=sink: _nop[(g,)](o)] * launches, args.replays) / launches
            row["same_over_distinct"] = row["same"] / row["distinct"]
            results["variants"][f"K{k}_G{g}"] = row
            print(f"K={k:5d} G={g:5d}  nop {row['nop']:6.2f} us  same {row['same']:6.2f} us  distinct "
                  f"{row['distinct']:6.2f} us  same/distinct {row['same_over_distinct']:.2f}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
