"""Probe: where the step's router spends its 5.7 µs a layer after the norm ends. A lead for the decode ladder, not a
ledger row (bench/GPU-PROBES.md keeps what it showed).

Session 30's timeline put `moe_router=cupy_rowwarp_pdl` at 5.5-6.1 µs of own time a layer (150 µs a token) for
2.36 MB of float32 weight: ~10% of the read ceiling, on the critical path between the layer's add_rmsnorm and the
experts' gate/up. Its launch starts ~0.9 µs after the norm does and ends ~5.7 µs after the norm ends. What fills
that time (the weight stream, x's read after the wait, the arrival, the last block's routing) is measured here by
leaving stages out, as METHOD.md says to place time inside a kernel without counters: kernels/moe_router.cu compiled
with RT_PROBE = 0 (the whole router, the step's bits), 1 (no routing), 2 (no arrival either), 3 (no read of x
either: the wait, the weights and the store). Session 32's run put half the router in the routing (2.76 µs a layer),
and a routing rebuilt with fewer serial picks gained only ~0.15 of it; so the routing itself is split too (session
41): -4 (the last block's warp only writes the outputs), -1 (it first loads the logits row and the biases as the
routing does), -2 (and forms the scores and choosers: sigmoid, bias). The picks and the weights' normalization are
the whole router less -2; the loads -1 less -4; the writes -4 less 1. Session 42's run (H100): the picks and weights
1.71 of the routing's 2.79 µs. Those are warm-L2 figures: router_code.py found that in the step, whose weight streams
leave none of the router's code in the L2, a longer routing tail pays for its instruction lines.

Each variant runs as the step runs it: PAIRS pairs of add_rmsnorm ("triton_pdl", letting the next kernel start) and
the router launched with PDL, each pair over its own random weight (PAIRS x 2.36 MB, past the L2), bf16 activations,
captured in one CUDA graph and replayed (the median of the replays). The router's share of a pair is the pair less
the norm alone. The whole router is also run at 1 and 4 warps a block (the registered launch uses ROUTER_WARPS = 2)
and checked bitwise against the registered implementation's output.

    python bench/probes/router_anatomy.py --out probe.json [--pairs 40] [--replays 30]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

#: RT_PROBE value -> what the kernel leaves out (the negative ones keep the arrival and split the routing: what the
#: last block's warp does of it; each writes the token's outputs)
STAGES = {0: "the whole router", -2: "routing: loads, scores, no picks", -1: "routing: loads only, no scores",
          -4: "routing: the outputs written only", 1: "no routing", 2: "no arrival, no routing",
          3: "no read of x, no arrival, no routing"}


def routing_parts(router_us: dict[int, float]) -> dict[str, float]:
    """The routing's parts (µs a layer) from the router's time under each RT_PROBE value: what each variant adds to
    the one below it. They sum to the whole router less its no-routing variant."""
    r = router_us
    return {"picks_and_weights": r[0] - r[-2], "scores": r[-2] - r[-1], "loads": r[-1] - r[-4],
            "output_writes": r[-4] - r[1]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--pairs", type=int, default=40, help="norm and router pairs in the chain (distinct weights)")
    ap.add_argument("--replays", type=int, default=30)
    args = ap.parse_args(argv)
    if args.pairs < 1 or args.replays < 1:
        ap.error(f"--pairs and --replays must be at least 1 (got {args.pairs} and {args.replays})")
    if not torch.cuda.is_available():
        print("router_anatomy probe: needs a CUDA device", file=sys.stderr)
        return 2

    from _router_pairs import router_pairs
    from sparkops_cupy import moe_router as cr
    from sparkops_triton._workloads import time_thunks

    rp = router_pairs(args.pairs)
    cfg, k = rp.cfg, rp.k

    def chain(fn, warps: int | None):
        out = rp.outputs()
        thunks = []
        for w in rp.weights:
            def pair(w=w):
                xn = rp.norm()  # [1, D]
                if fn is not None:
                    rp.launch(fn, w, xn, warps, out)
            thunks.append(pair)
        return thunks, out[:2]

    results = {"pairs": args.pairs, "replays": args.replays, "weight_mb": args.pairs * rp.e * rp.d * 4 / 1e6,
               "variants": {}}
    norm_us = time_thunks(chain(None, None)[0], args.replays) / args.pairs
    results["norm_alone_us"] = norm_us
    print(f"{'norm alone':44s} {norm_us:6.2f} us a pair", flush=True)
    outputs = {}
    runs = [(p, 2) for p in STAGES] + [(0, 1), (0, 4)]
    for probe, warps in runs:
        fn = rp.kernel("moe_router_rowwarp_pdl", f"#define RT_PROBE {probe}")
        thunks, out = chain(fn, warps)
        pair_us = time_thunks(thunks, args.replays) / args.pairs
        label = f"RT_PROBE={probe} warps={warps}"
        results["variants"][label] = {"leaves_out": STAGES[probe], "warps": warps, "pair_us": pair_us,
                                      "router_us": pair_us - norm_us}
        outputs[label] = out
        print(f"{label:18s} {STAGES[probe]:37s} {pair_us:6.2f} us a pair, the router {pair_us - norm_us:5.2f}",
              flush=True)

    # the whole router's output against the registered implementation on the last pair's weight and norm output
    torch.cuda.synchronize()
    xn = rp.norm()
    ref_w, ref_ids = cr.moe_router_rowwarp_pdl(xn, rp.weights[-1], rp.bias, k, cfg.n_group, cfg.topk_group,
                                               cfg.routed_scaling_factor, cfg.router_renorm_eps)
    torch.cuda.synchronize()
    same = {}
    for label in ("RT_PROBE=0 warps=2", "RT_PROBE=0 warps=1", "RT_PROBE=0 warps=4"):
        w_out, ids_out = outputs[label]
        same[label] = bool(torch.equal(w_out.view(torch.int32), ref_w.view(torch.int32))
                           and torch.equal(ids_out, ref_ids))
    results["bitwise_vs_registered"] = same
    print(f"the whole router's last output bitwise the registered implementation's: {same}")
    base = results["variants"]["RT_PROBE=0 warps=2"]["router_us"]
    r = {p: results["variants"][f"RT_PROBE={p} warps=2"]["router_us"] for p in STAGES}
    results["stage_us"] = {"routing": r[0] - r[1], "arrival": r[1] - r[2], "x_read": r[2] - r[3],
                           "wait_weights_store": r[3]}
    results["routing_us"] = routing_parts(r)
    print("the router's time by stage (us a layer): " + ", ".join(f"{n} {v:.2f}" for n, v in results["stage_us"].items())
          + f" (whole {base:.2f})")
    print("the routing by what its warp does (us a layer): "
          + ", ".join(f"{n} {v:.2f}" for n, v in results["routing_us"].items()))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
