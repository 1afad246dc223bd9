"""rmsnorm on CUDA (kernels/rmsnorm.cu), with a launch geometry chosen for the row length.

`geometry(D)` is shared with the fused rmsnorm + quantize kernel (rmsnorm_quantize.py): both run the
same row code with the same threads per row, which is what makes the fused result byte-identical to
this op followed by quantize_act.
"""

from __future__ import annotations

import torch

from sparkops.errors import BadInput

from . import _runtime as rt

SOURCES = rt.source_files("rmsnorm.cu")

#: rows up to this length get one warp each; longer rows one block each
WARP_ROW_MAX = 1024


def geometry(d: int, rows: int) -> tuple[str, tuple[int], tuple[int]]:
    """(kernel family "warp"/"block", grid, block) for `rows` rows of length d."""
    if d <= WARP_ROW_MAX:
        return "warp", ((rows + 7) // 8,), (256,)
    threads = min(1024, max(32, ((d + 7) // 8 + 31) // 32 * 32))  # about 8 values per thread
    return "block", (rows,), (threads,)


def check(op: str, x, weight) -> torch.device:
    dev = rt.cuda_device(op, x=x, weight=weight)
    rt.expect_shape(op, "x", x, (None, None), "rows [T, D]")
    rt.expect_shape(op, "weight", weight, (x.shape[1],), "one gain per channel of x")
    if weight.dtype != torch.float32:
        raise BadInput(f"{op}: 'weight' has dtype {weight.dtype}, expected float32; convert it with .float()")
    return dev


def rmsnorm(x, weight, eps):
    dev = check("rmsnorm", x, weight)
    code = rt.act_code("rmsnorm", "x", x)
    x, weight = rt.contiguous(x), rt.contiguous(weight)
    t, d = x.shape
    y = torch.empty_like(x)
    family, grid, block = geometry(d, t)
    if family == "warp":
        rt.launch("rmsnorm.cu", "rmsnorm_warp_rows", dev, grid, block,
                  (rt.ptr(x), rt.i32(code), rt.ptr(weight), rt.f32(eps), rt.i32(d), rt.i64(t), rt.ptr(y)))
    else:
        rt.launch("rmsnorm.cu", "rmsnorm_block_rows", dev, grid, block,
                  (rt.ptr(x), rt.i32(code), rt.ptr(weight), rt.f32(eps), rt.i32(d), rt.ptr(y)))
    return y
