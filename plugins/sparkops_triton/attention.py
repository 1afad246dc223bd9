"""attention in Triton, the plain decode form: one program per head over the whole context.

Decode (T = 1), absorbed form (spec 4), float32 arithmetic throughout (no tensor cores):
  q_lat = w_uk[h]^T q_nope                        [Lkv]
  score[s] = (q_lat . c_s + q_pe . k_pe_s) * scale over cached rows s < pos, and the new row itself
  online softmax, o_lat = sum_s p_s c_s           [Lkv]
  o = w_uv[h] o_lat                               [Dv]
The new row is read from `latent` (program 0 also stores it into cache[pos]), so the step is one
launch. Every head re-reads the whole cache: simple and correct, not fast at long context (see
`attention_splitk`). T > 1 runs the shared prefill path (`attention_prefill`, bf16 tensor cores),
which is why this implementation claims the "bf16" tolerance.
"""

import torch
import triton
import triton.language as tl

from .attention_prefill import check_args, dims, prefill


@triton.jit
def _decode_per_head_kernel(q_ptr, lat_ptr, cache_ptr, pos_ptr, wuk_ptr, wuv_ptr, o_ptr, L_MAX, DN, R, DV, LKV, QDIM,
                            WROW, scale, BL: tl.constexpr, BD: tl.constexpr, LKP: tl.constexpr, RP: tl.constexpr):
    h = tl.program_id(0)
    pos = tl.load(pos_ptr).to(tl.int32)
    lk = tl.arange(0, LKP)
    lk_ok = lk < LKV
    rp = tl.arange(0, RP)
    rp_ok = rp < R
    dd = tl.arange(0, BD)
    if h == 0:  # the new row into the cache; this launch reads it from `latent`, never from the cache
        for c0 in range(0, WROW, LKP):
            wm = (c0 + lk < WROW) & (pos < L_MAX)
            x = tl.load(lat_ptr + c0 + lk, mask=wm)
            tl.store(cache_ptr + pos.to(tl.int64) * WROW + c0 + lk, x.to(cache_ptr.dtype.element_ty), mask=wm)
    # q_lat = w_uk[h]^T q_nope, BD rows of w_uk[h] at a time
    q_lat = tl.zeros((LKP,), dtype=tl.float32)
    for d0 in range(0, DN, BD):
        d_ok = d0 + dd < DN
        qn = tl.load(q_ptr + h * QDIM + d0 + dd, mask=d_ok, other=0.0).to(tl.float32)
        w = tl.load(wuk_ptr + (h * DN + d0 + dd)[:, None].to(tl.int64) * LKV + lk[None, :],
                    mask=d_ok[:, None] & lk_ok[None, :], other=0.0).to(tl.float32)  # [BD, LKP]
        q_lat += tl.sum(w * qn[:, None], axis=0)
    q_pe = tl.load(q_ptr + h * QDIM + DN + rp, mask=rp_ok, other=0.0).to(tl.float32)
    # the new row first (it is always visible), then the cached rows 0..pos-1 in blocks of BL
    c_new = tl.load(lat_ptr + lk, mask=lk_ok, other=0.0).to(tl.float32)
    kpe_new = tl.load(lat_ptr + LKV + rp, mask=rp_ok, other=0.0).to(tl.float32)
    m_i = (tl.sum(q_lat * c_new, axis=0) + tl.sum(q_pe * kpe_new, axis=0)) * scale
    l_i = m_i * 0.0 + 1.0  # exp(score - max) of the one row seen so far
    acc = c_new
    bl = tl.arange(0, BL)
    for s0 in range(0, pos, BL):
        s = s0 + bl
        s_ok = s < pos
        srow = s[:, None].to(tl.int64) * WROW
        c = tl.load(cache_ptr + srow + lk[None, :], mask=s_ok[:, None] & lk_ok[None, :], other=0.0).to(tl.float32)
        kpe = tl.load(cache_ptr + srow + LKV + rp[None, :], mask=s_ok[:, None] & rp_ok[None, :],
                      other=0.0).to(tl.float32)
        sc = (tl.sum(c * q_lat[None, :], axis=1) + tl.sum(kpe * q_pe[None, :], axis=1)) * scale  # [BL]
        sc = tl.where(s_ok, sc, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(sc, axis=0))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(sc - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * c, axis=0)
        m_i = m_new
    o_lat = acc / l_i  # [LKP]
    for v0 in range(0, DV, BD):
        v_ok = v0 + dd < DV
        w = tl.load(wuv_ptr + (h * DV + v0 + dd)[:, None].to(tl.int64) * LKV + lk[None, :],
                    mask=v_ok[:, None] & lk_ok[None, :], other=0.0).to(tl.float32)  # [BD, LKP]
        o = tl.sum(w * o_lat[None, :], axis=1)
        tl.store(o_ptr + h * DV + v0 + dd, o.to(o_ptr.dtype.element_ty), mask=v_ok)


def decode_per_head(q, latent, cache, pos, w_uk, w_uv, scale):
    _, n, qdim = q.shape
    _, dn, lkv = w_uk.shape
    dv = w_uv.shape[1]
    r = qdim - dn
    _, rp, lkp, _ = dims(dn, r, lkv, dv)
    out = torch.empty((1, n, dv), dtype=q.dtype, device=q.device)
    bl = max(8, min(64, 8192 // lkp))  # a [BL, Lkv] float32 tile of ~8K values
    _decode_per_head_kernel[(n,)](q.contiguous(), latent.contiguous(), cache, pos, w_uk.contiguous(),
                                  w_uv.contiguous(), out, cache.shape[0], dn, r, dv, lkv, qdim, lkv + r, float(scale),
                                  BL=bl, BD=16, LKP=lkp, RP=rp, num_warps=8)
    return out


def attention(q, latent, cache, pos, w_uk, w_uv, scale):
    t = check_args("attention", q, latent, cache, pos, w_uk, w_uv)[0]
    if t == 1:
        return decode_per_head(q, latent, cache, pos, w_uk, w_uv, scale)
    if t == 0:
        return torch.empty((0, q.shape[1], w_uv.shape[1]), dtype=q.dtype, device=q.device)
    return prefill(q, latent, cache, pos, w_uk, w_uv, scale)
