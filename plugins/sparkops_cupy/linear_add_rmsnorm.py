"""linear_add_rmsnorm on CUDA: a decode token's output projection with the FFN's residual add and norm folded into the
GEMV's last block (kernels/linear_norm.cu).

"cupy_rowwarp_pdl_norm" (`linear_add_rmsnorm_rowwarp_pdl`): linear=cupy_rowwarp_pdl's warp form for a short Q4_K weight
(fewer than ROWWARP_TALL_ROWS rows: the o_proj shapes; a warp a row, the first weights requested before the PDL wait)
whose blocks store the projection's row as that kernel does and arrive at an int32 counter (this op's own pool); the
last to arrive adds the row to the residual stream and norms it (kernels/row_add_norm.cuh, the same instructions as
moe_experts_add_rmsnorm's). In the step this takes the FFN norm's launch after each attention block off the critical
path (add_rmsnorm=triton_pdl, 27 times a token on the 48B). The projection's output is the warp form's, bit for bit -
the step's o_proj bits (linear@Q4_K=cupy_rowwarp_pdl_q8_tall runs that form for short weights); the norm sums its
squares in another order than the Triton add_rmsnorm, so the claim is tolerance(): the fused op's float32 row.

Its stated policy for every other call (more than one token, a weight that is not Q4_K or is tall, a residual of
another shape or dtype, a gain that is not float32 [OUT]): this plugin's linear=cupy_rowwarp_pdl (its own policy for
what its kernels do not take: float32 everywhere), then the torch plugin's add_rmsnorm on its output. `fused_serves`
is that test; _policies.py's `linear_norm_passes` says it to the dispatcher.

Measured (H100, per op in the chain, each with the Triton norm after the plain GEMV as its pair): session 36's fold
added 5.5 us to the GEMV where ~1 was expected; sessions 37-38 found that tail in the last block's norm, its loads
waiting one by one (bench/probes/fold_anatomy.py), not in its arrival. With row_add_norm.cuh's vector form it adds 1.1
us, while the Triton norm after the plain GEMV costs the chain ~0.2 (it starts early under PDL): x0.864. Selected by
nothing.
"""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops.lanes import MAIN
from sparkops.qweight import QWeight

from . import _runtime as rt
from ._counters import RAN_FORMS, RAN_POOL, RAN_SCRATCHES, CounterPools, ran_choice
from .linear import _DT_SUFFIX, ROWWARP_TALL_ROWS, _checked, linear_rowwarp_pdl

SOURCES = rt.source_files("linear_norm.cu")
#: launch with programmatic dependent launch (the kernel is written for it); a test sets it False to launch the same
#: kernel plainly, its griddepcontrol instructions then no-ops
PDL = True

#: the last block's arrival and scratch (kernels/row_add_norm.cuh; _counters.RAN_FORMS and RAN_SCRATCHES say what each
#: form is and what GPU sessions 36-37 measured: all alike), read at each call; tests and side-by-sides set them
ARRIVAL, SCRATCH = "release", "global"
ARRIVALS, SCRATCHES = RAN_FORMS, RAN_SCRATCHES
#: int32 counters a pool (the tree's 33, then the global scratch's 32 floats)
POOL_COUNTERS = RAN_POOL

_POOLS = CounterPools("linear_add_rmsnorm", POOL_COUNTERS)


def counters(device: torch.device, n: int = MAIN) -> torch.Tensor | None:
    """The arrival counter pool of the device and lane `n` if it exists (tests check it is zero after every call)."""
    return _POOLS.on(device, n)


def fused_serves(x, weight, residual, norm_weight) -> bool:
    """Whether the fused kernel takes this call: one token, a Q4_K weight of fewer than ROWWARP_TALL_ROWS rows whose
    width is whole super-blocks, a residual [1, OUT] of x's dtype, a float32 gain [OUT]."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[0] != 1 or not isinstance(weight, QWeight):
        return False
    if weight.qtype != Q.Q4_K or len(weight.shape) != 2 or weight.shape[0] >= ROWWARP_TALL_ROWS \
            or weight.shape[1] % 256 or weight.shape[1] != x.shape[1]:
        return False
    n = weight.shape[0]
    if not isinstance(residual, torch.Tensor) or tuple(residual.shape) != (1, n) or residual.dtype != x.dtype:
        return False
    return isinstance(norm_weight, torch.Tensor) and norm_weight.dtype == torch.float32 \
        and tuple(norm_weight.shape) == (n,)


def linear_add_rmsnorm_rowwarp_pdl(x, weight, residual, norm_weight, eps):
    """Implementation "cupy_rowwarp_pdl_norm": the warp form's GEMV with the residual add and the norm in its last
    block; every other call by the stated policy (`fused_serves`)."""
    if not fused_serves(x, weight, residual, norm_weight):
        from sparkops_torch.add_rmsnorm import add_rmsnorm as torch_add_rmsnorm

        return torch_add_rmsnorm(linear_rowwarp_pdl(x, weight), residual, norm_weight, eps)
    rt.cuda_device("linear_add_rmsnorm", x=x, residual=residual, norm_weight=norm_weight)
    infix, form = ran_choice("linear_add_rmsnorm", ARRIVAL, SCRATCH)  # refused before anything is launched
    x, code, kw, n, k = _checked(x, weight)
    if x.data_ptr() % 16:  # the kernel reads the activations 16 bytes at a time
        x = x.clone()
    if kw.raw.data_ptr() % 16:
        raise BadInput(f"linear_add_rmsnorm: the weight's data is not 16-byte aligned (offset "
                       f"{kw.raw.data_ptr() % 16}); give it its own allocation (QWeight(raw.clone(), ...))")
    residual, gain = rt.contiguous(residual), rt.contiguous(norm_weight)
    y = torch.empty((1, n), dtype=x.dtype, device=x.device)  # [1, OUT] the projection, read back by the last block
    normed, summed = torch.empty_like(y), torch.empty_like(y)
    name = f"linear_q4_k_rowwarp{infix}pdl_{_DT_SUFFIX[code]}"
    rt.launch("linear_norm.cu", name, x.device, ((n + 3) // 4,), (128,),
              (rt.ptr(x), rt.ptr(kw.raw), rt.i64(kw.row_bytes), rt.i32(k), rt.i32(n), rt.ptr(y), rt.ptr(residual),
               rt.ptr(gain), rt.f32(eps), rt.ptr(normed), rt.ptr(summed), rt.ptr(_POOLS.get(x.device)),
               rt.i32(form)), pdl=PDL)
    return normed, summed
