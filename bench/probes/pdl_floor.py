"""Probe: how much of a small kernel's launch programmatic dependent launch hides, when every kernel of a chain
takes part. A lead for the decode ladder (PDL through the whole step), not a ledger row (bench/GPU-PROBES.md keeps it).

Session 17 measured PDL on the step's norm-and-projection pairs: 0.6-0.8 µs saved a pair once the kernels read x
through L1, where only the projection waited and only the norm let it start. The step makes 360 launches a token,
most of them small (norms, convs, the KDA recurrence, the router, attention's pieces), and an empty kernel costs
0.95-1.8 µs of a graph replay by its grid (session 17's broadcast probe). If each kernel of the step let the next
start at once and waited only before its first dependent read, how much of that would go? Here a chain of LAUNCHES
dependent kernels (each reads what the one before wrote: y = x * a + b over N float32 values, ping-pong buffers) is
captured in one CUDA graph and replayed (the median of the replays), for a few sizes of kernel:
  plain   launched plainly
  pdl     each kernel waits (gdc_wait) before its first load, then lets the next start (gdc_launch_dependents),
          launched with launch_pdl
Each replay first copies the chain's input in place (the same in both variants). The two chains must end in the same
bits (the probe checks). The saving a launch (plain - pdl) times the step's launches bounds what PDL through the step
could take off a token.

    python bench/probes/pdl_floor.py --out probe.json [--launches 48] [--replays 30]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

#: (label, float32 values a kernel reads and writes, values a program): a one-token norm (one program), a KDA-sized
#: state update (~64 programs), a small GEMV's worth of bytes (~1 MB over ~256 programs)
SIZES = [("one program, 4K values", 4096, 4096), ("64 programs, 256K values", 262144, 4096),
         ("256 programs, 1M values", 1 << 20, 4096)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--launches", type=int, default=48, help="dependent kernels in the chain")
    ap.add_argument("--replays", type=int, default=30)
    ap.add_argument("--step-launches", type=int, default=360, help="launches a decode token (the step's count)")
    args = ap.parse_args(argv)
    if args.launches < 2 or args.replays < 1 or args.step_launches < 1:
        ap.error(f"--launches must be at least 2, --replays and --step-launches at least 1 (got {args.launches}, "
                 f"{args.replays}, {args.step_launches})")
    if not torch.cuda.is_available():
        print("pdl_floor probe: needs a CUDA device", file=sys.stderr)
        return 2

    import triton
    import triton.language as tl
    from sparkops_triton._workloads import time_thunks as graph_time

    @triton.jit
    def _axpb(x_ptr, y_ptr, n, a, b, BLOCK: tl.constexpr, USE_GDC: tl.constexpr):
        if USE_GDC:
            tl.extra.cuda.gdc_wait()  # x is the kernel before's output
            tl.extra.cuda.gdc_launch_dependents()  # the next kernel waits for all of this one before it reads
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)  # [BLOCK] float32
        tl.store(y_ptr + offs, x * a + b, mask=m)

    gen = torch.Generator(device="cuda").manual_seed(0)
    results: dict = {"launches": args.launches, "replays": args.replays, "step_launches": args.step_launches,
                     "sizes": {}}
    for label, n, block in SIZES:
        start = torch.randn(n, generator=gen, device="cuda")  # random: never zeros
        bufs = [start.clone(), torch.empty_like(start)]
        grid = (triton.cdiv(n, block),)
        ends = {}
        row = {"values": n, "programs": grid[0]}
        for variant, pdl in (("plain", False), ("pdl", True)):
            def chain(pdl=pdl):
                bufs[0].copy_(start)  # every replay starts from the same input: the chain's end is comparable
                for i in range(args.launches):
                    src, dst = bufs[i % 2], bufs[(i + 1) % 2]
                    # the first kernel follows the copy, not a kernel: it lets the next start, launched plainly
                    _axpb[grid](src, dst, n, 1.0009765625, -0.001953125, BLOCK=block, USE_GDC=pdl,
                                **({"launch_pdl": True} if pdl and i > 0 else {}))

            us = graph_time([chain], args.replays)
            ends[variant] = bufs[args.launches % 2].clone()
            row[f"{variant}_us_per_launch"] = us / args.launches
        if not torch.equal(ends["plain"], ends["pdl"]):
            raise RuntimeError(f"pdl_floor: {label}: the PDL chain ended in other bits than the plain chain")
        row["saving_us_per_launch"] = row["plain_us_per_launch"] - row["pdl_us_per_launch"]
        row["step_saving_us"] = row["saving_us_per_launch"] * args.step_launches
        results["sizes"][label] = row
        print(f"{label:26s} plain {row['plain_us_per_launch']:5.2f} us  pdl {row['pdl_us_per_launch']:5.2f} us a "
              f"launch: {row['saving_us_per_launch']:+.2f} us, x{args.step_launches} = "
              f"{row['step_saving_us']:+.0f} us a token", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
