"""Probe: one launch of each one-token expert kernel pair at the 48B's MoE layer, for Nsight Compute to read.
A lead for the decode ladder, not a ledger row (bench/GPU-PROBES.md keeps what it showed).

Session 26's timeline (`step_timeline.py`, the step of session 23) had a MoE layer's gate/up at ~18 us of its own
time for ~24 MB of Q4_K rows and its down ending ~18 us after gate/up for ~12 MB: together 42% of the step, at a
quarter of the read ceiling. In the step the PDL pair overlaps, so the timeline cannot say how long each kernel
takes alone, nor what binds it. Nsight Compute serializes the launches, which is what is wanted here: each kernel's
own duration, DRAM throughput, achieved occupancy and stall reasons. So:

    ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \\
        --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats \\
        -k regex:"moe_q4_k|_read_kernel" --launch-skip 31 --launch-count 31 python3 bench/probes/moe_kernels.py

Stage `probe_ncu_moe` of bench/gpu_suite.sh runs that. A pass makes 31 launches: cupy_rowwarp's pair (gate/up copy,
down warp), the down in its copy form, cupy_rowwarp_pdl's pair, cupy_rowwarp_pdl_wide's, cupy_rowwarp_pdl_split's,
cupy_rowwarp_pdl_q8's, cupy_rowwarp_pdl_q8_hidden's and cupy_rowwarp_pdl_q8_pipe's pairs, and
cupy_rowwarp_pdl_q8_pairs' in its dense and padded forms of x, cupy_rowwarp_pdl_q8_hidden_cp's in its three forms of
the copy down (1, 3 and 6 commit groups), cupy_rowwarp_pdl_q8_hidden_ld's in its two forms (the PDL kernels launched with the attribute; with
nothing before them their waits return at once; session 26's run, before the split and Q8 forms existed, made 9,
session 27's, before the Q8 hidden vector, 13, session 28's, before the pipelined gate/up, 15, then 17, session 29's
21, session 30's 27), and a
plain read of the bytes the chosen experts' rows hold (the floor no kernel of these bytes beats). Each runs once to
warm up (compilation), then once measured, on random Q4_K weights and bf16 activations, one token routed to 8 distinct experts.

`--only LABEL` (repeatable) runs the named launches of LABELS alone, each once to warm up and once measured: stage
`probe_ncu_source_moe` reads one kernel's SASS page with its per-instruction stall samples that way
(`--launch-skip 1 --launch-count 1`), which a pass of all 27 launches, where a kernel recurs, would make ambiguous.
"""

from __future__ import annotations

import argparse
import sys

import torch

#: launches a pass makes (ncu --launch-skip / --launch-count)
LAUNCHES = 31
#: the pass's launches in order, by label (a pair's label names its gate/up and down launches)
LABELS = ("cupy_rowwarp copy/warp", "cupy_rowwarp copy/copy", "cupy_rowwarp_pdl", "cupy_rowwarp_pdl_wide",
          "cupy_rowwarp_pdl_split", "cupy_rowwarp_pdl_q8", "cupy_rowwarp_pdl_q8_hidden", "cupy_rowwarp_pdl_q8_pipe",
          "cupy_rowwarp_pdl_q8_pairs dense x", "cupy_rowwarp_pdl_q8_pairs padded x",
          "cupy_rowwarp_pdl_q8_hidden_cp 1 groups", "cupy_rowwarp_pdl_q8_hidden_cp 3 groups",
          "cupy_rowwarp_pdl_q8_hidden_cp 6 groups", "cupy_rowwarp_pdl_q8_hidden_ld ahead",
          "cupy_rowwarp_pdl_q8_hidden_ld ids", "read")


def _only(argv: list[str] | None) -> list[str] | None:
    """The labels `--only` names (None: the whole pass); an unknown one is an error naming LABELS."""
    parser = argparse.ArgumentParser(prog="moe_kernels.py")
    parser.add_argument("--only", action="append", metavar="LABEL", help="run this launch (or pair) alone")
    only = parser.parse_args(argv or []).only
    unknown = [label for label in only or () if label not in LABELS]
    if unknown:
        raise SystemExit(f"moe_kernels probe: no launch labelled {', '.join(map(repr, unknown))}; the labels are "
                         f"{', '.join(map(repr, LABELS))}")
    return only


def main(argv: list[str] | None = None) -> int:
    only = _only(argv)
    if not torch.cuda.is_available():
        print("moe_kernels probe: needs a CUDA device", file=sys.stderr)
        return 2
    import triton
    from _passes import streaming_read, warm_then_measured
    from gguf import GGMLQuantizationType as Q
    from sparkops_cupy import moe_experts as cme

    from sparkops.config import load_preset
    from sparkops_cupy._workloads import moe_workload

    _read_kernel = streaming_read()

    dev = torch.device("cuda", torch.cuda.current_device())
    cfg = load_preset("kimi-linear-48b-a3b")
    sets, _ = moe_workload(cfg, Q.Q4_K, torch.bfloat16).build(dev, 0)
    a = sets[0]
    # the bytes one token reads: the chosen experts' gate, up and down blocks and the shared expert's, copied into one
    # buffer for the read (a gather would time the gather)
    ids = a["ids"].reshape(-1).tolist()
    parts = [a[n].raw[e].reshape(-1) for n in ("w_gate", "w_up", "w_down") for e in ids]
    parts += [a[n].raw.reshape(-1) for n in ("s_gate", "s_up", "s_down")]
    words = torch.cat(parts).view(torch.int32)
    sink = torch.empty(triton.cdiv(words.numel(), 4096), dtype=torch.int32, device=dev)
    print(f"one token's expert bytes: {words.numel() * 4 / 1e6:.1f} MB", flush=True)

    def pair(**forms):
        """cupy_rowwarp's two launches on the set, in the given forms (moe_experts._launch_rowwarp)."""
        def call():
            one = cme._one_token(a["x"], a["weights"], a["ids"], *(a[n] for n in cme_weights))
            cme._launch_rowwarp(one, **forms)
        return call

    cme_weights = ("w_gate", "w_up", "w_down", "s_gate", "s_up", "s_down")

    def copy_down():
        was = cme.ROWWARP_DOWN
        cme.ROWWARP_DOWN = "copy"
        try:
            pair(gateup="copy")()
        finally:
            cme.ROWWARP_DOWN = was

    def forced(attr, value, **forms):
        """The pair in `forms` with moe_experts' module constant `attr` set to `value` while it launches."""
        def call():
            was = getattr(cme, attr)
            setattr(cme, attr, value)
            try:
                pair(**forms)()
            finally:
                setattr(cme, attr, was)
        return call

    q8h = dict(gateup="q8", pdl=True, q8_hidden=True)
    pairs_in = lambda form: forced("PAIRS_X", form, **q8h, pairs=True)  # noqa: E731
    copy_q8_in = lambda groups: forced("DOWN_CP_GROUPS", groups, **q8h, copy_q8_down=True)  # noqa: E731
    ld_in = lambda form: forced("DOWN_LD_FORM", form, **q8h, ld_q8_down=True)  # noqa: E731

    calls = [("cupy_rowwarp copy/warp", pair(gateup="copy")),
             ("cupy_rowwarp copy/copy", copy_down),
             ("cupy_rowwarp_pdl", pair(gateup="copy", pdl=True)),
             ("cupy_rowwarp_pdl_wide", pair(gateup="copy", pdl=True, wide_down=True)),
             ("cupy_rowwarp_pdl_split", pair(gateup="copy", pdl=True, split_down=True)),
             ("cupy_rowwarp_pdl_q8", pair(gateup="q8", pdl=True)),
             ("cupy_rowwarp_pdl_q8_hidden", pair(gateup="q8", pdl=True, q8_hidden=True)),
             ("cupy_rowwarp_pdl_q8_pipe", pair(gateup="q8", pdl=True, q8_hidden=True, pipe=True)),
             ("cupy_rowwarp_pdl_q8_pairs dense x", pairs_in("dense")),
             ("cupy_rowwarp_pdl_q8_pairs padded x", pairs_in("padded")),
             *((f"cupy_rowwarp_pdl_q8_hidden_cp {g} groups", copy_q8_in(g)) for g in sorted(cme.DOWN_CP_GROUP_FORMS)),
             *((f"cupy_rowwarp_pdl_q8_hidden_ld {f}", ld_in(f)) for f in ("ahead", "ids")),
             ("read", lambda: _read_kernel[(sink.numel(),)](words, sink, words.numel(), BLOCK=4096))]
    assert tuple(label for label, _ in calls) == LABELS, "LABELS is the pass's order: update it with the calls"
    warm_then_measured([c for c in calls if only is None or c[0] in only])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
