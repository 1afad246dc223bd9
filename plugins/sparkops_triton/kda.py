"""kda in Triton, recurrent form (spec 3.3): the whole decode step fused in one kernel.

One program per (head, block of BV value columns): it holds S[h][:, cols] ([D_k, BV] float32) in
registers, and for each token computes the gate a*softplus(g + dt_bias), the q/k L2-norms and scale,
sigmoid(beta), then decay -> error -> rank-1 write -> read, and finally writes its state block back
in place. 32 heads x (128 / BV) programs spread the 2 MiB state of a 48B layer over the SMs; each
program re-derives q, k and the gate for its head (128 values each: far fewer bytes than its
[128, BV] state block). T > 1 loops over the tokens inside the kernel, the state never leaving
registers (correct for any T; `kda_chunked` is the fast prefill form).

Decode roofline (48B): read + write 2 MiB of state = 4 MiB per layer, ~1 us at 4.04 TB/s, plus ~0.9 us
for a kernel in a replayed CUDA graph. Measured on the H200 (2026-11-29, BLOCK_V=32, bf16 q/k/v/g, 36
rotated state sets, graph replay): 4.49 us per step (943 GB/s of state), 24x fla's eager 110 us.
"""

import torch
import triton
import triton.language as tl

from ._arrival import arrive, depart
from ._runtime import FLOATS, cdiv, expect, expect_device, expect_dtype, expect_inplace, next_pow2

BLOCK_V = 32  # value columns per program: 32 heads x 4 blocks = 128 programs at 48B sizes (4.5 us per step, H200)


@triton.jit
def softplus(x):
    """log(1 + exp(x)) without overflow: max(x, 0) + log(1 + exp(-|x|))."""
    return tl.maximum(x, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(x)))


@triton.jit
def _kda_recurrent_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, a_ptr, dtb_ptr, s_ptr, o_ptr, T, H, D, scale, l2_eps,
                          gate_ptr, w_ptr, y_ptr, part_ptr, cnt_ptr, eps, DK: tl.constexpr, BV: tl.constexpr,
                          NORM: tl.constexpr, NB: tl.constexpr, PDL: tl.constexpr):
    """Program (h, j): the recurrence on value columns j*BV .. j*BV+BV-1 of head h, o's slice stored in o_ptr's dtype.
    NORM (kda_norm=triton_split, kda_norm.py): o_ptr is float32 scratch, each slice's sum of squares goes to part_ptr
    [T, H, NB], and the head's last program to arrive (cnt_ptr[h]) norms and gates the whole row into y_ptr; without
    NORM those five pointers and eps are not read. PDL (kda_norm=triton_split_pdl; GPU only, the interpreter has no
    griddepcontrol; the launch sets launch_pdl): the program may start while the previous kernel of the stream runs.
    It requests its slice of the state first (S[h] is written by this kernel alone, a step earlier), then waits for
    that kernel (`gdc_wait`: its grid complete, its memory visible) before it reads anything else, then lets the next
    kernel be scheduled (KDA's o_proj, launched with PDL, whose own wait covers this grid's every store)."""
    h, cols, dk, k_ok, c_ok, s_offs, s_mask, S, a, dtb = open_block(s_ptr, a_ptr, dtb_ptr, D, DK, BV, PDL)
    for t in range(T):
        row = (t * H + h).to(tl.int64) * D  # start of token t, head h in a [T, H, D] tensor
        q, k, g, v, b = load_token(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, row, t * H + h, dk, k_ok, cols, c_ok)
        S, o = recurrent_step(S, q, k, g, v, b, a, dtb, scale, l2_eps)  # o [BV]; masked columns are 0
        tl.store(o_ptr + row + cols, o.to(o_ptr.dtype.element_ty), mask=c_ok)
        if NORM:
            tl.store(part_ptr + (t * H + h) * NB + tl.program_id(1), tl.sum(o * o, axis=0))
    tl.store(s_ptr + s_offs, S, mask=s_mask)
    if NORM:
        if arrive(cnt_ptr, h, tl.num_programs(1)):  # the head's last program: its every slice and sum is in the L2
            norm_rows(o_ptr, part_ptr, gate_ptr, w_ptr, y_ptr, T, H, D, h, eps, dk, k_ok, NB, GATE_CG=False)
            depart(cnt_ptr, h)


@triton.jit
def open_block(s_ptr, a_ptr, dtb_ptr, D, DK: tl.constexpr, BV: tl.constexpr, PDL: tl.constexpr):
    """Program (h, j)'s view of head h's state block S[h][:, cols] ([DK, BV] float32, loaded) and of the head's decay
    constants a and dt_bias ([DK]); with PDL the state is requested before the wait for the kernel before (S[h] is
    written by this kernel alone, a step earlier) and everything else after it, then the next kernel is let start.
    Returns (h, cols [BV], dk [DK], k_ok, c_ok, s_offs [DK, BV], s_mask, S, a, dtb)."""
    h = tl.program_id(0)
    cols = tl.program_id(1) * BV + tl.arange(0, BV)  # value columns of this program [BV]
    dk = tl.arange(0, DK)  # key channels [DK]
    k_ok = dk < D
    c_ok = cols < D
    s_offs = h.to(tl.int64) * D * D + dk[:, None] * D + cols[None, :]  # [DK, BV] into S[h] = [D_k, D_v]
    s_mask = k_ok[:, None] & c_ok[None, :]
    S = tl.load(s_ptr + s_offs, mask=s_mask, other=0.0)
    if PDL:
        tl.extra.cuda.gdc_wait()  # nothing before this reads what another kernel writes
        tl.extra.cuda.gdc_launch_dependents()
    a = tl.load(a_ptr + h).to(tl.float32)
    dtb = tl.load(dtb_ptr + h * D + dk, mask=k_ok, other=0.0).to(tl.float32)
    return h, cols, dk, k_ok, c_ok, s_offs, s_mask, S, a, dtb


@triton.jit
def norm_rows(o_ptr, part_ptr, gate_ptr, w_ptr, y_ptr, T, H, D, h, eps, dk, k_ok, NB: tl.constexpr,
              GATE_CG: tl.constexpr):
    """y = o / sqrt(mean(o^2) + eps) * w * sigmoid(gate) over head h's whole rows, every token: o (float32) and the
    slices' sums of squares read from the L2 (other programs wrote them), the sums added in one fixed order. GATE_CG:
    the gate too was written by the head's programs (kda_lowrank_norm's scratch), so it is read from the L2 as well."""
    nb = tl.arange(0, NB)  # the head's programs, padded to a power of two
    nb_ok = nb < tl.num_programs(1)
    w = tl.load(w_ptr + dk, mask=k_ok, other=0.0).to(tl.float32)  # the norm's gain [DK]
    for t in range(T):
        row = (t * H + h).to(tl.int64) * D
        ss = tl.sum(tl.load(part_ptr + (t * H + h) * NB + nb, mask=nb_ok, other=0.0, cache_modifier=".cg"), axis=0)
        o = tl.load(o_ptr + row + dk, mask=k_ok, other=0.0, cache_modifier=".cg")  # the whole row [DK]
        if GATE_CG:
            gt = tl.load(gate_ptr + row + dk, mask=k_ok, other=0.0, cache_modifier=".cg").to(tl.float32)
        else:
            gt = tl.load(gate_ptr + row + dk, mask=k_ok, other=0.0).to(tl.float32)
        y = o * (1.0 / tl.sqrt(ss / D + eps)) * w * tl.sigmoid(gt)
        tl.store(y_ptr + row + dk, y.to(y_ptr.dtype.element_ty), mask=k_ok)


@triton.jit
def load_token(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, row, th, dk, k_ok, cols, c_ok):
    """One token's inputs for one head as float32: q, k, g over the key channels dk [DK], v over the value columns
    `cols` [BV], b = sigmoid(beta) (`row`: the head's offset in a [T, H, D] tensor; `th`: t * H + h)."""
    q = tl.load(q_ptr + row + dk, mask=k_ok, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + row + dk, mask=k_ok, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + row + dk, mask=k_ok, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + row + cols, mask=c_ok, other=0.0).to(tl.float32)
    b = tl.sigmoid(tl.load(beta_ptr + th).to(tl.float32))
    return q, k, g, v, b


@triton.jit
def recurrent_step(S, q, k, g, v, b, a, dtb, scale, l2_eps):
    """One token of the gated delta rule on a block of a head's state, S [DK, BV] float32 (kda's recurrence, spec
    3.3): q and k L2-normed (q scaled), the rows decayed by exp(a * softplus(g + dt_bias)), the delta-rule write with
    strength b; returns (S after the write, o = S^T q [BV], read after it)."""
    q = q * (scale / tl.sqrt(tl.sum(q * q, axis=0) + l2_eps))
    k = k / tl.sqrt(tl.sum(k * k, axis=0) + l2_eps)
    decay = tl.exp(a * softplus(g + dtb))  # exp(gate) in (0, 1], one per key row
    S = S * decay[:, None]  # decay the key rows first
    u = v - tl.sum(S * k[:, None], axis=0)  # v - S^T k with the decayed state [BV]
    S = S + (b * k)[:, None] * u[None, :]  # rank-1 delta-rule write
    return S, tl.sum(S * q[:, None], axis=0)  # read after the write [BV]


def check_args(op, q, k, v, g, beta, a, dt_bias, state):
    """Shapes, dtypes and devices of kda's arguments; returns (T, H, D)."""
    expect(op, "q", q, (None, None, None), "[T, H, D]")
    t, h, d = q.shape
    for name, x in (("k", k), ("v", v), ("g", g)):
        expect(op, name, x, (t, h, d), "the same [T, H, D] as q")
    expect(op, "beta", beta, (t, h), "one beta logit per token and head")
    expect(op, "a", a, (h,), "-exp(A_log) per head")
    expect(op, "dt_bias", dt_bias, (h * d,), "head-major decay-gate bias [H*D]")
    expect(op, "state", state, (h, d, d), "S[h] = [D_k, D_v]")
    expect_dtype(op, "v", v, FLOATS)
    expect_inplace(op, "state", state)
    expect_device(op, q=q, k=k, v=v, g=g, beta=beta, a=a, dt_bias=dt_bias, state=state)
    return t, h, d


def recurrent(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, block_v=None):
    """Launch the recurrent kernel on checked arguments (shared with the chunked impl's short calls)."""
    t, h, d = q.shape
    out = torch.empty((t, h, d), dtype=v.dtype, device=v.device)  # [T, H, D]
    if t == 0:
        return out
    dk = max(16, next_pow2(d))
    bv = block_v or min(dk, BLOCK_V)
    q, k, v, g, beta = (x.contiguous() for x in (q, k, v, g, beta))
    grid = (h, cdiv(d, bv))
    _kda_recurrent_kernel[grid](q, k, v, g, beta, a.contiguous(), dt_bias.contiguous(), state, out, t, h, d,
                                float(scale), float(l2_eps), out, out, out, out, out, 0.0, DK=dk, BV=bv, NORM=False,
                                NB=1, PDL=False, num_warps=warps(bv, dk))
    return out


def warps(bv: int, dk: int) -> int:
    """Warps a program of a [DK, BV] state block: 4 up to 4096 values, else 8."""
    return 4 if bv * dk <= 4096 else 8


def kda(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps):
    check_args("kda", q, k, v, g, beta, a, dt_bias, state)
    return recurrent(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps)
