"""kda_lowrank_norm in Triton: KDA's two low-rank gate up-projections, its recurrent step and its output norm in one
kernel (the decode fusion after kda_norm's).

At decode a KDA layer's decay logits g = f_b f and output gate = g_b ga are two GEMVs of ~1 MB each (F16 [H*D, P],
P = 128 on the 48B), ~2.7 us a launch in GPU session 22's step: 40 launches a token on the 48B, whose outputs only
the recurrence and its norm read. Here kda_norm=triton_split's grid (kda.py: a head's value columns over D / BV
programs, the norm by the head's last program to arrive) forms them itself:

    program (h, j)   g[h, :]      = f_b[h*D : h*D + D] . f     [D]: every key row of the head (the decay needs them all)
                     gate[h, cols] = g_b[h*D + cols] . ga       [BV]: its own value columns only, into a float32
                                                                scratch [T, H, D] the last program reads (from the L2)
                     then kda's recurrent step on S[h][:, cols], its output slice and sum of squares stored
    last program     norms and gates the whole row (kda.norm_rows, the gate read back with ld.global.cg)

Each of a head's D / BV programs forms the head's g: f_b's 32 KB a head is read once from DRAM and D / BV - 1 more
times from the L2, in exchange for no second launch and no [T, H*D] round trip through memory. The products are
float32 from the stored weights and the codes as given (the unfused chain rounds g and the gate to the activations'
dtype; the reference keeps them float64): the claim is the tolerance, not bit-identity with any chain.

"triton_split_pdl" (`kda_lowrank_norm_split_pdl`): the same launched with programmatic dependent launch, as
kda_norm=triton_split_pdl: the program requests its slice of the state (written only by this kernel, a step earlier)
while the kernel before it finishes, waits for that kernel before reading anything another kernel writes (q, k, v,
beta, the codes) or writing anything, then lets the next kernel (a PDL-launched o_proj) be scheduled. The same bits
as "triton_split".

Long calls loop over the tokens inside the kernel (correct for any T, serial in T); the engine calls kda_lowrank_norm
only for one-token calls ([engine] fuse_kda_gates).
"""

import torch
import triton
import triton.language as tl

from sparkops.errors import BadInput
from sparkops.qweight import QWeight

from . import kda
from ._arrival import arrive, counters, depart
from ._runtime import FLOATS, cdiv, expect, expect_device, expect_dtype, interpreting, next_pow2
from .kda import BLOCK_V, check_args, norm_rows, open_block, recurrent_step

#: the low rank's chunk a loop step of the up-projections reads: [D, BP] weights (16 values a thread at D = 128 with
#: WARPS' 8 warps), so the tile does not crowd out the state block's registers
BLOCK_P = 32
#: the up-projections' products summed across the row once (True) or chunk by chunk (False): `up_project`
ONE_SUM = True
#: warps a program (None: kda's, 4 for the 48B's [128, 32] state block). GPU session 23's probe
#: (bench/probes/kda_lowrank_forms.py, one H200, each form once, us a KDA layer, plain / PDL, BP 32): 4 warps chunk by
#: chunk 10.69 / 10.15, summed once 9.09 / 8.19; 8 warps chunk by chunk 7.39 / 9.22, summed once 7.72 / 8.76; 2 warps
#: summed once 8.75 / 8.02 (BP 16 lost everywhere, 64 tied). The chain it replaces: 4.61 (the two GEMVs) + 4.91
#: (kda_norm=triton_split_pdl). The proof's side-by-side then (call 7): 7.59 / 8.59 against the chain's 10.58.
#: Differences under ~1 us are inside one run's noise; 8 warps summed once had the least plain-plus-PDL time of the BP 32
#: forms, and the rung takes whichever form the proof's side-by-side finds faster
WARPS = 8


@triton.jit
def up_project(w_ptr, w_stride, rows, r_ok, x_ptr, P: tl.constexpr, BP: tl.constexpr, ONE_SUM: tl.constexpr):
    """sum_p W[rows, p] x[p] in float32 ([R] over `rows`), W a float weight as stored (row stride `w_stride`), x a code
    [P] in any float dtype; P in chunks of BP. ONE_SUM: the chunks' products accumulate elementwise and are summed
    across the row once at the end (no cross-thread reduction, hence no barrier, between one chunk's loads and the
    next's); else each chunk is summed as it comes. The two orders differ in rounding."""
    if ONE_SUM:
        acc2 = tl.zeros([rows.shape[0], BP], tl.float32)
        for p0 in tl.static_range(0, P, BP):
            w, x = _chunk(w_ptr, w_stride, rows, r_ok, x_ptr, p0, P, BP)
            acc2 += w * x[None, :]
        acc = tl.sum(acc2, axis=1)
    else:
        acc = tl.zeros([rows.shape[0]], tl.float32)
        for p0 in tl.static_range(0, P, BP):
            w, x = _chunk(w_ptr, w_stride, rows, r_ok, x_ptr, p0, P, BP)
            acc += tl.sum(w * x[None, :], axis=1)
    return acc


@triton.jit
def _chunk(w_ptr, w_stride, rows, r_ok, x_ptr, p0, P: tl.constexpr, BP: tl.constexpr):
    """Columns p0 .. p0+BP-1 of W's `rows` ([R, BP]) and of the code x ([BP]), as float32, zero past P or a row."""
    pc = p0 + tl.arange(0, BP)  # [BP]
    p_ok = pc < P
    w = tl.load(w_ptr + rows[:, None].to(tl.int64) * w_stride + pc[None, :], mask=r_ok[:, None] & p_ok[None, :],
                other=0.0).to(tl.float32)  # [R, BP]
    x = tl.load(x_ptr + pc, mask=p_ok, other=0.0).to(tl.float32)  # [BP]
    return w, x


@triton.jit
def _kda_lowrank_kernel(q_ptr, k_ptr, v_ptr, f_ptr, fb_ptr, beta_ptr, a_ptr, dtb_ptr, s_ptr, ga_ptr, gb_ptr, w_ptr,
                        o_ptr, gsc_ptr, part_ptr, cnt_ptr, y_ptr, T, H, D, f_stride, ga_stride, fb_stride, gb_stride,
                        scale, l2_eps, eps, P: tl.constexpr, BP: tl.constexpr, DK: tl.constexpr, BV: tl.constexpr,
                        NB: tl.constexpr, PDL: tl.constexpr, ONE_SUM: tl.constexpr):
    """Program (h, j): head h's decay logits (all D key rows) and its output gate on value columns j*BV .. j*BV+BV-1
    from the codes f[t] and ga[t] ([P] each, row strides f_stride / ga_stride), then kda's recurrence on those columns
    (o's float32 slice into o_ptr, its sum of squares into part_ptr [T, H, NB], the gate's slice into gsc_ptr); the
    head's last program to arrive (cnt_ptr[h]) norms and gates the whole row into y_ptr. PDL as kda.py's kernel."""
    h, cols, dk, k_ok, c_ok, s_offs, s_mask, S, a, dtb = open_block(s_ptr, a_ptr, dtb_ptr, D, DK, BV, PDL)
    for t in range(T):
        row = (t * H + h).to(tl.int64) * D  # start of token t, head h in a [T, H, D] tensor
        g = up_project(fb_ptr, fb_stride, h * D + dk, k_ok, f_ptr + t * f_stride, P, BP, ONE_SUM)  # [DK] decay logits
        gt = up_project(gb_ptr, gb_stride, h * D + cols, c_ok, ga_ptr + t * ga_stride, P, BP, ONE_SUM)  # [BV] output gate
        tl.store(gsc_ptr + row + cols, gt, mask=c_ok)
        q = tl.load(q_ptr + row + dk, mask=k_ok, other=0.0).to(tl.float32)
        k = tl.load(k_ptr + row + dk, mask=k_ok, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + row + cols, mask=c_ok, other=0.0).to(tl.float32)
        b = tl.sigmoid(tl.load(beta_ptr + t * H + h).to(tl.float32))
        S, o = recurrent_step(S, q, k, g, v, b, a, dtb, scale, l2_eps)  # o [BV]; masked columns are 0
        tl.store(o_ptr + row + cols, o, mask=c_ok)
        tl.store(part_ptr + (t * H + h) * NB + tl.program_id(1), tl.sum(o * o, axis=0))
    tl.store(s_ptr + s_offs, S, mask=s_mask)
    if arrive(cnt_ptr, h, tl.num_programs(1)):  # the head's last program: every slice, sum and gate is in the L2
        norm_rows(o_ptr, part_ptr, gsc_ptr, w_ptr, y_ptr, T, H, D, h, eps, dk, k_ok, NB, GATE_CG=True)
        depart(cnt_ptr, h)


def kda_lowrank_norm_split(q, k, v, f, f_b, beta, a, dt_bias, state, scale, l2_eps, ga, g_b, weight, eps):
    """Implementation "triton_split" (module docstring)."""
    return _kda_lowrank_norm(q, k, v, f, f_b, beta, a, dt_bias, state, scale, l2_eps, ga, g_b, weight, eps, pdl=False)


def kda_lowrank_norm_split_pdl(q, k, v, f, f_b, beta, a, dt_bias, state, scale, l2_eps, ga, g_b, weight, eps):
    """Implementation "triton_split_pdl": "triton_split" with programmatic dependent launch (module docstring)."""
    return _kda_lowrank_norm(q, k, v, f, f_b, beta, a, dt_bias, state, scale, l2_eps, ga, g_b, weight, eps,
                             pdl=not interpreting())


def _kda_lowrank_norm(q, k, v, f, f_b, beta, a, dt_bias, state, scale, l2_eps, ga, g_b, weight, eps, pdl: bool):
    """Every argument checked (a refused call leaves the state as it was), then one launch of kda's grid."""
    op = "kda_lowrank_norm"
    t, h, d = check_args(op, q, k, v, q, beta, a, dt_bias, state)  # g is formed here: q stands in for its shape
    fb, p = _up_weight(op, "f_b", f_b, h * d)
    gb, pg = _up_weight(op, "g_b", g_b, h * d)
    if pg != p:
        raise BadInput(f"{op}: f_b's low rank is {p} but g_b's is {pg}; both up-projections read codes of one rank "
                       f"(the head dim on Kimi-Linear)")
    for name, code in (("f", f), ("ga", ga)):
        expect(op, name, code, (t, p), f"[T, P] = [{t}, {p}]: {'f_a' if name == 'f' else 'g_a'}'s output")
        expect_dtype(op, name, code, FLOATS)
        if code.stride(-1) != 1:
            raise BadInput(f"{op}: '{name}' has stride {code.stride(-1)} along P; pass a code whose last dim is "
                           f"contiguous (a column slice of a fused projection is; .contiguous() makes one)")
    expect(op, "weight", weight, (d,), "one gain per head channel, shared by the heads")
    expect_device(op, v=v, f=f, f_b=fb, ga=ga, g_b=gb, weight=weight)
    y = torch.empty((t, h, d), dtype=v.dtype, device=v.device)  # [T, H, D]
    if t == 0:
        return y
    dk = max(16, next_pow2(d))
    bv = min(dk, BLOCK_V)
    nb = cdiv(d, bv)
    q, k, v, beta = (x.contiguous() for x in (q, k, v, beta))
    o = torch.empty((t, h, d), dtype=torch.float32, device=v.device)  # [T, H, D] unnormed slices
    gsc = torch.empty((t, h, d), dtype=torch.float32, device=v.device)  # [T, H, D] the output gate
    part = torch.empty((t, h, next_pow2(nb)), dtype=torch.float32, device=v.device)  # [T, H, NB] sums of squares
    _kda_lowrank_kernel[(h, nb)](
        q, k, v, f, fb, beta, a.contiguous(), dt_bias.contiguous(), state, ga, gb, weight.contiguous(), o, gsc, part,
        counters(op, v.device, h), y, t, h, d, f.stride(0), ga.stride(0), fb.stride(0), gb.stride(0), float(scale),
        float(l2_eps), float(eps), P=p, BP=min(BLOCK_P, next_pow2(p)), DK=dk, BV=bv, NB=next_pow2(nb), PDL=pdl,
        ONE_SUM=ONE_SUM, num_warps=WARPS or kda.warps(bv, dk), **({"launch_pdl": True} if pdl else {}))
    return y


def _up_weight(op: str, name: str, w, rows: int) -> tuple[torch.Tensor, int]:
    """(the stored float rows [H*D, P], P) of an up-projection; any other weight is named with the fix."""
    if not isinstance(w, QWeight):
        raise BadInput(f"{op}: '{name}' is a {type(w).__name__}; pass a sparkops.qweight.QWeight")
    if not w.is_float or len(w.shape) != 2:
        raise BadInput(f"{op}: '{name}' is {w.qtype.name} {list(w.shape)}; this kernel reads a float up-projection "
                       f"[H*D, P] (F32, F16 or BF16, as Kimi-Linear's GGUFs store f_b and g_b); select another "
                       f"implementation for quantized ones")
    if w.shape[0] != rows:
        raise BadInput(f"{op}: '{name}' has {w.shape[0]} rows; the up-projection makes H*D = {rows}")
    raw = w.raw
    if raw.stride(-1) != 1:
        raise BadInput(f"{op}: '{name}' stores its rows with stride {raw.stride(-1)}; pass contiguous rows")
    return raw, int(w.shape[1])
