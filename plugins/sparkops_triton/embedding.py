"""embedding in Triton: y[t] = dequantize(table)[ids[t]], decoding only the requested rows.

One program per token: it reads the token's id from device memory (no host sync), decodes the row
chunk by chunk (256 values) with the shared GGUF decoders, and writes it in the activation dtype.
An id outside [0, V) reads nothing and yields a row of NaN, so a bad id is visible downstream without
a host-side check inside the step (the contract forbids reading any row that was not asked for).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sparkops.errors import BadInput

from ._dequant import decode_chunk, values
from ._runtime import FLOATS, expect, expect_device
from .linear import grid_for, weight_rows


@triton.jit
def _embedding_kernel(ids_ptr, w_ptr, grid_ptr, y_ptr, V, D, w_stride, y_stride, n_chunks, QTYPE: tl.constexpr):
    t = tl.program_id(0)
    tok = tl.load(ids_ptr + t)                                          # int64 id, from device memory
    ok = (tok >= 0) & (tok < V)
    row = w_ptr + tl.where(ok, tok, 0) * w_stride                       # never a row outside the table
    rows = row + tl.zeros([1, 1, 1], tl.int64)                          # [1, 1, 1] pointer
    rmask = (tl.zeros([1, 1, 1], tl.int64) + tok >= 0) & ok             # [1, 1, 1]: read only a valid id
    dst = y_ptr + t.to(tl.int64) * y_stride
    for c in range(0, n_chunks):
        q, a, b, k, kok = decode_chunk(QTYPE, rows, c, rmask, D, grid_ptr)
        v = values(q, a, b)                                             # [1, S, L]
        v = tl.where(rmask, v, float("nan"))
        tl.store(dst + k, v.to(y_ptr.dtype.element_ty), mask=kok)


def embedding(table, ids, dtype):
    op = "embedding"
    raw = weight_rows(op, "table", table)
    if len(table.shape) != 2:
        raise BadInput(f"embedding: 'table' has shape {list(table.shape)}, expected [V, D]; pass the 2-D token table")
    expect(op, "ids", ids, (None,), "one id per token")
    if ids.dtype not in (torch.int64, torch.int32):
        raise BadInput(f"embedding: 'ids' is {ids.dtype}; pass int64 token ids")
    if dtype not in FLOATS:
        raise BadInput(f"embedding: dtype {dtype} is not an activation dtype; pass one of float32, float16, bfloat16")
    expect_device(op, table=raw, ids=ids)
    v, d = table.shape
    y = torch.empty((ids.shape[0], d), dtype=dtype, device=raw.device)  # [T, D]
    if ids.shape[0] == 0 or d == 0:
        return y
    _embedding_kernel[(ids.shape[0],)](ids.contiguous(), raw, grid_for(table, raw), y, v, d, raw.stride(0),
                                       y.stride(0), triton.cdiv(d, 256), QTYPE=int(table.qtype), num_warps=4)
    return y
