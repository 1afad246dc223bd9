"""linear on CUDA for IQ1_S weights, one token at a time: the Q8 row-copy GEMV (kernels/linear_iq1s_q8.cu).

- "cupy_rowwarp_pdl_q8_iq1s" (`linear_rowwarp_pdl_q8_iq1s`, written in session 50): cupy_rowwarp_pdl_q8's form
  (a block's 16 rows copied into shared memory before the PDL wait, x quantized once a block to Q8, an octet a row,
  integer dots) for IQ1_S rows: each lane's 32 weights of a super-block are 4 rows of the IQ1_S grid dotted by 8
  __dp4a. Why: the IQ1_S step's GEMVs ran on the registry's default linear (triton_lastblock: session 51's diagnosis;
  session 50 had read the Q4_K entry's policy target, cupy_float, for it and kernels/linear_iq1s_q8.cu's comment still
  says so), a GEMV the Q4_K ladder had left behind for its Q8 row-copy forms (sessions 13-27). Claims act_q8 (the
  activations quantized to Q8_0 blocks, as llama.cpp's IQ1_S dot). Other calls by the one-token GEMVs' stated policy
  (`linear._one_token`): a prefill chunk to the torch plugin's float32 linear, any other type or a few tokens to
  cupy_float. Chosen per weight type in a registry: `[ops.linear.cuda.by_type.IQ1_S]`.

- "cupy_rowwarp_pdl_q8_iq1s_short" (`linear_rowwarp_pdl_q8_iq1s_short`, written after GPU session 50): the same with
  short weights two octets a row (twice the blocks).

- "cupy_rowwarp_pdl_q8_iq1s_sg" and "cupy_rowwarp_pdl_q8_iq1s_sg_short" (session 51): the two above with the grid in
  shared memory (the nibble grid, 8 KB a block, copied with the rows before the PDL wait), bit for bit theirs. Why:
  Nsight Compute put the first at 67% L1/TEX throughput and 11% of DRAM; a warp's gather of 32 random rows of the
  global table is ~25 L1 wavefronts, the same gather from shared memory one request (kernels/iq1s_q8.cuh).

- "cupy_rowwarp_pdl_q8_iq1s_sg_mixed" (session 51, after the calls): per weight shape the form GPU session 51's probe
  timed fastest on an H100: short weights of at most MIXED_GLOBAL_MAX_K inputs (the o_proj) on the global grid, 16
  rows a block (cupy_rowwarp_pdl_q8_iq1s's kernel); everything else as cupy_rowwarp_pdl_q8_iq1s_sg_short.

- "cupy_rowwarp_pdl_q8_iq1s_t2" and "cupy_rowwarp_pdl_q8_iq1s_t2_rows16" (session 51, after the calls): the same GEMV
  over the weight repacked two bits a weight (`_iq1s_t2`: 72 bytes a super-block against 50, no grid read; made once a
  weight on its first call), bit for bit cupy_rowwarp_pdl_q8_iq1s_sg_short and cupy_rowwarp_pdl_q8_iq1s
  (kernels/linear_iq1s_t2.cu). Why: the shared-grid forms stayed bound by their grid gathers.

Kept apart from linear.py so that the records of that module's implementations, whose sources it is, do not change.
"""

from __future__ import annotations

import torch
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput

from . import _runtime as rt
from ._iq1s_t2 import T2_BYTES, repacked
from ._weights import NIB_GRID_BYTES, KernelWeight, iq1s_grid, iq1s_grid_nibbles
from .linear import ROWWARP_TALL_ROWS, _DT_SUFFIX, _one_token

#: the kernel files and their headers, each once
SOURCES = tuple(dict.fromkeys(rt.source_files("linear_iq1s_q8.cu") + rt.source_files("linear_iq1s_t2.cu")))
#: rows a block: an octet a row, 4 warps
ROWS = 16
#: bytes of an IQ1_S super-block of 256 weights (IQ1S_SBB in kernels/iq1s_q8.cuh)
BLOCK_BYTES = GGML_QUANT_SIZES[Q.IQ1_S][1]


def linear_rowwarp_pdl_q8_iq1s(x, weight):
    """Implementation "cupy_rowwarp_pdl_q8_iq1s": one token times an IQ1_S weight on Q8 activations and integer dots
    (see the module's docstring); every other call as cupy's one-token GEMVs' stated policy says."""
    return _one_token(x, weight, lambda w, kw: w.qtype == Q.IQ1_S, launch_iq1s_q8)


def linear_rowwarp_pdl_q8_iq1s_short(x, weight):
    """Implementation "cupy_rowwarp_pdl_q8_iq1s_short": cupy_rowwarp_pdl_q8_iq1s with weights of fewer than
    ROWWARP_TALL_ROWS rows two octets a row (8 rows a block, the even and the odd super-blocks: the Q4_K GEMV's answer
    for short weights, rowq8_q4_k's ROWS = 8), tall ones as cupy_rowwarp_pdl_q8_iq1s. Why: GPU session 50's o_proj
    (2304 rows) ran as 144 blocks of 16 rows, about one block an SM. Another order of sums for the short weights:
    act_q8's claim, its own bits. Every other call by the same stated policy."""
    return _one_token(x, weight, lambda w, kw: w.qtype == Q.IQ1_S, _launch_short)


def linear_rowwarp_pdl_q8_iq1s_sg(x, weight):
    """Implementation "cupy_rowwarp_pdl_q8_iq1s_sg": cupy_rowwarp_pdl_q8_iq1s with the IQ1_S grid read from shared
    memory (the module's docstring), its bits; every other call by the same stated policy."""
    return _one_token(x, weight, lambda w, kw: w.qtype == Q.IQ1_S, _launch_sg)


def linear_rowwarp_pdl_q8_iq1s_sg_short(x, weight):
    """Implementation "cupy_rowwarp_pdl_q8_iq1s_sg_short": cupy_rowwarp_pdl_q8_iq1s_short with the IQ1_S grid read
    from shared memory, its bits; every other call by the same stated policy."""
    return _one_token(x, weight, lambda w, kw: w.qtype == Q.IQ1_S, _launch_sg_short)


#: the most inputs a short weight (under ROWWARP_TALL_ROWS rows) may have for cupy_rowwarp_pdl_q8_iq1s_sg_mixed to
#: read the grid from global memory: GPU session 51 (H100) timed the o_proj (2304 x 4096) at 6.54 µs so against
#: 8.40 from shared memory, and the dense down (2304 x 9216) at 23.95 against 13.71
MIXED_GLOBAL_MAX_K = 4096


def linear_rowwarp_pdl_q8_iq1s_sg_mixed(x, weight):
    """Implementation "cupy_rowwarp_pdl_q8_iq1s_sg_mixed": per shape the faster of cupy_rowwarp_pdl_q8_iq1s (short
    weights of at most MIXED_GLOBAL_MAX_K inputs) and cupy_rowwarp_pdl_q8_iq1s_sg_short (everything else), each
    shape's bits those of the form it runs; every other call by the same stated policy."""
    return _one_token(x, weight, lambda w, kw: w.qtype == Q.IQ1_S, _launch_mixed)


def _launch_mixed(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor) -> None:
    """launch_iq1s_q8 in the form linear_rowwarp_pdl_q8_iq1s_sg_mixed names for [n, k]."""
    if n < ROWWARP_TALL_ROWS and k <= MIXED_GLOBAL_MAX_K:
        launch_iq1s_q8(x, code, kw, n, k, y)
    else:
        _launch_sg_short(x, code, kw, n, k, y)


def linear_rowwarp_pdl_q8_iq1s_t2(x, weight):
    """Implementation "cupy_rowwarp_pdl_q8_iq1s_t2": cupy_rowwarp_pdl_q8_iq1s_sg_short's GEMV over the weight's t2
    repacking (the module's docstring), its bits; every other call by the same stated policy."""
    return _one_token(x, weight, lambda w, kw: w.qtype == Q.IQ1_S,
                      lambda x, code, kw, n, k, y: launch_iq1s_t2(x, code, kw, n, k, y,
                                                                  16 if n >= ROWWARP_TALL_ROWS else 8))


def linear_rowwarp_pdl_q8_iq1s_t2_rows16(x, weight):
    """Implementation "cupy_rowwarp_pdl_q8_iq1s_t2_rows16": cupy_rowwarp_pdl_q8_iq1s's GEMV (16 rows a block at every
    shape) over the weight's t2 repacking, its bits; every other call by the same stated policy."""
    return _one_token(x, weight, lambda w, kw: w.qtype == Q.IQ1_S,
                      lambda x, code, kw, n, k, y: launch_iq1s_t2(x, code, kw, n, k, y, 16))


def launch_iq1s_t2(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor, rows: int) -> None:
    """y[0, :n] = x[0] @ W^T for an IQ1_S weight [n, k] (k a multiple of 256) read from its t2 repacking (made here on
    the first call), `rows` (16 or 8) a block, launched with programmatic dependent launch."""
    if kw.row_bytes != k // 256 * BLOCK_BYTES:
        raise BadInput(f"linear: an IQ1_S row of {k} inputs is {k // 256 * BLOCK_BYTES} bytes, the weight's rows are "
                       f"{kw.row_bytes}")
    w2 = repacked(kw.raw)
    row_bytes = k // 256 * T2_BYTES
    smem = k + 4 * (k // 32) + 4 * (k // 16) + rows * row_bytes  # codes, scales, sums of 16, the block's rows
    kernel = "t2rowq8pdl" if rows == 16 else "t2rowq8pairpdl"
    rt.launch("linear_iq1s_t2.cu", f"linear_iq1_s_{kernel}_{_DT_SUFFIX[code]}", x.device, ((n + rows - 1) // rows,),
              (128,), (rt.ptr(x), rt.ptr(w2), rt.i32(k), rt.i32(n), rt.ptr(y)), shared_mem=smem, pdl=True)


def _launch_short(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor) -> None:
    """launch_iq1s_q8 with 8 rows a block for weights of fewer than ROWWARP_TALL_ROWS rows."""
    launch_iq1s_q8(x, code, kw, n, k, y, rows=ROWS if n >= ROWWARP_TALL_ROWS else 8)


def _launch_sg(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor) -> None:
    """launch_iq1s_q8 with the grid in shared memory."""
    launch_iq1s_q8(x, code, kw, n, k, y, shared_grid=True)


def _launch_sg_short(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor) -> None:
    """_launch_short with the grid in shared memory."""
    launch_iq1s_q8(x, code, kw, n, k, y, rows=ROWS if n >= ROWWARP_TALL_ROWS else 8, shared_grid=True)


def launch_iq1s_q8(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor,
                   rows: int = ROWS, shared_grid: bool = False) -> None:
    """y[0, :n] = x[0] @ W^T for an IQ1_S weight [n, k] (k a multiple of 256) on Q8 activations, `rows` (16: an octet a
    row; 8: two) a block, the grid read from global memory or (shared_grid) from a copy in shared memory, launched with
    programmatic dependent launch; x 16-byte aligned (the caller's), the weight's data 16-byte aligned."""
    if rows not in (8, 16):
        raise BadInput(f"linear: the IQ1_S GEMV takes 16 or 8 rows a block, not {rows}")
    if kw.raw.data_ptr() % 16:
        raise BadInput(f"linear: the IQ1_S weight's data is not 16-byte aligned (offset {kw.raw.data_ptr() % 16}); "
                       f"give it its own allocation (QWeight(raw.clone(), ...))")
    if kw.row_bytes != k // 256 * BLOCK_BYTES:
        raise BadInput(f"linear: an IQ1_S row of {k} inputs is {k // 256 * BLOCK_BYTES} bytes, the weight's rows are "
                       f"{kw.row_bytes}")
    grid = iq1s_grid_nibbles(x.device) if shared_grid else iq1s_grid(x.device)
    smem = k + 4 * (k // 32) + 4 * (k // 16) + rows * kw.row_bytes  # codes, scales, sums of 16, the block's rows
    smem += NIB_GRID_BYTES if shared_grid else 0  # the nibble grid, first
    kernel = ("rowq8" if rows == 16 else "rowq8pair") + ("sg" if shared_grid else "") + "pdl"
    rt.launch("linear_iq1s_q8.cu", f"linear_iq1_s_{kernel}_{_DT_SUFFIX[code]}", x.device, ((n + rows - 1) // rows,),
              (128,), (rt.ptr(x), rt.ptr(kw.raw), rt.i32(k), rt.i32(n), rt.ptr(y), rt.ptr(grid)), shared_mem=smem,
              pdl=True)
