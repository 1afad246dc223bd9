"""kda_norm in Triton: KDA's recurrent step and its per-head output norm in one kernel (the decode fusion).

One program per head holds the whole state S[h] ([D_k, D_v] float32) and, for each token, runs kda's recurrent step
(kda.py's `recurrent_step`: gate, q/k L2-norms, decay -> error -> rank-1 write -> read), then norms the head's output
row o ([D_v] float32, never stored) and gates it: y = o / sqrt(mean(o^2) + eps) * weight * sigmoid(gate). The
unfused pair is two launches a KDA layer, the second reading back the row the first wrote; here o never leaves
registers.

The price of the fusion: the norm needs all D_v columns of a head in one program, so a head is one program (kda.py
splits it into D_v / 32 programs). At the 48B's decode shape that is 32 programs of 16 warps, each carrying 64 KB of
state (32 values a thread), where kda=triton runs 128 programs of 4 warps. Compiled for sm_90 (Triton 3.6, ptxas -v,
no GPU needed), that program holds too much: 16 warps cap a thread at 128 registers and it spills ~580 bytes a thread
(368 with its loads in another order; 8 warps: 255 registers, ~1 KB), where kda=triton's [128, 32] tile at 4 warps
fits in 222 registers.

Hence a second form, "triton_split" (`kda_norm_split`): kda's own kernel and grid (kda.py, NORM), a head's columns
over D / 32 programs, each storing its unnormed float32 output slice and its slice's sum of squares; the last of a
head's programs to arrive (sparkops_triton._arrival's counters) adds the head's partial sums in a fixed order, norms
and gates the whole row read back from the L2, and writes y. Deterministic (the same bits whichever program is
last), not bitwise "triton" (another summation order). GPU session 21's side-by-side at the 48B's decode step (a
KDA layer, CUDA graphs): the unfused pair 7.42 us, "triton" 11.00 (the spills cost more than the launch saved),
"triton_split" 6.12, kda alone 4.80.

`kda_norm_trigger` ("triton_pdl"): the one-program kernel, which first lets the next kernel of the stream be scheduled
(programmatic dependent launch), as gated_rmsnorm's "triton_pdl" does for KDA's o_proj. The same bits.
`kda_norm_split_pdl` ("triton_split_pdl"): "triton_split" launched with programmatic dependent launch (kda.py, PDL):
each program requests its slice of the state (2 MB a layer at the 48B, the kernel's largest read, written only by
itself a step earlier) while the kernel before it (the short conv) finishes, waits for that kernel, then lets the
next one be scheduled, so that a PDL-launched o_proj (linear@Q4_K=cupy_rowwarp_pdl) requests its weights while the
recurrence runs: with [engine] fuse_kda_norm the gated_rmsnorm whose trigger did that for it (session 18: 0.8 us a
pair) is not called. The same bits as "triton_split": the same arithmetic, every read of another kernel's output
after the wait.

Long calls (a prefill) loop over the tokens inside the kernel, correct for any T but serial in T; the engine calls
kda_norm only for one-token calls and keeps the chunked kda and the norm apart for a prefill chunk.
"""

import torch
import triton
import triton.language as tl

from . import kda
from ._arrival import counters
from ._runtime import FLOATS, cdiv, expect, expect_device, expect_dtype, interpreting, next_pow2
from .kda import BLOCK_V, check_args, load_token, recurrent_step


@triton.jit
def _kda_norm_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, a_ptr, dtb_ptr, s_ptr, gate_ptr, w_ptr, y_ptr, T, H, D,
                     scale, l2_eps, eps, DK: tl.constexpr, TRIGGER: tl.constexpr):
    if TRIGGER:  # compiled only for the GPU (the interpreter has no griddepcontrol)
        tl.extra.cuda.gdc_launch_dependents()
    h = tl.program_id(0)
    dk = tl.arange(0, DK)  # key channels, and value columns: a program holds the head's whole row [DK]
    ok = dk < D
    s_offs = h.to(tl.int64) * D * D + dk[:, None] * D + dk[None, :]  # [DK, DK] into S[h] = [D_k, D_v]
    s_mask = ok[:, None] & ok[None, :]
    S = tl.load(s_ptr + s_offs, mask=s_mask, other=0.0)  # masked columns stay 0: their u, o and y are 0
    a = tl.load(a_ptr + h).to(tl.float32)
    dtb = tl.load(dtb_ptr + h * D + dk, mask=ok, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + dk, mask=ok, other=0.0).to(tl.float32)  # the norm's gain [DK]
    for t in range(T):
        row = (t * H + h).to(tl.int64) * D  # start of token t, head h in a [T, H, D] tensor
        q, k, g, v, b = load_token(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, row, t * H + h, dk, ok, dk, ok)
        gt = tl.load(gate_ptr + row + dk, mask=ok, other=0.0).to(tl.float32)
        S, o = recurrent_step(S, q, k, g, v, b, a, dtb, scale, l2_eps)  # o [DK], float32, never stored
        inv = 1.0 / tl.sqrt(tl.sum(o * o, axis=0) / D + eps)  # the head's norm over its D channels
        y = o * inv * w * tl.sigmoid(gt)
        tl.store(y_ptr + row + dk, y.to(y_ptr.dtype.element_ty), mask=ok)
    tl.store(s_ptr + s_offs, S, mask=s_mask)


def kda_norm(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps):
    """Implementation "triton"."""
    return _kda_norm(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps, form="one")


def kda_norm_trigger(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps):
    """Implementation "triton_pdl": "triton" letting the next kernel be scheduled as it starts (module docstring)."""
    return _kda_norm(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps,
                     form="one" if interpreting() else "trigger")


def kda_norm_split(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps):
    """Implementation "triton_split": kda's kernel and grid, the norm by the head's last program (module docstring)."""
    return _kda_norm(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps, form="split")


def kda_norm_split_pdl(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps):
    """Implementation "triton_split_pdl": "triton_split" with programmatic dependent launch (module docstring)."""
    return _kda_norm(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps,
                     form="split" if interpreting() else "split_pdl")


def warps(dk: int) -> int:
    """Warps a one-program-a-head program: ~32 state values a thread at D = 128 (16 warps), fewer for smaller heads."""
    return max(1, min(16, dk * dk // (32 * 32)))


def _kda_norm(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps, form: str):
    """Checks, then the launch of `form`: "one" (a program a head), "trigger" (the same with PDL's trigger), "split"
    (kda's kernel with its norm epilogue), "split_pdl" (that launched with PDL)."""
    op = "kda_norm"
    t, h, d = _check(op, q, k, v, g, beta, a, dt_bias, state, gate, weight)
    y = torch.empty((t, h, d), dtype=v.dtype, device=v.device)  # [T, H, D]
    if t == 0:
        return y
    dk = max(16, next_pow2(d))
    q, k, v, g, beta, gate = (x.contiguous() for x in (q, k, v, g, beta, gate))
    a, dt_bias, weight = a.contiguous(), dt_bias.contiguous(), weight.contiguous()
    if form in ("split", "split_pdl"):
        bv = min(dk, BLOCK_V)
        nb = cdiv(d, bv)
        o = torch.empty((t, h, d), dtype=torch.float32, device=v.device)  # [T, H, D] unnormed slices
        part = torch.empty((t, h, next_pow2(nb)), dtype=torch.float32, device=v.device)  # [T, H, NB] sums of squares
        kda._kda_recurrent_kernel[(h, nb)](q, k, v, g, beta, a, dt_bias, state, o, t, h, d, float(scale),
                                           float(l2_eps), gate, weight, y, part, counters(op, v.device, h),
                                           float(eps), DK=dk, BV=bv, NORM=True, NB=next_pow2(nb),
                                           PDL=form == "split_pdl", num_warps=kda.warps(bv, dk),
                                           **({"launch_pdl": True} if form == "split_pdl" else {}))
    else:
        _kda_norm_kernel[(h,)](q, k, v, g, beta, a, dt_bias, state, gate, weight, y, t, h, d, float(scale),
                               float(l2_eps), float(eps), DK=dk, TRIGGER=form == "trigger", num_warps=warps(dk))
    return y


def _check(op, q, k, v, g, beta, a, dt_bias, state, gate, weight):
    """kda's argument checks, then the norm's; returns (T, H, D)."""
    t, h, d = check_args(op, q, k, v, g, beta, a, dt_bias, state)
    expect(op, "gate", gate, (t, h, d), "the same [T, H, D] as v")
    expect(op, "weight", weight, (d,), "one gain per head channel, shared by the heads")
    expect_dtype(op, "gate", gate, FLOATS)
    expect_device(op, v=v, gate=gate, weight=weight)
    return t, h, d
