"""moe_router on CUDA: a decode token's router in one launch (kernels/moe_router.cu).

"cupy_rowwarp" (`moe_router_rowwarp`): a warp an expert computes its float32 logit with every load of the weight row
requested at once (the row-warp idea of `linear=cupy_rowwarp`), and the last block of the token to finish routes it
with one warp (each pick two single-instruction warp reductions; no shared-memory reductions). Session 14's diagnosis
had the step's router, the Triton logits GEMV that routes in its last program (`moe_router=triton_prefetch`), at
7.3 µs a layer for 2.4 MB of weight (0.19 ms a token): 64 programs on 132 SMs, and a routing tail of block-wide
reductions.

The logits are summed in another order than the reference's float64 product: claim tolerance() (the router row:
weights close, ids exact except where the reference's choice is a near tie).

Session 15 (H200, the 48B's router, one token; bench/gpu-runs/2026-11-30-session15): 6.26 µs a layer with float32
activations against triton_prefetch's 7.64, but 7.23 against 7.37 with the bf16 activations the step runs; its rung
was none (0.997 at d=0, as forecast). Why bf16 activations cost the kernel ~1 µs more is not yet known.

"cupy_rowwarp_pdl" (`moe_router_rowwarp_pdl`, session 19): the same launch with programmatic dependent launch. In the
step the router follows the layer's add_rmsnorm; with add_rmsnorm=triton_pdl (which lets the next kernel be scheduled
as it starts) each warp requests its 9 KB weight row and only then waits for the norm's output, so the 2.4 MB stream
while the norm runs. Every thread waits before it touches anything a kernel writes (x, the logits scratch, the arrival
counter, the outputs). The same arithmetic in the same order: bit_identical to cupy_rowwarp. GPU session 21 found its
first form racing: x went through the read-only path (__ldg), which ptxas may hoist above griddepcontrol.wait, and
did (the SASS had every x load before ACQBULK); a replayed graph routed a stale x (float32). x is now read with a
coherent load after the wait (the SASS shows it), and the graph test passed 7 times of 7. Timed as norm-and-router
pairs at the 48B's shape, that form is 1.042x the plain cupy_rowwarp pair (8.42 against 8.78 us; 8.35 against 8.70),
where the racing form was 1.4% slower. Then the wait moved out of the logit loop (its first round's weights are
requested before it, as before), so that it runs on every path and tests/test_cuda_pdl_order.py can prove from the
SASS that no read-only load precedes it; the same loads and products in the same order, not yet timed on a GPU.

"cupy_rowwarp_pdl_sorted" (`moe_router_rowwarp_pdl_sorted`, session 32): GPU session 32 timed the router by stages
(bench/probes/router_anatomy.py, H100): 5.86 us a layer after its norm, of which the last block's routing is 2.76 and
the arrival 0.76. This form shortens that tail and nothing else: warp 0 of every block copies the selection biases
into shared memory before its PDL wait (the routing read them from memory after the arrival, likely evicted by the
token's 2 GB of weights), and each routing lane sorts its experts once, so a pick is one warp reduction and a ballot
(the second reduction only on a tie of keys) and the winner shifts its list instead of rescanning it. The same
routing rule, logits and sums: bit_identical to cupy_rowwarp. GPU session 32 (H100): its 49 GPU tests passed (the
same bits as cupy_rowwarp at every shape and dtype, the ties, a replayed graph, a NaN token), and in the norm-and-router
pair it took 6.99 against 7.20 us a layer, then 6.98 against 7.06: x1.012-1.030, ~0.1-0.2 us of the tail's 2.76.
The picks and the biases were not where the tail's time goes. Registered, selected by no registry (a rung would be
forecast ~x1.002).

"cupy_rowwarp_pdl_merge" (`moe_router_rowwarp_pdl_merge`, session 42): GPU session 42's probe split the routing's
2.79 us (H100): the top-8 picks and the weights 1.71, the scores 0.69, the loads 0.26, the writes 0.12. rt_route's
picks are a chain of 8 rounds (two warp reductions, a divergent rescan and a shuffle each); the sorted form's, a
reduction and a ballot each. This form has no pick rounds: each lane sorts its 8 experts by a 64-bit rank (the
chooser's order, then the lower id) with Batcher's 19-exchange network, and the warp merges its 32 lists in 5 butterfly
rounds of shuffles, each lane keeping the top 8 of its and its partner's, so every lane ends with the warp's top 8 in
rt_route's order; pick k's score is read from shared memory. The same order, sum and division: bit_identical to
cupy_rowwarp. Where a lane would hold more than 8 experts (E > 256) or top_k > 8 the kernel routes by rt_route, the
same bits. GPU session 42 (H100): its 76 GPU tests passed (the same bits as cupy_rowwarp at 8 shapes in 3 dtypes, the
ties, a replayed graph, a NaN token) and the captured gate's bit-identity claim held; per op, its 5 rounds unrolled,
the norm-and-router pair took 6.74 against 7.15 us a layer (x1.060). In the step it lost x0.889 / x0.895 (rungs56):
14.6 against 6.4 us of own time a router. bench/probes/router_code.py placed it: with the L2 flushed before each pair,
as the step's weight streams leave it, the unrolled tail grew by 7.8 us, the rounds as a loop by 2.4 (call 4's
build; the registered one since stores its scores after the scores' loop, not yet run), the sorted tail by 4.7,
rt_route by nothing. A one-warp tail run once a layer fetches its instructions
from memory; rt_route's short loop is the cheapest code. Registered, selected by no registry.

Its stated policy for every other call: the torch plugin's moe_router (float32, the same contract), for more than
ROUTER_MAX_T tokens (a prefill chunk: a GEMM's work), a weight that is not float32, a row length that is not a
multiple of 4, more than 32 x 16 experts, top_k or n_group above 32 (one warp routes: a lane a group, a lane a pick).
"""

from __future__ import annotations

import torch

from sparkops.errors import BadInput
from sparkops.ops._routing import check_routing
from sparkops.lanes import MAIN

from . import _runtime as rt
from ._counters import CounterPools

SOURCES = rt.source_files("moe_router.cu")
#: the most tokens one launch routes (a block row of the grid each); a longer call is a prefill chunk
ROUTER_MAX_T = 8
#: warps a block (a warp an expert): 2 puts the 48B's 256 experts on 128 blocks, about one an SM
ROUTER_WARPS = 2
#: the most experts one warp routes (RT_SLOTS x 32 in moe_router.cu)
ROUTER_MAX_EXPERTS = 512
#: int32 arrival counters a device (one a token, ROUTER_MAX_T at most a launch)
POOL_COUNTERS = 64

_POOLS = CounterPools("moe_router", POOL_COUNTERS)


def counters(device: torch.device) -> torch.Tensor:
    """The arrival counters of the device and the caller's lane (_counters.CounterPools: this op's own, created by the
    first call, before any CUDA-graph capture)."""
    return _POOLS.get(device)


def pool_on(device: torch.device, n: int = MAIN) -> torch.Tensor | None:
    """The pool of the device and lane `n` if it exists (tests check it is all zeros after every call)."""
    return _POOLS.on(device, n)


def rowwarp_serves(x, weight, top_k, n_group) -> bool:
    """Whether the one-launch kernel takes this call (the module docstring's policy)."""
    return (x.dim() == 2 and 1 <= x.shape[0] <= ROUTER_MAX_T and isinstance(weight, torch.Tensor)
            and weight.dtype == torch.float32 and weight.dim() == 2 and weight.shape[1] % 4 == 0
            and weight.shape[0] <= ROUTER_MAX_EXPERTS and int(top_k) <= 32 and int(n_group) <= 32
            and x.dtype in rt.DTYPE_CODE)


def moe_router_rowwarp(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
    """Implementation "cupy_rowwarp": up to ROUTER_MAX_T tokens routed in one launch (logits a warp an expert, the
    routing by the last block of each token); every other call the torch plugin's moe_router (the stated policy)."""
    return _route(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps, pdl=False)


def moe_router_rowwarp_pdl(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
    """Implementation "cupy_rowwarp_pdl": cupy_rowwarp's launch with programmatic dependent launch - each warp requests
    its expert's weight row before it waits for the kernel before (the norm writing x), so the router's 2.4 MB (the
    48B's) stream while that kernel finishes. The same arithmetic in the same order: the same bits as cupy_rowwarp;
    every other call by its stated policy."""
    return _route(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps, pdl=True)


def moe_router_rowwarp_pdl_sorted(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
    """Implementation "cupy_rowwarp_pdl_sorted": cupy_rowwarp_pdl with a shorter routing tail - every block copies the
    selection biases into shared memory before its wait, and the routing warp sorts each lane's experts once, so a
    pick is one warp reduction and a ballot, not a rescan. The same rule, loads and sums: the same bits as
    cupy_rowwarp; every other call by its stated policy."""
    return _route(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps, pdl=True,
                  kernel="moe_router_rowwarp_pdl_sorted")


def moe_router_rowwarp_pdl_merge(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
    """Implementation "cupy_rowwarp_pdl_merge": cupy_rowwarp_pdl with the routing's picks made by a sorting network and
    a butterfly merge of the lanes' lists (no pick rounds). The same rule, order and sums: the same bits as
    cupy_rowwarp; every other call by its stated policy."""
    return _route(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps, pdl=True,
                  kernel="moe_router_rowwarp_pdl_merge")


def _route(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps, pdl: bool, kernel: str | None = None):
    if not rowwarp_serves(x, weight, top_k, n_group):
        from sparkops_torch.moe_router import moe_router as torch_moe_router

        return torch_moe_router(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps)
    op = "moe_router"
    dev = rt.cuda_device(op, x=x, weight=weight, bias=bias)
    t, d = x.shape
    rt.expect_shape(op, "weight", weight, (None, d), "[E, D]")
    experts = weight.shape[0]
    rt.expect_shape(op, "bias", bias, (experts,), "one selection bias per expert")
    top_k, n_group, topk_group = check_routing(op, experts, top_k, n_group, topk_group)
    code = rt.act_code(op, "x", x)
    x, weight, bias = rt.contiguous(x), rt.contiguous(weight), rt.contiguous(bias.float())
    if x.data_ptr() % 16:  # the activations are read 8 or 16 bytes at a time
        x = x.clone()
    if weight.data_ptr() % 16:
        raise BadInput(f"{op}: the router weight's data is not 16-byte aligned; give it its own allocation")
    logits = torch.empty((t, experts), dtype=torch.float32, device=dev)  # [T, E] scratch
    weights = torch.empty((t, top_k), dtype=torch.float32, device=dev)  # [T, K]
    ids = torch.empty((t, top_k), dtype=torch.int64, device=dev)  # [T, K]
    kernel = kernel or ("moe_router_rowwarp_pdl" if pdl else "moe_router_rowwarp")
    rt.launch("moe_router.cu", kernel, dev,
              (-(-experts // ROUTER_WARPS), t),
              (32 * ROUTER_WARPS,),
              (rt.ptr(x), rt.i32(code), rt.ptr(weight), rt.i32(experts), rt.i32(d), rt.ptr(logits), rt.ptr(bias),
               rt.ptr(weights), rt.ptr(ids), rt.ptr(counters(dev)), rt.i32(experts // n_group), rt.i32(n_group),
               rt.i32(topk_group), rt.i32(top_k), rt.f32(scale), rt.f32(renorm_eps)), pdl=pdl)
    return weights, ids
