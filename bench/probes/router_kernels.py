"""Probe: one launch of each decode router at the 48B's shape (2304 x 256 float32, top-8), with float32 and with bf16
activations, for a profiler to read. A lead for the decode ladder, not a ledger row (bench/GPU-PROBES.md keeps what it
showed).

Session 15 timed `moe_router=cupy_rowwarp` at 6.26 µs a layer with float32 activations and 7.23 with bf16, where
Triton's `triton_prefetch` took 7.64 and 7.37. The two paths issue the same loads in the same order (the SASS has all
of a row's loads before the first FMA in both). The counters can say where the bf16 microsecond goes. Stage
`probe_router` of bench/gpu_suite.sh runs this under ncu (`ncu_passes`): LAUNCHES a pass (ROUTERS, each with float32
then bf16 activations), a warm-up pass first (compilation, the arrival counters), then the measured pass. Session 30
added `cupy_rowwarp_pdl`, the step's router (launched with nothing before it, its wait returns at once): its own time
in the step's timeline was 5.8 µs a layer for 2.4 MB, ~10% of the read ceiling. Stage `probe_ncu_source_router` reads
its SASS page with the stall samples: of its four launches (warm-up float32, bf16, then measured), the fourth.
"""

from __future__ import annotations

import sys

import torch


#: the routers a pass launches, in order, each with float32 then bf16 activations
ROUTERS = ("triton_prefetch", "cupy_rowwarp", "cupy_rowwarp_pdl")
#: launches a pass makes (ncu --launch-skip / --launch-count)
LAUNCHES = 2 * len(ROUTERS)


def main(argv: list[str] | None = None) -> int:
    if not torch.cuda.is_available():
        print("router_kernels probe: needs a CUDA device", file=sys.stderr)
        return 2
    from _passes import warm_then_measured

    from sparkops.config import load_preset
    from sparkops.plugins import load_catalog

    cfg = load_preset("kimi-linear-48b-a3b")
    d, e = cfg.hidden_size, cfg.n_experts
    dev = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator().manual_seed(0)
    weight = (torch.randn(e, d, generator=g) * d ** -0.5).to(dev)
    bias = (torch.randn(e, generator=g) * 0.1).to(dev)
    x32 = torch.randn(1, d, generator=g).to(dev)
    cat = load_catalog()
    calls = []
    for name in ROUTERS:
        fn = cat.get("moe_router", name).resolve()
        for x in (x32, x32.bfloat16()):
            calls.append((f"{name} {str(x.dtype).removeprefix('torch.')}",
                          lambda fn=fn, x=x: fn(x, weight, bias, cfg.n_experts_per_token, cfg.n_group, cfg.topk_group,
                                                cfg.routed_scaling_factor, cfg.router_renorm_eps)))
    warm_then_measured(calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
