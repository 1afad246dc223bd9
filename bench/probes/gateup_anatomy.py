"""Probe: where the step's MoE gate/up spends its ~15 µs a layer. A lead for the decode ladder, not a ledger row
(bench/GPU-PROBES.md keeps what it showed).

Why. GPU session 43's probe_l2_hot put the step's experts (cupy_rowwarp_pdl_q8_pairs_l2pf) at 21.8 µs a call cold
and 18.4 with every weight already in the L2: ~40% and ~48% of the read ceiling, so their bytes are not what binds
them. Session 28's Nsight Compute run of an earlier Q8 gate/up counted ~5.2 thread-instructions a weight, a third of
them the staging of x, which every one of the 1152 blocks does for itself. Whether that staging (or the dots, or the
copies) is what the step waits for decides the next form: x staged once a cluster of blocks (Hopper's distributed
shared memory) only pays if the staging is on the kernel's critical path.

How. The gate/up kernel the step runs (moe_q4_k_gateupq8hwxpdlpf_bf16, kernels/moe_rowwarp.cu's gateup_q8_q4_k) is
compiled again with parts of its body left out by textual edits of the source (each edit must match exactly once, or
the probe stops): "stage" (q8_stage: x's codes, scales and sums), "dot" (gu_q8_group: the rows' sums and the Q8
hidden vector's store; a store of one value that reads the staged codes and a copied byte stays, so neither is dead
code), "copy" (gu_copy_rows' weight copies: the block still reads its expert id). A variant's time less the whole
kernel's is what that part adds when the kernel runs alone; the parts overlap, so they need not sum. Each variant is
timed as the step runs gate/up: CALLS launches with programmatic dependent launch in one CUDA graph over rotated
routings (a different 8 of 256 experts each call, the 48B's shapes, bf16 x), the median of the replays. The whole
variant's hidden vector is checked bitwise against the registered kernel's on the same call. Then (written with it
in session 43) the grouped form, cupy_rowwarp_pdl_q8_pairs_l2pf_grouped's gate/up, at 2, 3 (its own), 4 and 9 commit
groups (its kernel's template argument edited), each timed the same way and its bits checked the same way; then its
pipelined forms (PIPE_FORMS: so many groups, only so many requested ahead, the next once one has landed).

    python3 bench/probes/gateup_anatomy.py --out probe.json [--replays 30]
"""

from __future__ import annotations

import argparse
import json
import sys

#: the kernel the step runs (cupy_rowwarp_pdl_q8_pairs_l2pf's gate/up at bf16 activations) and its device function
KERNEL = "moe_q4_k_gateupq8hwxpdlpf_bf16"
FUNCTION = "__device__ __forceinline__ void gateup_q8_q4_k("
#: part -> (the statement in gateup_q8_q4_k's body, what replaces it)
EDITS = {
    "stage": ("q8_stage<DT, XPAD>(x, D, xq, dx, s16);", ""),
    "dot": ("gu_q8_group<HQ8, PAIRS, XPAD, GROUPS, DEPTH>(sw, row_bytes, D, xq, dx, s16, b, r0, blockIdx.x, "
            "(i64)K * F + Fs, h,\n" + " " * 49 + "hv, g_src, u_src);",
            "if (threadIdx.x == 0) h[blockIdx.x] = (float)b.here + (float)xq[0] + (float)sw[0];"),
    "copy": ("const GuRows b = gu_copy_rows<PAIRS, GROUPS, DEPTH>(ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, "
             "Fs, r0, sw,\n" + " " * 56 + "&g_src, &u_src);",
             "i64 e_unused = 0; const GuRows b = gu_rows(ids, K, E, F, Fs, r0, e_unused);"),
}
#: the grouped form (cupy_rowwarp_pdl_q8_pairs_l2pf_grouped's gate/up: its copies in commit groups of super-blocks,
#: each dotted as it lands) and the line of its kernel whose last template argument, the groups, the probe varies
GROUPED = "moe_q4_k_gateupq8hwxpdlpfg3_bf16"
GROUPED_CALL = "gateup_q8_q4_k<DT_BF16, true, true, true, true, 3>("
GROUP_COUNTS = (2, 3, 4, 9)
#: (groups, depth): the pipelined grouped forms, only `depth` groups a block requested at first and group g + depth
#: once group g has landed (GPU session 43, after every group requested at once lost: they land interleaved)
PIPE_FORMS = ((3, 1), (3, 2), (4, 2), (6, 2), (6, 3), (9, 3))
#: the variants timed: the parts each leaves out
VARIANTS = {"whole": (), "no stage": ("stage",), "no dot": ("dot",), "no copy": ("copy",),
            "copies only": ("stage", "dot"), "stage only": ("copy", "dot"), "wait and ids only": ("stage", "dot", "copy")}
CALLS = 64


def edited_source(source: str, leave_out: tuple[str, ...]) -> str:
    """`source` (moe_rowwarp.cu expanded) with gateup_q8_q4_k's statements for the parts in `leave_out` replaced.
    Raises ValueError when the function or a statement is not found exactly once in it (the kernel has changed: the
    probe must be updated, not run on a guess)."""
    if source.count(FUNCTION) != 1:
        raise ValueError(f"gateup_anatomy: {FUNCTION!r} appears {source.count(FUNCTION)} times in moe_rowwarp.cu")
    start = source.index(FUNCTION)
    end = source.index("\n}\n", start) + 3
    body = source[start:end]
    for part in leave_out:
        old, new = EDITS[part]
        if body.count(old) != 1:
            raise ValueError(f"gateup_anatomy: the {part} statement {old!r} appears {body.count(old)} times in "
                             f"gateup_q8_q4_k; update bench/probes/gateup_anatomy.py's EDITS")
        body = body.replace(old, new)
    return source[:start] + body + source[end:]


def grouped_source(source: str, groups: int, depth: int | None = None) -> str:
    """`source` with the grouped bf16 kernel's commit groups set to `groups`, `depth` of them requested at first (all
    when None; its kernel name kept). Raises ValueError when its template call is not found exactly once."""
    if source.count(GROUPED_CALL) != 1:
        raise ValueError(f"gateup_anatomy: {GROUPED_CALL!r} appears {source.count(GROUPED_CALL)} times in "
                         f"moe_rowwarp.cu; update bench/probes/gateup_anatomy.py's GROUPED_CALL")
    args = f", {groups}>(" if depth is None else f", {groups}, {depth}>("
    return source.replace(GROUPED_CALL, GROUPED_CALL.replace(", 3>(", args))


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="gateup_anatomy.py", description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--replays", type=int, default=30, help="graph replays a figure (the median is kept)")
    args = ap.parse_args(argv)
    if args.replays < 3:
        ap.exit(2, "gateup_anatomy probe: --replays must be at least 3 (a median of fewer says little)\n")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    if not torch.cuda.is_available():
        print("gateup_anatomy probe: needs a CUDA device", file=sys.stderr)
        return 2
    import cupy
    from gguf import GGMLQuantizationType as Q
    from sparkops.config import load_preset
    from sparkops_cupy import _runtime as rt
    from sparkops_cupy._pdl import launch_pdl
    from sparkops_cupy._workloads import moe_workload
    from sparkops_cupy.moe_experts import _one_token
    from sparkops_triton._workloads import time_thunks

    cfg = load_preset("kimi-linear-48b-a3b")
    dev = torch.device("cuda", torch.cuda.current_device())
    sets, _ = moe_workload(cfg, Q.Q4_K, torch.bfloat16).build(dev, 0)
    calls = [_one_token(s["x"], s["weights"], s["ids"], s["w_gate"], s["w_up"], s["w_down"], s["s_gate"], s["s_up"],
                        s["s_down"]) for s in sets]
    a0 = calls[0]
    smem = a0.d // 64 * 80 + 4 * (a0.d // 32) + 4 * (a0.d // 16) + 16 * a0.kg.row_bytes  # _launch_rowwarp's, x padded
    grid = (a0.rows + 7) // 8
    source = rt.expanded_source("moe_rowwarp.cu")

    def compiled(leave_out: tuple[str, ...], groups: int | None = None, depth: int | None = None):
        code = edited_source(source, leave_out) if groups is None else grouped_source(source, groups, depth)
        with cupy.cuda.Device(dev.index):
            mod = cupy.RawModule(code=code, options=rt.OPTIONS, backend="nvrtc")
            return mod.get_function(KERNEL if groups is None else GROUPED)

    def launch(fn_ptr: int, a) -> None:
        argv_ = (rt.ptr(a.x), rt.ptr(a.ids), rt.i32(a.k), rt.i32(a.e), rt.ptr(a.kg.raw), rt.ptr(a.ku.raw),
                 rt.i64(a.kg.row_bytes), rt.i32(a.f), rt.ptr(a.sg.raw), rt.ptr(a.su.raw), rt.i32(a.fs), rt.i32(a.d),
                 rt.ptr(a.h))
        with cupy.cuda.Device(dev.index):
            launch_pdl(fn_ptr, (grid,), (128,), argv_, smem, torch.cuda.current_stream(dev).cuda_stream)

    def thunks(fn_ptr: int):
        return [lambda a=calls[i % len(calls)]: launch(fn_ptr, a) for i in range(CALLS)]

    results = {"kernel": KERNEL, "calls": CALLS, "replays": args.replays, "device": torch.cuda.get_device_name(dev),
               "blocks": grid, "smem": smem, "variants": {}, "grouped": {}, "pipelined": {}}
    registered = rt.kernel("moe_rowwarp.cu", KERNEL, dev.index)

    def bits(fn_ptr: int) -> torch.Tensor:
        """h after one launch on the first call's arguments, h NaN before (the Q8 hidden vector fills half of its
        bytes: the rest stays NaN in every run compared)."""
        a0.h.fill_(float("nan"))
        launch(fn_ptr, a0)
        torch.cuda.synchronize()
        return a0.h.clone()

    want = bits(registered.kernel.ptr)

    def timed(fn, label: str, row: dict, whole_us: float | None, check: bool) -> float:
        """Time fn's kernel (µs a call) into `row`, its bits against the registered kernel's if `check`; print it."""
        if check:
            row["same_bits"] = bool(torch.equal(bits(fn.kernel.ptr).view(torch.int32), want.view(torch.int32)))
        us = time_thunks(thunks(fn.kernel.ptr), args.replays) / CALLS
        row["us"] = us
        tail = ""
        if whole_us is not None:
            row["less_than_whole"] = whole_us - us
            tail = f" ({whole_us - us:+5.2f} against the whole)"
        if check:
            tail += f"; the registered kernel's bits: {row['same_bits']}"
        print(f"{label:20s} {us:6.2f} us a call{tail}", flush=True)
        return us

    results["registered_us"] = timed(registered, "registered kernel", {}, None, False)
    whole_us = None
    for label, leave_out in VARIANTS.items():
        row = results["variants"][label] = {"leaves_out": list(leave_out)}
        us = timed(compiled(leave_out), label, row, whole_us, label == "whole")
        whole_us = us if whole_us is None else whole_us
        row["less_than_whole"] = whole_us - us
    results["whole_same_bits"] = results["variants"]["whole"]["same_bits"]
    for groups in GROUP_COUNTS:  # the grouped form at each group count, all requested at once
        timed(compiled((), groups), f"grouped, {groups} groups", results["grouped"].setdefault(str(groups), {}),
              whole_us, True)
    for groups, depth in PIPE_FORMS:  # the pipelined grouped forms
        row = results["pipelined"].setdefault(f"{groups}x{depth}", {"groups": groups, "depth": depth})
        timed(compiled((), groups, depth), f"{groups} groups, {depth} ahead", row, whole_us, True)
    print(f"the whole variant's hidden vector bitwise the registered kernel's: {results['whole_same_bits']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    forms = list(results["grouped"].values()) + list(results["pipelined"].values())
    return 0 if results["whole_same_bits"] and all(g["same_bits"] for g in forms) else 1


if __name__ == "__main__":
    raise SystemExit(main())
