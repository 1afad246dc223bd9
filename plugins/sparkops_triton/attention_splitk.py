"""attention in Triton, split over the context (flash-decoding) for decode; prefill as `attention`.

Decode (T = 1), three launches:
  1. `_absorb_kernel` (shared): q_lat[h] = w_uk[h]^T q_nope[h] for all heads, bf16; the same launch
     stores the new latent row into cache[pos].
  2. `_split_kernel`: program j takes context rows [j*chunk, (j+1)*chunk) of the L = pos+1 rows for
     ALL heads at once: every latent row is read from memory once (all 32 heads share it, MQA-like),
     scores = Q_lat C^T + Q_pe K_pe^T ([N, rows], tensor cores), online softmax, acc = P C [N, Lkv];
     writes (max, sum, acc) per head. The split count fills the SMs; the chunk length is computed in
     the kernel from pos, so it tracks the real context, not the cache size.
  3. `_combine_kernel`: per head, merges the splits' partial softmax states and lifts the result with
     w_uv[h] ([Dv, Lkv] float32).
Bytes per step at context L: L x 576 x 2 (bf16 cache, the shared latent counted once) + w_uk and w_uv
(2 x 8 MiB float32 at 48B sizes) + partials (splits x N x Lkv x 4, written and read once).
"""

import torch
import triton
import triton.language as tl

from ._runtime import sm_count
from .attention_prefill import absorb, check_args, dims, operand_dtype, prefill, write_rows

SPLITS_PER_SM = 1
BLOCK_ROWS = 32  # cache rows per iteration of a split program
SPLIT_WARPS, SPLIT_STAGES = 8, 3  # 158 registers, 110 KiB shared memory (ptxas, sm_90)


@triton.jit
def _split_kernel(qlat_ptr, q_ptr, cache_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr, N, DN, R, LKV, QDIM, WROW, scale,
                  NP: tl.constexpr, BL: tl.constexpr, LKP: tl.constexpr, RP: tl.constexpr, OPD: tl.constexpr):
    j = tl.program_id(0)
    n_split = tl.num_programs(0)
    length = tl.load(pos_ptr).to(tl.int32) + 1  # rows 0..pos, the new one included
    chunk = tl.cdiv(tl.cdiv(length, n_split), BL) * BL
    start = j * chunk
    end = tl.minimum(start + chunk, length)
    hh = tl.arange(0, NP)
    h_ok = hh < N
    lk = tl.arange(0, LKP)
    lk_ok = lk < LKV
    rp = tl.arange(0, RP)
    rp_ok = rp < R
    q_lat = tl.load(qlat_ptr + hh[:, None] * LKP + lk[None, :], mask=h_ok[:, None], other=0.0)  # [NP, LKP] bf16
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
        sc = (tl.dot(q_lat, tl.trans(c)) + tl.dot(q_pe, tl.trans(kpe))) * scale  # [NP, BL]
        sc = tl.where(s_ok[None, :], sc, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(sc, axis=1))  # finite: every block holds a visible row
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(sc - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(OPD), c)
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


def decode_splitk(q, latent, cache, pos, w_uk, w_uv, scale, n_split=None):
    _, n, qdim = q.shape
    _, dn, lkv = w_uk.shape
    dv = w_uv.shape[1]
    r = qdim - dn
    _, rp, lkp, _ = dims(dn, r, lkv, dv)
    dev = q.device
    q = q.contiguous()
    opd, tl_opd = operand_dtype(cache)
    write_rows(latent, cache, pos)
    qlat = absorb(q, w_uk, pos, lkp, False, opd)  # [1, N, LKP]
    n_split = n_split or max(1, SPLITS_PER_SM * sm_count(dev))
    m = torch.empty((n_split, n), dtype=torch.float32, device=dev)
    l_sum = torch.empty((n_split, n), dtype=torch.float32, device=dev)
    acc = torch.empty((n_split, n, lkp), dtype=torch.float32, device=dev)
    np_ = max(16, 1 << (n - 1).bit_length())
    _split_kernel[(n_split,)](qlat, q, cache, pos, m, l_sum, acc, n, dn, r, lkv, qdim, lkv + r, float(scale), NP=np_,
                              BL=BLOCK_ROWS, LKP=lkp, RP=rp, OPD=tl_opd, num_warps=SPLIT_WARPS,
                              num_stages=SPLIT_STAGES)
    out = torch.empty((1, n, dv), dtype=q.dtype, device=dev)
    _combine_kernel[(n,)](m, l_sum, acc, w_uv.contiguous(), out, n, dv, lkv, n_split, SP=16, LKP=lkp, BD=8,
                          num_warps=4)
    return out


def attention_splitk(q, latent, cache, pos, w_uk, w_uv, scale):
    t = check_args("attention", q, latent, cache, pos, w_uk, w_uv)[0]
    if t == 1:
        return decode_splitk(q, latent, cache, pos, w_uk, w_uv, scale)
    if t == 0:
        return torch.empty((0, q.shape[1], w_uv.shape[1]), dtype=q.dtype, device=q.device)
    return prefill(q, latent, cache, pos, w_uk, w_uv, scale)
