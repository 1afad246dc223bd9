"""Probe: does a GEMV's weight stream, started while the kernel before it finishes, lift a chain of decode GEMVs?
A lead for the decode ladder, not a ledger row (bench/GPU-PROBES.md keeps what it showed).

Every Q4_K GEMV form tried so far costs ~12 us for the 48B's 16 MB q/k/v projection, where a plain read of the same
bytes in its own launch costs ~6 (session 16), and the step makes 360 launches. Part of each launch is its ramp (the
first blocks' first bytes) and its tail (the last wave's stragglers). Programmatic dependent launch (PDL) lets the
next kernel's blocks be scheduled before this one ends: the copy form written for it (`linear_q4_k_rowcppdl_*`)
requests its block's weight rows first, then waits for the kernel before it, so the ramp of one GEMV overlaps the
tail of the one before. Session 7's PDL form fetched one chunk of a split-K GEMV and hid 0.1 us; this one fetches a
block's whole 20 KB.

The chain: A (12288 x 2304, the q/k/v shape) then B (2304 x 4096, the o_proj shape) reading the first 4096 of A's
outputs, then A reading B's 2304, ..., PAIRS pairs of distinct random weights (beyond the L2), bf16 activations,
captured in one CUDA graph and replayed (the median of the replays). Variants:
  read        a plain streaming read of each weight's bytes, one launch each: the floor of one kernel a weight
  step        the forms the step picks by rows (copy for A, warp for B), plain launches
  copy        the copy form for both, plain launches
  copy_pdlk   the PDL-written copy form launched plainly (no attribute): the same bits and, it should be, the time
  copy_pdl    the same launched with PDL
The copy variants must agree bitwise: the probe checks the chain's last output and says so.

Then the step's own pairs, PAIRS times each over distinct weights: add_rmsnorm (the layer's norm, one program at
T = 1) followed by the tall projection (12288 x 2304) reading its output, and KDA's gated_rmsnorm (32 heads of 128)
followed by o_proj (2304 x 4096, the warp form):
  norm, gnorm               the norm alone
  norm_copy, gnorm_warp     the norm ("triton"), then the projection, plain launches
  norm_copy_pdl, gnorm_warp_pdl   the norm letting the next kernel start ("triton_pdl"), then the projection
                            launched with PDL
The saving a pair (plain - pdl, µs) is what rung norm-rowwarp-pdl forecasts from (stage rungs17d): 27 norm pairs
and 20 gated-norm pairs a token, taken off the row-warp side-by-side's time a token (`perop_factor.py --less`).

    python bench/probes/pdl_chain.py --out probe.json [--pairs 12] [--replays 30]
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch

READ_CEILING = 4.04e12  # bytes/s: the H200 read ceiling the other probes use


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--pairs", type=int, default=12, help="A, B pairs in the chain (distinct weights)")
    ap.add_argument("--replays", type=int, default=30)
    args = ap.parse_args(argv)
    if args.pairs < 1 or args.replays < 1:
        ap.error(f"--pairs and --replays must be at least 1 (got {args.pairs} and {args.replays})")
    if not torch.cuda.is_available():
        print("pdl_chain probe: needs a CUDA device", file=sys.stderr)
        return 2

    import triton
    from _passes import streaming_read
    from gguf import GGMLQuantizationType as Q
    from sparkops_cupy import _runtime as rt
    from sparkops_cupy import linear as cl
    from sparkops_cupy._weights import kernel_weight
    from sparkops_triton._workloads import time_thunks
    from sparkops_triton.add_rmsnorm import add_rmsnorm, add_rmsnorm_trigger
    from sparkops_triton.gated_rmsnorm import gated_rmsnorm, gated_rmsnorm_trigger

    from sparkops.gguf.quants import random_blocks
    from sparkops.qweight import QWeight

    _read_kernel = streaming_read()

    dev = torch.device("cuda", torch.cuda.current_device())
    rng = np.random.default_rng(0)
    shapes = ((12288, 2304), (2304, 4096))
    weights = []  # [2 * pairs] of (kernel weight, OUT, IN)
    for _ in range(args.pairs):
        for out_f, in_f in shapes:
            raw = np.ascontiguousarray(random_blocks(rng, (out_f, in_f), Q.Q4_K, 0.02))
            w = QWeight(torch.from_numpy(raw).to(dev), Q.Q4_K, (out_f, in_f), f"w{len(weights)}")
            weights.append((kernel_weight("linear", "weight", w, dev), out_f, in_f))
    total_bytes = sum(kw.raw.numel() for kw, _, _ in weights)
    x0 = torch.randn(1, 2304, generator=torch.Generator().manual_seed(0)).to(dev, torch.bfloat16)
    code = rt.DTYPE_CODE[x0.dtype]
    sink = torch.empty(1 << 16, dtype=torch.int32, device=dev)

    def chain(form: str | None, pdl: bool, pdl_kernel: bool) -> tuple[list, torch.Tensor]:
        bufs = [torch.empty((1, n), dtype=torch.bfloat16, device=dev) for _, n, _ in weights]
        thunks, x = [], x0
        for (kw, n, k), y in zip(weights, bufs):
            xin = x[:, :k]
            if pdl_kernel and not pdl:  # the PDL-written kernel, no attribute
                thunks.append(lambda xin=xin, kw=kw, n=n, k=k, y=y: rt.launch(
                    "linear_rowwarp.cu", "linear_q4_k_rowcppdl_bf16", dev, ((n + 15) // 16,), (128,),
                    (rt.ptr(xin), rt.ptr(kw.raw), rt.i64(kw.row_bytes), rt.i32(k), rt.i32(n), rt.ptr(y)),
                    shared_mem=4 * k + 4 * (k // 16) + 16 * kw.row_bytes))
            else:
                thunks.append(lambda xin=xin, kw=kw, n=n, k=k, y=y: cl.launch_rowwarp(
                    xin, code, kw, n, k, y, form, pdl=pdl))
            x = y
        return thunks, bufs[-1]

    variants = {"read": ([lambda words=kw.raw.view(torch.int32).reshape(-1): _read_kernel[
        (triton.cdiv(words.numel(), 4096),)](words, sink, words.numel(), BLOCK=4096) for kw, _, _ in weights], None)}
    variants["step"] = chain(None, False, False)
    variants["copy"] = chain("copy", False, False)
    variants["copy_pdlk"] = chain("copy", False, True)
    variants["copy_pdl"] = chain("copy", True, True)
    results = {"pairs": args.pairs, "shapes": [list(s) for s in shapes], "weight_mb": total_bytes / 1e6,
               "replays": args.replays, "variants": {}}
    for label, (thunks, _) in variants.items():
        us = time_thunks(thunks, args.replays)
        per = us / len(thunks)
        frac = total_bytes / (us * 1e-6) / READ_CEILING
        results["variants"][label] = {"us_per_round": us, "launches": len(thunks), "us_per_launch": per,
                                      "read_fraction": frac}
        print(f"{label:10s} {us:9.1f} us a round of {len(thunks)} launches, {per:6.2f} us each, "
              f"{100 * frac:5.1f}% of 4.04 TB/s over {total_bytes / 1e6:.0f} MB", flush=True)

    g = torch.Generator().manual_seed(1)
    resid = torch.randn(1, 2304, generator=g).to(dev, torch.bfloat16)
    gain = torch.randn(2304, generator=g).to(dev)
    o_heads = torch.randn(1, 32, 128, generator=g).to(dev, torch.bfloat16)
    o_gate = torch.randn(1, 32, 128, generator=g).to(dev, torch.bfloat16)
    head_gain = torch.randn(128, generator=g).to(dev)

    def add_norm(pdl: bool):
        norm = add_rmsnorm_trigger if pdl else add_rmsnorm
        return lambda: norm(x0, resid, gain, 1e-5)[0]  # [1, 2304]

    def gated_norm(pdl: bool):
        norm = gated_rmsnorm_trigger if pdl else gated_rmsnorm
        return lambda: norm(o_heads, o_gate, head_gain, 1e-5).reshape(1, 4096)

    def norm_pairs(norm, rows: int, form: str, with_gemv: bool, pdl: bool) -> tuple[list, torch.Tensor | None]:
        thunks, last = [], None
        for kw, n, k in (w for w in weights if w[1] == rows):
            y = torch.empty((1, n), dtype=torch.bfloat16, device=dev)

            def pair(kw=kw, n=n, k=k, y=y):
                normed = norm()
                if with_gemv:
                    cl.launch_rowwarp(normed, code, kw, n, k, y, form, pdl=pdl)
            thunks.append(pair)
            last = y
        return thunks, last if with_gemv else None

    for kind, make, rows, form in (("norm_pair", add_norm, 12288, "copy"), ("gnorm_pair", gated_norm, 2304, "warp")):
        short = kind.removesuffix("_pair")
        pair_variants = {short: norm_pairs(make(False), rows, form, False, False),
                         f"{short}_{form}": norm_pairs(make(False), rows, form, True, False),
                         f"{short}_{form}_pdl": norm_pairs(make(True), rows, form, True, True)}
        results[kind] = {"pairs": len(pair_variants[short][0]), "form": form}
        for label, (thunks, _) in pair_variants.items():
            per = time_thunks(thunks, args.replays) / len(thunks)
            results[kind][f"{label}_us"] = per
            print(f"{label:16s} {per:6.2f} us a pair", flush=True)
        results[kind]["saving_us"] = results[kind][f"{short}_{form}_us"] - results[kind][f"{short}_{form}_pdl_us"]
        print(f"{short} then its projection, with PDL: {results[kind]['saving_us']:.2f} us saved a pair")
        variants.update({k: pair_variants[k] for k in (f"{short}_{form}", f"{short}_{form}_pdl")})

    torch.cuda.synchronize()
    ref = variants["copy"][1].view(torch.int16)
    results["bitwise_vs_copy"] = {k: bool(torch.equal(variants[k][1].view(torch.int16), ref))
                                  for k in ("copy_pdlk", "copy_pdl")}
    for plain in ("norm_copy", "gnorm_warp"):
        results["bitwise_vs_copy"][f"{plain}_pdl"] = bool(torch.equal(variants[f"{plain}_pdl"][1].view(torch.int16),
                                                                      variants[plain][1].view(torch.int16)))
    results["finite"] = bool(torch.isfinite(variants["copy"][1].float()).all())
    print(f"last output bitwise the copy form's: {results['bitwise_vs_copy']}; finite: {results['finite']}")
    base, pdl = results["variants"]["copy"]["us_per_round"], results["variants"]["copy_pdl"]["us_per_round"]
    print(f"copy_pdl / copy: {pdl / base:.3f} of the time ({base / pdl:.3f}x)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all(results["bitwise_vs_copy"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
