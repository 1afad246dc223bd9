"""kda in Triton, chunked parallel form (spec 3.4) for prefill; short calls use the recurrent kernel.

Two kernels:

1. `_chunk_prepare_kernel`, one program per (chunk of 64 tokens, head), all chunks in parallel.
   Works in 16-token sub-blocks i, j:
   - q/k L2-norm (+ scale), gate = a*softplus(g + dt_bias), beta = sigmoid, Γ = in-chunk cumsum;
   - decayed products P[r,s] = Σ_d x_r[d] k_s[d] exp(Γ_r[d] - Γ_s[d]) for x = k (strict lower,
     times beta_r: L) and x = q (diagonal included: Aqk). Off-diagonal sub-blocks (i > j) factor the
     decay through the first row `ref` of sub-block i, between r and s: exp(Γ_r - Γ_ref) and
     exp(Γ_ref - Γ_s) are both <= 1, so neither overflows (never exp(-Γ_s) alone, FlashKDA#7).
     Diagonal sub-blocks have no such point: one column s at a time, the exponent is masked to
     -inf where s > r BEFORE exp;
   - X = (I + L)^-1 by forward substitution inside each 16x16 diagonal block, then the block rows
     X_ij = -X_ii Σ_{j<=m<i} L_im X_mj;
   - W = X (beta ⊙ exp(Γ) ⊙ K), U = X (beta ⊙ V), Qg = Q ⊙ exp(Γ), Kg = K ⊙ exp(Γ_C - Γ), exp(Γ_C).
2. `_chunk_state_kernel`, one program per (head, block of BV value columns), chunks in sequence:
   Vnew = U - W S;  O = Qg S + Aqk Vnew;  S <- exp(Γ_C) ⊙ S + Kg^T Vnew.

Precision: the prepare kernel's small products (around the triangular solve) are float32 FMA
("ieee"); the state kernel's products run on tensor cores in tf32 (10-bit mantissa operands, float32
accumulation), hence the "bf16" claim. ("tf32x3", about float32, spilled ~1.5 KB of registers per
thread in the state kernel.) All intermediates are stored in float32. Two variants trade that: "triton_chunked_split_tf32"
runs the prepare's small products as plain tf32 dots, and "triton_chunked_split_tf32_bf16scratch" also stores the state
kernel's W, Qg, Kg in bfloat16 (SCRATCH_BF16 makes the other forms do so in the tune studies). Calls with fewer than
`RECURRENT_BELOW` tokens (decode steps) go to the recurrent kernel of `kda.py` instead.

Measured on the H200 (2026-11-29, 48B sizes, bf16 inputs): 2.38 ms at T=4096, 17.6 ms at T=32768 per
layer - 3.8x slower than fla's chunk_kda (4.59 ms); against the recurrent kernel at T=4096, NMSE 4e-6
(output) and 6e-7 (state). Where the time goes was not measured; by estimate the prepare kernel (one
CTA per SM at 188 registers x 256 threads, 16 dependent column steps per diagonal sub-block, scratch
round trips) dominates. `python -m sparkops_triton._tune kda_prefill` times the launch variants.
Session 11 (H200, the 48B's 32768-token forward): at 4 warps 13.98 ms a layer (the split form 10.94); the
diagnosis put the one-kernel prepare at 201 ms and the state kernel at 77 ms of the forward's 925 (20 layers).
The GPU test test_gpu_48b_chunked_kernels_timed_one_by_one times each kernel of both forms.
Session 12 (the same test, T=32768, a layer): split 10.84 ms, split with tf32 prepare products 9.22 (products 3.49 ->
2.18, W/U 1.66 -> 1.31; a 1.039x row of the 48B's 32768-token prefill, 41480 tok/s), and with bfloat16 scratch too
8.00 (its GPU test; the next prefill rung).
"""

import torch
import triton
import triton.language as tl

from ._runtime import cdiv, next_pow2
from .kda import check_args, recurrent, softplus

CHUNK = 64  # tokens per chunk
SUB = 16  # tokens per sub-block (4 per chunk); also the smallest tl.dot size
RECURRENT_BELOW = 16  # shorter calls run the recurrent kernel: one chunk of mostly padding costs more
PREPARE_PRECISION = "ieee"  # the small products around the triangular solve: float32 FMA
DOT_PRECISION = "tf32"  # the state kernel's [64, D] x [D, BV] products: tensor cores
BLOCK_V = 32  # value columns per program of the state kernel
#: session 11's tune study kda_prefill (H200, T = 32768, 48B sizes, one layer): 17.6 ms at 8 warps and the loop, 13.9
#: at 4 warps, 12.7 at 4 warps with DIAG_UNROLL - which spills 56 bytes of registers (ptxas, sm_90), so not that one
#: (its nmse column was void that run: the harness fed later variants an advanced state, since fixed)
PREPARE_WARPS = 4
STATE_WARPS = 8  # 164 registers, no spills, 128 KiB shared memory with BLOCK_V = 32
STATE_STAGES = 1  # the loop loads [64, D] float32 tiles: a second stage overflows shared memory
#: W, Qg and Kg (the state kernel's [64, D] operands, read once per BV block of a head: 4x at D = 128) kept in bfloat16
#: instead of float32 between the two kernels: half their bytes written and read (by estimate the state kernel moves
#: ~16 MB a chunk step over all heads at float32, ~4 us of its ~7.5 us a step at T = 32768), their products still
#: tf32 on the widened values. The default of no registered form but "triton_chunked_split_tf32_bf16scratch" (which
#: asks for it per call); this switch lets the tune studies try it on the other forms
SCRATCH_BF16 = False
#: "triton_chunked_split": warps of its prepare phases' kernels and whether its products kernel unrolls the diagonal
#: sub-blocks' steps (as DIAG_UNROLL). Session 11 (as above): 14.9 ms at 8, 12.0 at 4, 10.9 at 4 unrolled
SPLIT_WARPS = 4
SPLIT_UNROLL = True
#: "triton_chunked_split_tf32": the prepare products' precision of that variant. Session 12's tune study
#: kda_prefill_split (H200, T = 32768, 48B sizes, one layer): 10.79 ms at "ieee", 9.17 ms at "tf32", nmse 2.3e-6
#: against the "ieee" output (the op's bf16 claim allows 1e-3 against the reference)
SPLIT_TF32_PRECISION = "tf32"
#: "triton_chunked_split_tf32_bf16scratch": that variant with SCRATCH_BF16's bfloat16 W, Qg, Kg. Session 12's tune study
#: kda_prefill_split_tf32 (as above): 9.41 ms with float32 scratch, 8.06 ms with bfloat16, nmse 2.5e-7 between them
#: the diagonal sub-blocks' 16 column steps: a runtime loop (False; each step's two scratch-row loads wait in turn)
#: or unrolled (True; the loads can all be issued ahead, the code grows ~16x). Same arithmetic in the same order;
#: the tune study kda_prefill times both (session 11: unrolled is faster at 4 warps but spills, see PREPARE_WARPS)
DIAG_UNROLL = False


@triton.jit
def _tile(ptr, row0, ncols, C: tl.constexpr):
    """[16, C] float32 rows row0..row0+15 of a scratch matrix with `ncols` columns (padded rows exist)."""
    r = tl.arange(0, 16)
    c = tl.arange(0, C)
    return tl.load(ptr + (row0 + r)[:, None].to(tl.int64) * ncols + c[None, :])


@triton.jit
def _put(ptr, row0, ncols, col0, x, C: tl.constexpr):
    r = tl.arange(0, 16)
    c = tl.arange(0, C)
    tl.store(ptr + (row0 + r)[:, None].to(tl.int64) * ncols + col0 + c[None, :], x)


@triton.jit
def _block(ptr, row0, col0, ncols):
    """[16, 16] block at (row0, col0) of a scratch matrix with `ncols` columns."""
    r = tl.arange(0, 16)
    return tl.load(ptr + (row0 + r)[:, None].to(tl.int64) * ncols + col0 + r[None, :])


@triton.jit
def _diag_column(kn_ptr, gam_ptr, row0, s, kn_i, qn_i, gam_i, kk, qk, DK: tl.constexpr):
    """Column s of a diagonal sub-block's two products, written into kk and qk."""
    r = tl.arange(0, 16)
    dk = tl.arange(0, DK)
    row = (row0 + s).to(tl.int64)
    k_s = tl.load(kn_ptr + row * DK + dk)  # [DK]
    g_s = tl.load(gam_ptr + row * DK + dk)
    decay = tl.exp(tl.where((r >= s)[:, None], gam_i - g_s[None, :], float("-inf")))  # [16, DK]
    kd = k_s[None, :] * decay
    kk_col = tl.sum(kn_i * kd, axis=1)  # [16]
    qk_col = tl.sum(qn_i * kd, axis=1)
    kk = tl.where((r[None, :] == s) & (r[:, None] > s), kk_col[:, None], kk)
    qk = tl.where((r[None, :] == s) & (r[:, None] >= s), qk_col[:, None], qk)
    return kk, qk


@triton.jit
def _diag_products(kn_ptr, gam_ptr, row0, kn_i, qn_i, gam_i, DK: tl.constexpr, UNROLL: tl.constexpr):
    """Diagonal sub-block: (strict-lower K-K products, lower Q-K products incl. the diagonal), [16, 16] each.

    Column s at a time: its key row and Γ row come from scratch; the exponent Γ_r - Γ_s is masked to
    -inf where s > r before exp, so only non-positive differences are exponentiated.
    """
    kk = tl.zeros((16, 16), dtype=tl.float32)
    qk = tl.zeros((16, 16), dtype=tl.float32)
    if UNROLL:
        for s in tl.static_range(16):
            kk, qk = _diag_column(kn_ptr, gam_ptr, row0, s, kn_i, qn_i, gam_i, kk, qk, DK)
    else:
        for s in range(16):  # a runtime loop: unrolled, 4 sub-blocks x 16 columns bloat the kernel
            kk, qk = _diag_column(kn_ptr, gam_ptr, row0, s, kn_i, qn_i, gam_i, kk, qk, DK)
    return kk, qk


@triton.jit
def _unit_lower_inverse(lmat):
    """(I + L)^-1 for a strictly lower-triangular [16, 16] L, row by row (forward substitution)."""
    r = tl.arange(0, 16)
    x = tl.where(r[:, None] == r[None, :], 1.0, 0.0)
    for i in range(1, 16):
        l_i = tl.sum(tl.where(r[:, None] == i, lmat, 0.0), axis=0)  # row i of L (zero from column i on)
        row = tl.where(r == i, 1.0, 0.0) - tl.sum(l_i[:, None] * x, axis=0)  # e_i - Σ_{m<i} L[i,m] X[m,:]
        x = tl.where(r[:, None] == i, row[None, :], x)
    return x


@triton.jit
def _phase_norms(q_ptr, k_ptr, g_ptr, beta_ptr, a, dtb, gam_ptr, kn_ptr, qn_ptr, b_ptr, n, i, carry, base, T, H, D,
                 scale, l2_eps, DK: tl.constexpr):
    """A, sub-block i of chunk n: normalised q/k, gate, Γ (cumulative from the chunk start: `carry` holds the
    gate sums of the sub-blocks before), beta -> scratch; returns the carry after this sub-block."""
    r = tl.arange(0, 16)
    dk = tl.arange(0, DK)
    k_ok = dk < D
    t = n * 64 + i * 16 + r  # tokens [16]
    valid = t < T
    m2 = valid[:, None] & k_ok[None, :]
    offs = (t.to(tl.int64) * H + tl.program_id(1))[:, None] * D + dk[None, :]  # into [T, H, D]
    q = tl.load(q_ptr + offs, mask=m2, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + offs, mask=m2, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + t.to(tl.int64) * H + tl.program_id(1), mask=valid, other=0.0).to(tl.float32)
    q = q * (scale / tl.sqrt(tl.sum(q * q, axis=1) + l2_eps))[:, None]
    k = k / tl.sqrt(tl.sum(k * k, axis=1) + l2_eps)[:, None]
    gate = _gate_tile(g_ptr, a, dtb, n, i, T, H, D, DK)
    gam = tl.cumsum(gate, axis=0) + carry[None, :]
    _put(gam_ptr, base + i * 16, DK, 0, gam, DK)
    _put(kn_ptr, base + i * 16, DK, 0, k, DK)
    _put(qn_ptr, base + i * 16, DK, 0, q, DK)
    tl.store(b_ptr + base + i * 16 + r, tl.where(valid, tl.sigmoid(beta), 0.0))
    return carry + tl.sum(gate, axis=0)


@triton.jit
def _gate_tile(g_ptr, a, dtb, n, i, T, H, D, DK: tl.constexpr):
    """[16, DK] gate a * softplus(g + dt_bias), sub-block i of chunk n (head: program axis 1); padding 0: no decay."""
    r = tl.arange(0, 16)
    dk = tl.arange(0, DK)
    t = n * 64 + i * 16 + r
    m2 = (t < T)[:, None] & (dk < D)[None, :]
    g = tl.load(g_ptr + (t.to(tl.int64) * H + tl.program_id(1))[:, None] * D + dk[None, :], mask=m2,
                other=0.0).to(tl.float32)
    return tl.where(m2, a * softplus(g + dtb[None, :]), 0.0)


@triton.jit
def _phase_products(gam_ptr, kn_ptr, qn_ptr, b_ptr, l_ptr, aqk_ptr, base, i, DK: tl.constexpr, PREC: tl.constexpr,
                    UNROLL: tl.constexpr):
    """B, block row i: L = strict_lower(diag(beta) P_kk) and Aqk by 16x16 blocks (zeros above the diagonal)."""
    r = tl.arange(0, 16)
    dk = tl.arange(0, DK)
    row_i = base + i * 16
    kn_i = _tile(kn_ptr, row_i, DK, DK)
    qn_i = _tile(qn_ptr, row_i, DK, DK)
    gam_i = _tile(gam_ptr, row_i, DK, DK)
    b_i = tl.load(b_ptr + row_i + r)
    kk, qk = _diag_products(kn_ptr, gam_ptr, row_i, kn_i, qn_i, gam_i, DK, UNROLL)
    _put(l_ptr, row_i, 64, i * 16, kk * b_i[:, None], 16)
    _put(aqk_ptr, row_i, 64, i * 16, qk, 16)
    ref = tl.load(gam_ptr + row_i.to(tl.int64) * DK + dk)  # Γ at the first row of sub-block i
    dec_i = tl.exp(gam_i - ref[None, :])  # <= 1
    kd_i = kn_i * dec_i
    qd_i = qn_i * dec_i
    for j in range(i):
        row_j = base + j * 16
        kr_j = _tile(kn_ptr, row_j, DK, DK) * tl.exp(ref[None, :] - _tile(gam_ptr, row_j, DK, DK))  # <= 1
        kk = tl.dot(kd_i, tl.trans(kr_j), input_precision=PREC)
        qk = tl.dot(qd_i, tl.trans(kr_j), input_precision=PREC)
        _put(l_ptr, row_i, 64, j * 16, kk * b_i[:, None], 16)
        _put(aqk_ptr, row_i, 64, j * 16, qk, 16)
    for j in range(i + 1, 4):  # above the diagonal: zeros, so later readers see a full matrix
        _put(aqk_ptr, row_i, 64, j * 16, tl.zeros((16, 16), dtype=tl.float32), 16)


@triton.jit
def _phase_inverse_row(l_ptr, x_ptr, base, i, PREC: tl.constexpr):
    """C, block row i of X = (I + L)^-1: X_ii = (I + L_ii)^-1, X_ij = -X_ii Σ_{j<=m<i} L_im X_mj (rows < i done)."""
    r = tl.arange(0, 16)
    row_i = base + i * 16
    lmat = tl.where(r[:, None] > r[None, :], _block(l_ptr, row_i, i * 16, 64), 0.0)
    x_ii = _unit_lower_inverse(lmat)
    _put(x_ptr, row_i, 64, i * 16, x_ii, 16)
    for j in range(i):
        acc = tl.zeros((16, 16), dtype=tl.float32)
        for m in range(j, i):
            acc += tl.dot(_block(l_ptr, row_i, m * 16, 64), _block(x_ptr, base + m * 16, j * 16, 64),
                          input_precision=PREC)
        _put(x_ptr, row_i, 64, j * 16, -tl.dot(x_ii, acc, input_precision=PREC), 16)


@triton.jit
def _phase_wu(v_ptr, gam_ptr, kn_ptr, qn_ptr, b_ptr, x_ptr, w_ptr, u_ptr, qg_ptr, kg_ptr, gam_c, base, n, i, T, H, D,
              DK: tl.constexpr, PREC: tl.constexpr):
    """D, block row i: W = X (beta exp(Γ) K), U = X (beta V), Qg = Q exp(Γ), Kg = K exp(Γ_C - Γ)."""
    r = tl.arange(0, 16)
    dk = tl.arange(0, DK)
    k_ok = dk < D
    row_i = base + i * 16
    w = tl.zeros((16, DK), dtype=tl.float32)
    u = tl.zeros((16, DK), dtype=tl.float32)
    for j in range(i + 1):
        row_j = base + j * 16
        b_j = tl.load(b_ptr + row_j + r)
        t_j = n * 64 + j * 16 + r
        vm = (t_j < T)[:, None] & k_ok[None, :]
        v_j = tl.load(v_ptr + (t_j.to(tl.int64) * H + tl.program_id(1))[:, None] * D + dk[None, :], mask=vm,
                      other=0.0)
        kb_j = _tile(kn_ptr, row_j, DK, DK) * tl.exp(_tile(gam_ptr, row_j, DK, DK)) * b_j[:, None]
        x_ij = _block(x_ptr, row_i, j * 16, 64)
        w += tl.dot(x_ij, kb_j, input_precision=PREC)
        u += tl.dot(x_ij, v_j.to(tl.float32) * b_j[:, None], input_precision=PREC)
    _put(w_ptr, row_i, DK, 0, w, DK)
    _put(u_ptr, row_i, DK, 0, u, DK)
    gam_i = _tile(gam_ptr, row_i, DK, DK)
    _put(qg_ptr, row_i, DK, 0, _tile(qn_ptr, row_i, DK, DK) * tl.exp(gam_i), DK)
    _put(kg_ptr, row_i, DK, 0, _tile(kn_ptr, row_i, DK, DK) * tl.exp(gam_c[None, :] - gam_i), DK)


@triton.jit
def _chunk_prepare_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, a_ptr, dtb_ptr,
                          gam_ptr, kn_ptr, qn_ptr, b_ptr, l_ptr, x_ptr,
                          w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, gc_ptr,
                          T, H, D, TP, scale, l2_eps, DK: tl.constexpr, PREC: tl.constexpr,
                          UNROLL: tl.constexpr = False):
    n = tl.program_id(0)
    h = tl.program_id(1)
    dk = tl.arange(0, DK)
    base = h * TP + n * 64  # first scratch row of this (head, chunk)
    a = tl.load(a_ptr + h).to(tl.float32)
    dtb = tl.load(dtb_ptr + h * D + dk, mask=dk < D, other=0.0).to(tl.float32)
    carry = tl.zeros((DK,), dtype=tl.float32)
    for i in range(4):
        carry = _phase_norms(q_ptr, k_ptr, g_ptr, beta_ptr, a, dtb, gam_ptr, kn_ptr, qn_ptr, b_ptr, n, i, carry, base,
                             T, H, D, scale, l2_eps, DK)
    tl.debug_barrier()
    for i in range(4):
        _phase_products(gam_ptr, kn_ptr, qn_ptr, b_ptr, l_ptr, aqk_ptr, base, i, DK, PREC, UNROLL)
    tl.debug_barrier()
    for i in range(4):
        _phase_inverse_row(l_ptr, x_ptr, base, i, PREC)
        tl.debug_barrier()
    gam_c = tl.load(gam_ptr + (base + 63).to(tl.int64) * DK + dk)  # Γ at the chunk's last row (padding adds 0)
    for i in range(4):
        _phase_wu(v_ptr, gam_ptr, kn_ptr, qn_ptr, b_ptr, x_ptr, w_ptr, u_ptr, qg_ptr, kg_ptr, gam_c, base, n, i, T, H,
                  D, DK, PREC)
    tl.store(gc_ptr + (h * (TP // 64) + n).to(tl.int64) * DK + dk, tl.exp(gam_c))


# -- "triton_chunked_split": the same phases as four launches, A, B and D over (sub-block, chunk, head) programs --
@triton.jit
def _split_norms_kernel(q_ptr, k_ptr, g_ptr, beta_ptr, a_ptr, dtb_ptr, gam_ptr, kn_ptr, qn_ptr, b_ptr, T, H, D, TP,
                        scale, l2_eps, DK: tl.constexpr):
    n = tl.program_id(0) // 4
    i = tl.program_id(0) % 4
    h = tl.program_id(1)
    dk = tl.arange(0, DK)
    a = tl.load(a_ptr + h).to(tl.float32)
    dtb = tl.load(dtb_ptr + h * D + dk, mask=dk < D, other=0.0).to(tl.float32)
    carry = tl.zeros((DK,), dtype=tl.float32)
    for j in range(i):  # the sub-blocks before, summed in the order the one-kernel form adds them
        carry = carry + tl.sum(_gate_tile(g_ptr, a, dtb, n, j, T, H, D, DK), axis=0)
    _phase_norms(q_ptr, k_ptr, g_ptr, beta_ptr, a, dtb, gam_ptr, kn_ptr, qn_ptr, b_ptr, n, i, carry, h * TP + n * 64,
                 T, H, D, scale, l2_eps, DK)


@triton.jit
def _split_products_kernel(gam_ptr, kn_ptr, qn_ptr, b_ptr, l_ptr, aqk_ptr, TP, DK: tl.constexpr, PREC: tl.constexpr,
                           UNROLL: tl.constexpr):
    n = tl.program_id(0) // 4
    i = tl.program_id(0) % 4
    _phase_products(gam_ptr, kn_ptr, qn_ptr, b_ptr, l_ptr, aqk_ptr, tl.program_id(1) * TP + n * 64, i, DK, PREC, UNROLL)


@triton.jit
def _split_inverse_kernel(l_ptr, x_ptr, TP, PREC: tl.constexpr):
    base = tl.program_id(1) * TP + tl.program_id(0) * 64
    for i in range(4):
        _phase_inverse_row(l_ptr, x_ptr, base, i, PREC)
        tl.debug_barrier()


@triton.jit
def _split_wu_kernel(v_ptr, gam_ptr, kn_ptr, qn_ptr, b_ptr, x_ptr, w_ptr, u_ptr, qg_ptr, kg_ptr, gc_ptr, T, H, D, TP,
                     DK: tl.constexpr, PREC: tl.constexpr):
    n = tl.program_id(0) // 4
    i = tl.program_id(0) % 4
    h = tl.program_id(1)
    dk = tl.arange(0, DK)
    base = h * TP + n * 64
    gam_c = tl.load(gam_ptr + (base + 63).to(tl.int64) * DK + dk)
    _phase_wu(v_ptr, gam_ptr, kn_ptr, qn_ptr, b_ptr, x_ptr, w_ptr, u_ptr, qg_ptr, kg_ptr, gam_c, base, n, i, T, H, D,
              DK, PREC)
    if i == 0:
        tl.store(gc_ptr + (h * (TP // 64) + n).to(tl.int64) * DK + dk, tl.exp(gam_c))


@triton.jit
def _chunk_state_kernel(w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, gc_ptr, s_ptr, o_ptr, T, H, D, TP,
                        DK: tl.constexpr, BV: tl.constexpr, PREC: tl.constexpr):
    h = tl.program_id(1)
    cols = tl.program_id(0) * BV + tl.arange(0, BV)  # [BV]
    c_ok = cols < D
    dk = tl.arange(0, DK)
    rows = tl.arange(0, 64)
    s_offs = h.to(tl.int64) * D * D + dk[:, None] * D + cols[None, :]
    s_mask = (dk < D)[:, None] & c_ok[None, :]
    S = tl.load(s_ptr + s_offs, mask=s_mask, other=0.0)  # [DK, BV]
    n_chunks = TP // 64
    for n in range(n_chunks):
        row0 = (h * TP + n * 64).to(tl.int64)
        tile = (row0 + rows)[:, None] * DK
        w = tl.load(w_ptr + tile + dk[None, :]).to(tl.float32)  # [64, DK] (stored float32 or bfloat16: SCRATCH_BF16)
        qg = tl.load(qg_ptr + tile + dk[None, :]).to(tl.float32)
        kg = tl.load(kg_ptr + tile + dk[None, :]).to(tl.float32)
        u = tl.load(u_ptr + tile + cols[None, :], mask=c_ok[None, :], other=0.0)  # [64, BV]
        aqk = tl.load(aqk_ptr + (row0 + rows)[:, None] * 64 + rows[None, :])  # [64, 64]
        gc = tl.load(gc_ptr + (h * n_chunks + n).to(tl.int64) * DK + dk)  # [DK]
        v_new = u - tl.dot(w, S, input_precision=PREC)  # [64, BV]
        o = tl.dot(qg, S, input_precision=PREC) + tl.dot(aqk, v_new, input_precision=PREC)
        t = n * 64 + rows
        tl.store(o_ptr + (t.to(tl.int64) * H + h)[:, None] * D + cols[None, :], o.to(o_ptr.dtype.element_ty),
                 mask=(t < T)[:, None] & c_ok[None, :])
        S = S * gc[:, None] + tl.dot(tl.trans(kg), v_new, input_precision=PREC)
    tl.store(s_ptr + s_offs, S, mask=s_mask)


def chunked(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, block_v=None, split=False, prec=None,
            scratch_bf16=None):
    """Launch the chunked kernels on checked arguments: the prepare kernel (split: its four phases as four launches)
    and the state kernel. `prec`: the prepare products' dot precision (default PREPARE_PRECISION); `scratch_bf16`:
    the state kernel's W, Qg, Kg held in bfloat16 (default SCRATCH_BF16)."""
    prec = prec or PREPARE_PRECISION
    scratch_bf16 = SCRATCH_BF16 if scratch_bf16 is None else scratch_bf16
    t, h, d = q.shape
    out = torch.empty((t, h, d), dtype=v.dtype, device=v.device)  # [T, H, D]
    if t == 0:
        return out
    dk = max(16, next_pow2(d))
    n_chunks = cdiv(t, CHUNK)
    tp = n_chunks * CHUNK
    dev = q.device
    f32 = dict(dtype=torch.float32, device=dev)
    gam, kn, qn, u = (torch.empty((h, tp, dk), **f32) for _ in range(4))  # [H, Tp, DK] scratch
    state_in = dict(f32, dtype=torch.bfloat16) if scratch_bf16 else f32  # the state kernel's W, Qg, Kg
    w, qg, kg = (torch.empty((h, tp, dk), **state_in) for _ in range(3))
    b = torch.empty((h, tp), **f32)
    lmat, xmat, aqk = (torch.empty((h, tp, CHUNK), **f32) for _ in range(3))  # [H, Tp, 64]
    gc = torch.empty((h, n_chunks, dk), **f32)
    q, k, v, g, beta = (x.contiguous() for x in (q, k, v, g, beta))
    if split:
        sub = (4 * n_chunks, h)  # (sub-block of a chunk, head) programs
        _split_norms_kernel[sub](q, k, g, beta, a.contiguous(), dt_bias.contiguous(), gam, kn, qn, b, t, h, d, tp,
                                 float(scale), float(l2_eps), DK=dk, num_warps=SPLIT_WARPS)
        _split_products_kernel[sub](gam, kn, qn, b, lmat, aqk, tp, DK=dk, PREC=prec, UNROLL=SPLIT_UNROLL,
                                    num_warps=SPLIT_WARPS)
        _split_inverse_kernel[(n_chunks, h)](lmat, xmat, tp, PREC=prec, num_warps=SPLIT_WARPS)
        _split_wu_kernel[sub](v, gam, kn, qn, b, xmat, w, u, qg, kg, gc, t, h, d, tp, DK=dk, PREC=prec,
                              num_warps=SPLIT_WARPS)
    else:
        _chunk_prepare_kernel[(n_chunks, h)](q, k, v, g, beta, a.contiguous(), dt_bias.contiguous(),
                                             gam, kn, qn, b, lmat, xmat, w, u, qg, kg, aqk, gc,
                                             t, h, d, tp, float(scale), float(l2_eps), DK=dk, PREC=prec,
                                             UNROLL=DIAG_UNROLL, num_warps=PREPARE_WARPS)
    bv = block_v or min(dk, BLOCK_V)
    _chunk_state_kernel[(cdiv(d, bv), h)](w, u, qg, kg, aqk, gc, state, out, t, h, d, tp, DK=dk, BV=bv,
                                          PREC=DOT_PRECISION, num_warps=STATE_WARPS,
                                          num_stages=STATE_STAGES)
    return out


def _chunked_or_recurrent(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, **launch):
    """Every chunked form's entry: the arguments checked, calls shorter than RECURRENT_BELOW (decode steps) on the
    recurrent kernel, the rest on `chunked` with the form's `launch` options (split, prec, scratch_bf16)."""
    t, _, _ = check_args("kda", q, k, v, g, beta, a, dt_bias, state)
    if t < RECURRENT_BELOW:
        return recurrent(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps)
    return chunked(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, **launch)


def kda_chunked(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps):
    """Implementation "triton_chunked": the two kernels of the module docstring, the prepare kernel in one launch."""
    return _chunked_or_recurrent(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps)


def kda_chunked_split(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps):
    """Implementation "triton_chunked_split": "triton_chunked" with its prepare kernel's phases as four launches.

    Why: the one prepare program per (chunk, head) runs every phase in turn, one CTA per SM (188 registers x 256
    threads): session 10's 16384-token chunk spent 136 ms in it (20 KDA layers, ~110 us a program, the state
    kernel 38). The phases that work per 16-row sub-block (A: norms and Γ; B: a block row of L and Aqk; D: a block
    row of W, U, Qg, Kg) run on (sub-block, chunk, head) programs, 4x as many and each a quarter as long; only C,
    the triangular inverse, keeps a program per (chunk, head). A program of A re-sums the gates of the sub-blocks
    before its own (in the order the one-kernel form adds them) instead of reading another program's carry.
    The same helper functions compute every value in the same order, so the interpreter gives the same bits as the
    one-kernel form; compiled, it does not (session 11, H200, T = 4096 at 48B sizes, both at 8 warps: the bits
    differed - the compiler schedules and contracts the same source differently in a different kernel). It claims
    "bf16" against the reference like "triton_chunked", and its GPU test bounds its distance from that form.
    Session 11's tune study (T = 32768, one layer): 10.9 ms at 4 warps unrolled, against 13.9 ms for the one kernel at
    its best launch without spills."""
    return _chunked_or_recurrent(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, split=True)


def kda_chunked_split_tf32(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps):
    """Implementation "triton_chunked_split_tf32": "triton_chunked_split" with the prepare phases' small products
    (the triangular solve's L, its inverse, W, U, Qg, Kg, Aqk) as plain tf32 tensor-core dots instead of float32 FMA.

    Why: those products are a chain of dependent [16, 16] x [16, DK] steps; on FMA each waits out the last, on the
    tensor cores they are short. tf32 keeps 10 mantissa bits of each operand, so it claims the op's "bf16" tolerance
    like its siblings, not bit-identity; its GPU test bounds its distance from "triton_chunked_split".
    Session 12's tune study (T = 32768, 48B sizes, one layer): 9.17 ms against 10.79 at "ieee", nmse 2.3e-6."""
    return _chunked_or_recurrent(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, split=True,
                                 prec=SPLIT_TF32_PRECISION)


def kda_chunked_split_tf32_bf16scratch(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps):
    """Implementation "triton_chunked_split_tf32_bf16scratch": "triton_chunked_split_tf32" with the state kernel's
    [64, D] operands W, Qg and Kg stored in bfloat16 between the kernels instead of float32.

    Why: the state kernel re-reads W, Qg and Kg once per value block of a head (4x at D = 128) and was the largest
    KDA kernel after the tf32 prepare (3.84 of 9.16 ms a layer at T = 32768, session 12). Half their bytes; the
    products stay tf32 on the widened values, the state and U stay float32. Claims the op's "bf16" tolerance; its
    GPU test bounds its distance from "triton_chunked_split_tf32". Session 12's tune study: 8.06 against 9.41 ms."""
    return _chunked_or_recurrent(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, split=True,
                                 prec=SPLIT_TF32_PRECISION, scratch_bf16=True)
