"""quantize_act on CUDA: Q8_0 blocks of 32, bit-identical to the NumPy reference (kernels/quantize_act.cu)."""

from __future__ import annotations

import torch

from sparkops.errors import BadInput

from . import _runtime as rt

SOURCES = rt.source_files("quantize_act.cu")


def quantize_act(x):
    dev = rt.cuda_device("quantize_act", x=x)
    rt.expect_shape("quantize_act", "x", x, (None, None), "rows [T, D]")
    t, d = x.shape
    if d % 32:
        raise BadInput(f"quantize_act: rows of x have {d} values, not a multiple of 32 (the Q8_0 block); "
                       f"pad the rows to a multiple of 32")
    code = rt.act_code("quantize_act", "x", x)
    x = rt.contiguous(x)
    q = torch.empty((t, d), dtype=torch.int8, device=dev)
    scales = torch.empty((t, d // 32), dtype=torch.float32, device=dev)
    launch_quantize(x, code, q, scales)
    return q, scales


def launch_quantize(x: torch.Tensor, code: int, q: torch.Tensor, scales: torch.Tensor) -> None:
    """Quantize the contiguous rows of x into preallocated q [T, D] int8 and scales [T, D/32] float32."""
    n_blocks = x.numel() // 32
    rt.launch("quantize_act.cu", "quantize_act_q8", x.device, ((n_blocks + 7) // 8,), (256,),
              (rt.ptr(x), rt.i32(code), rt.ptr(q), rt.ptr(scales), rt.i64(n_blocks)))
