"""rmsnorm fused with Q8_0 activation quantization, on CUDA (kernels/rmsnorm.cu).

`rmsnorm_quantize(x, weight, eps) -> (q, d)` equals, byte for byte, this backend's `rmsnorm` followed by
its `quantize_act` (`rmsnorm_quantize_unfused`): the fused kernel runs the same row code with the same
launch geometry and quantizes each 32-value block in registers instead of writing the normalised row
and reading it back. Both implement the named op `rmsnorm_quantize` (sparkops/ops/rmsnorm_quantize.py):
`cupy_unfused` claims its tolerance row, `cupy` claims bit-identity to `cupy_unfused`.
"""

from __future__ import annotations

import torch

from sparkops.errors import BadInput

from . import _runtime as rt
from .quantize_act import quantize_act
from .rmsnorm import check, geometry, rmsnorm

SOURCES = rt.source_files("rmsnorm.cu")


def rmsnorm_quantize(x, weight, eps):
    """(q int8 [T, D], d float32 [T, D/32]) = quantize_act(rmsnorm(x, weight, eps)), one kernel."""
    dev = check("rmsnorm_quantize", x, weight)
    if x.dtype != torch.float32:
        raise BadInput(f"rmsnorm_quantize: 'x' has dtype {x.dtype}; the fused kernel takes float32 rows "
                       f"(quantize_act is defined on float32), convert it with .float()")
    t, d = x.shape
    if d % 32:
        raise BadInput(f"rmsnorm_quantize: rows of x have {d} values, not a multiple of 32 (the Q8_0 block); "
                       f"pad the rows to a multiple of 32")
    x, weight = rt.contiguous(x), rt.contiguous(weight)
    q = torch.empty((t, d), dtype=torch.int8, device=dev)
    scales = torch.empty((t, d // 32), dtype=torch.float32, device=dev)
    family, grid, block = geometry(d, t)
    if family == "warp":
        rt.launch("rmsnorm.cu", "rmsnorm_q8_warp_rows", dev, grid, block,
                  (rt.ptr(x), rt.ptr(weight), rt.f32(eps), rt.i32(d), rt.i64(t), rt.ptr(q), rt.ptr(scales)))
    else:
        rt.launch("rmsnorm.cu", "rmsnorm_q8_block_rows", dev, grid, block,
                  (rt.ptr(x), rt.ptr(weight), rt.f32(eps), rt.i32(d), rt.ptr(q), rt.ptr(scales)))
    return q, scales


def rmsnorm_quantize_unfused(x, weight, eps):
    """The same pair as two kernels of this backend: what the fused kernel must equal byte for byte."""
    return quantize_act(rmsnorm(x, weight, eps))
