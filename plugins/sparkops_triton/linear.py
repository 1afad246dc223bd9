"""linear in Triton: y = x @ dequantize(W)^T with W read in its GGUF blocks, never expanded in memory.

Two paths, picked by the number of rows T of x (a host-side shape decision, fixed per graph):

* T <= GEMV_MAX_T (decode): a fused-dequant GEMV (`_dequant.gemv_*`). Each program owns R output
  rows and streams their blocks chunk by chunk (256 values), the next chunk's loads in flight while
  the current one is decoded in registers and multiplied with float32 activations; one chunk decode
  serves all T tokens. When OUT is too small to fill the GPU, the row is split over programs
  (split-K); the partial sums go to a float32 buffer [splits, T, OUT] that a second small kernel
  adds in a fixed order, so results are bit-reproducible (no float atomics). Claim tolerance().
  `linear_lastblock` ("triton_lastblock") drops that second launch: the last program of each row
  tile to finish (an int32 arrival counter, `_arrival`) adds the partials in the same order, so its
  output is bit-identical to "triton"'s with one launch fewer per split GEMV. `linear_pdl` ("triton_pdl",
  an experiment no registry selects by default) is that GEMV launched with programmatic dependent launch
  (Hopper): its first weight chunk is fetched while the previous kernel finishes (`_gemv_kernel`'s PDL);
  the same arithmetic, so bit-identical to "triton_lastblock". Interpreter-proven (without the
  griddepcontrol instructions, which the interpreter lacks) and compiled for sm_90; timed by the GPU tests.
  `linear_prefetch` ("triton_prefetch") is "triton_lastblock" with FETCH_DEPTH chunks' loads in flight per
  program instead of one: the same arithmetic, so bit-identical to it.
* T > GEMV_MAX_T (prefill): a GEMM. Each program decodes a [BN, 256] tile of W per step, and
  multiplies it with the [BM, 256] tile of x on the tensor cores (tl.dot), float32 accumulation.
  `linear` (implementation "triton") rounds both operands to bfloat16 for the dot: claim "bf16".
  `linear_fp32` ("triton_fp32") uses tf32x3 (three tf32 products, ~fp32 accuracy): claim tolerance().
  `linear_dqmm` ("triton_dqmm") decodes the whole weight once to bfloat16 (`dequantize.dequantize_bf16`) and runs
  the product on cuBLAS: the fused GEMM above decodes each weight tile again for every tile of tokens, and a 4096-token
  chunk of the 48B ran its linears and experts at 3.3% of the bf16 matmul ceiling (session 9). Claim "bf16".

The IQ1_S grid is uploaded once per device (`iq1s_grid_on`); the first call on a device must come
before any CUDA-graph capture. Measured on an H200 (T=1, lm_head 163840x2304, graph replay):
BF16 98%, Q4_K 44%, Q8_0 44%, Q6_K 22%, IQ1_S 11% of 4.04 TB/s: the quantized types are bound by
decode arithmetic and latency, not by bytes (see the report that came with this file).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sparkops.errors import BadInput
from sparkops.qweight import QWeight

from ._arrival import arrive, counters, depart
from ._dequant import (BF16, F16, F32, IQ1_S, Q4_K, Q4_K_FLAT, Q6_K, Q6_K_WIDE, Q8_0, decode_chunk, gemv_cols,
                       gemv_decode, gemv_dot, gemv_fetch, round_bf16, values)
from ._runtime import FLOATS, cdiv, expect, expect_device, expect_dtype, interpreting, next_pow2, sm_count
from .dequantize import dequantize_bf16

#: the largest T served by the GEMV (each extra token is one more FMA per weight value)
GEMV_MAX_T = 8

#: GEMV (rows per program at T=1, fewest rows, warps) per type; rows halve per doubling of T so the
#: per-token accumulators stay in registers (chosen from the compiled register counts, sm_90)
GEMV_CONFIG = {
    int(F32.value): (16, 2, 4), int(F16.value): (16, 2, 4), int(BF16.value): (16, 2, 4), int(Q8_0.value): (16, 2, 4),
    int(Q4_K.value): (64, 16, 4), int(Q6_K.value): (16, 2, 4), int(IQ1_S.value): (32, 4, 4),
}
#: "triton_flat": (rows per program at T=1, fewest rows, warps) of the flat Q4_K GEMV (`_dequant.Q4_K_FLAT`: one
#: word a thread and row: every row costs registers; sm_90, 4 warps: 16 rows take 72 registers at T=1, 32 take 168)
GEMV_FLAT_CONFIG = (16, 8, 4)
#: GEMM tile (tokens, output rows) and warps
GEMM_BM, GEMM_BN, GEMM_WARPS = 64, 64, 8
#: a GEMV whose row tiles are fewer than this many programs per SM splits its rows over K (`gemv_plan`)
GEMV_PROGRAMS_PER_SM = 2
#: "triton_prefetch": chunks of weight loads in flight per GEMV program (the others stream 1 ahead). Session 7 on the
#: H200 (T=1, graph): no depth beat 1 - lm_head Q6_K 342 us at 1, 357 at 2, 484 at 3; Q4_K 4096x2304 7.65 / 8.00 /
#: 7.74 us - and the 48B decode with linear=triton_prefetch at 2 ran 310.0 -> 304.7 tok/s (0.983, ledger
#: 20261130-000833-bca4ab). Kept at 2, the setting that row measured, as the record of a loss: no registry selects it
FETCH_DEPTH = 2
#: Q6_K GEMVs (linear's and moe_experts' decode) read their codes as 16-bit words (`_dequant.Q6_K_WIDE`): the same
#: accumulator columns as the byte loads, bit for bit; the final sum over them is bit-identical in the interpreter, but
#: compiled for sm_90 the accumulator gets another layout (4 columns a thread, not 1), so the GPU may add them in
#: another order (same tolerance claim). Not yet timed on a GPU, so off (see _tune's lm_head_q6k, linear_q6k_small)
Q6K_WIDE_LOADS = False


# ----------------------------------------------------------------------------------------------
# kernels
# ----------------------------------------------------------------------------------------------

@triton.jit
def _gemv_store(out_ptr, acc, t, T, rows, OUT):
    """Row t of the output: the accumulator [R, SA] summed over its columns (written only if t < T)."""
    tl.store(out_ptr + t * OUT + rows, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty), mask=(rows < OUT) & (t < T))


@triton.jit
def _combine_rows(part_ptr, y_ptr, T, OUT, split_stride, SPLITS, rows, TP: tl.constexpr, R: tl.constexpr):
    """y[t, rows] = sum_s part[s, t, rows] in order s = 0, 1, ...: `_combine_kernel`'s float32 sums and
    cast for one row tile and every token, read from L2 (.cg: other programs wrote the partials)."""
    tt = tl.arange(0, TP)
    offs = tt[:, None] * OUT + rows[None, :]                            # [TP, R] into one split's [T, OUT]
    mask = (tt < T)[:, None] & (rows < OUT)[None, :]
    acc = tl.zeros([TP, R], tl.float32)
    for s in range(0, SPLITS):
        acc += tl.load(part_ptr + s * split_stride + offs, mask=mask, other=0.0, cache_modifier=".cg")
    tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, grid_ptr, out_ptr, y_ptr, cnt_ptr, T, K, OUT, w_stride, x_stride, out_split_stride,
                 n_chunks, chunks_per_split, QTYPE: tl.constexpr, TP: tl.constexpr, R: tl.constexpr,
                 SA: tl.constexpr, PTX: tl.constexpr, LASTBLOCK: tl.constexpr, PDL: tl.constexpr,
                 DEPTH: tl.constexpr):
    """out[pid_k, t, o] = sum over this program's chunks of x[t] . W[o] (rows o of this program).

    One 2-D accumulator per token (TP <= 8, unrolled): each keeps the layout of the decoded tile, so
    nothing is reshuffled between threads until the final sum. A chunk is decoded once for all tokens.
    LASTBLOCK (split-K only): the last of the row tile's splits to arrive at counter pid_r also writes
    y[T, OUT] rows of this tile, the splits' partials added in order (see `_arrival`).
    PDL (with PTX; the launch sets launch_pdl): programmatic dependent launch. The program may start while
    the previous kernel of the stream is still running: it issues the weight loads of its first chunk (weights
    only: nothing a kernel writes), then `gdc_wait` (the previous grid complete, its memory visible), and only
    then reads x or writes partials, outputs or arrival counters. After the loop (every weight load of this
    program issued, scales included) `gdc_launch_dependents` lets the next PDL kernel start its own prologue
    while this one stores, arrives and reduces; the next kernel's own gdc_wait still waits for all of this
    grid to finish. Without PDL the kernel is the same code as before (the branches are compile-time).
    DEPTH (1, 2, 3): chunks whose weight loads are in flight ahead of the one being multiplied (the same
    arithmetic at every depth)."""
    pid_r = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = pid_r * R + tl.arange(0, R)                                  # [R]
    rmask = (rows < OUT)[:, None]                                       # [R, 1]
    row = w_ptr + (rows.to(tl.int64) * w_stride)[:, None]               # [R, 1]
    acc0 = tl.zeros([R, SA], tl.float32)
    acc1 = tl.zeros([R, SA], tl.float32)
    acc2 = tl.zeros([R, SA], tl.float32)
    acc3 = tl.zeros([R, SA], tl.float32)
    acc4 = tl.zeros([R, SA], tl.float32)
    acc5 = tl.zeros([R, SA], tl.float32)
    acc6 = tl.zeros([R, SA], tl.float32)
    acc7 = tl.zeros([R, SA], tl.float32)
    c0 = pid_k * chunks_per_split
    c1 = tl.minimum(c0 + chunks_per_split, n_chunks)
    xc = x_ptr + c0 * 256
    f1 = gemv_fetch(QTYPE, row, c0, rmask & (c0 < c1), K)
    if DEPTH > 1:
        f2 = gemv_fetch(QTYPE, row, c0 + 1, rmask & (c0 + 1 < c1), K)
    if DEPTH > 2:
        f3 = gemv_fetch(QTYPE, row, c0 + 2, rmask & (c0 + 2 < c1), K)
    if PDL:
        if PTX:                                                         # the interpreter has no griddepcontrol
            tl.extra.cuda.gdc_wait()                                    # nothing before this reads what a kernel writes
    for c in range(c0, c1):
        raw = f1                                                        # later chunks in flight during its math
        if DEPTH == 1:
            f1 = gemv_fetch(QTYPE, row, c + 1, rmask & (c + 1 < c1), K)
        elif DEPTH == 2:
            f1 = f2
            f2 = gemv_fetch(QTYPE, row, c + 2, rmask & (c + 2 < c1), K)
        else:
            f1 = f2
            f2 = f3
            f3 = gemv_fetch(QTYPE, row, c + 3, rmask & (c + 3 < c1), K)
        dec = gemv_decode(QTYPE, raw, row, c, rmask, K, grid_ptr, PTX)
        acc0 += gemv_dot(QTYPE, dec, xc, True, K, c)
        if TP > 1:
            acc1 += gemv_dot(QTYPE, dec, xc + x_stride, 1 < T, K, c)
        if TP > 2:
            acc2 += gemv_dot(QTYPE, dec, xc + 2 * x_stride, 2 < T, K, c)
            acc3 += gemv_dot(QTYPE, dec, xc + 3 * x_stride, 3 < T, K, c)
        if TP > 4:
            acc4 += gemv_dot(QTYPE, dec, xc + 4 * x_stride, 4 < T, K, c)
            acc5 += gemv_dot(QTYPE, dec, xc + 5 * x_stride, 5 < T, K, c)
            acc6 += gemv_dot(QTYPE, dec, xc + 6 * x_stride, 6 < T, K, c)
            acc7 += gemv_dot(QTYPE, dec, xc + 7 * x_stride, 7 < T, K, c)
        xc += 256
    if PDL:
        if PTX:
            tl.extra.cuda.gdc_launch_dependents()                       # no weight read left to issue
    dst = out_ptr + pid_k * out_split_stride
    _gemv_store(dst, acc0, 0, T, rows, OUT)
    if TP > 1:
        _gemv_store(dst, acc1, 1, T, rows, OUT)
    if TP > 2:
        _gemv_store(dst, acc2, 2, T, rows, OUT)
        _gemv_store(dst, acc3, 3, T, rows, OUT)
    if TP > 4:
        _gemv_store(dst, acc4, 4, T, rows, OUT)
        _gemv_store(dst, acc5, 5, T, rows, OUT)
        _gemv_store(dst, acc6, 6, T, rows, OUT)
        _gemv_store(dst, acc7, 7, T, rows, OUT)
    if LASTBLOCK:
        if arrive(cnt_ptr, pid_r, tl.num_programs(1)):
            _combine_rows(out_ptr, y_ptr, T, OUT, out_split_stride, tl.num_programs(1), rows, TP, R)
            depart(cnt_ptr, pid_r)


@triton.jit
def _combine_kernel(part_ptr, y_ptr, N, SPLITS, BLOCK: tl.constexpr):
    """y[i] = sum_s part[s, i] in order s = 0, 1, ... (deterministic), cast to y's dtype."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    acc = tl.zeros([BLOCK], tl.float32)
    for s in range(0, SPLITS):
        acc += tl.load(part_ptr + s * N + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def dot_acc(a, w, acc, BF16_DOT: tl.constexpr, INTERPRETED: tl.constexpr):
    """acc + a @ w^T on the tensor cores, float32 accumulation; a [M, K], w [N, K] float32 values.
    BF16_DOT: bfloat16 operands; else tf32x3 (three tf32 products: about float32 accuracy)."""
    if BF16_DOT and INTERPRETED:  # Triton 3.6's interpreter multiplies bf16 bit patterns in tl.dot
        return tl.dot(round_bf16(a), tl.trans(round_bf16(w)), acc, input_precision="ieee")
    elif BF16_DOT:
        return tl.dot(a.to(tl.bfloat16), tl.trans(w.to(tl.bfloat16)), acc)
    else:
        return tl.dot(a, tl.trans(w), acc, input_precision="tf32x3")


@triton.jit
def _gemm_kernel(x_ptr, w_ptr, grid_ptr, y_ptr, T, K, OUT, w_stride, x_stride, y_stride, n_chunks,
                 QTYPE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BF16_DOT: tl.constexpr,
                 INTERPRETED: tl.constexpr):
    """y[m, n] for a [BM, BN] tile: decode W[n, chunk] ([BN, 256]) per step, tl.dot with x[m, chunk]."""
    pid_n = tl.program_id(0)  # output rows vary fastest: neighbouring programs share the x tile in L2
    pid_m = tl.program_id(1)
    n = pid_n * BN + tl.arange(0, BN)                                   # [BN]
    m = pid_m * BM + tl.arange(0, BM)                                   # [BM]
    nmask = (n < OUT)[:, None, None]
    row = w_ptr + (n.to(tl.int64) * w_stride)[:, None, None]            # [BN, 1, 1]
    xrow = x_ptr + (m.to(tl.int64) * x_stride)[:, None]                 # [BM, 1]
    mmask = (m < T)[:, None]
    acc = tl.zeros([BM, BN], tl.float32)
    for c in range(0, n_chunks):
        q, a, b, k, ok = decode_chunk(QTYPE, row, c, nmask, K, grid_ptr)
        w = values(q, a, b).reshape(BN, 256)                           # [BN, 256]
        kk = k.reshape(1, 256)
        xv = tl.load(xrow + kk, mask=mmask & ok.reshape(1, 256), other=0.0)  # [BM, 256]
        acc = dot_acc(xv.to(tl.float32), w, acc, BF16_DOT, INTERPRETED)
    dst = y_ptr + (m.to(tl.int64) * y_stride)[:, None] + n[None, :]
    tl.store(dst, acc.to(y_ptr.dtype.element_ty), mask=mmask & (n < OUT)[None, :])


# ----------------------------------------------------------------------------------------------
# host side
# ----------------------------------------------------------------------------------------------

_GRIDS: dict[str, torch.Tensor] = {}


def iq1s_grid_on(device: torch.device) -> torch.Tensor:
    """IQ1_S's grid on `device` (uploaded once per device): int32 [2048 * 4], entry e's 8 values
    {-1, 0, 1} as bfloat16 bit patterns, two per word (value 2i in the low half of word 4e + i)."""
    key = str(device)
    g = _GRIDS.get(key)
    if g is None:
        import numpy as np

        from sparkops.gguf.quants import iq1s_grid

        bf16 = (iq1s_grid().astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # [2048, 8], exact
        words = np.ascontiguousarray(bf16).view(np.int32).reshape(-1)                     # little-endian pairs
        g = torch.from_numpy(words.copy()).to(device)
        _GRIDS[key] = g
    return g


def weight_rows(op: str, name: str, weight: QWeight) -> torch.Tensor:
    """The weight's stored data as a tensor whose last dim is contiguous (what the kernels index)."""
    if not isinstance(weight, QWeight):
        raise BadInput(f"{op}: '{name}' is a {type(weight).__name__}; pass a sparkops.qweight.QWeight")
    raw = weight.raw
    if raw.stride(-1) != 1:
        raise BadInput(f"{op}: '{name}' stores its rows with stride {raw.stride(-1)} along the last dim; "
                       f"pass a QWeight whose raw data is contiguous (QWeight(raw.contiguous(), ...))")
    return raw


def grid_for(weight: QWeight, raw: torch.Tensor) -> torch.Tensor:
    """The pointer the kernels take for the IQ1_S grid (any tensor on the device for other types)."""
    return iq1s_grid_on(raw.device) if int(weight.qtype) == int(IQ1_S.value) else raw


def grid_for_any(weights, raw: torch.Tensor) -> torch.Tensor:
    """The IQ1_S grid if any of `weights` (QWeights or None) is IQ1_S, else `raw` (a placeholder pointer)."""
    if any(w is not None and int(w.qtype) == int(IQ1_S.value) for w in weights):
        return iq1s_grid_on(raw.device)
    return raw


def gemv_qtype(qtype: int) -> int:
    """The QTYPE constexpr a GEMV kernel gets for a weight of type `qtype`: the type itself, or the pseudo
    type Q6_K_WIDE for Q6_K when Q6K_WIDE_LOADS is set (read at each call, so a study or a test can flip it)."""
    if int(qtype) == int(Q6_K.value) and Q6K_WIDE_LOADS:
        return int(Q6_K_WIDE.value)
    return int(qtype)


def gemv_flat_qtype(qtype: int, flat: bool) -> int:
    """The QTYPE constexpr of a GEMV: Q4_K_FLAT for Q4_K when `flat` ("triton_flat"), else `gemv_qtype`'s (the other
    types keep their decoders, Q6K_WIDE_LOADS included)."""
    return int(Q4_K_FLAT.value) if flat and int(qtype) == int(Q4_K.value) else gemv_qtype(qtype)


def gemv_plan(qtype: int, t: int, out_features: int, n_chunks: int, device: torch.device,
              flat: bool = False) -> tuple[int, int, int, int]:
    """(R, warps, splits, chunks per split) for a GEMV: enough programs to fill every SM GEMV_PROGRAMS_PER_SM times.
    `flat`: the flat Q4_K GEMV's tile (GEMV_FLAT_CONFIG) for a Q4_K weight."""
    flat_q4k = flat and int(qtype) == int(Q4_K.value)
    base, fewest, warps = GEMV_FLAT_CONFIG if flat_q4k else GEMV_CONFIG[int(qtype)]
    rows = max(fewest, base // next_pow2(t))
    tiles = cdiv(out_features, rows)
    want = GEMV_PROGRAMS_PER_SM * sm_count(device)
    splits = 1 if tiles >= want else min(n_chunks, cdiv(want, tiles))
    per = cdiv(n_chunks, splits)
    return rows, warps, cdiv(n_chunks, per), per


def run_gemv(x: torch.Tensor, raw: torch.Tensor, qtype: int, grid: torch.Tensor, y: torch.Tensor,
             lastblock: bool = False, pdl: bool = False, depth: int = 1, flat: bool = False) -> None:
    """y[T, OUT] = x[T, K] @ W^T for T <= GEMV_MAX_T; raw is the 2-D stored weight [OUT, row units].

    Split-K: `_combine_kernel` adds the partials in a second launch, or with `lastblock` the GEMV's last
    program per row tile does (same sums, same order: the same bits, one launch). `pdl` (with `lastblock`,
    so the GEMV is one launch): launched with programmatic dependent launch (`_gemv_kernel`'s PDL; compiled
    kernels only, the interpreter runs the same arithmetic without the griddepcontrol instructions). `depth`: chunks
    of weight loads in flight per program (1, 2, 3; the same bits at every depth). `flat`: Q4_K weights through the
    flat GEMV form (`_dequant.Q4_K_FLAT`, its own tile GEMV_FLAT_CONFIG; other sums, so other bits)."""
    if depth not in (1, 2, 3):
        raise BadInput(f"linear: a GEMV keeps 1, 2 or 3 chunks of weight loads in flight, not {depth!r} "
                       f"(linear.FETCH_DEPTH)")
    if pdl and not lastblock:
        raise BadInput("linear: the PDL GEMV is the last-block one (a second combine launch would follow it "
                       "without PDL); pass lastblock=True with pdl=True")
    t, k = x.shape
    out_features = raw.shape[0]
    n_chunks = cdiv(k, 256)
    rows, warps, splits, per = gemv_plan(qtype, t, out_features, n_chunks, x.device, flat)
    tiles = cdiv(out_features, rows)
    tp = next_pow2(t)
    # the launch shape stays the stored type's (GEMV_CONFIG, or GEMV_FLAT_CONFIG); the decoder may differ
    qt = gemv_flat_qtype(qtype, flat)
    # the pool exists after any last-block call on the device, split or not (warm-up before graph capture)
    cnt = counters("linear", x.device, tiles if splits > 1 else 0) if lastblock else y
    ptx = not interpreting()
    launch = {"launch_pdl": True} if pdl and ptx else {}  # the interpreter knows no launch_pdl
    if splits == 1:
        _gemv_kernel[(tiles, 1)](
            x, raw, grid, y, y, cnt, t, k, out_features, raw.stride(0), x.stride(0), 0, n_chunks, per,
            QTYPE=qt, TP=tp, R=rows, SA=gemv_cols(qt), PTX=ptx, LASTBLOCK=False, PDL=pdl, DEPTH=depth,
            num_warps=warps, **launch)
        return
    part = torch.empty((splits, t, out_features), dtype=torch.float32, device=x.device)  # [splits, T, OUT]
    _gemv_kernel[(tiles, splits)](
        x, raw, grid, part, y, cnt, t, k, out_features, raw.stride(0), x.stride(0), part.stride(0), n_chunks, per,
        QTYPE=qt, TP=tp, R=rows, SA=gemv_cols(qt), PTX=ptx, LASTBLOCK=lastblock, PDL=pdl, DEPTH=depth,
        num_warps=warps, **launch)
    if not lastblock:
        n = t * out_features
        _combine_kernel[(cdiv(n, 1024),)](part, y, n, splits, BLOCK=1024, num_warps=4)


def run_gemm(x: torch.Tensor, raw: torch.Tensor, qtype: int, grid: torch.Tensor, y: torch.Tensor, bf16: bool) -> None:
    t, k = x.shape
    out_features = raw.shape[0]
    _gemm_kernel[(cdiv(out_features, GEMM_BN), cdiv(t, GEMM_BM))](
        x, raw, grid, y, t, k, out_features, raw.stride(0), x.stride(0), y.stride(0), cdiv(k, 256),
        QTYPE=int(qtype), BM=GEMM_BM, BN=GEMM_BN, BF16_DOT=bf16, INTERPRETED=interpreting(), num_warps=GEMM_WARPS,
        num_stages=1 if raw.is_floating_point() else 2)  # float weight tiles are 64 KB: one stage fits


def run_dqmm(x: torch.Tensor, raw: torch.Tensor, qtype: int, grid: torch.Tensor, y: torch.Tensor) -> None:
    """y[T, OUT] = x[T, K] @ W^T for prefill ("triton_dqmm"): W decoded once to bfloat16 (`dequantize_bf16`), then
    one cuBLAS GEMM on bfloat16 operands with float32 accumulation; its bfloat16 result is widened into y."""
    w = dequantize_bf16(raw, qtype, grid, x.shape[1])                  # [OUT, K] bf16
    y.copy_(torch.matmul(x.to(torch.bfloat16), w.t()))                 # [T, OUT]


def _linear(x: torch.Tensor, weight: QWeight, bf16: bool, lastblock: bool = False, pdl: bool = False,
            depth: int = 1, flat: bool = False, dqmm: bool = False) -> torch.Tensor:
    op = "linear"
    expect(op, "x", x, (None, None), "[T, IN]")
    expect_dtype(op, "x", x, FLOATS)
    raw = weight_rows(op, "weight", weight)
    if len(weight.shape) != 2:
        raise BadInput(f"linear: 'weight' has shape {list(weight.shape)}, expected a 2-D [OUT, IN] weight; "
                       f"index a stacked weight first (weight[e])")
    out_features, in_features = weight.shape
    if x.shape[1] != in_features:
        raise BadInput(f"linear: 'x' has {x.shape[1]} features but the weight takes {in_features} "
                       f"(weight shape {list(weight.shape)}); pass x of shape [T, {in_features}]")
    expect_device(op, x=x, weight=raw)
    x = x.contiguous()
    t = x.shape[0]
    y = torch.empty((t, out_features), dtype=x.dtype, device=x.device)  # [T, OUT]
    if t == 0 or out_features == 0:
        return y
    if in_features == 0:
        return y.zero_()
    grid = grid_for(weight, raw)
    if t <= GEMV_MAX_T:
        run_gemv(x, raw, weight.qtype, grid, y, lastblock, pdl, depth, flat)
    elif dqmm:
        run_dqmm(x, raw, weight.qtype, grid, y)
    else:
        run_gemm(x, raw, weight.qtype, grid, y, bf16)
    return y


def linear(x, weight):
    """Implementation "triton": fp32 GEMV for T <= 8, bf16 tensor-core GEMM above (claim "bf16")."""
    return _linear(x, weight, bf16=True)


def linear_fp32(x, weight):
    """Implementation "triton_fp32": fp32 GEMV for T <= 8, tf32x3 tensor-core GEMM above (claim fp32)."""
    return _linear(x, weight, bf16=False)


def linear_lastblock(x, weight):
    """Implementation "triton_lastblock": "triton" with the split-K GEMV's partials added by its own last
    program per row tile instead of a second launch. Claim: bit-identical to "triton" (whose "bf16"
    claim it inherits)."""
    return _linear(x, weight, bf16=True, lastblock=True)


def linear_pdl(x, weight):
    """Implementation "triton_pdl": "triton_lastblock" with the decode GEMV launched with programmatic dependent
    launch (Hopper; `_gemv_kernel`'s PDL): each GEMV fetches its first weight chunk while the previous kernel of
    the stream finishes. PDL changes no arithmetic, so the claim is bit-identity to "triton_lastblock"; the
    prefill GEMM is "triton_lastblock"'s. An experiment, selected by no registry by default: proven in the
    interpreter (without the griddepcontrol instructions) and compiled for sm_90; the GPU tests time it."""
    return _linear(x, weight, bf16=True, lastblock=True, pdl=True)


def linear_prefetch(x, weight):
    """Implementation "triton_prefetch": "triton_lastblock" with FETCH_DEPTH chunks of weight loads in flight per
    decode GEMV program instead of one (the lm_head's programs stream 9 chunks each; a split GEMV's 2 or 3). The
    loads move, the arithmetic does not: claim bit-identical to "triton_lastblock"; prefill is its GEMM."""
    return _linear(x, weight, bf16=True, lastblock=True, depth=FETCH_DEPTH)


def linear_flat(x, weight):
    """Implementation "triton_flat": "triton_lastblock" with Q4_K weights through the flat GEMV form
    (`_dequant.Q4_K_FLAT`). Compiled for sm_90, the byte-form Q4_K GEMV's loop changes layout 8 times a chunk (16
    barriers): the activations, the sub-block sums and the scales each live in a layout of their own. In the flat
    form every tensor of a chunk is [32 words, R rows] in one layout (single-word loads, the header's scale bytes
    unpacked per word, the activations broadcast along the rows), nothing crosses threads until the final row sum,
    and the loop has no barrier. Other sums than
    "triton"'s, so no bit-identity: claim "bf16" (its prefill GEMM's); the GEMV alone is float32 arithmetic.

    Measured on the H200 (session 8, bench/gpu-runs/2026-11-30-session8): slower, not faster. A token's Q4_K
    projections (14 MiB, the tune study linear_gemv_flat) took 37.5-40.9 us over its tiles against 34.2 us for
    "triton_lastblock". No registry selects it: it stays as the record that the barriers were not what bound."""
    return _linear(x, weight, bf16=True, lastblock=True, flat=True)


def linear_dqmm(x, weight):
    """Implementation "triton_dqmm": decode as "triton_lastblock" (the same GEMVs); prefill (T > GEMV_MAX_T) decodes
    the weight once to bfloat16 and multiplies on cuBLAS (`run_dqmm`) instead of decoding a weight tile per tile of
    tokens. bf16 operands like "triton"'s GEMM but another order of sums and a bf16-rounded product: claim "bf16"."""
    return _linear(x, weight, bf16=True, lastblock=True, dqmm=True)
