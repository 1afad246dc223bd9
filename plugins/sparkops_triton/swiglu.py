"""swiglu in Triton: silu(gate) * up in float32, one launch.

The torch plugin's swiglu is five kernels at decode (two casts to float32, silu, the product, the cast back); the 48B
calls it once a token (its dense first layer: the experts' SwiGLU lives inside moe_experts). One elementwise
kernel over the flattened [T, F] rows does the same in float32 and stores gate's dtype: four launches a token fewer.
"""

import torch
import triton
import triton.language as tl

from ._runtime import FLOATS, cdiv, expect, expect_device, expect_dtype

BLOCK = 1024  # values a program: the 48B's dense intermediate row (9216) is 9 programs


@triton.jit
def _swiglu_kernel(g_ptr, u_ptr, y_ptr, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # [BLOCK] of the flattened [T, F]
    mask = offs < N
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, (g * tl.sigmoid(g) * u).to(y_ptr.dtype.element_ty), mask=mask)


def swiglu(gate, up):
    op = "swiglu"
    expect(op, "gate", gate, (None, None), "[T, F]")
    expect(op, "up", up, tuple(gate.shape), "the same [T, F] as gate")
    expect_dtype(op, "gate", gate, FLOATS)
    expect_dtype(op, "up", up, FLOATS)
    expect_device(op, gate=gate, up=up)
    gate, up = gate.contiguous(), up.contiguous()
    y = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)  # [T, F]
    n = gate.numel()
    if n:
        _swiglu_kernel[(cdiv(n, BLOCK),)](gate, up, y, n, BLOCK=BLOCK, num_warps=4)
    return y
