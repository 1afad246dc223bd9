"""Probe: does a router's routing tail pay for its code when the step's weight streams have left none of it in the
L2? A lead for the decode ladder, not a ledger row (bench/GPU-PROBES.md keeps what it showed).

GPU session 42: `moe_router=cupy_rowwarp_pdl_merge` (the picks by a sorting network and a butterfly merge, its 5
rounds unrolled: ~1,200 instructions straight through) took 6.74 against `cupy_rowwarp_pdl`'s 7.15 µs a layer in
the per-op pair (norm then router, 26 weights in one graph), the same bits, but 14.6 against 6.4 µs of own time in the
replayed step, and the step lost x0.889. The suspect: the last block's one warp runs its routing once a layer, and
between two layers ~60 MB of weights stream through the 50 MB L2, so its instruction lines come from memory, line by
line; in the pair only router weights stream, read with an evict-first hint (`__ldcs`), and the code stays.

Measured here by running each router as router_anatomy.py does (PAIRS norm-router pairs, add_rmsnorm "triton_pdl"
letting the PDL router start, a random weight a pair, one CUDA graph, the median of the replays), once as is
("warm": back to back) and once with a read of FLUSH_MB before each pair ("cold": the L2 holds none of the router's
code or data when its pair starts). The router's share is the pair less the norm alone (warm) or less the flush and
the norm (cold); a form whose cold share grows far more than rt_route's pays for its code. Forms: rt_route (the
registered `moe_router_rowwarp_pdl`), the sorted tail, the merge with its rounds as a loop (the registered build of
`_merge`) and unrolled (`RT_MERGE_ROLLED 0`). Each form's last output is checked bitwise against rt_route's.

    python bench/probes/router_code.py --out probe.json [--pairs 26] [--replays 30] [--flush-mb 96]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

#: form -> (the kernel's name, a #define line compiled before moe_router.cu, or "")
FORMS = {"rt_route": ("moe_router_rowwarp_pdl", ""), "sorted": ("moe_router_rowwarp_pdl_sorted", ""),
         "merge, rolled": ("moe_router_rowwarp_pdl_merge", ""),
         "merge, unrolled": ("moe_router_rowwarp_pdl_merge", "#define RT_MERGE_ROLLED 0")}


def code_penalties(router_us: dict[str, dict[str, float]]) -> dict[str, float]:
    """Each form's cold share less its warm share, less rt_route's same difference: what the form's code costs when
    the L2 is cold, beyond what the registered routing's does (µs a layer)."""
    base = router_us["rt_route"]["cold"] - router_us["rt_route"]["warm"]
    return {form: (t["cold"] - t["warm"]) - base for form, t in router_us.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--pairs", type=int, default=26, help="norm and router pairs in the chain (distinct weights)")
    ap.add_argument("--replays", type=int, default=30)
    ap.add_argument("--flush-mb", type=int, default=96, help="MB read before each cold pair (past the 50 MB L2)")
    args = ap.parse_args(argv)
    if args.pairs < 1 or args.replays < 1 or args.flush_mb < 1:
        ap.error(f"--pairs, --replays and --flush-mb must be at least 1 (got {args.pairs}, {args.replays}, "
                 f"{args.flush_mb})")
    if not torch.cuda.is_available():
        print("router_code probe: needs a CUDA device", file=sys.stderr)
        return 2

    from _router_pairs import router_pairs
    from sparkops_cupy import moe_router as cr
    from sparkops_triton._workloads import time_thunks

    rp = router_pairs(args.pairs)
    flush = torch.rand(args.flush_mb * 2 ** 20 // 4, generator=rp.generator).to(rp.dev)  # [N] float32, real values
    flush_sum = torch.empty((), device=rp.dev)

    def chain(fn, cold: bool):
        out = rp.outputs()
        thunks = []
        for w in rp.weights:
            def pair(w=w):
                if cold:
                    torch.sum(flush, dim=0, out=flush_sum)  # the L2 refilled with the flush buffer
                xn = rp.norm()  # [1, D]
                if fn is not None:
                    rp.launch(fn, w, xn, cr.ROUTER_WARPS, out)
            thunks.append(pair)
        return thunks, out[:2]

    results = {"pairs": args.pairs, "replays": args.replays, "flush_mb": args.flush_mb, "baseline_us": {},
               "pair_us": {}, "router_us": {}}
    for cond in ("warm", "cold"):
        base = time_thunks(chain(None, cond == "cold")[0], args.replays) / args.pairs
        results["baseline_us"][cond] = base
        print(f"{'norm alone' if cond == 'warm' else 'flush, then the norm':28s} {base:7.2f} us a pair", flush=True)
    outputs = {}
    for form, (name, define) in FORMS.items():
        fn = rp.kernel(name, define)
        results["pair_us"][form], results["router_us"][form] = {}, {}
        for cond in ("warm", "cold"):
            thunks, out = chain(fn, cond == "cold")
            pair_us = time_thunks(thunks, args.replays) / args.pairs
            results["pair_us"][form][cond] = pair_us
            results["router_us"][form][cond] = pair_us - results["baseline_us"][cond]
            outputs[form] = out
        r = results["router_us"][form]
        print(f"{form:16s} the router {r['warm']:5.2f} us warm, {r['cold']:5.2f} cold (+{r['cold'] - r['warm']:.2f})",
              flush=True)
    torch.cuda.synchronize()
    ref_w, ref_ids = outputs["rt_route"]
    same = {form: bool(torch.equal(w.view(torch.int32), ref_w.view(torch.int32)) and torch.equal(i, ref_ids))
            for form, (w, i) in outputs.items()}
    results["bitwise_vs_rt_route"] = same
    results["code_penalty_us"] = code_penalties(results["router_us"])
    print(f"each form's last output bitwise rt_route's: {same}")
    print("cold less warm, beyond rt_route's (us a layer): "
          + ", ".join(f"{f} {v:+.2f}" for f, v in results["code_penalty_us"].items()))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
