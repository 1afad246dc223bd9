"""add_rmsnorm_router on CUDA: a decode token's residual add, FFN norm and MoE router in one PDL launch
(kernels/add_rmsnorm_router.cu).

"cupy_rowwarp_pdl" (`add_rmsnorm_router_rowwarp_pdl`): moe_router=cupy_rowwarp_pdl's grid - a warp an expert, two
warps a block, (cdiv(E, 2), T) blocks - launched with programmatic dependent launch after the kernel that writes x.
Each warp requests its expert's float32 weight row before it waits (the router's 2.4 MB on the 48B stream while the
kernel before ends), then norms the token's row itself - every warp takes the whole row's sum of squares, so none
waits for another - and dots its rounded normed values with its row; chunk c of normed and summed is stored by warp
c % W of the token's W warps. The last block of a token to arrive (an int32 counter a token, its own pool here) routes
it with one warp, as moe_router.cu does. In the step this removes the norm's launch from the chain: the unfused pair
is add_rmsnorm=triton_pdl (~1.7 us, one program at T = 1) and then the router, ending ~5.7 us after the norm ends,
26 times a token on the 48B.

The normed values are rounded to the activation dtype as the Triton add_rmsnorm rounds them (the norm of the rounded
sum; normalise, then the gain, then the cast), but the sum of squares is added in another order (a lane's chunks in
order, then the warp's butterfly), so it claims tolerance() - add_rmsnorm_router's row: normed and summed within
add_rmsnorm's limit, the routing of its own normed row within moe_router's - not bit-identity with the unfused chain.

Its stated policy for every other call: the torch plugin's add_rmsnorm_router (the torch add_rmsnorm, then the torch
moe_router on its normed output: float32 maths, the same contract), for more than ROUTER_MAX_T tokens (a prefill
chunk), activations other than float32 / bfloat16 / float16 or a residual of another dtype or shape, a router weight
that is not a float32 [E, D] matrix, a row length that is not a multiple of 4, more than ROUTER_MAX_EXPERTS experts,
top_k or n_group above 32 (one warp routes: a lane a group, a lane a pick). `fused_serves` is that test;
_policies.py's `norm_router_passes` says it to the dispatcher.
"""

from __future__ import annotations

import torch

from sparkops.errors import BadInput
from sparkops.ops._routing import check_routing
from sparkops.lanes import MAIN

from . import _runtime as rt
from ._counters import CounterPools

SOURCES = rt.source_files("add_rmsnorm_router.cu")
#: the most tokens one launch takes (a block row of the grid each); a longer call is a prefill chunk
ROUTER_MAX_T = 8
#: warps a block (a warp an expert): 2 puts the 48B's 256 experts on 128 blocks, about one an SM
ROUTER_WARPS = 2
#: the most experts one warp routes (AR_SLOTS x 32 in add_rmsnorm_router.cu)
ROUTER_MAX_EXPERTS = 512
#: int32 arrival counters a device and lane (one a token, ROUTER_MAX_T at most a launch)
POOL_COUNTERS = 64
#: the kernel of each activation dtype (each its own registers and chunks a round: the .cu file says why)
KERNELS = {torch.float32: "add_rmsnorm_router_pdl_f32", torch.bfloat16: "add_rmsnorm_router_pdl_bf16",
           torch.float16: "add_rmsnorm_router_pdl_f16"}

#: launch with programmatic dependent launch (the kernel is written for it); a test sets it False to launch the same
#: kernel plainly, its griddepcontrol instructions then no-ops, for the bits a replayed PDL chain must give
PDL = True

_POOLS = CounterPools("add_rmsnorm_router", POOL_COUNTERS)


def counters(device: torch.device) -> torch.Tensor:
    """The arrival counters of the device and the caller's lane (_counters.CounterPools: this op's own, created by the
    first call, before any CUDA-graph capture)."""
    return _POOLS.get(device)


def pool_on(device: torch.device, n: int = MAIN) -> torch.Tensor | None:
    """The pool of the device and lane `n` if it exists (tests check it is all zeros after every call)."""
    return _POOLS.on(device, n)


def fused_serves(x, residual, router_weight, top_k, n_group) -> bool:
    """Whether the one-launch kernel takes this call (the module docstring's policy)."""
    return (isinstance(x, torch.Tensor) and x.dim() == 2 and 1 <= x.shape[0] <= ROUTER_MAX_T and x.dtype in KERNELS
            and isinstance(residual, torch.Tensor) and residual.dtype == x.dtype and residual.shape == x.shape
            and isinstance(router_weight, torch.Tensor) and router_weight.dtype == torch.float32
            and router_weight.dim() == 2 and router_weight.shape[1] == x.shape[1] and x.shape[1] % 4 == 0
            and router_weight.shape[0] <= ROUTER_MAX_EXPERTS and int(top_k) <= 32 and int(n_group) <= 32)


def add_rmsnorm_router_rowwarp_pdl(x, residual, weight, eps, router_weight, bias, top_k, n_group, topk_group, scale,
                                   renorm_eps):
    """Implementation "cupy_rowwarp_pdl": up to ROUTER_MAX_T tokens normed and routed in one PDL launch; every other
    call the torch plugin's add_rmsnorm_router (the stated policy)."""
    if not fused_serves(x, residual, router_weight, top_k, n_group):
        from sparkops_torch.add_rmsnorm_router import add_rmsnorm_router as torch_add_rmsnorm_router

        return torch_add_rmsnorm_router(x, residual, weight, eps, router_weight, bias, top_k, n_group, topk_group,
                                        scale, renorm_eps)
    op = "add_rmsnorm_router"
    dev = rt.cuda_device(op, x=x, residual=residual, weight=weight, router_weight=router_weight, bias=bias)
    t, d = x.shape
    rt.expect_shape(op, "weight", weight, (d,), "one norm gain per channel")
    experts = router_weight.shape[0]
    rt.expect_shape(op, "bias", bias, (experts,), "one selection bias per expert")
    top_k, n_group, topk_group = check_routing(op, experts, top_k, n_group, topk_group)
    x, residual, router_weight = rt.contiguous(x), rt.contiguous(residual), rt.contiguous(router_weight)
    gain, bias = rt.contiguous(weight.float()), rt.contiguous(bias.float())
    if x.data_ptr() % 16:  # the activations are read 16 (float32) or 8 bytes at a time
        x = x.clone()
    if residual.data_ptr() % 16:
        residual = residual.clone()
    if gain.data_ptr() % 16:  # the gain is read 16 bytes at a time
        gain = gain.clone()
    if router_weight.data_ptr() % 16:
        raise BadInput(f"{op}: the router weight's data is not 16-byte aligned; give it its own allocation")
    normed = torch.empty((t, d), dtype=x.dtype, device=dev)  # [T, D]
    summed = torch.empty((t, d), dtype=x.dtype, device=dev)  # [T, D]
    logits = torch.empty((t, experts), dtype=torch.float32, device=dev)  # [T, E] scratch
    route_weights = torch.empty((t, top_k), dtype=torch.float32, device=dev)  # [T, K]
    ids = torch.empty((t, top_k), dtype=torch.int64, device=dev)  # [T, K]
    rt.launch("add_rmsnorm_router.cu", KERNELS[x.dtype], dev, (-(-experts // ROUTER_WARPS), t), (32 * ROUTER_WARPS,),
              (rt.ptr(x), rt.ptr(residual), rt.ptr(gain), rt.f32(eps), rt.ptr(normed), rt.ptr(summed),
               rt.ptr(router_weight), rt.i32(experts), rt.i32(d), rt.ptr(logits), rt.ptr(bias), rt.ptr(route_weights),
               rt.ptr(ids), rt.ptr(counters(dev)), rt.i32(experts // n_group), rt.i32(n_group), rt.i32(topk_group),
               rt.i32(top_k), rt.f32(scale), rt.f32(renorm_eps)), pdl=PDL)
    return normed, summed, route_weights, ids
