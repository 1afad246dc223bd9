"""moe_experts on CUDA: routed + shared SwiGLU experts for each token (kernels/moe_experts.cu).

Two launches per call: gate/up (silu(gate) * up for the K chosen experts and the shared expert, ids
read on the device) and down (the weighted combine, one warp per output row, no atomics). When the
shared expert is stored in another type than the routed experts it gets its own two launches, the
second accumulating into the output. Block-quantized weights use Q8_0 activations and __dp4a, as
linear does: claim tolerance("act_q8").

"cupy_rowwarp" (`moe_experts_rowwarp`, kernels/moe_rowwarp.cu): one token with every expert weight in Q4_K, in two
launches built like linear's row-warp GEMVs (a row's loads requested before any is used, no split-K): gate/up into a
float32 hidden vector, then down with the routing weights. Float32 products as the reference's, other sums: claim
tolerance(). Its stated policy for every other call (more than one token, another type, a width that is not a whole
number of Q4_K blocks) is the torch plugin's float32 moe_experts (dequantized weights, cuBLAS): correct everywhere,
and fast where decode never goes (a prefill chunk).

"cupy_rowwarp_staged" (`moe_experts_rowwarp_staged`): cupy_rowwarp with the "staged" gate/up form (a warp a hidden
row), a name of its own for an interleaved pair. Session 15: 923 against triton_prefetch's 902 µs a token, and none in
the step (0.987). Kept, tested, selected by nothing.

"cupy_rowhalf" (`moe_experts_rowhalf`): cupy_rowwarp whose gate/up run the copy form's structure with packed half2
products, two weights an instruction (kernels/q4k_half.cuh, as linear=cupy_rowhalf): claim tolerance("bf16"). Down
stays float32. Session 16: a regression as a rung (0.939), 35.8 against triton_prefetch's 34.9 µs a layer once its
staging was mended. Kept, tested, selected by nothing.

"cupy_rowwarp_pdl" (`moe_experts_rowwarp_pdl`): cupy_rowwarp's copy/warp pair launched with programmatic dependent
launch: gate/up waits for the router, then lets down start; down issues its first weight loads before it waits for
gate/up. The same bits. Session 17: with h read from L2, 2.5x slower per op and a regression as a rung (0.683).
Session 18, read through L1: 872 against triton_prefetch's 905 µs a token per op (bf16), but 1.000 as a rung (none).
Kept, tested, selected by nothing.

"cupy_rowwarp_pdl_split", "cupy_rowwarp_pdl_q8", "cupy_rowwarp_pdl_q8_split" (session 27: 0.937, 1.008 and, over the
split step, 1.042 as rungs) and "cupy_rowwarp_pdl_q8_hidden" (session 27: 1.157, the step since): the PDL pair with
down split four warps an output, with gate/up on Q8 activations and __dp4a, both, and the Q8 gate/up writing the hidden
vector in Q8 for a down by __dp4a. "cupy_rowwarp_pdl_q8_pipe" (written after session 28): the Q8 hidden pair with its
gate/up pipelined through stages of shared memory, a few blocks an SM (the same bits; session 28: 0.958, a
regression). "cupy_rowwarp_pdl_q8_pairs" (written after session 28): the Q8 hidden pair with a lane a whole sub-block
pair in gate/up's dot loop (1.66 instructions a weight against 2.7; slower per op all the same, 851 against 794 us a
token). "cupy_rowwarp_pdl_q8_hidden_cp" and "cupy_rowwarp_pdl_q8_pairs_cp" (written after session 29): the Q8 hidden
pair and the pairs pair with down in a copy form (each warp's rows copied into shared memory before the wait, dotted
group by group as they land: the same bits as their warp-down pairs; session 30: slower alone and per op, never a
rung). "cupy_rowwarp_pdl_q8_hidden_ld" and "cupy_rowwarp_pdl_q8_pairs_ld" (written after session 30): the same pairs with
their down's expert ids read once a warp (the same bits; session 30, per op: x1.066 over the Q8 hidden pair).
"cupy_rowwarp_pdl_q8_pairs_hs" (written in session 40): the pairs pair with that down reading the hidden vector from
shared memory, copied once a block right after the wait (the same bits; session 40: a tie).
"cupy_rowwarp_pdl_q8_pairs_l2pf" (written in session 40): the pairs pair with that down asking for its later groups'
weight lines in the L2 before its wait, and gate/up the shared expert's (the same bits). Each function's docstring
says why and what it measured.

"cupy_mma" (`moe_experts_mma`, kernels/moe_mma.cu): the same two launches on the tensor cores (q4k_mma.cuh: the codes as
bfloat16 128 + q, mma.sync, the scales once a sub-block); the activations and the hidden vector are rounded to
bfloat16 for the products: claim tolerance("bf16"). cupy_rowwarp's policy for every other call. Two forms
(MOE_MMA_FORMS): session 13's "tile" (the default: passed its GPU tests in session 14 and lost its rung, 0.975) and
"pipe", which requests every weight byte a block decodes into shared memory before decoding any, as linear's (slower
per op in session 14: kept, tested, selected by nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops.qweight import QWeight

from . import _runtime as rt
from ._weights import KernelWeight, iq1s_grid, kernel_weight

SOURCES = rt.source_files("moe_experts.cu")


def _stage_bytes(n: int, is_float: bool) -> int:
    """Shared memory for n staged inputs (moe_experts.cu: int8 values padded to 16 bytes + 2 floats / 32)."""
    return 4 * n if is_float else (n + 15) // 16 * 16 + 8 * (n // 32)


def moe_experts(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    op = "moe_experts"
    dev = rt.cuda_device(op, x=x, weights=weights, ids=ids)
    k, e, f, fs = _shapes(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)
    t, d = x.shape
    has_shared = fs > 0
    if w_gate.qtype != w_up.qtype or (has_shared and s_gate.qtype != s_up.qtype):
        raise BadInput(f"{op}: gate and up projections must share a quant type (got {w_gate.qtype.name} / "
                       f"{w_up.qtype.name}); re-quantize one of them")
    code = rt.act_code(op, "x", x)
    x = rt.contiguous(x)
    ids = rt.contiguous(ids.long())
    weights = rt.contiguous(weights.float())
    kg, ku, kd = (kernel_weight(op, n, w, dev) for n, w in (("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down)))
    same_up = has_shared and s_gate.qtype == w_gate.qtype
    same_down = has_shared and s_down.qtype == w_down.qtype
    sg = su = sd = None
    if has_shared:
        sg, su, sd = (kernel_weight(op, n, w, dev) for n, w in (("s_gate", s_gate), ("s_up", s_up), ("s_down", s_down)))

    width = k * f + fs
    h = torch.empty((t, width), dtype=torch.float32, device=dev)
    y = torch.empty((t, d), dtype=x.dtype, device=dev)
    _gate_up(x, code, d, kg, ku, f, k, ids, e, sg if same_up else None, su if same_up else None,
             fs if same_up else 0, h, width, 0)
    if has_shared and not same_up:
        _gate_up(x, code, d, sg, su, fs, 1, None, 1, None, None, 0, h, width, k * f)
    _down(h, width, 0, kd, f, k, ids, e, weights, sd if same_down else None, fs if same_down else 0, d, y, code, 0)
    if has_shared and not same_down:
        _down(h, width, k * f, sd, fs, 1, None, 1, None, None, 0, d, y, code, 1)
    return y


#: the row-warp kernels' dtype suffix per activation dtype code (rt.DTYPE_CODE)
_DT_SUFFIX = {0: "f32", 1: "bf16", 2: "f16"}
#: cupy_rowwarp's forms (kernels/moe_rowwarp.cu), read at each call: gate/up "octet" (4 super-blocks a row in flight
#: in registers), "copy" (the block's gate and up rows copied whole into shared memory first) or "staged" (a warp a
#: hidden row, twice the octet form's warps; session 15: slower than copy); down "warp" (16
#: super-blocks in flight a warp) or "copy" (the block's rows of every chosen expert copied into shared memory first).
#: Session 13, the 48B's experts, one token, bf16 (µs a layer): octet/warp 35.3, octet/copy 36.7, copy/warp 34.2,
#: copy/copy 35.2; triton_prefetch 35.0 (float32 activations: 35.9, 37.6, 34.9, 35.9; 34.3)
ROWWARP_GATEUP, ROWWARP_DOWN = "copy", "warp"
#: cupy_rowwarp_pdl_split's forms (kernels/moe_rowwarp.cu's down_split_q4_k): warps an output -> the kernel; DOWN_SPLIT
#: is the one it runs, read at each call (the side-by-side times each). 4 by the reading of session 26's Nsight
#: Compute run (its registers give 32 warps an SM), not yet by a measurement
DOWN_SPLIT_FORMS = {2: "moe_q4_k_downsplit2pdl", 4: "moe_q4_k_downsplitpdl", 8: "moe_q4_k_downsplit8pdl"}
DOWN_SPLIT = 4
#: cupy_rowwarp_pdl_q8_pipe's forms (kernels/moe_rowwarp.cu's gateup_q8pipe_q4_k): shared-memory stages of 8 gate and 8
#: up rows a block -> the kernel name's stem; PIPE_STAGES is the one it runs, read at each call (the side-by-side times
#: each). At the 48B's width a stage is ~20 KB: 3 stages put 3 blocks on an SM (12 warps, ~124 KB of rows in flight),
#: 4 stages 2 blocks. Session 28, per op in the chain: 862 us a token with 3 stages, 930 with 4 (the one-wave
#: form's 788)
PIPE_STAGE_FORMS = {3: "moe_q4_k_gateupq8hp3pdl", 4: "moe_q4_k_gateupq8hp4pdl"}
PIPE_STAGES = 3
#: cupy_rowwarp_pdl_q8_pairs' forms of the staged x (kernels/q4k_q8.cuh's q8_stage XPAD): "dense" (its codes in order;
#: the octet's 8 lanes read 64-code chunks 64 bytes apart, 4-way shared-memory bank conflicts) or "padded" (each 64
#: codes at a stride of 80 bytes: 8 distinct groups of banks; the same bits). PAIRS_X is the one it runs, read at each
#: call (the side-by-side times both). Per op in the norm-router-experts chain, a token (the 48B's shape, bf16):
#: session 28 "dense" 851 against the Q8 hidden pair's 794 us; session 29 "dense" 850, "padded" 751 against 794. Under
#: Nsight Compute (session 29, bench/probes/moe_kernels.py) the padded gate/up took 14.08 us against the dense form's
#: 16.93 and the Q8 hidden gate/up's 15.62; its short-scoreboard stalls fell from 6.24 to 1.13 an issue: the bank
#: conflicts were what made the dense form slow. So "padded"
PAIRS_X_FORMS = ("dense", "padded")
PAIRS_X = "padded"
#: the copy downs' forms (kernels/moe_rowwarp.cu's down_q8cp_q4_k, the down of cupy_rowwarp_pdl_q8_hidden_cp and
#: _q8_pairs_cp): commit groups a warp's copies are split into, each dotted as soon as it lands -> the kernel.
#: DOWN_CP_GROUPS is the one they run, read at each call (the side-by-side times each). GPU session 30, per op in the
#: norm-router-experts chain, a token (the 48B's shape, bf16): 1 group 807 / 809, 3 groups 933 / 930, 6 groups 908 /
#: 908 us, against the warp down's pair's 787; under Nsight Compute alone 14.9, 17.0, 17.5 against 11.7-12.5 us. So 1
#: (the least slow)
DOWN_CP_GROUP_FORMS = {1: "moe_q4_k_downq8cp1pdl", 3: "moe_q4_k_downq8cp3pdl", 6: "moe_q4_k_downq8cp6pdl"}
DOWN_CP_GROUPS = 1
#: the "q8 loads" downs' forms (kernels/moe_rowwarp.cu's down_q8ld_q4_k, the down of cupy_rowwarp_pdl_q8_hidden_ld and
#: _q8_pairs_ld): "ids" (the slots' expert ids and weights read once a warp, a lane a slot) or "ahead" (that, and each
#: round's hidden values requested one round before they are dotted) -> the kernel. DOWN_LD_FORM is the one they run,
#: read at each call (the side-by-side times both). GPU session 30 (call 7), per op in the norm-router-experts chain, a
#: token (the 48B's shape, bf16): "ids" 736.9, "ahead" 746.3 against the warp down's pair's 785.3 us. So "ids": the
#: id loads were the wait that mattered, and requesting the hidden values early bought nothing more
#: "l2pf" (written in session 40: "ids" with the later groups' weight lines asked into the L2 before the wait) is the
#: down of cupy_rowwarp_pdl_q8_pairs_l2pf, which names it whatever DOWN_LD_FORM says
DOWN_LD_FORMS = {"ids": "moe_q4_k_downq8idspdl", "ahead": "moe_q4_k_downq8aheadpdl", "l2pf": "moe_q4_k_downq8l2pfpdl"}
DOWN_LD_FORM = "ids"
#: the grouped gate/up's commit groups -> its kernels' suffix (kernels/moe_rowwarp.cu's gateup_q8_q4_k<.., GROUPS>;
#: a group is a range of whole super-blocks of every row, so a row of fewer super-blocks leaves a group empty), and the
#: groups cupy_rowwarp_pdl_q8_pairs_l2pf_grouped runs: 3 for the 48B's 9 super-blocks a row (3 each)
GU_GROUP_FORMS = {3: "g3"}
GU_GROUPS = 3
#: the streamed gate/up's (groups, groups requested ahead) -> its kernels' suffix (gateup_q8_q4_k<.., GROUPS, DEPTH>:
#: the first DEPTH groups requested after the wait, group g + DEPTH once group g has landed), and the pair
#: cupy_rowwarp_pdl_q8_pairs_l2pf_streamed runs: 3 groups, 1 ahead (GPU session 46's probe_gateup, H100: 12.22 against
#: 13.27 us a call for the whole form; 2 ahead 13.56, 4 groups 2 ahead 12.49)
GU_DEPTH_FORMS = {(3, 1): "g3d1"}
GU_DEPTH = (3, 1)
#: the most slots those downs read a lane each (moe_rowwarp.cu's DOWN_LD_MAX_K); a call with more runs the warp down
#: (down_q8_q4_k: the same bits), by the stated policy (_policies.experts_ld_passes)
DOWN_LD_MAX_K = 32
#: the most shared memory a copy down's block may take (an H200 block's 227 KB); a call past it runs the Q8 hidden
#: pair's warp down (down_q8_q4_k: the same bits), by the stated policy (_policies.experts_cp_passes)
DOWN_CP_SMEM_LIMIT = 227 * 1024


#: the most shared memory the staged down's block may take (kernels/moe_rowwarp.cu's down_q8hs_q4_k: the whole hidden
#: vector, codes and scales; 48 KB, the most a launch takes without opting in); a call past it runs the Q8 hidden pair's
#: warp down (down_q8_q4_k: the same bits), by the stated policy (_policies.experts_hs_passes)
DOWN_HS_SMEM_LIMIT = 48 * 1024


def down_hs_smem(k: int, f: int, fs: int) -> int:
    """Shared memory of one staged-down block: the Q8 hidden vector's K * F + Fs codes and as many bytes of their
    groups' scales (a float2 for 8 codes)."""
    return 2 * (k * f + fs)


def down_hs_fits(k: int, f: int, fs: int) -> bool:
    """Whether the staged down takes a call of K slots of F hidden rows and a shared expert of Fs (0: none)."""
    return k <= DOWN_LD_MAX_K and down_hs_smem(k, f, fs) <= DOWN_HS_SMEM_LIMIT


def down_cp_smem(k: int, f: int, fs: int) -> int:
    """Shared memory of one copy-down block (4 warps): each warp's K * F / 256 + Fs / 256 super-blocks of 144 bytes,
    then its K expert ids and routing weights, rounded up to 16 bytes (moe_rowwarp.cu's dcp_warp_bytes)."""
    units = k * (f // 256) + fs // 256
    return 4 * ((units * 144 + 8 * k + 15) // 16 * 16)


def down_cp_fits(k: int, f: int, fs: int) -> bool:
    """Whether the copy down takes a call of K slots of F hidden rows and a shared expert of Fs (0: none)."""
    return down_cp_smem(k, f, fs) <= DOWN_CP_SMEM_LIMIT


def _shapes(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down) -> tuple[int, int, int, int]:
    """A call's shapes checked against each other: (K chosen, E experts, F, Fs; Fs = 0 without a shared expert)."""
    op = "moe_experts"
    rt.expect_shape(op, "x", x, (None, None), "[T, D]")
    t, d = x.shape
    rt.expect_shape(op, "ids", ids, (t, None), "[T, K]")
    k = ids.shape[1]
    rt.expect_shape(op, "weights", weights, (t, k), "[T, K], one weight per chosen expert")
    for name, w in (("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down)):
        if w is None or len(w.shape) != 3:
            raise BadInput(f"{op}: '{name}' must be a stacked [E, rows, cols] QWeight")
    e, f, _ = w_gate.shape
    if tuple(w_gate.shape) != (e, f, d) or tuple(w_up.shape) != (e, f, d) or tuple(w_down.shape) != (e, d, f):
        raise BadInput(f"{op}: expert weights must be gate/up [E, F, D] and down [E, D, F] with D = {d}; got "
                       f"{list(w_gate.shape)}, {list(w_up.shape)}, {list(w_down.shape)}")
    shared = [s is not None for s in (s_gate, s_up, s_down)]
    if any(shared) and not all(shared):
        raise BadInput(f"{op}: pass all three shared-expert weights (s_gate, s_up, s_down) or none")
    fs = s_gate.shape[0] if all(shared) else 0
    if fs and (tuple(s_gate.shape) != (fs, d) or tuple(s_up.shape) != (fs, d) or tuple(s_down.shape) != (d, fs)):
        raise BadInput(f"{op}: shared expert weights must be gate/up [Fs, D] and down [D, Fs] with D = {d}")
    return k, e, f, fs


def rowwarp_serves(x, w_gate, w_up, w_down, s_gate, s_up, s_down) -> bool:
    """Whether cupy_rowwarp's kernels take this call: one token, every expert weight Q4_K, widths of whole blocks."""
    shared = (s_gate, s_up, s_down)
    if x.dim() != 2 or x.shape[0] != 1 or not all(isinstance(w, QWeight) for w in (w_gate, w_up, w_down)):
        return False
    if any(s is not None and not isinstance(s, QWeight) for s in shared):
        return False
    ws = [w for w in (w_gate, w_up, w_down, *shared) if w is not None]
    if any(w.qtype != Q.Q4_K for w in ws) or any(w.shape[-1] % 256 for w in ws):
        return False
    return all(s is None for s in shared) or s_gate.shape[0] % 2 == 0


@dataclass
class _OneToken:
    """A one-token call's arguments as the row-warp and tensor-core kernels take them, checked, and its buffers."""

    x: torch.Tensor
    code: int
    ids: torch.Tensor
    weights: torch.Tensor
    kg: KernelWeight
    ku: KernelWeight
    kd: KernelWeight
    sg: KernelWeight | None
    su: KernelWeight | None
    sd: KernelWeight | None
    d: int
    k: int
    e: int
    f: int
    fs: int
    rows: int  # K * F + Fs: the hidden vector's length
    h: torch.Tensor  # [K * F + Fs] float32
    y: torch.Tensor  # [1, D], x's dtype


def _one_token(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down) -> _OneToken:
    op = "moe_experts"
    dev = rt.cuda_device(op, x=x, weights=weights, ids=ids)
    d = x.shape[1]
    k, e, f, fs = _shapes(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)
    code = rt.act_code(op, "x", x)
    x = rt.contiguous(x)
    if x.data_ptr() % 16:  # the activations are read 16 bytes at a time
        x = x.clone()
    kg, ku, kd = (kernel_weight(op, n, w, dev) for n, w in (("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down)))
    sg = su = sd = None
    if fs:
        sg, su, sd = (kernel_weight(op, n, w, dev) for n, w in (("s_gate", s_gate), ("s_up", s_up), ("s_down", s_down)))
    for kw in (kg, ku, kd, sg, su, sd):
        if kw is not None and kw.raw.data_ptr() % 16:
            raise BadInput(f"{op}: an expert weight's data is not 16-byte aligned; give it its own allocation")
    rows = k * f + fs
    return _OneToken(x, code, rt.contiguous(ids.long()), rt.contiguous(weights.float()), kg, ku, kd, sg, su, sd, d, k,
                     e, f, fs, rows, torch.empty((rows,), dtype=torch.float32, device=dev),
                     torch.empty((1, d), dtype=x.dtype, device=dev))


def _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, launch):
    """The stated policy of the one-token Q4_K expert kernels (cupy_rowwarp, cupy_mma): a call `rowwarp_serves` runs
    `launch` on its checked arguments (_one_token); every other call the torch plugin's float32 moe_experts."""
    if not rowwarp_serves(x, w_gate, w_up, w_down, s_gate, s_up, s_down):
        from sparkops_torch.moe_experts import moe_experts as torch_moe_experts

        return torch_moe_experts(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)
    a = _one_token(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)
    launch(a)
    return a.y


def moe_experts_rowwarp(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp": one token's Q4_K experts in two row-warp launches (kernels/moe_rowwarp.cu);
    every other call runs the torch plugin's float32 moe_experts (the stated policy, `rowwarp_serves`)."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, _launch_rowwarp)


def moe_experts_rowwarp_staged(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_staged": cupy_rowwarp with its "staged" gate/up form (a warp a hidden row) and
    ROWWARP_DOWN's down; every other call by the same stated policy. Its own name, so that a registry can put it
    beside cupy_rowwarp in one interleaved pair."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="staged"))


def _launch_rowwarp(a: _OneToken, gateup: str | None = None, pdl: bool = False, shared_first: bool = False,
                    wide_down: bool = False, split_down: bool = False, q8_hidden: bool = False,
                    pipe: bool = False, pairs: bool = False, copy_q8_down: bool = False,
                    ld_q8_down: bool = False, xpf_down: bool = False, hs_down: bool = False,
                    ld_form: str | None = None, shared_l2: bool = False, gu_groups: int = 1,
                    gu_depth: int | None = None) -> None:
    """cupy_rowwarp's two launches for a checked one-token call: gate/up in form `gateup` (None: ROWWARP_GATEUP; "half"
    only by name), down in ROWWARP_DOWN. `pdl` (gate/up "copy", down "warp"): both launched with programmatic
    dependent launch (the kernels written for it: gate/up waits, then lets down start; down issues its first weight
    loads before it waits). `shared_first` (with `pdl`): gate/up's first blocks take the shared expert's rows and copy
    them before the wait (kernels/moe_rowwarp.cu's SHARED_FIRST). `wide_down` (with `pdl`): down's first group of loads
    is DOWN_WIDE_ROUNDS x 4 super-blocks a warp (the 48B's whole row) instead of 16. `split_down` (with `pdl`): down
    as DOWN_SPLIT warps an output, each a share of its super-blocks (kernels/moe_rowwarp.cu's down_split_q4_k:
    another order of the sum, hence the tolerance claim). `q8_hidden` (with gate/up "q8" and `pdl`): gate/up writes
    the hidden vector in Q8 (groups of 8 codes and their float scale, into h's own bytes) and down dots it by __dp4a
    (kernels/moe_rowwarp.cu's hq8_store_group, down_q8_q4_k). `pipe` (with `q8_hidden`): that gate/up pipelined, a few
    blocks an SM each taking groups of 8 hidden rows through PIPE_STAGES stages of shared memory (gateup_q8pipe_q4_k:
    the same rows' sums, so the same bits). `pairs` (with `q8_hidden`, not `pipe`): that gate/up with each lane a whole
    Q4_K sub-block pair of every other super-block (q4k_q8.cuh's q8_block64: 16 __dp4a a super-block, the scales
    decoded once a pair and applied as integers) and the row copies paired (other sums: act_q8's claim, its own
    bits), x staged in form PAIRS_X. `copy_q8_down` (with `q8_hidden`): down in the copy form, each warp's rows
    copied into shared memory before the wait in DOWN_CP_GROUPS commit groups (down_q8cp_q4_k: the same products in
    the same order, so down_q8_q4_k's bits); a call whose block would not fit DOWN_CP_SMEM_LIMIT runs down_q8_q4_k
    (the stated policy). `ld_q8_down` (with `q8_hidden`): down in form DOWN_LD_FORM (down_q8ld_q4_k: the slots' ids
    read once a warp, the hidden values maybe a round ahead; down_q8_q4_k's bits); more than DOWN_LD_MAX_K slots run
    down_q8_q4_k (the stated policy). `xpf_down` (with `q8_hidden`, neither the copy nor the ld down): down_q8_q4_k
    with every line of the hidden vector its lanes read prefetched into L1 right after its wait (XPF: the same
    bits). `hs_down` (with `q8_hidden`, no other down form): down in the staged form (down_q8hs_q4_k: the ids form's
    loads, the whole hidden vector copied into shared memory right after the wait; down_q8_q4_k's bits); a call past
    DOWN_LD_MAX_K slots or DOWN_HS_SMEM_LIMIT runs down_q8_q4_k (the stated policy). `ld_form` (with `ld_q8_down`):
    the q8-loads down's form by name, DOWN_LD_FORM's when None. `shared_l2` (with `pairs` and x padded): the gate/up
    blocks of the shared expert's rows ask for their weight lines in the L2 before the wait (SHARED_L2: the same
    bits). `gu_groups` (with `shared_l2`): that gate/up's weight copies in so many commit groups of whole
    super-blocks, each dotted once it has landed (GU_GROUP_FORMS; gateup_q8_q4_k's GROUPS: the same sums in the same
    order, the same bits). `gu_depth` (with `gu_groups`): only so many of those groups requested at first, each later
    one once the one so many before it has landed (GU_DEPTH_FORMS; gateup_q8_q4_k's DEPTH: the same bits)."""
    x, code, ids, weights, h, y = a.x, a.code, a.ids, a.weights, a.h, a.y
    d, k, e, f, fs, rows, dev = a.d, a.k, a.e, a.f, a.fs, a.rows, a.x.device
    kg, ku, kd, sg, su, sd = a.kg, a.ku, a.kd, a.sg, a.su, a.sd
    # "half" only when an implementation names it (cupy_rowhalf): cupy_rowwarp's float32 claim does not cover fp16
    named, gateup = gateup is not None, gateup or ROWWARP_GATEUP
    if gateup not in ("octet", "copy", "staged") + (("half", "q8") if named else ()) \
            or ROWWARP_DOWN not in ("warp", "copy"):
        raise BadInput(f"moe_experts: cupy_rowwarp's forms are gate/up 'octet', 'copy' or 'staged' and down 'warp' or "
                       f"'copy', not {gateup!r} / {ROWWARP_DOWN!r} (sparkops_cupy.moe_experts.ROWWARP_GATEUP / _DOWN)")
    padded = pairs and PAIRS_X == "padded"  # the staged codes at 80 bytes a 64 (q4k_q8.cuh's q8_xq_bytes)
    if gateup == "half":  # fp16 pairs (16 bytes a slot of 8), sums of 16, 8 gate + 8 up rows
        smem = 2 * d + 4 * (d // 16) + 16 * kg.row_bytes
    elif gateup == "q8":  # int8 codes, a float scale a block of 32, int sums of 16, 8 gate + 8 up rows
        smem = (d // 64 * 80 if padded else d) + 4 * (d // 32) + 4 * (d // 16) + 16 * kg.row_bytes
    else:  # float32 activations, sums of 16 (, 8 gate + 8 up rows)
        smem = 4 * d + 4 * (d // 16) + (16 * kg.row_bytes if gateup == "copy" else 0)
    if gateup == "q8" and not pdl:
        raise BadInput("moe_experts: the Q8 gate/up is written for programmatic dependent launch (pdl=True)")
    if pdl and (gateup not in ("copy", "q8") or ROWWARP_DOWN != "warp"):
        raise BadInput(f"moe_experts: programmatic dependent launch is written for gate/up 'copy' with down 'warp', "
                       f"not {gateup!r} / {ROWWARP_DOWN!r}")
    if shared_first and not pdl:
        raise BadInput("moe_experts: the shared-first gate/up is written for programmatic dependent launch (pdl=True)")
    if (wide_down or split_down) and not pdl:
        raise BadInput("moe_experts: the wide and split downs are written for programmatic dependent launch (pdl=True)")
    if wide_down and split_down:
        raise BadInput("moe_experts: the wide and the split down are two forms of one kernel; pick one")
    if q8_hidden and (gateup != "q8" or not pdl or wide_down or split_down):
        raise BadInput("moe_experts: the Q8 hidden vector is written by the PDL Q8 gate/up and read by its own down "
                       "(gate/up 'q8', pdl=True, neither the wide nor the split down)")
    if q8_hidden and rows % 8:
        raise BadInput(f"moe_experts: the Q8 hidden vector's groups are 8 rows; K * F + Fs = {rows} is not a multiple "
                       f"of 8")
    if pipe and not q8_hidden:
        raise BadInput("moe_experts: the pipelined gate/up is the Q8 hidden form's (q8_hidden=True)")
    if pairs and (not q8_hidden or pipe):
        raise BadInput("moe_experts: the pairs gate/up is the one-wave Q8 hidden form's (q8_hidden=True, pipe=False)")
    if pairs and PAIRS_X not in PAIRS_X_FORMS:
        raise BadInput(f"moe_experts: the pairs gate/up's forms of x are {list(PAIRS_X_FORMS)}, not {PAIRS_X!r} "
                       f"(sparkops_cupy.moe_experts.PAIRS_X)")
    if copy_q8_down and not q8_hidden:
        raise BadInput("moe_experts: the copy down on the Q8 hidden vector is the Q8 hidden forms' (q8_hidden=True)")
    if ld_q8_down and (not q8_hidden or copy_q8_down):
        raise BadInput("moe_experts: the q8-loads down is the Q8 hidden forms' (q8_hidden=True), not the copy down's")
    if xpf_down and (not q8_hidden or copy_q8_down or ld_q8_down):
        raise BadInput("moe_experts: the prefetching down is the Q8 hidden forms' warp down (q8_hidden=True), not the "
                       "copy or the ld down's")
    if hs_down and (not q8_hidden or copy_q8_down or ld_q8_down or xpf_down):
        raise BadInput("moe_experts: the staged down is the Q8 hidden forms' (q8_hidden=True), not the copy, the ld or "
                       "the prefetching down's")
    if hs_down and h.data_ptr() % 16:
        raise BadInput("moe_experts: the staged down copies the hidden vector in 16-byte chunks; h must start on 16 "
                       "bytes")
    if shared_l2 and not (pairs and padded and not shared_first):
        raise BadInput("moe_experts: the shared expert's L2 prefetch is written for the pairs gate/up with x padded "
                       "(pairs=True, PAIRS_X 'padded'), not the shared-first one")
    if gu_groups != 1 and (gu_groups not in GU_GROUP_FORMS or not shared_l2):
        raise BadInput(f"moe_experts: the grouped gate/up is the L2-prefetching pairs gate/up's (shared_l2=True) in "
                       f"{sorted(GU_GROUP_FORMS)} commit groups, not {gu_groups!r} with shared_l2={shared_l2}")
    if gu_depth is not None and (gu_groups, gu_depth) not in GU_DEPTH_FORMS:
        raise BadInput(f"moe_experts: the streamed gate/up's forms are {sorted(GU_DEPTH_FORMS)} (groups, groups "
                       f"requested ahead), not ({gu_groups!r}, {gu_depth!r})")
    if ld_form is not None and not ld_q8_down:
        raise BadInput(f"moe_experts: a q8-loads down form ({ld_form!r}) names the ld down's form (ld_q8_down=True)")
    ld_form = DOWN_LD_FORM if ld_form is None else ld_form
    if ld_q8_down and ld_form not in DOWN_LD_FORMS:
        raise BadInput(f"moe_experts: the q8-loads down's forms are {sorted(DOWN_LD_FORMS)}, not {ld_form!r} "
                       f"(sparkops_cupy.moe_experts.DOWN_LD_FORM)")
    if copy_q8_down and DOWN_CP_GROUPS not in DOWN_CP_GROUP_FORMS:
        raise BadInput(f"moe_experts: the copy down's forms are {sorted(DOWN_CP_GROUP_FORMS)} commit groups, not "
                       f"{DOWN_CP_GROUPS!r} (sparkops_cupy.moe_experts.DOWN_CP_GROUPS)")
    if pipe and PIPE_STAGES not in PIPE_STAGE_FORMS:
        raise BadInput(f"moe_experts: the pipelined gate/up's forms are {sorted(PIPE_STAGE_FORMS)} stages, not "
                       f"{PIPE_STAGES!r} (sparkops_cupy.moe_experts.PIPE_STAGES)")
    if split_down and DOWN_SPLIT not in DOWN_SPLIT_FORMS:
        raise BadInput(f"moe_experts: the split down's forms are {sorted(DOWN_SPLIT_FORMS)} warps an output, not "
                       f"{DOWN_SPLIT!r} (sparkops_cupy.moe_experts.DOWN_SPLIT)")
    suffix = {"octet": "", "copy": "cp", "staged": "stg", "half": "hc", "q8": "q8"}[gateup] + ("h" if q8_hidden else "") \
        + ("w" if pairs else "") + ("x" if padded else "") + ("pdl" if pdl else "") + ("sh" if shared_first else "") \
        + ("pf" if shared_l2 else "") + (GU_GROUP_FORMS.get(gu_groups, "") if gu_depth is None
                                         else GU_DEPTH_FORMS[gu_groups, gu_depth])
    name, grid = f"moe_q4_k_gateup{suffix}_{_DT_SUFFIX[code]}", (rows + 7) // 8
    if pipe:  # the stages after the staged activations; as many blocks as the SMs hold, no more than the groups
        smem += (PIPE_STAGES - 1) * 16 * kg.row_bytes
        name, grid = f"{PIPE_STAGE_FORMS[PIPE_STAGES]}_{_DT_SUFFIX[code]}", _pipe_grid(rows // 8, smem, dev)
    rt.launch("moe_rowwarp.cu", name, dev, (grid,), (256 if gateup == "staged" else 128,),
              (rt.ptr(x), rt.ptr(ids), rt.i32(k), rt.i32(e), rt.ptr(kg.raw), rt.ptr(ku.raw), rt.i64(kg.row_bytes),
               rt.i32(f), rt.ptr(sg.raw if sg else None), rt.ptr(su.raw if su else None), rt.i32(fs), rt.i32(d),
               rt.ptr(h)), shared_mem=smem, pdl=pdl)
    copy_down = ROWWARP_DOWN == "copy"
    smem = 4 * (k * kd.row_bytes + (sd.row_bytes if sd else 0)) if copy_down else 0  # 4 rows of every slot
    down = "moe_q4_k_downcp" if copy_down else ("moe_q4_k_downpdlw" if wide_down else DOWN_SPLIT_FORMS[DOWN_SPLIT]
                                                 if split_down else ("moe_q4_k_downq8xpfpdl" if xpf_down
                                                                     else "moe_q4_k_downq8pdl") if q8_hidden
                                                 else "moe_q4_k_downpdl") if pdl else "moe_q4_k_down"
    if copy_q8_down and down_cp_fits(k, f, fs):  # else down_q8_q4_k, the same bits (the stated policy)
        down, smem = DOWN_CP_GROUP_FORMS[DOWN_CP_GROUPS], down_cp_smem(k, f, fs)
    if ld_q8_down and k <= DOWN_LD_MAX_K:  # else down_q8_q4_k, the same bits (the stated policy)
        down = DOWN_LD_FORMS[ld_form]
    if hs_down and down_hs_fits(k, f, fs):  # else down_q8_q4_k, the same bits (the stated policy)
        down, smem = "moe_q4_k_downq8hspdl", down_hs_smem(k, f, fs)
    grid, block = ((d,), (32 * DOWN_SPLIT,)) if split_down else (((d + 3) // 4,), (128,))  # an output a block / a warp
    rt.launch("moe_rowwarp.cu", down, dev, grid, block,
              (rt.ptr(h), rt.ptr(ids), rt.ptr(weights), rt.i32(k), rt.i32(e), rt.ptr(kd.raw), rt.i64(kd.row_bytes),
               rt.i32(f), rt.ptr(sd.raw if sd else None), rt.i64(sd.row_bytes if sd else 0), rt.i32(fs), rt.i32(d),
               rt.ptr(y), rt.i32(code)), shared_mem=smem, pdl=pdl)


def moe_experts_rowwarp_pdl(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl": cupy_rowwarp (gate/up "copy", down "warp") with both launches using
    programmatic dependent launch: gate/up waits for the router, then lets down start, and down's first weight loads
    overlap gate/up. The same bits as cupy_rowwarp; every other call by its stated policy."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="copy", pdl=True))


def moe_experts_rowwarp_pdl_shared(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_shared": cupy_rowwarp_pdl with the shared expert's gate/up rows requested
    before the wait for the router. Those rows do not depend on the router's ids, so their bytes (1/9 of a 48B layer's
    gate/up) stream while the router runs: session 25's timeline had the router at ~6 us a layer, its expert kernels at
    ~36. The grid's first blocks take them (blocks start in index order); each row's sum is unchanged, so the claim is
    bit-identity to cupy_rowwarp. Every other call by the stated policy."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="copy", pdl=True, shared_first=True))


def moe_experts_rowwarp_pdl_wide(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_wide": cupy_rowwarp_pdl with down's whole row requested at once. The PDL down
    issues a group of loads before it waits for gate/up and the rest after: with groups of 16 super-blocks the 48B's
    36 take two more round trips once h is ready, and session 26's timeline had down ending ~18 us after gate/up for
    ~12 MB. Here the first group is the row's 36 (kernels/moe_rowwarp.cu's DOWN_WIDE_ROUNDS), all requested before the
    wait. Each lane adds its super-blocks in the same order, so the claim is bit-identity to cupy_rowwarp. Every other
    call by the stated policy. Session 26: per op 0.944, its rung 0.966 (a regression). Nsight Compute then found the
    down short of warps, not of loads in flight, and this form's 128 registers cost it more warps (29.7 us alone
    against 19.6); kept as a measured form, selected by nothing."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="copy", pdl=True, wide_down=True))


def moe_experts_rowwarp_pdl_split(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_split": cupy_rowwarp_pdl with down split four warps an output. Nsight Compute on
    the warp form's down (session 26, the 48B's layer alone): 17.8 us for ~12 MB, 14% of DRAM, ~4.3 warps a scheduler
    of which 0.68 eligible, stalled on its loads. A warp an output row gives the grid too few warps, and the wide form
    (more loads a warp, 128 registers) was slower. Here each output is a block of four warps, each adding a quarter
    of the row's super-blocks (all requested before the PDL wait), the four sums added in warp order: 4x the warps, a
    quarter of the chain each (DOWN_SPLIT: 2 and 8 are the other forms). Another order of the sum than cupy_rowwarp's,
    so its claim is the tolerance row. Every other call by the stated policy. Session 27: per op 1237 against 1077 us
    a token (its 2- and 8-warp forms 1084 and 1239), 24.8 against 19.4 us alone under Nsight Compute with 1.7x the
    warps and 1.4x the instructions (a block's warps no longer share h's lines), rung 0.937: a regression, kept as a
    measured form, selected by nothing."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="copy", pdl=True, split_down=True))


def moe_experts_rowwarp_pdl_q8(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8": cupy_rowwarp_pdl with gate/up on Q8 activations and integer dots
    (kernels/moe_rowwarp.cu's gateup_q8_q4_k: x quantized once a block to Q8 blocks of 32, each lane's 32 weights of a
    super-block dotted by 8 __dp4a), down the PDL warp form. Nsight Compute had the float gate/up at ~7.2
    instructions a weight, close to issue-bound (session 26); this is ~1.3, and its shared memory (~24 KB) puts the 48B's
    1152 blocks in one wave. The activations' rounding is llama.cpp's: the claim is tolerance("act_q8"). Every other
    call by the stated policy. Session 27: 15.5 against 19.6 us alone under Nsight Compute (~5 instructions a weight,
    not ~1.3: the staging of x in every block costs about what the dots do); per op 1061 against 1074 us a token, its
    rung 1.008 (none): the PDL down overlapping it took as long as before."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="q8", pdl=True))


def moe_experts_rowwarp_pdl_q8_split(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8_split": the Q8 gate/up of cupy_rowwarp_pdl_q8 with cupy_rowwarp_pdl_split's
    down (DOWN_SPLIT warps an output): both of session 26's leads in one pair, its own name so that a rung over the
    split step changes gate/up alone. tolerance("act_q8"); every other call by the stated policy."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="q8", pdl=True, split_down=True))


def moe_experts_rowwarp_pdl_q8_hidden(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8_hidden": cupy_rowwarp_pdl_q8 whose gate/up writes the hidden vector in Q8
    (each block's 8 values one group: int8 codes, a float32 scale and the group's scaled code sum) and whose down dots
    those codes with the 4-bit weights by __dp4a, 8 a lane a super-block, down's warp form otherwise. Nsight Compute
    in GPU session 27: the float down at ~10 thread-instructions a weight and 19.2 us for ~12 MB alone (float32 h read
    32 values a lane a super-block and summed again), against ~4.6 a weight that the read roofline allows; the Q8
    gate/up had taken gate/up from 19.6 to 15.5 us. Both roundings are act_q8's kind: the claim is tolerance("act_q8").
    Every other call by the stated policy. Session 27: per op 796 against 1079 us a token (x1.357), its rung 1.157 /
    1.151 over session 23's step (526.6 / 501.0 tok/s): the step since."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="q8", pdl=True, q8_hidden=True))


def moe_experts_rowwarp_pdl_q8_pipe(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8_pipe": cupy_rowwarp_pdl_q8_hidden with its gate/up pipelined. Nsight Compute
    in GPU session 28 had the one-wave Q8 gate/up (1152 blocks, one group of 8 hidden rows each) at 15.8 us for ~24 MB,
    32% of DRAM, 5.2 thread-instructions a weight, about a third of them staging x again in every block: every block
    requests its 16 rows at once and then waits, so the bytes land together near the end and no dot overlaps a
    transfer. Here a few blocks an SM (PIPE_STAGES stages of shared memory) take groups g = block, + grid, ... with
    the next groups' rows requested while the warps dot the current one, x staged once a block. Each row's sum is the
    one-wave form's code (gu_q8_group), and down is the same kernel: the claim is bit-identity to
    cupy_rowwarp_pdl_q8_hidden. Every other call by the stated policy. Session 28: the same bits (its GPU tests and the
    captured gate), per op 862 against the one-wave pair's 788 us a token (4 stages: 930), its rung 0.958 / 0.961 (a
    regression). Nsight Compute alone: gate/up 16.35 against 15.52 us with 10% fewer instructions (6.16 M against
    6.84 M warp instructions: x's staging was a tenth of them, not a third) and half the cycles an issue (6.5 against
    13.5), but 2.9 warps a scheduler against 7.4: with few warps the dots bind. The dot loop's 87 instructions a lane
    a super-block (2.7 a weight; 8 of them __dp4a) are the cost. Kept as a measured form, selected by nothing."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="q8", pdl=True, q8_hidden=True, pipe=True))


def moe_experts_rowwarp_pdl_q8_pairs(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8_pairs": cupy_rowwarp_pdl_q8_hidden with a shorter dot loop in gate/up. The
    disassembly in session 28 put the one-wave gate/up's loop at 87 instructions a lane a super-block for 32 weights
    (2.7 a weight, 8 of them __dp4a): two lanes of each sub-block pair decode the same 6-bit scales, 8 lanes read
    each header, and every partial sum is converted and scaled in float. Here a lane takes a whole pair of every other
    super-block (64 weights, 16 __dp4a), decodes its scales once and scales the integer sums as integers before one
    conversion: 106 instructions for 64 weights (1.66 a weight). The row copies go two a turn of the loop (6
    instructions a copy against 16). Down is the Q8 hidden pair's. Another order of the products' sums: its claim is
    tolerance("act_q8"), with bits of its own. Every other call by the stated policy. Session 28 (call 5, tests and
    side-by-side only): its 10 GPU tests passed (within 1e-6 nmse of the Q8 hidden pair at three widths), but per op it
    was slower, 851 against the Q8 hidden pair's 794 us a token, with 21% fewer instructions in gate/up. Unexplained
    yet; the suspects are x's shared-memory reads (lanes 64 bytes apart: 4-way bank conflicts against the one-wave
    form's 2-way), the octet's 5-and-4 split of 9 super-blocks, and each turn's longer dependent chain. So it has a
    second form, PAIRS_X = "padded" (each 64 staged codes at a stride of 80 bytes: the octet's reads on 8 distinct
    bank groups; the same bits), the one it runs since session 29: per op 751 against the Q8 hidden pair's 794 us a
    token (the dense form 850), its gate/up 14.08 against 15.62 us under Nsight Compute, its short-scoreboard stalls
    6.24 -> 1.13 an issue (bench/gpu-runs/2026-12-02-session29)."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="q8", pdl=True, q8_hidden=True, pairs=True))


def moe_experts_rowwarp_pdl_q8_hidden_cp(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8_hidden_cp": cupy_rowwarp_pdl_q8_hidden with down in a copy form. Nsight
    Compute in GPU session 29 had the Q8 down alone at ~12 us for ~12 MB (20% of DRAM, 0.58 eligible warps a scheduler,
    long-scoreboard stalls, ~3.5 us of issue): its warp requests a row's 36 super-blocks in three groups of register
    loads, each after the last one's products, so most of its bytes are requested late. Here each warp copies its
    output's rows into shared memory with cp.async before the PDL wait, every byte at once, in DOWN_CP_GROUPS commit
    groups, and dots each group as it lands (kernels/moe_rowwarp.cu's down_q8cp_q4_k: 52 registers against 80, no
    block barrier). Session 26's copy form of the float down gained nothing (18.7 against 17.8 us alone); that down
    spent ~10 instructions a weight, this one ~3. The same products in the same order: the claim is bit-identity to
    cupy_rowwarp_pdl_q8_hidden. Every other call by the stated policy (_policies.experts_cp_passes: a block past
    DOWN_CP_SMEM_LIMIT runs the warp down, the same bits). GPU session 30: the same bits (its GPU tests and the
    captured gate), but slower, alone and in the chain. Per op in the chain 807 us a token in its fastest form (1
    group; 3 groups 933) against the warp down's pair's 787, a forecast of 0.844 for the rung (3 groups), whose pair
    was stopped by the call's deadline and not timed again. Under Nsight Compute alone its down took 14.9 us (1 group;
    3 groups 17.0, 6 groups 17.5) against the warp down's 11.7-12.5: 1.3-1.7x the warp instructions (the copy loop's
    address arithmetic, a division a chunk) and long-scoreboard stalls still ~6.4 an issue with every weight already
    in shared memory. So the warp down was not waiting on late weight bytes: its hidden-vector reads (64 bytes a lane
    a super-block through L1, four times the weight bytes) are the suspects now. Kept as a measured form, selected by
    nothing."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="q8", pdl=True, q8_hidden=True, copy_q8_down=True))


def moe_experts_rowwarp_pdl_q8_pairs_xpf(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8_pairs_xpf": cupy_rowwarp_pdl_q8_pairs with its down prefetching the hidden
    vector into L1 right after its PDL wait (kernels/moe_rowwarp.cu's down_q8_q4_k<.., XPF>: every line of codes and
    scales each lane reads, for every group). Written after GPU session 38, whose disassembly of the down showed each of
    a group's four rounds loading its share of the hidden vector only after the round before was summed: four L2
    round trips in turn, after the wait, for the vector gate/up had just written. The same loads and sums:
    cupy_rowwarp_pdl_q8_pairs' bits. Every other call by the stated policy. GPU session 39 (H200): its tests passed, but
    per op it took 1100 against the pairs pair's 767 us a token (x0.697), and its rung with the GEMV's xpf form timed
    x0.740 / x0.749. Kept as a measured form, selected by nothing."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="q8", pdl=True, q8_hidden=True, pairs=True,
                                                    xpf_down=True))


def moe_experts_rowwarp_pdl_q8_pairs_cp(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8_pairs_cp": cupy_rowwarp_pdl_q8_pairs' gate/up (a lane a whole sub-block
    pair, x padded) with cupy_rowwarp_pdl_q8_hidden_cp's copy down: session 29's faster gate/up (751 against 794 us a
    token per op, a none as a rung) and this down in one pair, its own name so that a rung can stack them. The claim
    is bit-identity to cupy_rowwarp_pdl_q8_pairs (the same gate/up, a down of the same bits). Every other call by the
    stated policy (_policies.experts_cp_passes). GPU session 30: per op in the chain 947 us a token (3 groups) against
    cupy_rowwarp_pdl_q8_pairs' 751; the pairs gate/up was stacked with the warp down instead (stage rungs34). Kept,
    tested, selected by nothing."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="q8", pdl=True, q8_hidden=True, pairs=True,
                                                    copy_q8_down=True))


def moe_experts_rowwarp_pdl_q8_hidden_ld(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8_hidden_ld": cupy_rowwarp_pdl_q8_hidden with its down's loads requested
    earlier. Nsight Compute's source page of the Q8 down launched alone (GPU session 30, stage probe_ncu_source_moe)
    put ~60% of its warps' stall samples on long-scoreboard waits: ~22% on each round's expert-id load (four a group
    through __ldcg, asm volatile, so one round trip after another before that round's weights are requested), ~16%
    on each round's hidden-vector loads (__ldca, issued next to their use), ~10% on the first weights after the wait.
    Here a warp reads its K slots' ids and weights once, a lane a slot, and shuffles each unit's (DOWN_LD_FORM "ids",
    77 registers against 80); the "ahead" form also requests each round's hidden values before the round before is
    dotted (94). kernels/moe_rowwarp.cu's down_q8ld_q4_k: the same values and products in the same order, so the claim
    is bit-identity to cupy_rowwarp_pdl_q8_hidden. Every other call by the stated policy (_policies.experts_ld_passes:
    more than DOWN_LD_MAX_K slots run the warp down, the same bits). GPU session 30 (call 7, tests and side-by-side
    only): its 21 GPU tests passed; per op in the chain "ids" 736.9 and "ahead" 746.3 against the warp down's pair's
    785.3 us a token (x1.066); not yet a rung (stage rungs35)."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="q8", pdl=True, q8_hidden=True, ld_q8_down=True))


def moe_experts_rowwarp_pdl_q8_pairs_ld(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8_pairs_ld": cupy_rowwarp_pdl_q8_pairs' gate/up (a lane a whole sub-block
    pair, x padded) with cupy_rowwarp_pdl_q8_hidden_ld's down, its own name so that a rung over a step whose experts
    are the pairs pair changes the down alone. The claim is bit-identity to cupy_rowwarp_pdl_q8_pairs. Every other
    call by the stated policy (_policies.experts_ld_passes). GPU session 30 (call 7): per op 712.2 ("ahead") against
    the pairs pair's 750.4 us a token."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="q8", pdl=True, q8_hidden=True, pairs=True,
                                                    ld_q8_down=True))


def moe_experts_rowwarp_pdl_q8_pairs_l2pf(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8_pairs_l2pf": cupy_rowwarp_pdl_q8_pairs_ld (the step's experts since session
    39) with each kernel asking, before its PDL wait, for the weight lines it will read after it whose addresses it
    knows by then (prefetch.global.L2: a request, no register): the down its second and third groups' (the q8-loads
    down's "l2pf" form, kernels/moe_rowwarp.cu's down_q8ld_q4_k<.., L2PF>; 20 of a row's 36 super-blocks at the 48B's
    shape), while gate/up runs; gate/up the shared expert's rows (gateup_q8_q4_k<.., SHARED_L2>: they need no expert
    id), while the router runs. Written in GPU session 40, after the staged down tied: with the hidden vector's round
    trips gone the down's own time did not move, and what its compiled form still does after the wait is request its
    later groups' weights from DRAM, a group at a time. The same loads and sums: cupy_rowwarp_pdl_q8_pairs' bits.
    Every other call by the stated policy (_policies.experts_ld_passes). GPU session 41 (H100): rungs54 over the s52
    step x1.012 / x1.011, then x1.011 / x1.013 (a none); session 42 stacked it with the active PDL attention (rungs55,
    x1.030 at d=0: a win), so it is the step's experts since (s55)."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="q8", pdl=True, q8_hidden=True, pairs=True,
                                                    ld_q8_down=True, ld_form="l2pf", shared_l2=True))


def moe_experts_rowwarp_pdl_q8_pairs_l2pf_grouped(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8_pairs_l2pf_grouped": cupy_rowwarp_pdl_q8_pairs_l2pf (the step's experts
    since GPU session 42) with its gate/up's weight copies requested in GU_GROUPS commit groups of whole super-blocks
    (group g of every row before group g + 1 of any) and each group dotted as soon as it has landed, not every byte of
    the block first (kernels/moe_rowwarp.cu's gu_copy_range_grouped; gateup_q8_q4_k's GROUPS). Why: GPU session 43's
    probe_gateup (H100) timed the step's gate/up at 13.57 us a call, its weight copies alone 8.96 (the read ceiling
    after the launch and the wait's ~2.1), its x staging and dots alone 7.82 (no copy): the dots of a one-wave block
    all wait for the block's last byte, so ~4.6 us of them run after the bytes stop. The same loads, rows and sums in
    the same order (each lane's super-blocks still o / 4, o / 4 + 2, ...): cupy_rowwarp_pdl_q8_pairs' bits. The down
    is l2pf's. Every other call by the stated policy (_policies.experts_ld_passes). GPU session 43 (H200): its 11 GPU
    tests and the captured gate passed (the same bits), but per op in the chain it took 735 against the l2pf pair's
    712 us a token, and its rung (rungs57) lost x0.976 / x0.976: requested at once, a block's groups land interleaved
    with every other block's, so each group's wait and barrier only add (probe_gateup: 12.3, 13.4, 13.4 and 17.6 us
    at 2, 3, 4 and 9 groups against 11.9). Kept, tested, selected by nothing; gateup_q8_q4_k's DEPTH (groups asked
    as earlier ones land) is the probe's next form. That refactor changed this form's compiled code (the production
    kernels' is unchanged): the build now in the tree has not run on a GPU yet (stage proofs57 re-runs its tests)."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="q8", pdl=True, q8_hidden=True, pairs=True,
                                                    ld_q8_down=True, ld_form="l2pf", shared_l2=True,
                                                    gu_groups=GU_GROUPS))


def moe_experts_rowwarp_pdl_q8_pairs_l2pf_streamed(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8_pairs_l2pf_streamed": the grouped form
    (cupy_rowwarp_pdl_q8_pairs_l2pf_grouped: the step's l2pf pair with its gate/up's weight copies in commit groups of
    whole super-blocks, each dotted once it has landed) with only the first GU_DEPTH[1] of its GU_DEPTH[0] groups requested after the wait, and each later
    group once the one before it has landed (kernels/moe_rowwarp.cu's gateup_q8_q4_k DEPTH). Why: requested at once,
    a block's groups land interleaved with every other block's, so no block's first group comes first and each
    group's wait only adds (the grouped form lost x0.976 in session 43's rungs57); requested one behind the other,
    the dots of a group run under the next group's copy. GPU session 46's probe_gateup (H100): 12.22 us a call
    against 13.27 for the step's gate/up, the registered kernel's bits (2 ahead 13.56, 4 groups 2 ahead 12.49, 6 or
    9 groups slower). The same loads, rows and sums in the same order: cupy_rowwarp_pdl_q8_pairs' bits. The down is
    l2pf's. Every other call by the stated policy (_policies.experts_ld_passes)."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="q8", pdl=True, q8_hidden=True, pairs=True,
                                                    ld_q8_down=True, ld_form="l2pf", shared_l2=True,
                                                    gu_groups=GU_DEPTH[0], gu_depth=GU_DEPTH[1]))


def moe_experts_rowwarp_pdl_q8_pairs_hs(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowwarp_pdl_q8_pairs_hs": cupy_rowwarp_pdl_q8_pairs_ld (the step's experts since session
    39) with its down reading the hidden vector from shared memory: right after its PDL wait each block copies the
    whole vector (codes and scales, 18 KB at the 48B's shape) with cp.async, every copy issued before any is waited
    on (kernels/moe_rowwarp.cu's down_q8hs_q4_k). Written in GPU session 40: the compiled ids-once down waits out
    4 L2 round trips in turn for its share of the vector in each of its 3 groups. The same products in the same order:
    cupy_rowwarp_pdl_q8_pairs' bits. Every other call by the stated policy (_policies.experts_hs_passes). GPU session
    40 (H100): its 11 GPU tests passed; per op in the norm-router-experts chain 775 against the ids-once pair's 768 us
    a token (x0.991); over the s52 step x1.001 / x1.001 (a none), its down's own time in the replayed step 207.4
    against 209.0 us a token. Selected by nothing; kept, tested, as the measured answer."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="q8", pdl=True, q8_hidden=True, pairs=True,
                                                    hs_down=True))


def moe_experts_rowhalf(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_rowhalf": cupy_rowwarp with gate/up in the copy form's structure and packed half2 products
    (kernels/q4k_half.cuh: fp16 activations scaled by a power of two, fp16 products and partial sums; claim
    tolerance("bf16")), down in ROWWARP_DOWN's float32 form; every other call by cupy_rowwarp's stated policy."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down,
                          lambda a: _launch_rowwarp(a, gateup="half"))


def moe_experts_mma(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "cupy_mma": one token's Q4_K experts in two tensor-core launches (kernels/moe_mma.cu); every
    other call runs the torch plugin's float32 moe_experts (the stated policy, `rowwarp_serves`)."""
    return _one_token_q4k(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, _launch_mma)


#: cupy_mma's forms (kernels/moe_mma.cu): "tile", 4 warps a 16-row tile, each super-block loaded into registers as it
#: is decoded (session 13); "pipe", every super-block a block decodes requested into shared memory first (cp.async),
#: each decoded as soon as it lands: 8 warps a gate/up tile, 16 a down tile. Session 14's Nsight Compute run on the
#: decode step's Triton experts: gate/up 20.8 us a layer at 24% of DRAM, 25% occupancy - the same stall as linear's
MOE_MMA_FORMS = ("tile", "pipe")
#: the form cupy_mma runs. Session 14 (bf16, graph, the 48B's experts, us a layer): tile 37.1, pipe 41.5,
#: triton_prefetch 34.9, cupy_rowwarp copy/warp 34.2
MOE_MMA_FORM = "tile"


def _launch_mma(a: _OneToken) -> None:
    """cupy_mma's two tensor-core launches for a checked one-token call, in form MOE_MMA_FORM."""
    if MOE_MMA_FORM not in MOE_MMA_FORMS:
        raise BadInput(f"moe_experts: cupy_mma's forms are {list(MOE_MMA_FORMS)}, not {MOE_MMA_FORM!r} "
                       f"(sparkops_cupy.moe_experts.MOE_MMA_FORM)")
    x, code, ids, weights, h, y = a.x, a.code, a.ids, a.weights, a.h, a.y
    d, k, e, f, fs, rows, dev = a.d, a.k, a.e, a.f, a.fs, a.rows, a.x.device
    kg, ku, kd, sg, su, sd = a.kg, a.ku, a.kd, a.sg, a.su, a.sd
    pipe = MOE_MMA_FORM == "pipe"
    units = k * (f // 256) + fs // 256  # the down's super-block columns: every slot's, then the shared expert's
    gateup = (f"moe_q4_k_gateup_mmapipe_{_DT_SUFFIX[code]}", 256, 2 * (d // 256) * 16 * 144 + 4 * 8 * 16) if pipe \
        else (f"moe_q4_k_gateup_mma_{_DT_SUFFIX[code]}", 128, 4 * 64)
    down = ("moe_q4_k_down_mmapipe", 512, units * 16 * 144 + 4 * 16 * 16) if pipe \
        else ("moe_q4_k_down_mma", 128, 4 * 64)
    rt.launch("moe_mma.cu", gateup[0], dev, (rows // 16,), (gateup[1],),
              (rt.ptr(x), rt.ptr(ids), rt.i32(k), rt.i32(e), rt.ptr(kg.raw), rt.ptr(ku.raw), rt.i64(kg.row_bytes),
               rt.i32(f), rt.ptr(sg.raw if sg else None), rt.ptr(su.raw if su else None), rt.i32(d), rt.ptr(h)),
              shared_mem=gateup[2] + 2 * d + 4 * (d // 32))  # and the bf16 activations, their sums of 32
    rt.launch("moe_mma.cu", down[0], dev, ((d + 15) // 16,), (down[1],),
              (rt.ptr(h), rt.ptr(ids), rt.ptr(weights), rt.i32(k), rt.i32(e), rt.ptr(kd.raw), rt.i64(kd.row_bytes),
               rt.i32(f), rt.ptr(sd.raw if sd else None), rt.i64(sd.row_bytes if sd else 0), rt.i32(fs), rt.i32(d),
               rt.ptr(y), rt.i32(code)), shared_mem=down[2] + 2 * rows + 4 * (rows // 32))


def _pipe_grid(groups: int, smem: int, dev: torch.device) -> int:
    """The pipelined gate/up's blocks: as many as every SM holds at `smem` bytes of dynamic shared memory a block (plus
    the 1 KB the runtime reserves for each and the kernel's 32 static bytes), never more than the groups of 8 rows,
    nor than 8 an SM."""
    idx = dev.index if dev.index is not None else torch.cuda.current_device()
    per_sm = max(1, min(8, rt.shared_memory_per_sm(idx) // (smem + 1024 + 32)))
    return max(1, min(groups, per_sm * rt.sm_count(idx)))


def _grid_rows(rows: int, dev: torch.device) -> int:
    idx = dev.index if dev.index is not None else torch.cuda.current_device()
    return max(1, min((rows + 7) // 8, rt.sm_count(idx) * 8))


def _gate_up(x, code, d, kg: KernelWeight, ku: KernelWeight, f, k, ids, e, sg: KernelWeight | None,
             su: KernelWeight | None, fs, h, width, h_off) -> None:
    dev = x.device
    table = iq1s_grid(dev) if kg.suffix == "iq1_s" else None
    rows = k * f + fs
    rt.launch("moe_experts.cu", f"moe_gate_up_{kg.suffix}", dev, (_grid_rows(rows, dev), x.shape[0]), (256,),
              (rt.ptr(x), rt.i32(code), rt.i32(d), rt.ptr(kg.raw), rt.ptr(ku.raw), rt.i64(kg.row_bytes), rt.i32(f),
               rt.i32(k), rt.ptr(ids), rt.i32(e), rt.ptr(sg.raw if sg else None), rt.ptr(su.raw if su else None),
               rt.i32(fs), rt.i32(kg.wdt), rt.ptr(h), rt.i64(width), rt.i32(h_off), rt.ptr(table)),
              shared_mem=_stage_bytes(d, kg.is_float))


def _down(h, width, h_off, kd: KernelWeight, f, k, ids, e, weights, sd: KernelWeight | None, fs, d, y, y_code,
          accumulate) -> None:
    dev = h.device
    table = iq1s_grid(dev) if kd.suffix == "iq1_s" else None
    rt.launch("moe_experts.cu", f"moe_down_{kd.suffix}", dev, (_grid_rows(d, dev), h.shape[0]), (256,),
              (rt.ptr(h), rt.i64(width), rt.i32(h_off), rt.ptr(kd.raw), rt.i64(kd.row_bytes), rt.i32(f), rt.i32(k),
               rt.ptr(ids), rt.i32(e), rt.ptr(weights), rt.ptr(sd.raw if sd else None),
               rt.i64(sd.row_bytes if sd else 0), rt.i32(fs), rt.i32(d), rt.i32(kd.wdt), rt.ptr(y), rt.i32(y_code),
               rt.i32(accumulate), rt.ptr(table)), shared_mem=_stage_bytes(k * f + fs, kd.is_float))
