"""short_conv_kda_norm in Triton: KDA's merged q|k|v short conv, its recurrent step and its output norm in one kernel
(the decode fusion after kda_norm's).

At decode the step runs short_conv=triton over the 3P projected channels, then kda_norm=triton_split_pdl on its
output: two launches a KDA layer in series (GPU session 32's timeline on an H100: the conv adds 4.8 us, the
recurrence 5.6), the second reading back the [3P] row the first just wrote. Here kda_norm=triton_split's grid (kda.py:
a head's value columns over D / BV programs, the norm by the head's last program to arrive) convolves its own inputs:

    program (h, j)   q[h], k[h] = silu(conv) over the head's 2 x D key channels   (every key row: the L2-norms need all)
                     v[h, cols] = silu(conv) over its BV value columns
                     each rounded to x's dtype (the chain hands kda_norm that tensor), then kda's recurrent step on
                     S[h][:, cols], o's float32 slice and its sum of squares stored (kda.py, NORM)
                     then its v columns' window rows rolled (no other program reads them)
    last program     norms and gates the head's whole row (kda.norm_rows), then rolls the window rows of the head's q
                     and k channels: every program of the head has read the old ones by then (each read them before
                     its arrival, an acq_rel atomic after a barrier: _arrival.py)

Each tap and each old window row is a register vector of its own (4 taps at most, Kimi-Linear's), picked by a
compile-time branch or an elementwise select. The first form picked them out of [4, N] blocks by masked sums: ~70
barriers a token more than the recurrence's 22, and 11.1 us in GPU session 33's step where the recurrence ran 6.3
(tests/backends/test_triton_compile.py now bounds the fused kernel's barriers by the recurrence's).

A head's q and k are convolved by each of its D / BV programs (4 x 256 channels x W taps at the 48B: a few hundred
FMAs a program, nothing beside its 16 KB state block). The conv's arithmetic is short_conv=triton's (each tap's input
is a window row or an x row plus zero, the taps added in order, then acc * sigmoid(acc)) and the recurrence's and the
norm's are kda_norm=triton_split's (the same jit helpers), so on one GPU the output is expected to be the unfused
chain's bits; the claim is only the tolerance (a compiler may contract the two kernels' FMAs differently), and the
GPU test reports which it was.

"triton_split_pdl" (`short_conv_kda_norm_split_pdl`): launched with programmatic dependent launch. Before the wait
for the kernel before it (the q|k|v GEMV) each program requests its state block, its taps and its window rows
(written only by this kernel, a step earlier, or never: the taps), then it waits, reads x, g, beta and the gate
(another kernel's outputs) and lets the next kernel (a PDL-launched o_proj) be scheduled. The same bits as
"triton_split".

Long calls loop over the tokens inside the kernel (correct for any T, serial in T); the engine calls it only for
decode calls ([engine] fuse_conv_kda, graph.FUSED_NORM_MAX_T tokens at most).
"""

import torch
import triton
import triton.language as tl

from sparkops.errors import BadInput

from . import kda
from ._arrival import arrive, counters, depart
from ._runtime import FLOATS, cdiv, expect, expect_device, expect_dtype, expect_inplace, interpreting, next_pow2
from .kda import BLOCK_V, norm_rows, recurrent_step


#: the most taps the kernel holds (each tap and window row is a register vector of its own): Kimi-Linear's is 4
MAX_TAPS = 4


@triton.jit
def _tap(cw_ptr, ch, ok, i: tl.constexpr, W: tl.constexpr):
    """Tap i of channels `ch` [N] (float32; zero past W)."""
    if i < W:
        return tl.load(cw_ptr + ch.to(tl.int64) * W + i, mask=ok, other=0.0).to(tl.float32)
    return tl.zeros(ch.shape, dtype=tl.float32)


@triton.jit
def _row(win_ptr, ch, ok, C, i: tl.constexpr, W: tl.constexpr):
    """Window row i of channels `ch` [N] (float32; zero past W - 1)."""
    if i < W - 1:
        return tl.load(win_ptr + i * C + ch, mask=ok, other=0.0).to(tl.float32)
    return tl.zeros(ch.shape, dtype=tl.float32)


@triton.jit
def _block(win_ptr, cw_ptr, ch, ok, C, W: tl.constexpr):
    """Channels `ch`'s taps 0..3 and old window rows 0..2, each its own [N] vector in the layout of `ch` (no 2D block
    to pick them from: picking by masked sums over a block's rows cost ~70 barriers a token in the first form)."""
    return (_tap(cw_ptr, ch, ok, 0, W), _tap(cw_ptr, ch, ok, 1, W), _tap(cw_ptr, ch, ok, 2, W),
            _tap(cw_ptr, ch, ok, 3, W), _row(win_ptr, ch, ok, C, 0, W), _row(win_ptr, ch, ok, C, 1, W),
            _row(win_ptr, ch, ok, C, 2, W))


@triton.jit
def _conv_token(x_ptr, x_stride, t, ch, ok, blk, W: tl.constexpr):
    """silu(sum_i tap_i * x_ext[t + i]) over channels `ch` [N], x_ext = [window ; x], `blk` = _block's vectors:
    short_conv=triton's arithmetic (each tap's input a window row or an x row, plus zero; the taps added in order;
    acc * sigmoid(acc)), float32."""
    w0, w1, w2, w3, s0, s1, s2 = blk
    acc = tl.zeros(ch.shape, dtype=tl.float32)
    for i in tl.static_range(W):
        if i == 0:
            w = w0
        elif i == 1:
            w = w1
        elif i == 2:
            w = w2
        else:
            w = w3
        r = t + i  # row of x_ext: window row r while r < W - 1 (rows past W - 2 are zero vectors)
        sv = tl.where(r == 0, s0, tl.where(r == 1, s1, tl.where(r == 2, s2, 0.0)))
        src = r - (W - 1)  # x's row, when it is one
        xv = tl.load(x_ptr + src.to(tl.int64) * x_stride + ch, mask=ok & (src >= 0), other=0.0).to(tl.float32)
        acc += (xv + sv) * w
    return acc * tl.sigmoid(acc)


@triton.jit
def _roll_window(x_ptr, x_stride, win_ptr, T, ch, ok, C, W: tl.constexpr, WT: tl.constexpr):
    """The window rows of channels `ch` become the last W-1 raw rows of [window ; x] (short_conv=triton's roll): every
    new row read into registers first, a barrier, then stored (a new row may come from an old one stored over)."""
    r = tl.arange(0, WT)
    r_ok = r < W - 1
    src = T - (W - 1) + r  # x's row of new window row r; negative: old window row src + W - 1
    m_x = (r_ok & (src >= 0))[:, None] & ok[None, :]
    m_s = (r_ok & (src < 0))[:, None] & ok[None, :]
    new = (tl.load(x_ptr + src[:, None].to(tl.int64) * x_stride + ch[None, :], mask=m_x, other=0.0).to(tl.float32)
           + tl.load(win_ptr + (src + (W - 1))[:, None] * C + ch[None, :], mask=m_s, other=0.0))
    tl.debug_barrier()  # every read of the old rows in this program happens before the first write
    tl.store(win_ptr + r[:, None] * C + ch[None, :], new, mask=r_ok[:, None] & ok[None, :])


@triton.jit
def _conv_kda_kernel(x_ptr, cw_ptr, win_ptr, g_ptr, beta_ptr, a_ptr, dtb_ptr, s_ptr, gate_ptr, w_ptr, o_ptr, part_ptr,
                     cnt_ptr, y_ptr, T, H, D, x_stride, scale, l2_eps, eps, W: tl.constexpr, WT: tl.constexpr,
                     DK: tl.constexpr, BV: tl.constexpr, NB: tl.constexpr, PDL: tl.constexpr):
    """Program (h, j): the conv of head h's q and k channels and of its value columns j*BV .. j*BV+BV-1, then kda's
    recurrence on those columns (o's float32 slice into o_ptr, its sum of squares into part_ptr [T, H, NB]); the head's
    last program to arrive (cnt_ptr[h]) norms and gates the whole row into y_ptr and rolls the head's q/k window rows.
    PDL: the state, window and taps requested before the wait for the kernel before; nothing another kernel writes
    read, and nothing written, before it."""
    h, cols, dk, k_ok, c_ok, s_offs, s_mask, S, a, dtb = kda.open_block(s_ptr, a_ptr, dtb_ptr, D, DK, BV, False)
    P = H * D
    C = 3 * P
    qch = h * D + dk  # the head's q channels [DK] of x's 3P
    kch = P + qch  # its k channels [DK]
    vch = 2 * P + h * D + cols  # this program's v channels [BV]
    blk_q = _block(win_ptr, cw_ptr, qch, k_ok, C, W)  # 4 taps and 3 window rows, [DK] each
    blk_k = _block(win_ptr, cw_ptr, kch, k_ok, C, W)
    blk_v = _block(win_ptr, cw_ptr, vch, c_ok, C, W)  # [BV] each
    if PDL:
        tl.extra.cuda.gdc_wait()  # x, g, beta and the gate are other kernels' outputs
        tl.extra.cuda.gdc_launch_dependents()
    act = x_ptr.dtype.element_ty  # the chain's conv output dtype, kda_norm's q/k/v
    for t in range(T):
        row = (t * H + h).to(tl.int64) * D  # start of token t, head h in a [T, H, D] tensor
        q = _conv_token(x_ptr, x_stride, t, qch, k_ok, blk_q, W).to(act).to(tl.float32)
        k = _conv_token(x_ptr, x_stride, t, kch, k_ok, blk_k, W).to(act).to(tl.float32)
        v = _conv_token(x_ptr, x_stride, t, vch, c_ok, blk_v, W).to(act).to(tl.float32)
        q = tl.where(k_ok, q, 0.0)  # masked channels: silu(0) is 0 already; kept explicit for the L2-norms
        k = tl.where(k_ok, k, 0.0)
        g = tl.load(g_ptr + row + dk, mask=k_ok, other=0.0).to(tl.float32)
        b = tl.sigmoid(tl.load(beta_ptr + t * H + h).to(tl.float32))
        S, o = recurrent_step(S, q, k, g, v, b, a, dtb, scale, l2_eps)  # o [BV]; masked columns are 0
        tl.store(o_ptr + row + cols, o, mask=c_ok)
        tl.store(part_ptr + (t * H + h) * NB + tl.program_id(1), tl.sum(o * o, axis=0))
    tl.store(s_ptr + s_offs, S, mask=s_mask)
    _roll_window(x_ptr, x_stride, win_ptr, T, vch, c_ok, C, W, WT)  # this program's v columns: no one else reads them
    if arrive(cnt_ptr, h, tl.num_programs(1)):  # the head's last program: every slice and sum is in the L2, and every
        # program of the head has read the old q/k window rows
        norm_rows(o_ptr, part_ptr, gate_ptr, w_ptr, y_ptr, T, H, D, h, eps, dk, k_ok, NB, GATE_CG=False)
        _roll_window(x_ptr, x_stride, win_ptr, T, qch, k_ok, C, W, WT)
        _roll_window(x_ptr, x_stride, win_ptr, T, kch, k_ok, C, W, WT)
        depart(cnt_ptr, h)


def short_conv_kda_norm_split(x, conv_weight, window, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps):
    """Implementation "triton_split" (module docstring)."""
    return _short_conv_kda_norm(x, conv_weight, window, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps,
                                pdl=False)


def short_conv_kda_norm_split_pdl(x, conv_weight, window, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight,
                                  eps):
    """Implementation "triton_split_pdl": "triton_split" with programmatic dependent launch (module docstring)."""
    return _short_conv_kda_norm(x, conv_weight, window, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps,
                                pdl=not interpreting())


def _short_conv_kda_norm(x, conv_weight, window, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps,
                         pdl: bool):
    """Every argument checked (a refused call leaves the window and the state as they were), then one launch of
    kda_norm=triton_split's grid."""
    op = "short_conv_kda_norm"
    t, h, d, width = _check(op, x, conv_weight, window, g, beta, a, dt_bias, state, gate, weight)
    y = torch.empty((t, h, d), dtype=x.dtype, device=x.device)  # [T, H, D]
    if t == 0:
        return y
    if x.stride(-1) != 1:
        x = x.contiguous()
    dk = max(16, next_pow2(d))
    bv = min(dk, BLOCK_V)
    nb = cdiv(d, bv)
    g, beta, gate = (z.contiguous() for z in (g, beta, gate))
    o = torch.empty((t, h, d), dtype=torch.float32, device=x.device)  # [T, H, D] unnormed slices
    part = torch.empty((t, h, next_pow2(nb)), dtype=torch.float32, device=x.device)  # [T, H, NB] sums of squares
    _conv_kda_kernel[(h, nb)](
        x, conv_weight.contiguous(), window, g, beta, a.contiguous(), dt_bias.contiguous(), state, gate,
        weight.contiguous(), o, part, counters(op, x.device, h), y, t, h, d, x.stride(0), float(scale), float(l2_eps),
        float(eps), W=width, WT=next_pow2(width), DK=dk, BV=bv, NB=next_pow2(nb), PDL=pdl,
        num_warps=kda.warps(bv, dk), **({"launch_pdl": True} if pdl else {}))
    return y


def _check(op, x, conv_weight, window, g, beta, a, dt_bias, state, gate, weight):
    """Shapes, dtypes and devices of every argument; returns (T, H, D, W)."""
    expect(op, "g", g, (None, None, None), "[T, H, D]: the decay logits give the heads' shape")
    t, h, d = g.shape
    p = h * d
    expect(op, "x", x, (t, 3 * p), f"[T, 3P] = [{t}, {3 * p}]: the q|k|v projections of g's tokens, P = H*D")
    expect(op, "conv_weight", conv_weight, (3 * p, None), "[3P, W]: the merged q|k|v taps")
    width = conv_weight.shape[1]
    if width < 1 or width > MAX_TAPS:
        raise BadInput(f"{op}: conv_weight has {width} taps per channel; this kernel holds 1 to {MAX_TAPS} (Kimi-Linear's "
                       f"short conv has 4): select short_conv_kda_norm=torch, or leave [engine] fuse_conv_kda off")
    expect(op, "window", window, (width - 1, 3 * p), "[W-1, 3P]: the previous W-1 raw q|k|v rows")
    expect(op, "beta", beta, (t, h), "one beta logit per token and head")
    expect(op, "a", a, (h,), "-exp(A_log) per head")
    expect(op, "dt_bias", dt_bias, (p,), "head-major decay-gate bias [H*D]")
    expect(op, "state", state, (h, d, d), "S[h] = [D_k, D_v]")
    expect(op, "gate", gate, (t, h, d), "the same [T, H, D] as g")
    expect(op, "weight", weight, (d,), "one gain per head channel, shared by the heads")
    for name, z in (("x", x), ("g", g), ("gate", gate), ("conv_weight", conv_weight)):
        expect_dtype(op, name, z, FLOATS)
    expect_inplace(op, "window", window)
    expect_inplace(op, "state", state)
    expect_device(op, x=x, conv_weight=conv_weight, window=window, g=g, beta=beta, a=a, dt_bias=dt_bias, state=state,
                  gate=gate, weight=weight)
    return t, h, d, width
