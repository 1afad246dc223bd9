"""add_rmsnorm in Triton: the residual add and the next RMSNorm in one pass over the row.

summed = residual + x is rounded to x's dtype (what the unfused chain stores) and the norm is taken
of that stored value, so the fused op equals add-then-rmsnorm on the device, not a more exact variant.

`add_rmsnorm_trigger` ("triton_pdl"): the same kernel, which first lets the next kernel of the stream be
scheduled (programmatic dependent launch's `griddepcontrol.launch_dependents`). A kernel launched with PDL after
it (cupy_rowwarp_pdl's tall projections) then requests its weights while this one runs, and waits for it before
reading its output. For a kernel launched plainly after it, nothing changes. The same bits as "triton".

`add_rmsnorm_wait` ("triton_pdl_wait"): the triggering kernel launched as a PDL dependent itself (launch_pdl). It
may start while the kernel before it (the o_proj, the MoE down) still runs: it requests the gain first (no kernel
writes it), then waits for that kernel (`gdc_wait`: its grid complete, its memory visible), then lets the next kernel
be scheduled and reads x and the residual. Two waits of the plain forms leave the chain: the launch after the kernel
before ends (session 18: ~0.3 us a launch for a small PDL chain), and the gain's own round trip, which the plain forms
issue after the summed row's store (the compiler may not move a load above a store it cannot prove apart). The same
arithmetic on the same values: the same bits as "triton".
"""

import torch
import triton
import triton.language as tl

from ._runtime import FLOATS, expect, expect_device, expect_dtype, interpreting
from .rmsnorm import row_launch


@triton.jit
def _add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, x_stride, r_stride, D, eps, BLOCK: tl.constexpr,
                        TRIGGER: tl.constexpr, WAIT: tl.constexpr = False):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < D
    if WAIT:  # launched as a PDL dependent (GPU only): the gain, which no kernel writes, before the wait
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.extra.cuda.gdc_wait()  # nothing below reads memory before the kernel before is complete
    if TRIGGER:  # compiled only for the GPU (the interpreter has no griddepcontrol)
        tl.extra.cuda.gdc_launch_dependents()
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * r_stride + cols, mask=mask, other=0.0).to(tl.float32)
    summed = (x + r).to(s_ptr.dtype.element_ty)  # the stored residual stream
    tl.store(s_ptr + row * D + cols, summed, mask=mask)
    s = summed.to(tl.float32)
    if not WAIT:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(s * s, axis=0) / D + eps)
    tl.store(y_ptr + row * D + cols, (s * inv * w).to(y_ptr.dtype.element_ty), mask=mask)


def add_rmsnorm(x, residual, weight, eps):
    """Implementation "triton"."""
    return _add_rmsnorm(x, residual, weight, eps, trigger=False)


def add_rmsnorm_trigger(x, residual, weight, eps):
    """Implementation "triton_pdl": "triton" letting the next kernel be scheduled as it starts (module docstring)."""
    return _add_rmsnorm(x, residual, weight, eps, trigger=not interpreting())


def add_rmsnorm_wait(x, residual, weight, eps):
    """Implementation "triton_pdl_wait": "triton_pdl" launched as a PDL dependent, the gain requested before the wait
    (module docstring). In the interpreter (no griddepcontrol, no PDL launch) it is "triton" itself."""
    pdl = not interpreting()
    return _add_rmsnorm(x, residual, weight, eps, trigger=pdl, wait=pdl)


def _add_rmsnorm(x, residual, weight, eps, trigger: bool, wait: bool = False):
    op = "add_rmsnorm"
    expect(op, "x", x, (None, None), "[T, D]")
    expect(op, "residual", residual, tuple(x.shape), "the same shape as x")
    expect(op, "weight", weight, (x.shape[1],), "one gain per channel")
    expect_dtype(op, "x", x, FLOATS)
    expect_device(op, x=x, residual=residual, weight=weight)
    x = x if x.stride(-1) == 1 else x.contiguous()
    residual = residual if residual.stride(-1) == 1 else residual.contiguous()
    t, d = x.shape
    normed = torch.empty((t, d), dtype=x.dtype, device=x.device)  # [T, D]
    summed = torch.empty((t, d), dtype=x.dtype, device=x.device)  # [T, D]
    if t == 0:
        return normed, summed
    block, warps = row_launch(d)
    _add_rmsnorm_kernel[(t,)](x, residual, weight.contiguous(), normed, summed, x.stride(0), residual.stride(0), d,
                              float(eps), BLOCK=block, TRIGGER=trigger, WAIT=wait, num_warps=warps,
                              **({"launch_pdl": True} if wait else {}))
    return normed, summed
