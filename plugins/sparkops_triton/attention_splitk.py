"""attention in Triton, split over the context (flash-decoding) for decode; prefill as `attention`.

Three implementations share this code:
  "triton_splitk"  `attention_splitk`: products on the cache's 16-bit dtype (tf32 for a float32 cache),
                   claim "bf16" (the fast one for a bf16 registry).
  "triton_splitk_wide"  `attention_splitk_wide`: "triton_splitk" with its decode combine spread wider (step 3
                   below), claimed bit-identical to "triton_splitk"; prefill is "triton_splitk"'s.
  "triton_fp32"    `attention_splitk_fp32`: every operand float32 and every tl.dot in tf32x3 (three tf32
                   products, about float32 accuracy), in decode and prefill alike (`fp32=True` down to
                   `attention_prefill`), claim float32. Why: the 48B model gate refuses a bf16 attention,
                   so a float32 registry needs a fast float32-accurate one (prefill above all: long contexts).

Decode (T = 1), four launches:
  1. `_write_rows_kernel` (shared): stores the new latent row into cache[pos]; `_absorb_kernel` (shared):
     q_lat[h] = w_uk[h]^T q_nope[h] for all heads (float32 FMA), stored in the operand dtype.
  2. `_split_kernel`: program j takes context rows [j*chunk, (j+1)*chunk) of the L = pos+1 rows for
     ALL heads at once: every latent row is read from memory once (all 32 heads share it, MQA-like),
     scores = Q_lat C^T + Q_pe K_pe^T ([N, rows], tensor cores), online softmax, acc = P C [N, Lkv];
     writes (max, sum, acc) per head. The split count fills the SMs; the chunk length is computed in
     the kernel from pos, so it tracks the real context, not the cache size. "triton_fp32" runs it on
     groups of 16 heads (programs (split, group)) with the scores in 64-wide slices (`sliced_dot`):
     tf32x3 holds its operands and a second accumulator in registers, and all 32 heads would spill.
  3. `_combine_kernel`: per head, merges the splits' partial softmax states and lifts the result with
     w_uv[h] ([Dv, Lkv] float32).
     "triton_splitk_wide": programs (head, row group), COMBINE_GROUPS groups of w_uv[h]'s rows (48B: 32 x 4 =
     128 programs instead of 32); each merges its head's splits exactly as above (the merge is repeated per
     group) and lifts its rows only. A split that got no rows (short contexts: at pos 0 all but one of 132)
     stores its max (-inf) and sum (0) but not its acc (SKIP_EMPTY), and the combine masks that acc's load
     off, knowing the empty splits from pos as the split kernel does (not from max = -inf, which a split with
     rows may also hold on non-finite inputs): triton_splitk stored +0.0 there (the untouched tl.zeros) and
     loaded it, the masked load gives +0.0, and both multiply it by the same weight, whatever that is. The max
     over the splits is unrolled (its loads independent). Why: at depth 0 the 48B's decode spent ~49 us per
     layer here (H200), 32 programs each waiting on ~34 dependent memory round trips, and 8.6 MB of empty acc
     written and read. Cost: once every split holds rows (long contexts) each group re-reads its head's acc,
     COMBINE_GROUPS x 8.6 MB of reads (just written: mostly L2) instead of 8.6 MB.
Bytes per step at context L: L x 576 x 2 (bf16 cache, the shared latent counted once; x 4 for a float32
cache) + w_uk and w_uv (2 x 8 MiB float32 at 48B sizes) + partials (splits x N x Lkv x 4, written and read
once).
"""

import torch
import triton
import triton.language as tl

from ._runtime import cdiv, sm_count
from .attention_prefill import (absorb, check_args, dims, dot_precision, operand_dtype, prefill, sliced_dot,
                                write_rows)

SPLITS_PER_SM = 1
BLOCK_ROWS = 32  # cache rows per iteration of a split program
SPLIT_WARPS, SPLIT_STAGES = 8, 3  # 158 registers, 110 KiB shared memory (ptxas, sm_90)
# "triton_fp32", from ptxas reports alone (not timed yet): 16 heads per program (tf32x3 keeps a second
# [heads, Lkv] accumulator for its small products), 16 rows per step, the scores in 64-wide slices:
# 255 registers, no spills, 104 KiB shared memory (sm_90)
FP32_HEADS, FP32_BLOCK_ROWS, FP32_SPLIT_WARPS, FP32_SPLIT_STAGES, FP32_SPLIT_KC = 16, 16, 8, 1, 64
COMBINE_SP, COMBINE_BD = 16, 8  # the combine's splits per step and w_uv rows per step (all implementations)
#: "triton_splitk_wide": row groups per head in the combine (48B: Dv 128 -> 4 x 32 rows, 32 x 4 = 128 programs)
COMBINE_GROUPS = 4


@triton.jit
def _split_kernel(qlat_ptr, q_ptr, cache_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr, N, DN, R, LKV, QDIM, WROW, scale,
                  NP: tl.constexpr, BL: tl.constexpr, LKP: tl.constexpr, RP: tl.constexpr, OPD: tl.constexpr,
                  PREC: tl.constexpr = None, KC: tl.constexpr = 0, GROUPED: tl.constexpr = False,
                  SKIP_EMPTY: tl.constexpr = False):
    j = tl.program_id(0)
    n_split = tl.num_programs(0)
    length = tl.load(pos_ptr).to(tl.int32) + 1  # rows 0..pos, the new one included
    chunk = tl.cdiv(tl.cdiv(length, n_split), BL) * BL
    start = j * chunk
    end = tl.minimum(start + chunk, length)
    hh = tl.arange(0, NP)
    if GROUPED:  # program (j, g) takes heads g*NP .. g*NP+NP-1 (else one program per split takes all)
        hh = tl.program_id(1) * NP + hh
    h_ok = hh < N
    lk = tl.arange(0, LKP)
    lk_ok = lk < LKV
    rp = tl.arange(0, RP)
    rp_ok = rp < R
    q_lat = tl.load(qlat_ptr + hh[:, None] * LKP + lk[None, :], mask=h_ok[:, None], other=0.0)  # [NP, LKP] OPD
    q_pe = tl.load(q_ptr + hh[:, None] * QDIM + DN + rp[None, :], mask=h_ok[:, None] & rp_ok[None, :],
                   other=0.0).to(OPD)  # [NP, RP]
    m_i = tl.full((NP,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((NP,), dtype=tl.float32)
    acc = tl.zeros((NP, LKP), dtype=tl.float32)
    bl = tl.arange(0, BL)
    for s0 in range(start, end, BL):
        s = s0 + bl
        s_ok = s < end
        srow = s[:, None].to(tl.int64) * WROW
        c = tl.load(cache_ptr + srow + lk[None, :], mask=s_ok[:, None] & lk_ok[None, :], other=0.0).to(OPD)
        kpe = tl.load(cache_ptr + srow + LKV + rp[None, :], mask=s_ok[:, None] & rp_ok[None, :],
                      other=0.0).to(OPD)
        if KC == 0:
            sc = (tl.dot(q_lat, tl.trans(c), input_precision=PREC)
                  + tl.dot(q_pe, tl.trans(kpe), input_precision=PREC)) * scale  # [NP, BL]
        else:
            sc = sliced_dot(tl.zeros((NP, BL), dtype=tl.float32), qlat_ptr + hh * LKP, h_ok, LKP,
                            cache_ptr + s.to(tl.int64) * WROW, s_ok, LKV, LKP, KC, OPD, PREC)
            sc = sliced_dot(sc, q_ptr + hh * QDIM + DN, h_ok, R, cache_ptr + s.to(tl.int64) * WROW + LKV, s_ok, R,
                            RP, KC, OPD, PREC) * scale
        sc = tl.where(s_ok[None, :], sc, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(sc, axis=1))  # finite: every block holds a visible row
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(sc - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(OPD), c, input_precision=PREC)
        m_i = m_new
    part = j * N + hh  # [NP] partial index (split, head)
    tl.store(m_ptr + part, m_i, mask=h_ok)
    tl.store(l_ptr + part, l_i, mask=h_ok)
    acc_ok = h_ok[:, None]
    if SKIP_EMPTY:  # an empty split's acc (all +0.0) is not stored: the wide combine masks its loads off
        acc_ok = acc_ok & (start < end)
    tl.store(acc_ptr + part[:, None].to(tl.int64) * LKP + lk[None, :], acc, mask=acc_ok)


@triton.jit
def _combine_kernel(m_ptr, l_ptr, acc_ptr, wuv_ptr, o_ptr, N, DV, LKV, n_split, SP: tl.constexpr,
                    LKP: tl.constexpr, BD: tl.constexpr, pos_ptr=None, BL: tl.constexpr = 0, ROWS: tl.constexpr = 0,
                    NS: tl.constexpr = 0):
    """Head h's splits merged, o_lat lifted by w_uv[h]. The switches ("triton_splitk_wide"; off, the kernel is
    "triton_splitk"'s): BL > 0, the splits the split kernel found empty (its `start >= end`, from pos and BL) have
    their acc loads masked off (SKIP_EMPTY left them unwritten; they held +0.0, the mask's `other`); ROWS > 0,
    program (h, g) lifts rows [g*ROWS, (g+1)*ROWS) of w_uv[h] only; NS > 0, the split count is NS (= n_split)
    and the max loop is unrolled. Each changes which loads run, never an operation on a loaded value."""
    h = tl.program_id(0)
    sp = tl.arange(0, SP)
    m_all = tl.full((SP,), float("-inf"), dtype=tl.float32)
    if NS > 0:  # the max loop unrolled: its loads independent of one another
        for j0 in tl.static_range(0, NS, SP):
            m_all = tl.maximum(m_all, tl.load(m_ptr + (j0 + sp) * N + h, mask=j0 + sp < NS, other=float("-inf")))
    else:
        for j0 in range(0, n_split, SP):  # the global max over the splits
            m_all = tl.maximum(m_all, tl.load(m_ptr + (j0 + sp) * N + h, mask=j0 + sp < n_split,
                                              other=float("-inf")))
    m_top = tl.max(m_all, axis=0)
    if BL > 0:  # the split kernel's chunk: split j holds rows iff j * chunk < length
        length = tl.load(pos_ptr).to(tl.int32) + 1
        chunk = tl.cdiv(tl.cdiv(length, n_split), BL) * BL
    lk = tl.arange(0, LKP)
    total = tl.zeros((SP,), dtype=tl.float32)
    o_lat = tl.zeros((LKP,), dtype=tl.float32)
    for j0 in range(0, n_split, SP):
        ok = j0 + sp < n_split
        part = (j0 + sp) * N + h
        m_j = tl.load(m_ptr + part, mask=ok, other=float("-inf"))
        wgt = tl.exp(m_j - m_top)  # 0 for empty splits (max -inf)
        total += wgt * tl.load(l_ptr + part, mask=ok, other=0.0)
        a_ok = ok
        if BL > 0:
            a_ok = ok & ((j0 + sp) * chunk < length)
        a = tl.load(acc_ptr + part[:, None].to(tl.int64) * LKP + lk[None, :], mask=a_ok[:, None], other=0.0)
        o_lat += tl.sum(a * wgt[:, None], axis=0)
    o_lat = o_lat / tl.sum(total, axis=0)
    dd = tl.arange(0, BD)
    v_lo = 0
    v_hi = DV
    if ROWS > 0:  # this program's rows of w_uv[h]
        v_lo = tl.program_id(1) * ROWS
        v_hi = tl.minimum(v_lo + ROWS, DV)
    for v0 in range(v_lo, v_hi, BD):
        v_ok = v0 + dd < v_hi
        w = tl.load(wuv_ptr + (h * DV + v0 + dd)[:, None].to(tl.int64) * LKV + lk[None, :],
                    mask=v_ok[:, None] & (lk < LKV)[None, :], other=0.0).to(tl.float32)  # [BD, LKP]
        tl.store(o_ptr + h * DV + v0 + dd, tl.sum(w * o_lat[None, :], axis=1).to(o_ptr.dtype.element_ty), mask=v_ok)


def decode_splitk(q, latent, cache, pos, w_uk, w_uv, scale, n_split=None, fp32=False, wide=False):
    _, n, qdim = q.shape
    _, dn, lkv = w_uk.shape
    dv = w_uv.shape[1]
    r = qdim - dn
    _, rp, lkp, _ = dims(dn, r, lkv, dv)
    dev = q.device
    q = q.contiguous()
    opd, tl_opd = operand_dtype(cache, fp32)
    write_rows(latent, cache, pos)
    qlat = absorb(q, w_uk, pos, lkp, False, opd)  # [1, N, LKP]
    np_ = max(16, 1 << (n - 1).bit_length())  # heads per program: all of them, or FP32_HEADS
    np_ = min(np_, FP32_HEADS) if fp32 else np_
    groups = -(-n // np_)
    n_split = n_split or max(1, SPLITS_PER_SM * sm_count(dev) // groups)
    m = torch.empty((n_split, n), dtype=torch.float32, device=dev)
    l_sum = torch.empty((n_split, n), dtype=torch.float32, device=dev)
    acc = torch.empty((n_split, n, lkp), dtype=torch.float32, device=dev)
    if fp32:
        bl, warps, stages, kc = FP32_BLOCK_ROWS, FP32_SPLIT_WARPS, FP32_SPLIT_STAGES, FP32_SPLIT_KC
    else:
        bl, warps, stages, kc = BLOCK_ROWS, SPLIT_WARPS, SPLIT_STAGES, 0
    _split_kernel[(n_split, groups)](qlat, q, cache, pos, m, l_sum, acc, n, dn, r, lkv, qdim, lkv + r, float(scale),
                                     NP=np_, BL=bl, LKP=lkp, RP=rp, OPD=tl_opd, PREC=dot_precision(fp32), KC=kc,
                                     GROUPED=groups > 1, SKIP_EMPTY=wide, num_warps=warps, num_stages=stages)
    out = torch.empty((1, n, dv), dtype=q.dtype, device=dev)
    if wide:  # "triton_splitk_wide": programs (head, row group), empty splits' acc neither written nor read
        rows = cdiv(cdiv(dv, COMBINE_GROUPS), COMBINE_BD) * COMBINE_BD
        _combine_kernel[(n, cdiv(dv, rows))](m, l_sum, acc, w_uv.contiguous(), out, n, dv, lkv, n_split,
                                             SP=COMBINE_SP, LKP=lkp, BD=COMBINE_BD, pos_ptr=pos, BL=bl, ROWS=rows,
                                             NS=n_split, num_warps=4)
    else:
        _combine_kernel[(n,)](m, l_sum, acc, w_uv.contiguous(), out, n, dv, lkv, n_split, SP=COMBINE_SP, LKP=lkp,
                              BD=COMBINE_BD, num_warps=4)
    return out


def _attention(q, latent, cache, pos, w_uk, w_uv, scale, fp32, wide=False):
    t = check_args("attention", q, latent, cache, pos, w_uk, w_uv)[0]
    if t == 1:
        return decode_splitk(q, latent, cache, pos, w_uk, w_uv, scale, fp32=fp32, wide=wide)
    if t == 0:
        return torch.empty((0, q.shape[1], w_uv.shape[1]), dtype=q.dtype, device=q.device)
    return prefill(q, latent, cache, pos, w_uk, w_uv, scale, fp32=fp32)


def attention_splitk(q, latent, cache, pos, w_uk, w_uv, scale):
    """Implementation "triton_splitk": split-K decode, flash prefill, 16-bit / tf32 products (claim "bf16")."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, fp32=False)


def attention_splitk_fp32(q, latent, cache, pos, w_uk, w_uv, scale):
    """Implementation "triton_fp32": the same kernels on float32 operands, tf32x3 products (claim float32)."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, fp32=True)


def attention_splitk_wide(q, latent, cache, pos, w_uk, w_uv, scale):
    """Implementation "triton_splitk_wide": "triton_splitk" with a wider decode combine (prefill is its own).

    What: the combine runs on programs (head, row group) instead of one per head: each merges its head's
    splits exactly as "triton_splitk" does and lifts COMBINE_GROUPS-th of w_uv[h]'s rows; the acc of splits
    that hold no rows is neither stored (split kernel, SKIP_EMPTY) nor loaded (masked: they held +0.0, which
    is the masked load's value); the max over the splits is unrolled (split count a constexpr).
    Why: on the H200 the 48B decode at depth 0 spent ~49 us per MLA layer in attention for ~17 MB of bytes:
    32 combine programs on 132 SMs, each a chain of ~34 dependent memory round trips (9 for the max, 9
    merging [16, 512] acc tiles, 8.6 MB mostly of empty splits, 16 over w_uv's rows), and 8.6 MB of acc
    written for empty splits.
    Claim: bit-identical to "triton_splitk": every output element gets the same operations on the same
    values in the same order; only which programs run them and which loads are skipped change.
    """
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, fp32=False, wide=True)
