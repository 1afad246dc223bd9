"""Probe: where the norm folds' tail comes from. A lead for the decode ladder, not a ledger row (bench/GPU-PROBES.md
keeps what it showed).

GPU sessions 36-38 timed the two norm folds (the residual add and RMSNorm in the last block of the kernel before:
moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm, linear_add_rmsnorm=cupy_rowwarp_pdl_norm) at ~15 us a layer
more than the MoE down alone and ~6 more than the o_proj GEMV alone, where ~1 was expected. Three arrival forms, two
scratches and a relaxed arrival left the tail as it was; session 38's kernel-by-kernel records put it inside the fused
kernel (its own time 24.8 against the plain down's 9.3 us), not in a later start of the next one. What is left is
the fold's code itself: the last block's norm, the registers that code holds (96 against the plain down's 80), the
arrival's barrier. Here each is left out in turn, as METHOD.md says to place time inside a kernel without counters:
the folds' sources compiled with RAN_PROBE (kernels/row_add_norm.cuh) =

    0  the whole fold (the registered kernel's code, its bits)
    1  no norm: the last block returns after its arrival (the plain kernel's registers)
    2  no arrival either: every block returns after storing its outputs (the plain kernel with the fold's arguments)
    3  the whole fold with the norm's loop form (one element at a time: the plain kernel's registers)
    4  the whole fold with the scalar norm sessions 36-38 timed (a value a load, held in registers)

Session 38's first run (before 0's vector norm existed, when 0 was today's 4) answered it: the arrival costs ~1.9 us
(MoE) and nothing (o_proj); the norm the rest, in its loads waiting one by one. So 0 is now the vector norm
(row_add_norm.cuh's row_add_norm_vec: every 16-byte chunk requested before the first is used), 4 the scalar one.

each swapped in for the registered kernel (the module's own launch, its arrival and scratch) and run as the step runs
it: one call a set over the workload's sets (a token routed to other experts each call; an o_proj weight a set, past
the L2), captured in one CUDA graph and replayed (the median of the replays), with PDL and without it (the module's
PDL constant). Beside them, what the fold replaces: the plain pair or GEMV alone, and then with the Triton norm
(add_rmsnorm=triton_pdl, the step's). Each variant's register count is printed, and variants 0 and 3 are checked
against the registered kernel: 0 bit for bit, 3 and 4 the summed stream bit for bit and the normed
values' largest difference (their sums of squares run in another order than 0's).

    python bench/probes/fold_anatomy.py --out probe.json [--replays 30]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

import torch

#: RAN_PROBE value -> what the variant leaves out
STAGES = {0: "the whole fold", 1: "no norm", 2: "no arrival, no norm", 3: "the norm's loop form",
          4: "the scalar norm"}
#: the folds: label -> (kernel source, the registered kernel's name for the module's ARRIVAL/SCRATCH defaults)
FOLDS = {"moe": ("moe_down_norm.cu", "moe_q4_k_downq8normgpdl"),
         "oproj": ("linear_norm.cu", "linear_q4_k_rowwarpnormgpdl_bf16")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fold_anatomy.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="where to write the JSON")
    ap.add_argument("--replays", type=int, default=30, help="graph replays a variant (the median is kept)")
    args = ap.parse_args(argv)
    if args.replays < 1:
        ap.error(f"--replays must be at least 1 (got {args.replays})")
    if not torch.cuda.is_available():
        print("fold_anatomy probe: needs a CUDA device", file=sys.stderr)
        return 2

    import cupy
    from gguf import GGMLQuantizationType as Q
    from sparkops_cupy import _runtime as rt
    from sparkops_cupy import linear_add_rmsnorm as cln
    from sparkops_cupy import moe_experts_add_rmsnorm as cmn
    from sparkops_cupy._workloads import linear_workload, moe_workload
    from sparkops_cupy.linear import linear_rowwarp_pdl
    from sparkops_cupy.moe_experts import moe_experts_rowwarp_pdl_q8_hidden
    from sparkops_triton._workloads import time_thunks
    from sparkops_triton.add_rmsnorm import add_rmsnorm_trigger

    from sparkops.config import load_preset

    assert (cmn.ARRIVAL, cmn.SCRATCH) == (cln.ARRIVAL, cln.SCRATCH) == ("release", "global"), \
        "FOLDS names the global-scratch kernels: update it with the modules' defaults"
    dev = torch.device("cuda", torch.cuda.current_device())
    idx = dev.index
    cfg = load_preset("kimi-linear-48b-a3b")
    d = cfg.hidden_size
    g = torch.Generator().manual_seed(0)
    resid = (3 * torch.randn(1, d, generator=g)).to(dev, torch.bfloat16)  # [1, D] the residual stream
    gain = (1.0 + 0.1 * torch.randn(d, generator=g)).to(dev)  # [D]
    eps = 1e-5

    moe_sets, _ = moe_workload(cfg, Q.Q4_K, torch.bfloat16).build(dev, 0)
    names = ("x", "weights", "ids", "w_gate", "w_up", "w_down", "s_gate", "s_up", "s_down")
    moe_args = [tuple(s[n] for n in names) for s in moe_sets]
    lin_sets, _ = linear_workload(Q.Q4_K, d, cfg.mla_heads * cfg.v_head_dim, "o_proj",
                                  dtype=torch.bfloat16).build(dev, 53)
    lin_args = [(s["x"], s["weight"]) for s in lin_sets]

    ops = {  # label -> (module, the argument sets, the plain op, the fold)
        "moe": (cmn, moe_args, lambda a: moe_experts_rowwarp_pdl_q8_hidden(*a),
                lambda a: cmn.moe_experts_add_rmsnorm_q8_hidden(*a, resid, gain, eps)),
        "oproj": (cln, lin_args, lambda a: linear_rowwarp_pdl(*a),
                  lambda a: cln.linear_add_rmsnorm_rowwarp_pdl(*a, resid, gain, eps)),
    }

    def variant(fold: str, probe: int):
        cu, name = FOLDS[fold]
        with cupy.cuda.Device(idx):
            mod = cupy.RawModule(code=f"#define RAN_PROBE {probe}\n" + rt.expanded_source(cu), options=rt.OPTIONS,
                                 backend="nvrtc")
            return mod.get_function(name)

    @contextlib.contextmanager
    def swapped(fold: str, fn, pdl: bool):
        """The module's launches take `fn` for the registered kernel (runtime's function cache), PDL as given."""
        cu, name = FOLDS[fold]
        module = ops[fold][0]
        key = (cu, name, idx)
        was_fn, was_pdl = rt._functions.get(key), module.PDL
        rt._functions[key], module.PDL = fn, pdl
        try:
            yield
        finally:
            module.PDL = was_pdl
            if was_fn is None:
                rt._functions.pop(key, None)
            else:
                rt._functions[key] = was_fn

    def timed(thunks) -> float:
        return time_thunks(thunks, args.replays) / len(thunks)

    results = {"replays": args.replays, "device": torch.cuda.get_device_name(idx), "folds": {}}
    for fold, (module, sets, plain, fused) in ops.items():
        out = results["folds"][fold] = {"sets": len(sets), "kernel": FOLDS[fold][1], "variants": {}}
        plain_us = timed([lambda a=a: plain(a) for a in sets])
        chain_us = timed([lambda a=a: add_rmsnorm_trigger(plain(a), resid, gain, eps) for a in sets])
        out["plain_us"], out["plain_and_norm_us"] = plain_us, chain_us
        print(f"{fold}: the plain op {plain_us:6.2f} us a call, with the Triton norm after it {chain_us:6.2f}",
              flush=True)
        registered = fused(sets[0])  # the registered kernel's (normed, summed) on the first set
        torch.cuda.synchronize()
        for probe, leaves_out in STAGES.items():
            fn = variant(fold, probe)
            for pdl in (True, False):
                if not pdl and probe in (1, 3, 4):
                    continue  # without PDL only the whole fold and the plain one: what PDL changes
                with swapped(fold, fn, pdl):
                    us = timed([lambda a=a: fused(a) for a in sets])
                    same = worst = None
                    if probe in (0, 3, 4):  # (normed, summed) against the registered kernel's
                        got = fused(sets[0])
                        torch.cuda.synchronize()
                        same = all(torch.equal(x.view(torch.int16), y.view(torch.int16))
                                   for x, y in zip(got, registered))
                        worst = float((got[0].float() - registered[0].float()).abs().max())
                        if probe == 0 and not same:
                            raise SystemExit(f"fold_anatomy probe: {fold}'s RAN_PROBE=0 build is not the registered "
                                             f"kernel's bits: the probe's sources differ from the registered ones")
                        if not torch.equal(got[1], registered[1]):
                            raise SystemExit(f"fold_anatomy probe: {fold}'s RAN_PROBE={probe} build's summed stream "
                                             f"is not the registered kernel's")
                label = f"RAN_PROBE={probe} {'pdl' if pdl else 'no pdl'}"
                out["variants"][label] = {"leaves_out": leaves_out, "pdl": pdl, "us": us, "over_plain_us":
                                          us - plain_us, "registers": int(fn.num_regs), "same_bits": same,
                                          "normed_max_abs_diff": worst}
                bits = "" if same is None else (" same bits" if same else f" normed within {worst:.2g}")
                print(f"  {label:18s} {leaves_out:20s} {us:6.2f} us a call ({us - plain_us:+6.2f} over the plain op), "
                      f"{fn.num_regs} registers{bits}", flush=True)
        assert not module.counters(dev).any(), f"{fold}: a variant left its counters non-zero"

    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
