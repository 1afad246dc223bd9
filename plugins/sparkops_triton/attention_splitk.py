"""attention in Triton, split over the context (flash-decoding) for decode; prefill as `attention`.

Two implementations share this code:
  "triton_splitk"  `attention_splitk`: products on the cache's 16-bit dtype (tf32 for a float32 cache),
                   claim "bf16" (the fast one for a bf16 registry).
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
Bytes per step at context L: L x 576 x 2 (bf16 cache, the shared latent counted once; x 4 for a float32
cache) + w_uk and w_uv (2 x 8 MiB float32 at 48B sizes) + partials (splits x N x Lkv x 4, written and read
once).
"""

import torch
import triton
import triton.language as tl

from ._runtime import sm_count
from .attention_prefill import (absorb, check_args, dims, dot_precision, operand_dtype, prefill, sliced_dot,
                                write_rows)

SPLITS_PER_SM = 1
BLOCK_ROWS = 32  # cache rows per iteration of a split program
SPLIT_WARPS, SPLIT_STAGES = 8, 3  # 158 registers, 110 KiB shared memory (ptxas, sm_90)
# "triton_fp32", from ptxas reports alone (not timed yet): 16 heads per program (tf32x3 keeps a second
# [heads, Lkv] accumulator for its small products), 16 rows per step, the scores in 64-wide slices:
# 255 registers, no spills, 104 KiB shared memory (sm_90)
FP32_HEADS, FP32_BLOCK_ROWS, FP32_SPLIT_WARPS, FP32_SPLIT_STAGES, FP32_SPLIT_KC = 16, 16, 8, 1, 64


@triton.jit
def _split_kernel(qlat_ptr, q_ptr, cache_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr, N, DN, R, LKV, QDIM, WROW, scale,
                  NP: tl.constexpr, BL: tl.constexpr, LKP: tl.constexpr, RP: tl.constexpr, OPD: tl.constexpr,
                  PREC: tl.constexpr = None, KC: tl.constexpr = 0, GROUPED: tl.constexpr = False):
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
    tl.store(acc_ptr + part[:, None].to(tl.int64) * LKP + lk[None, :], acc, mask=h_ok[:, None])


@triton.jit
def _combine_kernel(m_ptr, l_ptr, acc_ptr, wuv_ptr, o_ptr, N, DV, LKV, n_split, SP: tl.constexpr,
                    LKP: tl.constexpr, BD: tl.constexpr):
    h = tl.program_id(0)
    sp = tl.arange(0, SP)
    m_all = tl.full((SP,), float("-inf"), dtype=tl.float32)
    for j0 in range(0, n_split, SP):  # the global max over the splits
        m_all = tl.maximum(m_all, tl.load(m_ptr + (j0 + sp) * N + h, mask=j0 + sp < n_split, other=float("-inf")))
    m_top = tl.max(m_all, axis=0)
    lk = tl.arange(0, LKP)
    total = tl.zeros((SP,), dtype=tl.float32)
    o_lat = tl.zeros((LKP,), dtype=tl.float32)
    for j0 in range(0, n_split, SP):
        ok = j0 + sp < n_split
        part = (j0 + sp) * N + h
        m_j = tl.load(m_ptr + part, mask=ok, other=float("-inf"))
        wgt = tl.exp(m_j - m_top)  # 0 for empty splits (max -inf)
        total += wgt * tl.load(l_ptr + part, mask=ok, other=0.0)
        a = tl.load(acc_ptr + part[:, None].to(tl.int64) * LKP + lk[None, :], mask=ok[:, None], other=0.0)
        o_lat += tl.sum(a * wgt[:, None], axis=0)
    o_lat = o_lat / tl.sum(total, axis=0)
    dd = tl.arange(0, BD)
    for v0 in range(0, DV, BD):
        v_ok = v0 + dd < DV
        w = tl.load(wuv_ptr + (h * DV + v0 + dd)[:, None].to(tl.int64) * LKV + lk[None, :],
                    mask=v_ok[:, None] & (lk < LKV)[None, :], other=0.0).to(tl.float32)  # [BD, LKP]
        tl.store(o_ptr + h * DV + v0 + dd, tl.sum(w * o_lat[None, :], axis=1).to(o_ptr.dtype.element_ty), mask=v_ok)


def decode_splitk(q, latent, cache, pos, w_uk, w_uv, scale, n_split=None, fp32=False):
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
                                     GROUPED=groups > 1, num_warps=warps, num_stages=stages)
    out = torch.empty((1, n, dv), dtype=q.dtype, device=dev)
    _combine_kernel[(n,)](m, l_sum, acc, w_uv.contiguous(), out, n, dv, lkv, n_split, SP=16, LKP=lkp, BD=8,
                          num_warps=4)
    return out


def _attention(q, latent, cache, pos, w_uk, w_uv, scale, fp32):
    t = check_args("attention", q, latent, cache, pos, w_uk, w_uv)[0]
    if t == 1:
        return decode_splitk(q, latent, cache, pos, w_uk, w_uv, scale, fp32=fp32)
    if t == 0:
        return torch.empty((0, q.shape[1], w_uv.shape[1]), dtype=q.dtype, device=q.device)
    return prefill(q, latent, cache, pos, w_uk, w_uv, scale, fp32=fp32)


def attention_splitk(q, latent, cache, pos, w_uk, w_uv, scale):
    """Implementation "triton_splitk": split-K decode, flash prefill, 16-bit / tf32 products (claim "bf16")."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, fp32=False)


def attention_splitk_fp32(q, latent, cache, pos, w_uk, w_uv, scale):
    """Implementation "triton_fp32": the same kernels on float32 operands, tf32x3 products (claim float32)."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, fp32=True)
