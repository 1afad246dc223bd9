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

    import cupy
    from sparkops_cupy import _runtime as rt
    from sparkops_cupy import moe_router as cr
    from sparkops_cupy._pdl import launch_pdl
    from sparkops_triton._workloads import time_thunks
    from sparkops_triton.add_rmsnorm import add_rmsnorm_trigger

    from sparkops.config import load_preset

    cfg = load_preset("kimi-linear-48b-a3b")
    d, e, k = cfg.hidden_size, cfg.n_experts, cfg.n_experts_per_token
    dev = torch.device("cuda", torch.cuda.current_device())
    idx = dev.index
    g = torch.Generator().manual_seed(0)
    weights = [(torch.randn(e, d, generator=g) * d ** -0.5).to(dev) for _ in range(args.pairs)]  # [E, D] each
    bias = (torch.randn(e, generator=g) * 0.1).to(dev)
    x = torch.randn(1, d, generator=g).to(dev, torch.bfloat16)
    resid = torch.randn(1, d, generator=g).to(dev, torch.bfloat16)
    gain = (1.0 + 0.1 * torch.randn(d, generator=g)).to(dev)
    flush = torch.rand(args.flush_mb * 2 ** 20 // 4, generator=g).to(dev)  # [N] float32, real values
    flush_sum = torch.empty((), device=dev)
    counters = cr.counters(dev)
    source = rt.expanded_source("moe_router.cu")

    def kernel(name: str, define: str):
        with cupy.cuda.Device(idx):
            mod = cupy.RawModule(code=(define + "\n" if define else "") + source, options=rt.OPTIONS, backend="nvrtc")
            return mod.get_function(name)

    def chain(fn, cold: bool):
        out_w = torch.full((1, k), float("nan"), device=dev)  # [1, K]
        out_ids = torch.full((1, k), -1, dtype=torch.int64, device=dev)  # [1, K]
        logits = torch.empty((1, e), dtype=torch.float32, device=dev)  # [1, E] scratch
        thunks = []
        for w in weights:
            def pair(w=w):
                if cold:
                    torch.sum(flush, dim=0, out=flush_sum)  # the L2 refilled with the flush buffer
                xn = add_rmsnorm_trigger(x, resid, gain, 1e-5)[0]  # [1, D]
                if fn is not None:
                    a = (rt.ptr(xn), rt.i32(rt.DTYPE_CODE[xn.dtype]), rt.ptr(w), rt.i32(e), rt.i32(d),
                         rt.ptr(logits), rt.ptr(bias), rt.ptr(out_w), rt.ptr(out_ids), rt.ptr(counters),
                         rt.i32(e // cfg.n_group), rt.i32(cfg.n_group), rt.i32(cfg.topk_group), rt.i32(k),
                         rt.f32(cfg.routed_scaling_factor), rt.f32(cfg.router_renorm_eps))
                    with cupy.cuda.Device(idx):
                        launch_pdl(fn.kernel.ptr, (-(-e // cr.ROUTER_WARPS), 1), (32 * cr.ROUTER_WARPS,), a, 0,
                                   torch.cuda.current_stream(idx).cuda_stream)
            thunks.append(pair)
        return thunks, (out_w, out_ids)

    results = {"pairs": args.pairs, "replays": args.replays, "flush_mb": args.flush_mb, "baseline_us": {},
               "pair_us": {}, "router_us": {}}
    for cond in ("warm", "cold"):
        base = time_thunks(chain(None, cond == "cold")[0], args.replays) / args.pairs
        results["baseline_us"][cond] = base
        print(f"{'norm alone' if cond == 'warm' else 'flush, then the norm':28s} {base:7.2f} us a pair", flush=True)
    outputs = {}
    for form, (name, define) in FORMS.items():
        fn = kernel(name, define)
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
