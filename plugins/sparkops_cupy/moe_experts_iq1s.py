"""moe_experts on CUDA for IQ1_S experts, one token at a time: the Q8 row-copy kernels (kernels/moe_iq1s_q8.cu).

- "cupy_rowwarp_pdl_q8_iq1s" (`moe_experts_rowwarp_pdl_q8_iq1s`, written in session 50): gate/up and down as two PDL
  launches, each block's 16 rows copied whole into shared memory, the activations (x, then the hidden vector) quantized
  once a block to Q8, an octet a row dotting IQ1_S grid rows by __dp4a (linear_iq1s_q8.cu's GEMV, kernels/iq1s_q8.cuh).
  Why: the IQ1_S step's experts run on triton_prefetch, a float kernel of the ladder's early sessions (session 25's fix
  when the step's Q4_K expert kernels passed IQ1_S to the float32 path); the Q4_K experts' largest decode gain was Q8
  activations and integer dots (session 27, x1.157 in the step). Claims act_q8 (two quantized operands an expert, as
  the Q4_K Q8 experts). Every other call by the stated policy (`iq1s_serves`): the torch plugin's float32 moe_experts,
  which dequantizes the experts each call. Chosen per weight type in a registry: `[ops.moe_experts.cuda.by_type.IQ1_S]`.

- "cupy_rowwarp_pdl_q8h_iq1s" (`moe_experts_rowwarp_pdl_q8h_iq1s`, written after GPU session 50's Nsight Compute
  figures): the hidden vector quantized once by gate/up, and a down of a warp an output row.

- "cupy_rowwarp_pdl_q8h_iq1s_sg" (`moe_experts_rowwarp_pdl_q8h_iq1s_sg`, session 51): that pair with the grid in
  shared memory (the nibble grid, 8 KB a block, copied before the PDL wait) and a down of 8 warps a block, bit for bit
  its own (kernels/iq1s_q8.cuh: a warp's grid gather one shared-memory request instead of ~25 L1 wavefronts).

- "cupy_rowwarp_pdl_q8h_iq1s_staged" (session 51): the shared-grid pair with a staged down: a block's 8 output rows
  of every slot and the whole Q8 hidden vector copied into shared memory by cp.async (Nsight Compute had the
  shared-grid down's warps stalled 18 of 23 cycles on their global loads), bit for bit cupy_rowwarp_pdl_q8h_iq1s.
- "cupy_rowwarp_pdl_q8h_iq1s_staged_pair" (session 51): that with a gate/up of two octets a row (16 warps a block: the
  shared-grid gate/up ran at 26% achieved occupancy, about two blocks an SM); other sums, act_q8's claim.
- "cupy_rowwarp_pdl_q8h_iq1s_staged_flat" (session 51, after the calls): that with the down's (slot, super-block)
  pairs dealt over a row's octets in turn; act_q8's claim.
- "cupy_rowwarp_pdl_q8h_iq1s_t2" (session 51, after the calls): _staged_flat over the experts repacked two bits a
  weight (`_iq1s_t2`, made once a weight on its first call; kernels/moe_iq1s_t2.cu), no grid read; its bits.

Kept apart from moe_experts.py so that the records of that module's implementations, whose sources it is, do not
change.
"""

from __future__ import annotations

import torch
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

from sparkops.qweight import QWeight

from . import _runtime as rt
from ._iq1s_t2 import T2_BYTES, repacked
from ._weights import NIB_GRID_BYTES, iq1s_grid, iq1s_grid_nibbles
from .linear import _DT_SUFFIX
from .moe_experts import _one_token, _OneToken as _OneTokenArgs

#: the kernel files and their headers, each once
SOURCES = tuple(dict.fromkeys(rt.source_files("moe_iq1s_q8.cu") + rt.source_files("moe_iq1s_t2.cu")))
#: rows a block of either kernel: an octet a row, 4 warps
ROWS = 16
#: hidden rows a block of the Q8-hidden gate/up: one whole Q8 block of h (8 warps, an octet a row)
H8_ROWS = 32
#: the most routed experts a token the kernels take: the first form's down stages K + 1 slots of 16 rows and the
#: whole hidden vector in shared memory (at the 48B's widths, 16 slots are ~80 KB of a block's 227 KB)
MAX_K = 16
#: the most tokens a call runs here, one token's two launches after another (a decode step has one; the op's gate cases
#: have two); more (a prefill chunk) go to the torch plugin, as the one-token GEMVs' ROWWARP_GEMV_MAX_T
MAX_T = 8
#: bytes of an IQ1_S super-block of 256 weights (IQ1S_SBB in kernels/iq1s_q8.cuh)
BLOCK_BYTES = GGML_QUANT_SIZES[Q.IQ1_S][1]
#: output rows (warps) a block of the shared-grid downs: its 8 KB grid copy (and the staged down's hidden vector)
#: shared by 8 rows
SG_DOWN_WARPS = 8
#: the Q8-hidden forms: (gate/up kernel, its threads, down kernel, its rows a block, the grid in shared memory)
H8_FORMS = {"plain": ("gateupq8hpdl", 256, "downq8hpdl", 4, False),
            "sg": ("gateupq8hsgpdl", 256, "downq8hsgpdl", SG_DOWN_WARPS, True),
            "staged": ("gateupq8hsgpdl", 256, "downq8hstagedpdl", SG_DOWN_WARPS, True),
            "staged_pair": ("gateupq8hpairsgpdl", 512, "downq8hstagedpdl", SG_DOWN_WARPS, True),
            "staged_flat": ("gateupq8hpairsgpdl", 512, "downq8hflatpdl", SG_DOWN_WARPS, True)}
#: the downs that stage their rows and the hidden vector in shared memory
STAGED_DOWNS = ("downq8hstagedpdl", "downq8hflatpdl")


def iq1s_serves(x, ids, w_gate, w_up, w_down, s_gate, s_up, s_down) -> bool:
    """Whether the kernels take this call: 1 to MAX_T tokens (one after another), every expert weight IQ1_S, D, F and
    Fs multiples of 256, at most MAX_K routed experts a token."""
    shared = (s_gate, s_up, s_down)
    if x.dim() != 2 or not 1 <= x.shape[0] <= MAX_T or ids.dim() != 2 or ids.shape[1] > MAX_K:
        return False
    ws = [w for w in (w_gate, w_up, w_down, *shared) if w is not None]
    if not all(isinstance(w, QWeight) for w in (w_gate, w_up, w_down)) or any(not isinstance(w, QWeight) for w in ws):
        return False
    return all(w.qtype == Q.IQ1_S for w in ws) and all(w.shape[-1] % 256 == 0 for w in ws) and \
        x.shape[1] % 256 == 0


def moe_experts_rowwarp_pdl_q8_iq1s(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8_iq1s": one token's IQ1_S experts on Q8 activations and integer dots (see the
    module's docstring), up to MAX_T tokens one after another; every other call the torch plugin's float32
    moe_experts (the stated policy, `iq1s_serves`)."""
    return _served(_launch, x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)


def _served(launch, x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down) -> torch.Tensor:
    """The stated policy of both forms: a call `iq1s_serves` runs `launch` token by token (a token's output is its
    one-token call's, bit for bit); every other call the torch plugin's float32 moe_experts."""
    if not iq1s_serves(x, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
        from sparkops_torch.moe_experts import moe_experts as torch_moe_experts

        return torch_moe_experts(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)
    if x.shape[0] == 1:
        return launch(_one_token(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down))
    return torch.cat([launch(_one_token(x[t:t + 1], weights[t:t + 1], ids[t:t + 1], w_gate, w_up, w_down, s_gate,
                                        s_up, s_down)) for t in range(x.shape[0])])


def moe_experts_rowwarp_pdl_q8h_iq1s(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8h_iq1s": cupy_rowwarp_pdl_q8_iq1s with the hidden vector quantized once, by
    gate/up (32 hidden rows a block: one whole Q8 block of h each), and a down of a warp an output row reading the
    rows and the hidden codes from global memory (kernels/moe_iq1s_q8.cu's gateup_q8h_iq1_s, down_q8h_iq1_s). Why: GPU
    session 50 timed cupy_rowwarp_pdl_q8_iq1s at 54.5 µs a layer against triton_prefetch's 42.8 (H100), and Nsight
    Compute put its down at 22.9 µs with 144 blocks at 6.8% achieved occupancy, each block quantizing the whole
    9216-value hidden vector again. Claims act_q8 (the same two quantized operands an expert); the same stated policy
    (`iq1s_serves`), up to MAX_T tokens one after another."""
    return _served(_launch_h8, x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)


def moe_experts_rowwarp_pdl_q8h_iq1s_sg(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8h_iq1s_sg": cupy_rowwarp_pdl_q8h_iq1s with the IQ1_S grid read from shared
    memory and SG_DOWN_WARPS output rows a down block (the module's docstring), its bits; the same stated policy."""
    return _served(lambda a: _launch_h8(a, "sg"), x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)


def moe_experts_rowwarp_pdl_q8h_iq1s_staged(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8h_iq1s_staged": cupy_rowwarp_pdl_q8h_iq1s_sg with the down's rows and the
    hidden vector staged in shared memory (kernels/moe_iq1s_q8.cu's down_q8hs_iq1_s), cupy_rowwarp_pdl_q8h_iq1s's
    bits; the same stated policy."""
    return _served(lambda a: _launch_h8(a, "staged"), x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)


def moe_experts_rowwarp_pdl_q8h_iq1s_staged_pair(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8h_iq1s_staged_pair": cupy_rowwarp_pdl_q8h_iq1s_staged with a gate/up of two
    octets a row (16 warps a block); other sums in the gate/up, act_q8's claim; the same stated policy."""
    return _served(lambda a: _launch_h8(a, "staged_pair"), x, weights, ids, w_gate, w_up, w_down, s_gate, s_up,
                   s_down)


def moe_experts_rowwarp_pdl_q8h_iq1s_staged_flat(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8h_iq1s_staged_flat": cupy_rowwarp_pdl_q8h_iq1s_staged_pair with a down that
    deals a row's (slot, super-block) pairs over its octets in turn (9 each at the 48B's widths, against 12 for the
    octet with three whole slots); other sums, act_q8's claim; the same stated policy."""
    return _served(lambda a: _launch_h8(a, "staged_flat"), x, weights, ids, w_gate, w_up, w_down, s_gate, s_up,
                   s_down)


def moe_experts_rowwarp_pdl_q8h_iq1s_t2(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8h_iq1s_t2": cupy_rowwarp_pdl_q8h_iq1s_staged_flat over the experts' t2
    repacking (two bits a weight, no grid), its bits; the same stated policy."""
    return _served(_launch_t2, x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)


def _launch_t2(a: _OneTokenArgs) -> torch.Tensor:
    """The t2 pair (kernels/moe_iq1s_t2.cu) for a checked one-token call; the repacked copies made on the first call."""
    dt = _DT_SUFFIX[a.code]
    kg, ku, kd = (repacked(kw.raw) for kw in (a.kg, a.ku, a.kd))
    sg, su, sd = (repacked(kw.raw) if kw is not None else None for kw in (a.sg, a.su, a.sd))  # None: no shared one
    rb = a.d // 256 * T2_BYTES  # a gate/up row's bytes
    smem = a.d + a.d // 8 + a.d // 4 + 2 * H8_ROWS * rb  # x's codes, scales, sums of 16; 32 gate and 32 up rows
    rt.launch("moe_iq1s_t2.cu", f"moe_iq1_s_t2gateupq8hpdl_{dt}", a.x.device, (a.rows // H8_ROWS,), (512,),
              (rt.ptr(a.x), rt.ptr(a.ids), rt.i32(a.k), rt.i32(a.e), rt.i32(a.f), rt.i32(a.fs), rt.i32(a.d),
               rt.ptr(kg), rt.ptr(ku), rt.ptr(sg), rt.ptr(su), rt.ptr(a.h)), shared_mem=smem, pdl=True)
    rbf, rbs = a.f // 256 * T2_BYTES, a.fs // 256 * T2_BYTES  # a down row's bytes: routed, shared
    smem = a.rows + a.rows // 4 + SG_DOWN_WARPS * (rbs + a.k * rbf)  # h's codes, scales, sums; the rows
    rt.launch("moe_iq1s_t2.cu", f"moe_iq1_s_t2downq8hpdl_{dt}", a.x.device,
              ((a.d + SG_DOWN_WARPS - 1) // SG_DOWN_WARPS,), (32 * SG_DOWN_WARPS,),
              (rt.ptr(a.h), rt.ptr(a.ids), rt.ptr(a.weights), rt.i32(a.k), rt.i32(a.e), rt.i32(a.f), rt.i32(a.fs),
               rt.i32(a.d), rt.ptr(kd), rt.ptr(sd), rt.ptr(a.y)), shared_mem=smem, pdl=True)
    return a.y


def _launch_h8(a: _OneTokenArgs, form: str = "plain") -> torch.Tensor:
    """The Q8-hidden pair for a checked one-token call in one of H8_FORMS: gate/up writes h's Q8 codes, scales and code
    sums into a.h's bytes (1.25 bytes a value of its 4), down reads them; its output a.y."""
    gateup, threads, down, rows, shared_grid = H8_FORMS[form]
    grid = iq1s_grid_nibbles(a.x.device) if shared_grid else iq1s_grid(a.x.device)
    grid_smem = NIB_GRID_BYTES if shared_grid else 0
    dt = _DT_SUFFIX[a.code]
    sg, su, sd = (kw.raw if kw is not None else None for kw in (a.sg, a.su, a.sd))  # None: no shared expert
    rb = a.d // 256 * BLOCK_BYTES  # a gate/up row's bytes
    smem = grid_smem + a.d + a.d // 8 + a.d // 4 + 2 * H8_ROWS * rb  # x's codes, scales, sums of 16; 32 gate, 32 up
    rt.launch("moe_iq1s_q8.cu", f"moe_iq1_s_{gateup}_{dt}", a.x.device, (a.rows // H8_ROWS,), (threads,),
              (rt.ptr(a.x), rt.ptr(a.ids), rt.i32(a.k), rt.i32(a.e), rt.i32(a.f), rt.i32(a.fs), rt.i32(a.d),
               rt.ptr(a.kg.raw), rt.ptr(a.ku.raw), rt.ptr(sg), rt.ptr(su), rt.ptr(a.h), rt.ptr(grid)),
              shared_mem=smem, pdl=True)
    smem = grid_smem
    if down in STAGED_DOWNS:  # the hidden vector's codes, scales and sums; the rows of the shared expert, slots
        rbf, rbs = a.f // 256 * BLOCK_BYTES, a.fs // 256 * BLOCK_BYTES
        smem += a.rows + a.rows // 4 + rows * rbs + a.k * rows * rbf
    rt.launch("moe_iq1s_q8.cu", f"moe_iq1_s_{down}_{dt}", a.x.device, ((a.d + rows - 1) // rows,), (32 * rows,),
              (rt.ptr(a.h), rt.ptr(a.ids), rt.ptr(a.weights), rt.i32(a.k), rt.i32(a.e), rt.i32(a.f), rt.i32(a.fs),
               rt.i32(a.d), rt.ptr(a.kd.raw), rt.ptr(sd), rt.ptr(a.y), rt.ptr(grid)), shared_mem=smem, pdl=True)
    return a.y


def _launch(a: _OneTokenArgs) -> torch.Tensor:
    """gate/up then down for a checked one-token call; its output a.y."""
    grid = iq1s_grid(a.x.device)
    dt = _DT_SUFFIX[a.code]
    sg, su, sd = (kw.raw if kw is not None else None for kw in (a.sg, a.su, a.sd))  # None: no shared expert
    rb = a.d // 256 * BLOCK_BYTES  # a gate/up row's bytes
    smem = a.d + a.d // 8 + a.d // 4 + 2 * ROWS * rb  # x's codes, scales, sums of 16; 16 gate and 16 up rows
    rt.launch("moe_iq1s_q8.cu", f"moe_iq1_s_gateupq8pdl_{dt}", a.x.device, (a.rows // ROWS,), (128,),
              (rt.ptr(a.x), rt.ptr(a.ids), rt.i32(a.k), rt.i32(a.e), rt.i32(a.f), rt.i32(a.fs), rt.i32(a.d),
               rt.ptr(a.kg.raw), rt.ptr(a.ku.raw), rt.ptr(sg), rt.ptr(su), rt.ptr(a.h), rt.ptr(grid)),
              shared_mem=smem, pdl=True)
    rbf, rbs = a.f // 256 * BLOCK_BYTES, a.fs // 256 * BLOCK_BYTES  # a down row's bytes: routed, shared
    smem = a.rows + a.rows // 8 + a.rows // 4 + ROWS * rbs + a.k * ROWS * rbf  # h's codes, scales, sums; the rows
    rt.launch("moe_iq1s_q8.cu", f"moe_iq1_s_downq8pdl_{dt}", a.x.device, ((a.d + ROWS - 1) // ROWS,), (128,),
              (rt.ptr(a.h), rt.ptr(a.ids), rt.ptr(a.weights), rt.i32(a.k), rt.i32(a.e), rt.i32(a.f), rt.i32(a.fs),
               rt.i32(a.d), rt.ptr(a.kd.raw), rt.ptr(sd), rt.ptr(a.y), rt.ptr(grid)),
              shared_mem=smem, pdl=True)
    return a.y
