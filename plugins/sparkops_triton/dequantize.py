"""Whole GGUF weights to bfloat16 in one launch: the first half of the "triton_dqmm" prefill GEMMs.

Why: a prefill chunk multiplies every weight with thousands of tokens. The fused GEMMs (`linear._gemm_kernel`,
`moe_experts._moe_gemm_*_kernel`) decode each weight tile again for every tile of tokens, so their tensor cores
wait on block-decode arithmetic: on the H200 a 4096-token chunk of the 48B spent 883 ms in them at 25 TFLOP/s, 3.3%
of the bf16 matmul ceiling (session 9's prefill diagnosis). Decoding each weight once per chunk into a bf16 scratch
costs one read of its blocks and one write of 2 bytes per value (about 19 MB for a [4096, 2304] projection, a few
microseconds at the read ceiling); the product then runs on cuBLAS (`torch.matmul`) or, for the experts grouped by
expert, on `torch._grouped_mm`, which reach a large share of the tensor cores.

The values are exactly `_dequant.values` (a * q + b in float32, the fused GEMMs' operands before their bf16 dot),
rounded to bfloat16: the same operands the "triton" GEMMs multiply.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sparkops.errors import BadInput

from ._dequant import decode_chunk, round_bf16, values
from ._runtime import cdiv

#: rows per program (each program decodes one 256-value chunk of R rows) and warps; the tune study dequant_bf16 times
#: the alternatives. Session 11 (H200, one 48B Q4_K expert stack): (16, 4) 617 us, (16, 2) 566 us (68% of the read
#: ceiling), the others 580-693 us; the same bits (each value is decoded alone)
DEQUANT_ROWS, DEQUANT_WARPS = 16, 2


@triton.jit
def _dequant_kernel(w_ptr, grid_ptr, out_ptr, ROWS, K, w_stride, out_stride, QTYPE: tl.constexpr, R: tl.constexpr):
    """out[n, 256c : 256c + 256] = the values of chunk c of rows n (this program's R rows), as bfloat16."""
    n = tl.program_id(0) * R + tl.arange(0, R)                         # [R]
    c = tl.program_id(1)
    nmask = (n < ROWS)[:, None, None]                                   # [R, 1, 1]
    row = w_ptr + (n.to(tl.int64) * w_stride)[:, None, None]            # [R, 1, 1]
    q, a, b, k, ok = decode_chunk(QTYPE, row, c, nmask, K, grid_ptr)   # q [R, S, L], k [1, S, L]
    v = values(q, a, b)                                                 # [R, S, L] float32
    dst = out_ptr + (n.to(tl.int64) * out_stride)[:, None, None] + k
    # rounded to nearest (ties to even) before the cast, which is then exact: the interpreter's own cast truncates
    tl.store(dst, round_bf16(v).to(tl.bfloat16), mask=nmask & ok)


def dequantize_bf16(raw: torch.Tensor, qtype: int, grid: torch.Tensor, k: int,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """The weight whose stored rows are `raw` (2-D [rows, row units], last dim contiguous; a stacked [E, rows,
    units] weight is flattened to E * rows rows) as bfloat16 [rows, k] (or [E, rows, k]).

    qtype: the GGML type id; grid: the IQ1_S table (any tensor on the device for other types); k: values per row;
    out: where to write (a [rows, k] bfloat16 tensor with a contiguous last dim), else a new tensor."""
    shape = tuple(raw.shape[:-1])
    rows2d = raw.reshape(-1, raw.shape[-1]) if raw.dim() != 2 else raw  # [rows, units]
    if rows2d.stride(-1) != 1:
        raise BadInput(f"dequantize_bf16: the stored rows have stride {rows2d.stride(-1)} along their last dim; "
                       f"pass rows whose last dim is contiguous")
    rows = rows2d.shape[0]
    if out is None:
        out = torch.empty((rows, k), dtype=torch.bfloat16, device=raw.device)
    elif out.dtype != torch.bfloat16 or tuple(out.shape) != (rows, k) or out.stride(-1) != 1:
        raise BadInput(f"dequantize_bf16: 'out' is {out.dtype} {list(out.shape)}; pass a bfloat16 [{rows}, {k}] "
                       f"tensor whose last dim is contiguous")
    if rows and k:
        _dequant_kernel[(cdiv(rows, DEQUANT_ROWS), cdiv(k, 256))](
            rows2d, grid, out, rows, k, rows2d.stride(0), out.stride(0), QTYPE=int(qtype), R=DEQUANT_ROWS,
            num_warps=DEQUANT_WARPS)
    return out.view(*shape, k)
