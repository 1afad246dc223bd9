"""Probe: what binds the MLA split at 131072 rows, its loads or its per-tile chain. A lead for the decode ladder, not a
ledger row (bench/GPU-PROBES.md keeps what it showed).

Why. GPU session 53 measured the one-group tensor-core split (mla_split_mma, one block of 8 warps an SM) at ~74 µs a
layer for 151 MB (68% of an H100's measured read ceiling) and found halving its bytes (an fp8 cache) gained x1.02.
Session 54's twin split (two groups of 8 warps a block, each streaming its own tiles) ran at the same speed with twice
the warps, each warp's cycles between issues doubled (Nsight Compute), while neither the tensor pipe (~21%), shared
memory (~45%) nor DRAM (~50%) was full. Whether the next form should move the loads or the arithmetic depends on which
part alone takes the kernel's time; session 54's bulk split (mla_split_bulk: each tile by 64 bulk copies, the copy
engine's, instead of 4608 cp.async) is the loads moved.

How. Each kernel (mla_split_mma, _qreg, _ring, _l2pf, _twin and _bulk, plain launches) is compiled again with parts of
its body left out by textual edits of attention.cu (each edit must match exactly once, or the probe stops): "tile" (the
call of mma_tile: the loads, waits and barriers only), "refill" (the copies of every tile after each group's first: the
arithmetic over a tile already in shared memory), "score mma" and "pv mma" (the tensor-core products of the scores and
of P.C; their shared-memory loads stay), and both of those with the refills ("no refill, no mma": what the tile's loads
from shared memory, softmax and barriers take alone). A variant's time less the whole kernel's is what that part adds
when the kernel runs alone; the parts overlap, so they need not sum. Each is timed as CALLS launches in one CUDA graph
over two 131072-row bf16 caches in turn (151 MB each, past the L2), the median of the replays. The whole variants'
partials are checked bitwise against the registered kernels' on the same call (the bulk and L2-prefetching splits'
against mla_split_mma's).

    python3 bench/probes/split_anatomy.py --out probe.json [--replays 20] [--kernels mla_split_qreg ...]
"""

from __future__ import annotations

import argparse
import json
import sys

ROWS = 131072
CALLS = 8
#: kernel -> (threads, the tile call in its body, its refill statement); the bulk, qreg, ring and l2pf splits are
#: mla_split_mma's body with each tile's rows fetched by bulk copies (BULK; attention=cupy_splitk_bf16_bulk_active_pdl),
#: with each warp's queries in registers (QREG; ..._qreg_active_pdl), with the qreg split's tiles in a ring of
#: half-tile slots (RING; ..._ring_active_pdl) or with each tile prefetched into the L2 a tile ahead (L2PF;
#: ..._l2pf_active_pdl), so they share tile calls or refills (such an edit reaches every kernel of the body; only the
#: one named is timed; the L2PF split's prefetches stay in its "no refill" variant)
_MMA_TILE = "            mma_tile(sQ, sC, sS, sP, sAlpha, row0, r1, tid, m_run, l_run, oacc, BlockSync{});"
_MMA_REFILL = ("            if (j < n_tiles) mma_load_stage(sC0, cache, j % MMA_STAGES, r0 + (i64)j * MMA_BL, r1, "
               "tid);")
_QREG_TILE = ("            mma_tile_parts<4, BlockSync, RING>(sQ, qf, sC, sC_hi, sS,\n" + " " * 30 +
              "(float*)(smem + (sizeof(CT) == 1 || RING ? QF8_SMEM_S2 : MMA_SMEM_Q)), sP, sAlpha, row0,\n" + " " * 30 +
              "r1, tid, m_run, l_run, oacc, BlockSync{});")
KERNELS = {
    "mla_split_mma": (256, _MMA_TILE, _MMA_REFILL),
    "mla_split_qreg": (256, _QREG_TILE, _MMA_REFILL),
    "mla_split_ring": (256, _QREG_TILE, "                ring_load_half(sC0, sQ, (const u16*)cache, 2 * it + "
                                        "RING_AHEAD + h, n_tiles, r0, r1, tid);"),
    "mla_split_l2pf": (256, _MMA_TILE, _MMA_REFILL),
    "mla_split_twin": (512, "        mma_tile(sQ, sC, sS, sP, sAlpha, r0 + (i64)it * MMA_BL, r1, gtid, m_run, l_run, "
                            "oacc, sync);",
                       "            mma_load_rows(sC, cache, r0 + (i64)(it + 2) * MMA_BL, r1, gtid);"),
    "mla_split_bulk": (256, _MMA_TILE,
                       "            if (it + 1 < n_tiles) bulk_fetch(smem + MMA_SMEM_C, (const u16*)cache, it + 1, r0, "
                       "r1, tid, bars);"),
}
#: the registered kernel whose partials each kernel's whole variant must give bit for bit (the bulk copies change no
#: value: mla_split_mma's)
SAME_AS = {"mla_split_mma": "mla_split_mma", "mla_split_twin": "mla_split_twin", "mla_split_bulk": "mla_split_mma",
           "mla_split_qreg": "mla_split_qreg", "mla_split_l2pf": "mla_split_mma",
           "mla_split_ring": "mla_split_qreg"}
#: part -> the statements the tile code holds for it (mma_tile_parts: the queries-from-shared-memory scores of the
#: one-group, twin and bulk splits; the queries-in-registers scores of mla_split_qreg), each left out
_PV_MMA = ("                mma_bf16(oacc[mt][2 * jp], pa[mt], b[0], b[1]);\n"
           "                mma_bf16(oacc[mt][2 * jp + 1], pa[mt], b[2], b[3]);\n")
_SCORE_MMA = ("                mma_bf16(sacc[mt][0], a[mt], b[0], b[1]);\n"
              "                mma_bf16(sacc[mt][1], a[mt], b[2], b[3]);\n")
_SCORE_MMA_QREG = ("                    mma_bf16(sacc[mt][2 * np], qf[mt][ks], b[0], b[1]);\n"
                   "                    mma_bf16(sacc[mt][2 * np + 1], qf[mt][ks], b[2], b[3]);\n")


def tile_edits(kernel: str) -> dict[str, str]:
    """The tile-code parts a variant of `kernel` may leave out: its score products and P.C's."""
    return {"score mma": _SCORE_MMA_QREG if kernel == "mla_split_qreg" else _SCORE_MMA, "pv mma": _PV_MMA}


VARIANTS = {"whole": (), "no tile": ("tile",), "no refill": ("refill",), "no score mma": ("score mma",),
            "no pv mma": ("pv mma",), "no mma": ("score mma", "pv mma"),
            "no refill, no mma": ("refill", "score mma", "pv mma")}


def edited_source(source: str, kernel: str, leave_out: tuple[str, ...]) -> str:
    """attention.cu (expanded) with `kernel`'s parts in `leave_out` left out. Raises ValueError when a statement is not
    found exactly once (the kernel has changed: the probe must be updated, not run on a guess)."""
    _, tile_call, refill = KERNELS[kernel]
    edits = {"tile": tile_call, "refill": refill, **tile_edits(kernel)}
    for part in leave_out:
        old = edits[part]
        if source.count(old) != 1:
            raise ValueError(f"split_anatomy: the {part} statement of {kernel} appears {source.count(old)} times in "
                             f"attention.cu; update bench/probes/split_anatomy.py")
        source = source.replace(old, "")
    return source


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="split_anatomy.py", description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--replays", type=int, default=20, help="graph replays a figure (the median is kept)")
    ap.add_argument("--kernels", nargs="+", choices=list(KERNELS), default=list(KERNELS),
                    help="the kernels to take apart, in this order (default: all)")
    args = ap.parse_args(argv)
    if args.replays < 3:
        ap.exit(2, "split_anatomy probe: --replays must be at least 3 (a median of fewer says little)\n")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    if not torch.cuda.is_available():
        print("split_anatomy probe: needs a CUDA device", file=sys.stderr)
        return 2
    import cupy
    from sparkops_cupy import _runtime as rt
    from sparkops_cupy.attention import BULK_SMEM_BYTES, MMA_SMEM_BYTES, QF8_SMEM_BYTES, TW_SMEM_BYTES
    from sparkops_triton._workloads import time_thunks

    dev = torch.device("cuda", torch.cuda.current_device())
    idx = dev.index
    g = torch.Generator(device=dev).manual_seed(54)
    caches = [torch.randn(ROWS, 576, generator=g, device=dev).to(torch.bfloat16) for _ in range(2)]
    qa = (torch.randn(32, 576, generator=g, device=dev) * 0.05).to(torch.bfloat16)
    pos = torch.tensor([ROWS - 1], dtype=torch.int64, device=dev)
    splits = rt.sm_count(idx)
    part_m = torch.empty(splits, 1, 32, device=dev)
    part_l = torch.empty(splits, 1, 32, device=dev)
    part_acc = torch.empty(splits, 1, 32, 512, device=dev)
    smem = {"mla_split_mma": MMA_SMEM_BYTES, "mla_split_twin": TW_SMEM_BYTES, "mla_split_bulk": BULK_SMEM_BYTES,
            "mla_split_qreg": MMA_SMEM_BYTES, "mla_split_l2pf": MMA_SMEM_BYTES, "mla_split_ring": QF8_SMEM_BYTES}
    source = rt.expanded_source("attention.cu")
    nbytes = ROWS * 576 * 2

    def launcher(fn, kernel: str):
        threads = KERNELS[kernel][0]
        fn.max_dynamic_shared_size_bytes = smem[kernel]

        def call(cache) -> None:
            argv_ = (rt.ptr(qa), rt.ptr(cache), rt.ptr(pos), rt.i64(ROWS), rt.ptr(part_m), rt.ptr(part_l),
                     rt.ptr(part_acc), rt.i32(1))
            with cupy.cuda.Device(idx), rt._stream(idx):
                fn((splits,), (threads,), argv_, shared_mem=smem[kernel])
        return call

    def partials(call) -> torch.Tensor:
        part_acc.fill_(float("nan"))
        call(caches[0])
        torch.cuda.synchronize()
        return part_acc.clone()

    results = {"rows": ROWS, "calls": CALLS, "replays": args.replays, "device": torch.cuda.get_device_name(dev),
               "blocks": splits, "kernels": {}}
    ok = True
    wants = {k: partials(launcher(rt.kernel("attention.cu", k, idx), k)) for k in {SAME_AS[n] for n in args.kernels}}
    for kernel in args.kernels:
        want = wants[SAME_AS[kernel]]
        rows = results["kernels"][kernel] = {}
        whole = None
        for label, leave_out in VARIANTS.items():
            with cupy.cuda.Device(idx):
                mod = cupy.RawModule(code=edited_source(source, kernel, leave_out), options=rt.OPTIONS,
                                     backend="nvrtc")
                call = launcher(mod.get_function(kernel), kernel)
            row = rows[label] = {"leaves_out": list(leave_out)}
            if label == "whole":
                row["same_bits"] = bool(torch.equal(partials(call).view(torch.int32), want.view(torch.int32)))
                ok = ok and row["same_bits"]
            us = time_thunks([lambda c=caches[i % 2]: call(c) for i in range(CALLS)], args.replays) / CALLS
            row["us"] = us
            row["gb_s"] = nbytes / us / 1e3
            whole = us if whole is None else whole
            row["less_than_whole"] = whole - us
            bits = f"; the registered kernel's bits: {row['same_bits']}" if "same_bits" in row else ""
            print(f"{kernel:15s} {label:17s} {us:7.2f} us a call ({row['gb_s']:5.0f} GB/s, "
                  f"{whole - us:+6.2f} against the whole){bits}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
