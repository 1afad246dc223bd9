"""MLA attention in Triton: the pieces the attention implementations share, and the prefill path (T > 1).

`pos` stays in device memory: every kernel reads it, none of this code synchronizes the host.

Prefill (spec 4), for T new tokens at absolute positions pos .. pos+T-1:
  1. `_write_rows_kernel`: cache[pos + t] = latent[t].
  2. `_absorb_kernel`: q_lat[t, h] = w_uk[h]^T q_nope[t, h] (short calls with pos > 0: it serves step 4's
     absorbed form).
  3. `_project_kernel`: for the NEW rows only, k_nope[t, h] = w_uk[h] c_t and v[t, h] = w_uv[h] c_t.
  4. the history: queries against the rows cached BEFORE this call (0 .. pos-1), giving a partial softmax
     state (running max, sum, accumulator) per (token, head); with pos = 0 the empty state. Two forms:
     - T < NAIVE_HISTORY_MIN_T (short calls): `_history_kernel`, absorbed form (scores in latent space, so
       old rows need no projection; the latent accumulator is lifted by w_uv);
     - T >= NAIVE_HISTORY_MIN_T (chunked prefill at depth): `_project_kernel` projects the cached rows
       into naive form (up to the cache's end, rows past pos skipped on the device), then
       `_history_naive_kernel` attends over them like the flash kernel without a causal mask.
     Why two: the absorbed form costs ~5.6k FLOPs per (query, row, head) (576-wide scores, recomputed for
     each of Lkv/VC accumulator slices) and reads every history row once per 16 queries; the naive form
     costs 640 plus the projection, ~262k per (row, head) shared by all T queries, so it wins from T ~ 50.
     Session 4 on the H200: a 131072-token fill in 4096-token chunks slowed to ~60 s per chunk at 57k
     rows on the absorbed form (triton_fp32) and never finished.
  5. `_flash_kernel`: causal flash attention over the new rows in naive form (192-wide keys,
     128-wide values), starting from the partial state of step 4: o = acc / sum.
Softmax is float32 everywhere; the matrix products (tl.dot, float32 accumulation) come in two precisions:
  default (`fp32=False`; "triton", "triton_splitk"): operands in the cache's 16-bit dtype, else float32 on
      tf32 tensor cores (10-bit mantissas), so these claim variant "bf16";
  `fp32=True` ("triton_fp32"): every operand float32 whatever the cache holds (16-bit values widen exactly),
      every tl.dot in tf32x3 (three tf32 products: about float32 accuracy), so it claims float32 - the
      accuracy a float32 registry needs (the 48B model gate refuses bf16 attention). tf32x3 costs ~3x the
      MMA work and holds its operands in registers, so this variant launches smaller tiles and takes the
      score products in slices (`sliced_dot`; the FP32_* shapes below).

Known costs: in short calls step 2's scratch is [T, N, Lkv] (operand dtype) whether or not pos > 0 (pos is not
known on the host); in long calls the naive history's scratch is [Lmax, N, Dn+Dv] (operand dtype: 4.3 GB at the
48B's 131072 rows in float32), allocated for the cache's whole length for the same reason.
"""

import torch
import triton
import triton.language as tl

from sparkops.errors import BadInput

from ._runtime import FLOATS, cdiv, expect, expect_device, expect_dtype, next_pow2


# launch shapes (48B sizes: Dn 128, R 64, Lkv 512, Dv 128), chosen from ptxas reports and H200 timings
PROJECT_BK, PROJECT_WARPS = 32, 8
HISTORY_BN, HISTORY_VC, HISTORY_WARPS = 16, 128, 8
#: calls of at least this many new rows take the history in naive form (step 4 of the module docstring)
NAIVE_HISTORY_MIN_T = 64
#: the causal flash kernel's tile: 128 queries x 64 keys, 8 warps, 3 stages. Session 11's tune study attention_prefill
#: (H200, T = 32768 at 48B sizes, one layer): 63.7 ms at the old (64, 64, 8, 2), 28.7 ms here (~380 TFLOP/s), nmse 0
#: against the old tile (the same 64-key blocks in the same order for every query row)
FLASH_BM, FLASH_BN, FLASH_WARPS, FLASH_STAGES = 128, 64, 8, 3
# "triton_fp32" (tf32x3), from ptxas reports alone (not timed yet): a tf32x3 product holds its operands in
# registers as tf32 hi and lo parts and keeps a second accumulator, so the tiles are smaller and the score
# products run in KC-wide slices (`sliced_dot`). No spills: project 226 registers; history 170, 104 KiB of
# shared memory; flash 249, 132 KiB (sm_90)
FP32_PROJECT_BK, FP32_PROJECT_WARPS = 16, 8
FP32_HISTORY_BN, FP32_HISTORY_VC, FP32_HISTORY_KC, FP32_HISTORY_WARPS, FP32_HISTORY_STAGES = 32, 64, 64, 8, 1
FP32_FLASH_BM, FP32_FLASH_BN, FP32_FLASH_KC, FP32_FLASH_WARPS, FP32_FLASH_STAGES = 64, 16, 32, 4, 2


def check_args(op, q, latent, cache, pos, w_uk, w_uv):
    """Shapes, dtypes, devices; returns the sizes (T, N, Dn, R, Lkv, Dv)."""
    expect(op, "q", q, (None, None, None), "[T, N, Dn+R]")
    t, n, qdim = q.shape
    expect(op, "w_uk", w_uk, (n, None, None), "[N, Dn, Lkv]")
    _, dn, lkv = w_uk.shape
    expect(op, "w_uv", w_uv, (n, None, lkv), "[N, Dv, Lkv]")
    dv = w_uv.shape[1]
    r = qdim - dn
    if r < 0:
        raise BadInput(f"{op}: q has {qdim} values per head but w_uk says Dn = {dn}; q must be [q_nope ; q_pe]")
    expect(op, "latent", latent, (t, lkv + r), "[T, Lkv+R]: [normed c ; k_pe]")
    expect(op, "cache", cache, (None, lkv + r), "[Lmax, Lkv+R]")
    expect(op, "pos", pos, (1,), "a one-element position tensor")
    expect_dtype(op, "q", q, FLOATS)
    expect_dtype(op, "cache", cache, FLOATS)
    if pos.dtype not in (torch.int64, torch.int32):
        raise BadInput(f"{op}: 'pos' is {pos.dtype}; pass an int64 (or int32) tensor")
    if not cache.is_contiguous():
        raise BadInput(f"{op}: 'cache' is not contiguous, so rows cannot be written in place; allocate it contiguous")
    if t > cache.shape[0]:
        raise BadInput(f"{op}: {t} new rows do not fit a cache of {cache.shape[0]} rows; allocate the cache for "
                       f"the full context")
    expect_device(op, q=q, latent=latent, cache=cache, pos=pos, w_uk=w_uk, w_uv=w_uv)
    return t, n, dn, r, lkv, dv


def operand_dtype(cache, fp32=False):
    """(torch dtype, triton dtype) of the matrix-product operands: the cache's own 16-bit type, else float32
    (tf32 tensor cores), so a 16-bit cache is never rounded twice and a float32 one loses only tf32 bits.
    fp32=True ("triton_fp32"): float32 always, so queries, probabilities and projections are never rounded."""
    if cache.dtype in (torch.bfloat16, torch.float16) and not fp32:
        return cache.dtype, (tl.bfloat16 if cache.dtype == torch.bfloat16 else tl.float16)
    return torch.float32, tl.float32


def dot_precision(fp32):
    """The kernels' PREC (tl.dot input_precision): tf32x3 for "triton_fp32", else None (Triton's default:
    tf32 for float32 operands, native for 16-bit ones)."""
    return "tf32x3" if fp32 else None


def dims(dn, r, lkv, dv):
    """Power-of-two tile widths (>= 16, the smallest tl.dot size) for Dn, R, Lkv, Dv."""
    return tuple(max(16, next_pow2(x)) for x in (dn, r, lkv, dv))


@triton.jit
def sliced_dot(acc, a_rows, a_ok, a_width, b_rows, b_ok, b_width, W: tl.constexpr, KC: tl.constexpr,
               OPD: tl.constexpr, PREC: tl.constexpr):
    """acc + A B^T over W columns, KC at a time, each slice loaded from memory where it is used.

    a_rows [M] / b_rows [N] point at the rows' first columns; a_ok / b_ok mask rows, columns past a_width /
    b_width read 0. Why: tf32x3 holds both operands of a product in registers twice (tf32 hi and lo parts);
    a [16, 512] float32 operand per warp alone would take 512 registers per thread, a KC-wide slice fits.
    """
    kc = tl.arange(0, KC)
    for k0 in tl.static_range(0, W, KC):
        a = tl.load(a_rows[:, None] + k0 + kc[None, :], mask=a_ok[:, None] & (k0 + kc < a_width)[None, :],
                    other=0.0).to(OPD)  # [M, KC]
        b = tl.load(b_rows[:, None] + k0 + kc[None, :], mask=b_ok[:, None] & (k0 + kc < b_width)[None, :],
                    other=0.0).to(OPD)  # [N, KC]
        acc = tl.dot(a, tl.trans(b), acc, input_precision=PREC)
    return acc


@triton.jit
def _write_rows_kernel(latent_ptr, cache_ptr, pos_ptr, L_MAX, WROW, BLOCK: tl.constexpr):
    """cache[pos + t, :] = latent[t, :]; rows past the cache end are dropped (the host checks the context)."""
    t = tl.program_id(0)
    row = tl.load(pos_ptr).to(tl.int64) + t
    cols = tl.arange(0, BLOCK)
    for c0 in range(0, WROW, BLOCK):
        m = (c0 + cols < WROW) & (row < L_MAX)
        x = tl.load(latent_ptr + t.to(tl.int64) * WROW + c0 + cols, mask=m)
        tl.store(cache_ptr + row * WROW + c0 + cols, x.to(cache_ptr.dtype.element_ty), mask=m)


def write_rows(latent, cache, pos):
    t, wrow = latent.shape
    _write_rows_kernel[(t,)](latent.contiguous(), cache, pos, cache.shape[0], wrow, BLOCK=256, num_warps=2)


@triton.jit
def _absorb_kernel(q_ptr, wuk_ptr, qlat_ptr, pos_ptr, N, DN, LKV, QDIM, ONLY_WITH_HISTORY: tl.constexpr,
                   BL: tl.constexpr, BD: tl.constexpr, LKP: tl.constexpr):
    """q_lat[t, h, c] = sum_d q[t, h, d] w_uk[h, d, c] for a block of BL latent columns c (operand dtype out)."""
    th = tl.program_id(0)  # t * N + h
    h = th % N
    if ONLY_WITH_HISTORY:
        if tl.load(pos_ptr) == 0:
            return
    cols = tl.program_id(1) * BL + tl.arange(0, BL)
    c_ok = cols < LKV
    dd = tl.arange(0, BD)
    acc = tl.zeros((BL,), dtype=tl.float32)
    for d0 in range(0, DN, BD):
        d_ok = d0 + dd < DN
        qv = tl.load(q_ptr + th.to(tl.int64) * QDIM + d0 + dd, mask=d_ok, other=0.0).to(tl.float32)
        w = tl.load(wuk_ptr + (h.to(tl.int64) * DN + d0 + dd)[:, None] * LKV + cols[None, :],
                    mask=d_ok[:, None] & c_ok[None, :], other=0.0).to(tl.float32)  # [BD, BL]
        acc += tl.sum(w * qv[:, None], axis=0)
    tl.store(qlat_ptr + th.to(tl.int64) * LKP + cols, acc.to(qlat_ptr.dtype.element_ty), mask=cols < LKP)


def absorb(q, w_uk, pos, lkp, only_with_history, opd):
    """q_lat [T, N, LKP] in the operand dtype (zero past Lkv)."""
    t, n, qdim = q.shape
    _, dn, lkv = w_uk.shape
    qlat = torch.empty((t, n, lkp), dtype=opd, device=q.device)
    bl = min(lkp, 128)
    _absorb_kernel[(t * n, cdiv(lkp, bl))](q.contiguous(), w_uk.contiguous(), qlat, pos, n, dn, lkv, qdim,
                                           ONLY_WITH_HISTORY=only_with_history, BL=bl, BD=16, LKP=lkp,
                                           num_warps=4)
    return qlat


@triton.jit
def _project_kernel(lat_ptr, wuk_ptr, wuv_ptr, k_ptr, v_ptr, pos_ptr, T, N, DN, DV, LKV, WROW,
                    BM: tl.constexpr, BK: tl.constexpr, DNP: tl.constexpr, DVP: tl.constexpr, OPD: tl.constexpr,
                    PREC: tl.constexpr = None, UPTO_POS: tl.constexpr = False):
    """k[t, h] = w_uk[h] c_t, v[t, h] = w_uv[h] c_t for BM rows and one head (OPD out, [T, N, DNP|DVP]).
    UPTO_POS: only rows t < pos (the cached history; T is then the cache's length), the rest skipped."""
    h = tl.program_id(1)
    r0 = tl.program_id(0) * BM
    if UPTO_POS:
        T = tl.minimum(T, tl.load(pos_ptr).to(tl.int32))
        if r0 >= T:
            return
    rows = r0 + tl.arange(0, BM)
    r_ok = rows < T
    kk = tl.arange(0, BK)
    dn = tl.arange(0, DNP)
    dv = tl.arange(0, DVP)
    acc_k = tl.zeros((BM, DNP), dtype=tl.float32)
    acc_v = tl.zeros((BM, DVP), dtype=tl.float32)
    for c0 in range(0, LKV, BK):
        c_ok = c0 + kk < LKV
        c = tl.load(lat_ptr + rows[:, None].to(tl.int64) * WROW + c0 + kk[None, :], mask=r_ok[:, None] & c_ok[None, :],
                    other=0.0).to(OPD)  # [BM, BK]
        wk = tl.load(wuk_ptr + (h * DN + dn)[None, :].to(tl.int64) * LKV + c0 + kk[:, None],
                     mask=c_ok[:, None] & (dn < DN)[None, :], other=0.0).to(OPD)  # [BK, DNP] = w_uk[h]^T
        wv = tl.load(wuv_ptr + (h * DV + dv)[None, :].to(tl.int64) * LKV + c0 + kk[:, None],
                     mask=c_ok[:, None] & (dv < DV)[None, :], other=0.0).to(OPD)
        acc_k = tl.dot(c, wk, acc_k, input_precision=PREC)
        acc_v = tl.dot(c, wv, acc_v, input_precision=PREC)
    base = rows[:, None].to(tl.int64) * N + h
    tl.store(k_ptr + base * DNP + dn[None, :], acc_k.to(OPD), mask=r_ok[:, None])
    tl.store(v_ptr + base * DVP + dv[None, :], acc_v.to(OPD), mask=r_ok[:, None])


@triton.jit
def _history_kernel(q_ptr, qlat_ptr, cache_ptr, pos_ptr, wuv_ptr, m_ptr, l_ptr, acc_ptr, T, N, DN, R, DV, LKV,
                    QDIM, WROW, scale, BM: tl.constexpr, BN: tl.constexpr, LKP: tl.constexpr, RP: tl.constexpr,
                    DVP: tl.constexpr, VC: tl.constexpr, OPD: tl.constexpr, PREC: tl.constexpr = None,
                    KC: tl.constexpr = 0):
    """Queries of this call against cached rows 0..pos-1 (absorbed form); writes (max, sum, acc) per (t, h).

    The latent accumulator is taken VC columns at a time (recomputing the scores for each slice) and
    lifted by w_uv right away, so no [BM, Lkv] float32 accumulator or [Lkv, Dv] operand is ever held.
    KC > 0: the scores in KC-wide slices (`sliced_dot`); 0: one product over all LKP (and RP) columns.
    """
    h = tl.program_id(1)
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    r_ok = rows < T
    hist = tl.load(pos_ptr).to(tl.int32)
    lk = tl.arange(0, LKP)
    rp = tl.arange(0, RP)
    dv = tl.arange(0, DVP)
    vc = tl.arange(0, VC)
    nn = tl.arange(0, BN)
    m_i = tl.full((BM,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    out = tl.zeros((BM, DVP), dtype=tl.float32)
    if hist > 0:
        th = rows[:, None].to(tl.int64) * N + h
        q_lat = tl.load(qlat_ptr + th * LKP + lk[None, :], mask=r_ok[:, None], other=0.0)  # [BM, LKP] OPD
        q_pe = tl.load(q_ptr + th * QDIM + DN + rp[None, :], mask=r_ok[:, None] & (rp < R)[None, :],
                       other=0.0).to(OPD)  # [BM, RP]
        for v0 in range(0, LKP, VC):
            m_i = tl.full((BM,), float("-inf"), dtype=tl.float32)
            l_i = tl.zeros((BM,), dtype=tl.float32)
            acc = tl.zeros((BM, VC), dtype=tl.float32)
            for s0 in range(0, hist, BN):
                s = s0 + nn
                s_ok = s < hist
                srow = s[:, None].to(tl.int64) * WROW
                c = tl.load(cache_ptr + srow + lk[None, :], mask=s_ok[:, None] & (lk < LKV)[None, :],
                            other=0.0).to(OPD)  # [BN, LKP]
                kpe = tl.load(cache_ptr + srow + LKV + rp[None, :], mask=s_ok[:, None] & (rp < R)[None, :],
                              other=0.0).to(OPD)  # [BN, RP]
                if KC == 0:
                    sc = (tl.dot(q_lat, tl.trans(c), input_precision=PREC)
                          + tl.dot(q_pe, tl.trans(kpe), input_precision=PREC)) * scale  # [BM, BN]
                else:
                    q_rows = rows.to(tl.int64) * N + h  # [BM]
                    c_rows = cache_ptr + s.to(tl.int64) * WROW  # [BN]
                    sc = sliced_dot(tl.zeros((BM, BN), dtype=tl.float32), qlat_ptr + q_rows * LKP, r_ok, LKP,
                                    c_rows, s_ok, LKV, LKP, KC, OPD, PREC)
                    sc = sliced_dot(sc, q_ptr + q_rows * QDIM + DN, r_ok, R, c_rows + LKV, s_ok, R, RP, KC, OPD,
                                    PREC) * scale
                sc = tl.where(s_ok[None, :], sc, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(sc, axis=1))
                alpha = tl.exp(m_i - m_new)
                p = tl.exp(sc - m_new[:, None])
                l_i = l_i * alpha + tl.sum(p, axis=1)
                cv = tl.load(cache_ptr + srow + v0 + vc[None, :], mask=s_ok[:, None] & (v0 + vc < LKV)[None, :],
                             other=0.0).to(OPD)  # [BN, VC]
                acc = acc * alpha[:, None] + tl.dot(p.to(OPD), cv, input_precision=PREC)
                m_i = m_new
            wv = tl.load(wuv_ptr + (h * DV + dv)[None, :].to(tl.int64) * LKV + v0 + vc[:, None],
                         mask=(v0 + vc < LKV)[:, None] & (dv < DV)[None, :], other=0.0)  # [VC, DVP] = w_uv[h]^T slice
            out += tl.dot(acc, wv, input_precision=PREC)
    th1 = rows.to(tl.int64) * N + h
    tl.store(m_ptr + th1, m_i, mask=r_ok)
    tl.store(l_ptr + th1, l_i, mask=r_ok)
    tl.store(acc_ptr + th1[:, None] * DVP + dv[None, :], out, mask=r_ok[:, None])


@triton.jit
def _attend_block(q_nope, q_pe, q_rows, r_ok, k_ptr, v_ptr, pe_rows, s, s_ok, visible, m_i, l_i, acc, N, h, DN, R,
                  scale, BM: tl.constexpr, BN: tl.constexpr, DNP: tl.constexpr, RP: tl.constexpr,
                  DVP: tl.constexpr, OPD: tl.constexpr, PREC: tl.constexpr, KC: tl.constexpr):
    """One block of BN keys in naive form for BM queries, folded into the running softmax: scores
    [q_nope ; q_pe] . [k ; k_pe] * scale (k from k_ptr [rows, N, DNP]; k_pe at pe_rows[j] .. + R), masked to
    `visible`; returns (max, sum, acc [BM, DVP]) with the block's values (v_ptr [rows, N, DVP]) added.
    q_rows points at each query's row of q (the sliced products load their own slices: KC > 0)."""
    dn = tl.arange(0, DNP)
    rp = tl.arange(0, RP)
    dv = tl.arange(0, DVP)
    ts = s.to(tl.int64) * N + h
    if KC == 0:
        k = tl.load(k_ptr + ts[:, None] * DNP + dn[None, :], mask=s_ok[:, None], other=0.0)  # [BN, DNP]
        kpe = tl.load(pe_rows[:, None] + rp[None, :], mask=s_ok[:, None] & (rp < R)[None, :],
                      other=0.0).to(OPD)  # [BN, RP]
        sc = (tl.dot(q_nope, tl.trans(k), input_precision=PREC)
              + tl.dot(q_pe, tl.trans(kpe), input_precision=PREC)) * scale  # [BM, BN]
    else:
        sc = sliced_dot(tl.zeros((BM, BN), dtype=tl.float32), q_rows, r_ok, DN, k_ptr + ts * DNP, s_ok, DNP, DNP,
                        KC, OPD, PREC)
        sc = sliced_dot(sc, q_rows + DN, r_ok, R, pe_rows, s_ok, R, RP, KC, OPD, PREC) * scale
    sc = tl.where(visible, sc, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(sc, axis=1))  # finite: the callers' blocks each hold a visible key per row
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(sc - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    v = tl.load(v_ptr + ts[:, None] * DVP + dv[None, :], mask=s_ok[:, None], other=0.0)  # [BN, DVP]
    acc = acc * alpha[:, None] + tl.dot(p.to(OPD), v, input_precision=PREC)
    return m_new, l_i, acc


@triton.jit
def _history_naive_kernel(q_ptr, cache_ptr, k_ptr, v_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr, T, N, DN, R, LKV, QDIM,
                          WROW, scale, BM: tl.constexpr, BN: tl.constexpr, DNP: tl.constexpr, RP: tl.constexpr,
                          DVP: tl.constexpr, OPD: tl.constexpr, PREC: tl.constexpr = None, KC: tl.constexpr = 0):
    """Queries of this call against cached rows 0..pos-1 in naive form: keys [k_nope ; k_pe] with k_nope
    from `_project_kernel` (UPTO_POS) and k_pe read from the cache rows, values from the projection; every
    history row is visible to every query. Writes (max, sum, acc) per (t, h), which `_flash_kernel` continues.
    KC > 0: the scores in KC-wide slices (`sliced_dot`); 0: one product over all DNP (and RP) columns."""
    h = tl.program_id(1)
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    r_ok = rows < T
    hist = tl.load(pos_ptr).to(tl.int32)
    dn = tl.arange(0, DNP)
    rp = tl.arange(0, RP)
    dv = tl.arange(0, DVP)
    nn = tl.arange(0, BN)
    th = rows.to(tl.int64) * N + h
    q_nope = tl.load(q_ptr + th[:, None] * QDIM + dn[None, :], mask=r_ok[:, None] & (dn < DN)[None, :],
                     other=0.0).to(OPD)  # [BM, DNP]
    q_pe = tl.load(q_ptr + th[:, None] * QDIM + DN + rp[None, :], mask=r_ok[:, None] & (rp < R)[None, :],
                   other=0.0).to(OPD)  # [BM, RP]
    m_i = tl.full((BM,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    acc = tl.zeros((BM, DVP), dtype=tl.float32)
    for s0 in range(0, hist, BN):
        s = s0 + nn
        s_ok = s < hist
        m_i, l_i, acc = _attend_block(q_nope, q_pe, q_ptr + th * QDIM, r_ok, k_ptr, v_ptr,
                                      cache_ptr + s.to(tl.int64) * WROW + LKV, s, s_ok, s_ok[None, :], m_i, l_i, acc,
                                      N, h, DN, R, scale, BM, BN, DNP, RP, DVP, OPD, PREC, KC)
    tl.store(m_ptr + th, m_i, mask=r_ok)
    tl.store(l_ptr + th, l_i, mask=r_ok)
    tl.store(acc_ptr + th[:, None] * DVP + dv[None, :], acc, mask=r_ok[:, None])


@triton.jit
def _flash_kernel(q_ptr, lat_ptr, k_ptr, v_ptr, m_ptr, l_ptr, acc_ptr, o_ptr, T, N, DN, R, DV, LKV, QDIM, WROW,
                  scale, BM: tl.constexpr, BN: tl.constexpr, DNP: tl.constexpr, RP: tl.constexpr,
                  DVP: tl.constexpr, OPD: tl.constexpr, PREC: tl.constexpr = None, KC: tl.constexpr = 0):
    """Causal attention of the new queries over the new rows (naive form), continuing the history's softmax.
    KC > 0: the scores in KC-wide slices (`sliced_dot`); 0: one product over all DNP (and RP) columns."""
    h = tl.program_id(1)
    q0 = tl.program_id(0) * BM
    rows = q0 + tl.arange(0, BM)
    r_ok = rows < T
    dn = tl.arange(0, DNP)
    rp = tl.arange(0, RP)
    dv = tl.arange(0, DVP)
    nn = tl.arange(0, BN)
    th = rows.to(tl.int64) * N + h
    q_nope = tl.load(q_ptr + th[:, None] * QDIM + dn[None, :], mask=r_ok[:, None] & (dn < DN)[None, :],
                     other=0.0).to(OPD)
    q_pe = tl.load(q_ptr + th[:, None] * QDIM + DN + rp[None, :], mask=r_ok[:, None] & (rp < R)[None, :],
                   other=0.0).to(OPD)
    m_i = tl.load(m_ptr + th, mask=r_ok, other=float("-inf"))
    l_i = tl.load(l_ptr + th, mask=r_ok, other=0.0)
    acc = tl.load(acc_ptr + th[:, None] * DVP + dv[None, :], mask=r_ok[:, None], other=0.0)  # [BM, DVP]
    end = tl.minimum(q0 + BM, T)
    for s0 in range(0, end, BN):
        s = s0 + nn
        s_ok = s < T
        visible = (s[None, :] <= rows[:, None]) & s_ok[None, :]  # causal: key s = t is visible to row t
        m_i, l_i, acc = _attend_block(q_nope, q_pe, q_ptr + th * QDIM, r_ok, k_ptr, v_ptr,
                                      lat_ptr + s.to(tl.int64) * WROW + LKV, s, s_ok, visible, m_i, l_i, acc,
                                      N, h, DN, R, scale, BM, BN, DNP, RP, DVP, OPD, PREC, KC)
    o = acc / l_i[:, None]
    tl.store(o_ptr + th[:, None] * DV + dv[None, :], o.to(o_ptr.dtype.element_ty),
             mask=r_ok[:, None] & (dv < DV)[None, :])


def prefill(q, latent, cache, pos, w_uk, w_uv, scale, fp32=False):
    """The whole prefill path on checked arguments: write rows, history (absorbed, or naive for long calls),
    new rows (naive).
    fp32=True: float32 operands and tf32x3 dots ("triton_fp32"); else 16-bit / tf32 ones (claim "bf16")."""
    t, n, qdim = q.shape
    _, dn, lkv = w_uk.shape
    dv = w_uv.shape[1]
    r = qdim - dn
    dnp, rp, lkp, dvp = dims(dn, r, lkv, dv)
    wrow = lkv + r
    dev = q.device
    q, latent, w_uk, w_uv = q.contiguous(), latent.contiguous(), w_uk.contiguous(), w_uv.contiguous()
    opd, tl_opd = operand_dtype(cache, fp32)
    prec = dot_precision(fp32)
    write_rows(latent, cache, pos)
    k_new = torch.empty((t, n, dnp), dtype=opd, device=dev)
    v_new = torch.empty((t, n, dvp), dtype=opd, device=dev)
    big = t >= 64
    bm = 64 if big else 16
    if fp32:  # launch shapes: (BK, warps, stages), (BN, VC, KC, warps, stages), (BM, BN, KC, warps, stages)
        project = (FP32_PROJECT_BK, FP32_PROJECT_WARPS, 3)
        history = (FP32_HISTORY_BN, FP32_HISTORY_VC, FP32_HISTORY_KC, FP32_HISTORY_WARPS, FP32_HISTORY_STAGES)
        flash = (FP32_FLASH_BM, FP32_FLASH_BN, FP32_FLASH_KC, FP32_FLASH_WARPS, FP32_FLASH_STAGES)
    else:
        project = (PROJECT_BK, PROJECT_WARPS, 3)
        history = (HISTORY_BN, HISTORY_VC, 0, HISTORY_WARPS, 3)
        flash = (FLASH_BM, FLASH_BN, 0, FLASH_WARPS, FLASH_STAGES)
    proj = dict(BK=min(project[0], lkp), DNP=dnp, DVP=dvp, OPD=tl_opd, PREC=prec, num_warps=project[1],
                num_stages=project[2])
    _project_kernel[(cdiv(t, bm), n)](latent, w_uk, w_uv, k_new, v_new, pos, t, n, dn, dv, lkv, wrow, BM=bm, **proj)
    m = torch.empty((t, n), dtype=torch.float32, device=dev)
    l_sum = torch.empty((t, n), dtype=torch.float32, device=dev)
    acc = torch.empty((t, n, dvp), dtype=torch.float32, device=dev)
    bm, bn = flash[:2] if big else (16, 16)
    if t >= NAIVE_HISTORY_MIN_T:  # naive form: project the cached rows 0..pos-1, then attend over them
        lmax = cache.shape[0]
        k_hist = torch.empty((lmax, n, dnp), dtype=opd, device=dev)  # rows past pos stay unwritten, never read
        v_hist = torch.empty((lmax, n, dvp), dtype=opd, device=dev)
        _project_kernel[(cdiv(lmax, 64), n)](cache, w_uk, w_uv, k_hist, v_hist, pos, lmax, n, dn, dv, lkv, wrow,
                                             BM=64, UPTO_POS=True, **proj)
        _history_naive_kernel[(cdiv(t, bm), n)](q, cache, k_hist, v_hist, pos, m, l_sum, acc, t, n, dn, r, lkv, qdim,
                                                wrow, float(scale), BM=bm, BN=bn, DNP=dnp, RP=rp, DVP=dvp, OPD=tl_opd,
                                                PREC=prec, KC=flash[2], num_warps=flash[3], num_stages=flash[4])
    else:
        qlat = absorb(q, w_uk, pos, lkp, True, opd)  # [T, N, LKP]
        _history_kernel[(cdiv(t, 16), n)](q, qlat, cache, pos, w_uv, m, l_sum, acc, t, n, dn, r, dv, lkv, qdim,
                                          wrow, float(scale), BM=16, BN=history[0], LKP=lkp, RP=rp, DVP=dvp,
                                          VC=min(lkp, history[1]), OPD=tl_opd, PREC=prec, KC=history[2],
                                          num_warps=history[3], num_stages=history[4])
    out = torch.empty((t, n, dv), dtype=q.dtype, device=dev)
    _flash_kernel[(cdiv(t, bm), n)](q, latent, k_new, v_new, m, l_sum, acc, out, t, n, dn, r, dv, lkv, qdim, wrow,
                                    float(scale), BM=bm, BN=bn, DNP=dnp, RP=rp, DVP=dvp, OPD=tl_opd, PREC=prec,
                                    KC=flash[2], num_warps=flash[3] if big else 4, num_stages=flash[4])
    return out
