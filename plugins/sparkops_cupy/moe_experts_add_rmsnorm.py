"""moe_experts_add_rmsnorm on CUDA: a decode token's experts with the next block's residual add and norm folded into
the down's last block (kernels/moe_down_norm.cu).

"cupy_rowwarp_pdl_q8_hidden_norm" (`moe_experts_add_rmsnorm_q8_hidden`): moe_experts=cupy_rowwarp_pdl_q8_hidden's two
PDL launches - the Q8 gate/up writing the hidden vector in Q8 (moe_rowwarp.cu's moe_q4_k_gateupq8hpdl, unchanged),
then a down whose blocks store the experts' output row as that pair's down does and arrive at an int32 counter (this
op's own pool); the last to arrive adds the row to the residual stream and norms it (moe_down_norm.cu says how and
why). In the step this takes the norm's launch after each MoE layer off the critical path (add_rmsnorm=triton_pdl,
~1.8 us of its own and ~0.4 of launch, 26 times a token on the 48B). The experts' output is the pair's, bit for bit;
the norm sums its squares in another order than the Triton add_rmsnorm, so the claim is tolerance("act_q8") - the
experts' own claim, in the fused op's row.

Its stated policy for every other call (more than one token, a weight that is not Q4_K, a width that is not a whole
number of Q4_K blocks, a residual of another shape or dtype): this plugin's cupy_rowwarp_pdl_q8_hidden moe_experts
(which hands the calls its kernels do not take to the torch plugin's float32 experts), then the torch plugin's
add_rmsnorm on its output. `fused_serves` is that test; _policies.py's `experts_norm_passes` says it to the
dispatcher.

Measured (H100, per op in the norm-router-experts chain): session 36's fold added 15.9 us to the down where ~1 was
expected; sessions 37-38 found that tail in the last block's norm, its loads waiting one by one
(bench/probes/fold_anatomy.py), not in its arrival (+1.8 us). With row_add_norm.cuh's vector form it adds 4.0 us, while
the Triton norm after the plain pair costs the chain ~1.6: x0.893. Selected by nothing. The step's experts are now
the pairs pair's (cupy_rowwarp_pdl_q8_pairs), whose gate/up this fold does not launch.
"""

from __future__ import annotations

import torch

from sparkops.lanes import MAIN

from . import _runtime as rt
from ._counters import RAN_FORMS, RAN_POOL, RAN_SCRATCHES, CounterPools, ran_choice
from .moe_experts import _DT_SUFFIX, _one_token, moe_experts_rowwarp_pdl_q8_hidden, rowwarp_serves

SOURCES = rt.source_files("moe_down_norm.cu")
#: launch with programmatic dependent launch (both kernels are written for it); a test sets it False to launch the
#: same kernels plainly, their griddepcontrol instructions then no-ops
PDL = True

#: the last block's arrival and scratch (kernels/row_add_norm.cuh; _counters.RAN_FORMS and RAN_SCRATCHES say what each
#: form is and what GPU sessions 36-37 measured: all alike), read at each call; tests and side-by-sides set them
ARRIVAL, SCRATCH = "release", "global"
ARRIVALS, SCRATCHES = RAN_FORMS, RAN_SCRATCHES
#: int32 counters a pool (the tree's 33, then the global scratch's 32 floats)
POOL_COUNTERS = RAN_POOL

_POOLS = CounterPools("moe_experts_add_rmsnorm", POOL_COUNTERS)


def counters(device: torch.device, n: int = MAIN) -> torch.Tensor | None:
    """The arrival counter pool of the device and lane `n` if it exists (tests check it is zero after every call)."""
    return _POOLS.on(device, n)


def fused_serves(x, w_gate, w_up, w_down, s_gate, s_up, s_down, residual, norm_weight) -> bool:
    """Whether the fused kernels take this call: cupy_rowwarp_pdl_q8_hidden's one-token Q4_K experts (`rowwarp_serves`:
    F and Fs whole Q4_K blocks, so the hidden vector is whole groups of 8), a residual of x's shape and dtype, a float32
    gain of x's width."""
    if not rowwarp_serves(x, w_gate, w_up, w_down, s_gate, s_up, s_down):
        return False
    if not isinstance(residual, torch.Tensor) or residual.shape != x.shape or residual.dtype != x.dtype:
        return False
    return isinstance(norm_weight, torch.Tensor) and norm_weight.dtype == torch.float32 \
        and tuple(norm_weight.shape) == (x.shape[1],)


def moe_experts_add_rmsnorm_q8_hidden(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, residual,
                                      norm_weight, eps):
    """Implementation "cupy_rowwarp_pdl_q8_hidden_norm": the Q8 hidden pair with the residual add and the norm in the
    down's last block; every other call by the stated policy (`fused_serves`)."""
    if not fused_serves(x, w_gate, w_up, w_down, s_gate, s_up, s_down, residual, norm_weight):
        from sparkops_torch.add_rmsnorm import add_rmsnorm as torch_add_rmsnorm

        y = moe_experts_rowwarp_pdl_q8_hidden(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)
        return torch_add_rmsnorm(y, residual, norm_weight, eps)
    rt.cuda_device("moe_experts_add_rmsnorm", x=x, residual=residual, norm_weight=norm_weight)
    infix, form = ran_choice("moe_experts_add_rmsnorm", ARRIVAL, SCRATCH)  # refused before anything is launched
    a = _one_token(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)
    dev, d, code = a.x.device, a.d, a.code
    residual, gain = rt.contiguous(residual), rt.contiguous(norm_weight)
    normed, summed = torch.empty_like(a.y), torch.empty_like(a.y)  # [1, D] each, x's dtype
    cnt = _POOLS.get(dev)
    kg, ku, kd, sg, su, sd = a.kg, a.ku, a.kd, a.sg, a.su, a.sd
    # gate/up: moe_experts=cupy_rowwarp_pdl_q8_hidden's kernel as that pair launches it (moe_experts.py's
    # _launch_rowwarp with gateup="q8", q8_hidden=True): int8 codes, a float scale a block of 32, int sums of 16, then
    # the block's 8 gate and 8 up rows in shared memory
    smem = d + 4 * (d // 32) + 4 * (d // 16) + 16 * kg.row_bytes
    rt.launch("moe_rowwarp.cu", f"moe_q4_k_gateupq8hpdl_{_DT_SUFFIX[code]}", dev, ((a.rows + 7) // 8,), (128,),
              (rt.ptr(a.x), rt.ptr(a.ids), rt.i32(a.k), rt.i32(a.e), rt.ptr(kg.raw), rt.ptr(ku.raw),
               rt.i64(kg.row_bytes), rt.i32(a.f), rt.ptr(sg.raw if sg else None), rt.ptr(su.raw if su else None),
               rt.i32(a.fs), rt.i32(d), rt.ptr(a.h)), shared_mem=smem, pdl=PDL)
    rt.launch("moe_down_norm.cu", f"moe_q4_k_downq8{infix}pdl", dev, ((d + 3) // 4,), (128,),
              (rt.ptr(a.h), rt.ptr(a.ids), rt.ptr(a.weights), rt.i32(a.k), rt.i32(a.e), rt.ptr(kd.raw),
               rt.i64(kd.row_bytes), rt.i32(a.f), rt.ptr(sd.raw if sd else None), rt.i64(sd.row_bytes if sd else 0),
               rt.i32(a.fs), rt.i32(d), rt.ptr(a.y), rt.i32(code), rt.ptr(residual), rt.ptr(gain), rt.f32(eps),
               rt.ptr(normed), rt.ptr(summed), rt.ptr(cnt), rt.i32(form)), pdl=PDL)
    return normed, summed
