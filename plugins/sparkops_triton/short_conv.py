"""short_conv in Triton: causal depthwise conv + SiLU over [window ; x], with the window updated in place.

Grid: (time blocks, channel blocks). Row t of the output needs inputs t-(W-1) .. t of x_ext =
[state ; x]; only the first time block reaches back into `state`. That same program (time block 0)
also writes the new window, the last W-1 rows of x_ext, after a barrier, so no program reads the old
window after it has been overwritten (a program of another time block never touches `state`).

`short_conv_pdl` ("triton_pdl"): the same kernel launched with programmatic dependent launch. At one token (the decode
step) it requests its window rows and taps - nothing the kernel before it writes - before it waits for that kernel
(griddepcontrol.wait) and reads x; a longer call waits first. Right after the wait it lets the next kernel be
scheduled (KDA's kda_norm=triton_split_pdl then requests its 2 MB of state while this one runs). Each tap is taken
from the prefetched block by a sum of one value and zeros, and added in the same order with the same operands, so the
claim is bit-identity to "triton". Session 24's timeline: in a step whose GEMVs, experts and KDA norms are PDL
kernels, the short conv (20 launches a token) was one of the chain's breaks.
"""

import torch
import triton
import triton.language as tl

from ._runtime import FLOATS, cdiv, expect, expect_device, expect_dtype, expect_inplace, interpreting, next_pow2


@triton.jit
def _short_conv_kernel(x_ptr, w_ptr, s_ptr, y_ptr, T, C, W: tl.constexpr, W_POW2: tl.constexpr,
                       BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr, PREFETCH: tl.constexpr = False,
                       GDC: tl.constexpr = False, W_TAPS: tl.constexpr = 1):
    """PREFETCH (one token: BLOCK_T == 1 and T == 1): the window rows and the taps loaded first, x after (GDC: after
    the wait for the kernel before). GDC: launched with PDL (wait before reading x, then let the next kernel be
    scheduled); compiled only for the GPU. W_TAPS: a power of two >= W (the prefetched taps' block)."""
    pid_t = tl.program_id(0)
    ch = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)  # [BLOCK_C]
    c_ok = ch < C
    t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)  # [BLOCK_T]
    acc = tl.zeros((BLOCK_T, BLOCK_C), dtype=tl.float32)
    if PREFETCH:
        j = tl.arange(0, W_TAPS)  # [W_TAPS]: window row j for the taps j < W - 1, tap j for j < W
        win = tl.load(s_ptr + j[:, None] * C + ch[None, :], mask=(j < W - 1)[:, None] & c_ok[None, :],
                      other=0.0).to(tl.float32)  # [W_TAPS, BLOCK_C] the old window (this kernel's last call wrote it)
        taps = tl.load(w_ptr + ch[None, :] * W + j[:, None], mask=(j < W)[:, None] & c_ok[None, :],
                       other=0.0).to(tl.float32)  # [W_TAPS, BLOCK_C]
        if GDC:
            tl.extra.cuda.gdc_wait()  # x is the kernel before's output
            tl.extra.cuda.gdc_launch_dependents()  # the next kernel's own wait still waits for all of this grid
        xrow = tl.load(x_ptr + ch, mask=c_ok, other=0.0).to(tl.float32)  # [BLOCK_C] the one token
        zero = tl.zeros((BLOCK_C,), dtype=tl.float32)
        for i in tl.static_range(W):  # tap i: window row i (i < W - 1), then x; the loop below's operands and order
            w = tl.sum(tl.where(j[:, None] == i, taps, 0.0), axis=0)  # [BLOCK_C] exact: one value and zeros
            if i < W - 1:
                sv = tl.sum(tl.where(j[:, None] == i, win, 0.0), axis=0)
                acc += (zero + sv)[None, :] * w[None, :]
            else:
                acc += (xrow + zero)[None, :] * w[None, :]
    else:
        if GDC:
            tl.extra.cuda.gdc_wait()  # a longer call: nothing read before the kernel before is done
            tl.extra.cuda.gdc_launch_dependents()
        for i in tl.static_range(W):
            src = t - (W - 1) + i  # row of x feeding tap i; negative rows live in the window
            from_x = (src >= 0) & (src < T)
            from_s = src < 0
            xv = tl.load(x_ptr + src[:, None] * C + ch[None, :], mask=from_x[:, None] & c_ok[None, :], other=0.0)
            sv = tl.load(s_ptr + (src + (W - 1))[:, None] * C + ch[None, :], mask=from_s[:, None] & c_ok[None, :],
                         other=0.0)
            w = tl.load(w_ptr + ch * W + i, mask=c_ok, other=0.0).to(tl.float32)  # [BLOCK_C]
            acc += (xv.to(tl.float32) + sv.to(tl.float32)) * w[None, :]
    y = acc * tl.sigmoid(acc)
    tl.store(y_ptr + t[:, None] * C + ch[None, :], y.to(y_ptr.dtype.element_ty),
             mask=(t < T)[:, None] & c_ok[None, :])
    if pid_t == 0:
        # the new window: rows T-(W-1) .. T-1 of x_ext in x's coordinates, some still from the old window
        r = tl.arange(0, W_POW2)  # W_POW2 >= W-1; not `j`: the prefetch's j has W_TAPS rows
        r_ok = r < (W - 1)
        src_new = T - (W - 1) + r
        m_x = (r_ok & (src_new >= 0))[:, None] & c_ok[None, :]
        m_s = (r_ok & (src_new < 0))[:, None] & c_ok[None, :]
        new = (tl.load(x_ptr + src_new[:, None] * C + ch[None, :], mask=m_x, other=0.0).to(tl.float32)
               + tl.load(s_ptr + (src_new + (W - 1))[:, None] * C + ch[None, :], mask=m_s, other=0.0))
        tl.debug_barrier()  # every read of the old window in this program happens before the first write
        tl.store(s_ptr + r[:, None] * C + ch[None, :], new, mask=r_ok[:, None] & c_ok[None, :])


def short_conv(x, weight, state):
    """Implementation "triton"."""
    return _short_conv(x, weight, state, pdl=False)


def short_conv_pdl(x, weight, state):
    """Implementation "triton_pdl": "triton" launched with programmatic dependent launch (module docstring). In
    Triton's interpreter (no griddepcontrol) the same prefetching arithmetic runs without the launch attribute."""
    return _short_conv(x, weight, state, pdl=True)


def _short_conv(x, weight, state, pdl: bool):
    op = "short_conv"
    expect(op, "x", x, (None, None), "[T, C]")
    t, c = x.shape
    expect(op, "weight", weight, (c, None), "[C, W] taps per channel")
    width = weight.shape[1]
    expect(op, "state", state, (width - 1, c), "[W-1, C]: the previous W-1 raw inputs")
    expect_dtype(op, "x", x, FLOATS)
    expect_inplace(op, "state", state)
    expect_device(op, x=x, weight=weight, state=state)
    if width < 1:
        from sparkops.errors import BadInput

        raise BadInput(f"{op}: weight has {width} taps per channel; pass at least one")
    x = x.contiguous()
    y = torch.empty((t, c), dtype=x.dtype, device=x.device)  # [T, C]
    if t == 0:
        return y
    # only time block 0 may reach back into the window: a block must span at least W-1 rows
    block_t = 1 if t == 1 else max(16, next_pow2(width - 1))
    block_c = 128 if t > 1 else 256
    grid = (cdiv(t, block_t), cdiv(c, block_c))
    gdc = pdl and not interpreting()
    _short_conv_kernel[grid](x, weight.contiguous(), state, y, t, c, W=width, W_POW2=next_pow2(max(1, width - 1)),
                             BLOCK_T=block_t, BLOCK_C=block_c, PREFETCH=pdl and t == 1, GDC=gdc,
                             W_TAPS=next_pow2(width), num_warps=4, **({"launch_pdl": True} if gdc else {}))
    return y
