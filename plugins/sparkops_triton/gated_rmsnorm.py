"""gated_rmsnorm in Triton: KDA's output norm, per head RMSNorm times sigmoid(gate), float32 inside.

Each program takes ROWS consecutive (token, head) rows of D values: at decode (T=1, 32 heads of 128)
that is a handful of programs instead of 32 one-row launches' worth of tiny programs.

`gated_rmsnorm_trigger` ("triton_pdl"): the same kernel, which first lets the next kernel of the stream be
scheduled (programmatic dependent launch). KDA's o_proj launched with PDL after it (cupy_rowwarp_pdl) then
requests its weights while this one runs. The same bits as "triton".
"""

import torch
import triton
import triton.language as tl

from ._runtime import FLOATS, cdiv, expect, expect_device, expect_dtype, interpreting, next_pow2


@triton.jit
def _gated_rmsnorm_kernel(x_ptr, g_ptr, w_ptr, y_ptr, n_rows, D, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr,
                          TRIGGER: tl.constexpr):
    if TRIGGER:  # compiled only for the GPU (the interpreter has no griddepcontrol)
        tl.extra.cuda.gdc_launch_dependents()
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)  # [ROWS]
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < D)
    offs = rows[:, None] * D + cols[None, :]  # [ROWS, BLOCK]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    gate = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < D, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / D + eps)  # [ROWS]
    y = x * inv[:, None] * w[None, :] * tl.sigmoid(gate)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def gated_rmsnorm(x, gate, weight, eps):
    """Implementation "triton"."""
    return _gated_rmsnorm(x, gate, weight, eps, trigger=False)


def gated_rmsnorm_trigger(x, gate, weight, eps):
    """Implementation "triton_pdl": "triton" letting the next kernel be scheduled as it starts (module docstring)."""
    return _gated_rmsnorm(x, gate, weight, eps, trigger=not interpreting())


def _gated_rmsnorm(x, gate, weight, eps, trigger: bool):
    op = "gated_rmsnorm"
    expect(op, "x", x, (None, None, None), "[T, H, D]")
    expect(op, "gate", gate, tuple(x.shape), "the same shape as x")
    expect(op, "weight", weight, (x.shape[2],), "one gain per head channel, shared by the heads")
    expect_dtype(op, "x", x, FLOATS)
    expect_device(op, x=x, gate=gate, weight=weight)
    x, gate = x.contiguous(), gate.contiguous()
    t, h, d = x.shape
    y = torch.empty((t, h, d), dtype=x.dtype, device=x.device)  # [T, H, D]
    n_rows = t * h
    if n_rows == 0:
        return y
    block = next_pow2(d)
    rows = max(1, min(16, 2048 // block))  # ~2K values per program
    _gated_rmsnorm_kernel[(cdiv(n_rows, rows),)](x, gate, weight.contiguous(), y, n_rows, d, float(eps), ROWS=rows,
                                                 BLOCK=block, TRIGGER=trigger, num_warps=4)
    return y
