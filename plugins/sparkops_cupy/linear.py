"""linear on CUDA: GEMV per token over GGUF blocks, the weight streamed through shared memory (kernels/linear.cu).

Two implementations share the kernel body and differ in what they do with the activations:
- "cupy_dp4a" (`linear`): block-quantized weights (Q8_0, Q4_K, Q6_K, IQ1_S) are dotted with Q8_0-quantized
  activations through __dp4a, as llama.cpp does: not the float reference's arithmetic, hence the claim
  tolerance("act_q8"). The 48B model gate refused it (session 6).
- "cupy_float" (`linear_float`): the same weight stream and the same chunk loads, dotted with the activations as
  they came, in float32 (kernels/float_dot.cuh): the reference's arithmetic up to the order of the sums, claim
  tolerance(). Session 4 measured the integer kernel's Q6_K lm_head at 126 us against Triton's 344; this keeps
  that weight stream without the quantized activations.
F32/F16/BF16 weights are dotted in float32 with unquantized activations by both.
- "cupy_rowwarp" (`linear_rowwarp`): the one-token Q4_K GEMV of decode as one warp per output row, every byte of
  the row requested before any is used (kernels/linear_rowwarp.cu): one launch, no split-K, no staging in shared
  memory. Float32 products as cupy_float's, summed in another order: claim tolerance(). Its policy for every
  other call - more than one token, or a weight that is not Q4_K - is cupy_float's kernel, stated here and in the
  implementation's description; a registry selects it per type (linear@Q4_K) so the other types keep theirs.
"""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops.qweight import QWeight

from . import _runtime as rt
from ._weights import KernelWeight, iq1s_grid, kernel_weight

SOURCES = rt.source_files("linear.cu")
#: pipeline depth of the weight stream (LINEAR_STAGES in linear.cu)
STAGES = 3
#: bytes one pipeline stage aims at (a block keeps STAGES - 1 stages in flight)
STAGE_TARGET = 16 * 1024
#: rows a block computes at a time: 8 warps, one row per half-warp
ROWS_PER_PASS = 16


def linear(x, weight):
    """Implementation "cupy_dp4a": Q8_0-quantized activations, integer dot products."""
    return _linear(x, weight, float_act=False)


def linear_float(x, weight):
    """Implementation "cupy_float": float32 activations and products (no quantization of the activations)."""
    return _linear(x, weight, float_act=True)


def linear_rowwarp(x, weight):
    """Implementation "cupy_rowwarp": one token times a Q4_K weight as one warp per row (kernels/linear_rowwarp.cu);
    every other call runs cupy_float's kernel (the stated policy: the row-warp kernel is the decode GEMV only)."""
    if x.dim() != 2 or x.shape[0] != 1 or not isinstance(weight, QWeight) or weight.qtype != Q.Q4_K:
        return _linear(x, weight, float_act=True)
    dev = rt.cuda_device("linear", x=x)
    kw = kernel_weight("linear", "weight", weight, dev)
    if len(weight.shape) != 2:
        raise BadInput(f"linear: 'weight' ({weight.name}) has shape {list(weight.shape)}, expected a 2-D "
                       f"[OUT, IN] weight")
    n, k = weight.shape
    rt.expect_shape("linear", "x", x, (None, k), f"rows of the weight's {k} input features")
    code = rt.act_code("linear", "x", x)
    x = rt.contiguous(x)
    if x.data_ptr() % 16:  # the kernel reads the activations 16 bytes at a time
        x = x.clone()
    y = torch.empty((1, n), dtype=x.dtype, device=dev)
    launch_rowwarp(x, code, kw, n, k, y)
    return y


#: the row-warp kernel per activation dtype code (rt.DTYPE_CODE)
_ROWWARP = {0: "linear_q4_k_rowwarp_f32", 1: "linear_q4_k_rowwarp_bf16", 2: "linear_q4_k_rowwarp_f16"}
#: rows (warps) per block of the row-warp kernel: 128 threads (its __launch_bounds__)
ROWWARP_ROWS = 4


def launch_rowwarp(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor) -> None:
    """y[0, :n] = x[0] @ W^T for a Q4_K weight (kernels/linear_rowwarp.cu); x and the weight 16-byte aligned."""
    if kw.raw.data_ptr() % 16:
        raise BadInput(f"linear: the weight's data is not 16-byte aligned (offset {kw.raw.data_ptr() % 16}); "
                       f"give it its own allocation (QWeight(raw.clone(), ...))")
    rt.launch("linear_rowwarp.cu", _ROWWARP[code], x.device, ((n + ROWWARP_ROWS - 1) // ROWWARP_ROWS,),
              (32 * ROWWARP_ROWS,), (rt.ptr(x), rt.ptr(kw.raw), rt.i64(kw.row_bytes), rt.i32(k), rt.i32(n), rt.ptr(y)))


def _linear(x, weight, float_act: bool):
    dev = rt.cuda_device("linear", x=x)
    kw = kernel_weight("linear", "weight", weight, dev)
    if len(weight.shape) != 2:
        raise BadInput(f"linear: 'weight' ({weight.name}) has shape {list(weight.shape)}, expected a 2-D "
                       f"[OUT, IN] weight")
    n, k = weight.shape
    rt.expect_shape("linear", "x", x, (None, k), f"rows of the weight's {k} input features")
    code = rt.act_code("linear", "x", x)
    x = rt.contiguous(x)
    y = torch.empty((x.shape[0], n), dtype=x.dtype, device=dev)
    launch_linear(x, code, kw, n, k, y, float_act)
    return y


def staging_bytes(k: int, tokens: int, is_float: bool, float_act: bool = False) -> int:
    """Shared memory a block needs to stage `tokens` activation rows of length k: floats for float weights; for
    block weights Q8_0 codes with a scale and a sum per 32, or (float_act) floats with a sum per 32."""
    if is_float:
        return tokens * k * 4
    if float_act:
        return tokens * k * 4 + tokens * (k // 32) * 4
    return tokens * k + 2 * tokens * (k // 32) * 4


def tile_rows(n: int, row_bytes: int, sms: int) -> int:
    """Rows per streamed tile: ~STAGE_TARGET bytes in whole passes of 16 rows, but small enough that a
    small matrix still gives every multiprocessor two tiles."""
    p = ROWS_PER_PASS
    rt = p * max(1, min(4, STAGE_TARGET // (p * row_bytes)))
    spread = max(p, (n // (2 * sms) + p - 1) // p * p)
    return max(1, min(rt, spread))


def launch_linear(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor,
                  float_act: bool = False) -> None:
    t = x.shape[0]
    dev = x.device
    idx = dev.index if dev.index is not None else torch.cuda.current_device()
    if kw.raw.data_ptr() % 16:
        raise BadInput(f"linear: the weight's data is not 16-byte aligned (offset {kw.raw.data_ptr() % 16}); "
                       f"give it its own allocation (QWeight(raw.clone(), ...))")
    limit = rt.max_shared_memory(idx)
    sms = rt.sm_count(idx)
    nt = 1 if t == 1 else 4
    rows = tile_rows(n, kw.row_bytes, sms)
    while True:
        stage = (rows * kw.row_bytes + 16 + 15) // 16 * 16
        smem = STAGES * stage + staging_bytes(k, nt, kw.is_float, float_act)
        if smem <= limit:
            break
        if rows > 1:
            rows = max(1, rows // 2)
        elif nt > 1:
            nt = 1
        else:
                raise BadInput(f"linear: rows of {kw.row_bytes} bytes ({k} inputs) do not fit the cupy GEMV's shared "
                           f"memory ({smem} > {limit} bytes); use another implementation for this weight")
    n_tiles = (n + rows - 1) // rows
    per_sm = max(1, min(8, rt.shared_memory_per_sm(idx) // smem))
    grid_x = min(n_tiles, sms * per_sm)
    table = iq1s_grid(dev) if kw.suffix == "iq1_s" else None
    name = f"linear_{kw.suffix}_f_t{nt}" if float_act and not kw.is_float else f"linear_{kw.suffix}_t{nt}"
    rt.launch("linear.cu", name, dev, (grid_x, (t + nt - 1) // nt), (256,),
              (rt.ptr(x), rt.i32(code), rt.i32(t), rt.i32(k), rt.ptr(kw.raw), rt.i64(kw.row_bytes), rt.i32(kw.wdt),
               rt.i32(n), rt.i32(rows), rt.i32(stage), rt.ptr(y), rt.ptr(table)), shared_mem=smem)
