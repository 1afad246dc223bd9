"""linear on CUDA: GEMVs over GGUF blocks, for decode.

Twelve implementations. Two stream the weight through shared memory (kernels/linear.cu) and differ in what they do with
the activations:
- "cupy_dp4a" (`linear`): block-quantized weights (Q8_0, Q4_K, Q6_K, IQ1_S) are dotted with Q8_0-quantized
  activations through __dp4a, as llama.cpp does: not the float reference's arithmetic, hence the claim
  tolerance("act_q8"). The 48B model gate refused it (session 6).
- "cupy_float" (`linear_float`): the same weight stream and the same chunk loads, dotted with the activations as
  they came, in float32 (kernels/float_dot.cuh): the reference's arithmetic up to the order of the sums, claim
  tolerance(). Session 4 measured the integer kernel's Q6_K lm_head at 126 us against Triton's 344; this keeps
  that weight stream without the quantized activations.
  F32/F16/BF16 weights are dotted in float32 with unquantized activations by both.
The others are one-token GEMVs that request a row's bytes before using any, with one stated policy for every other call:
- "cupy_rowwarp" (`linear_rowwarp`): the one-token Q4_K GEMV of decode, every byte of a row requested before any is
  used (kernels/linear_rowwarp.cu): one launch, no split-K. One warp a row, or for tall weights a warp per 4 rows
  from activations staged once a block in shared memory (ROWWARP_FORMS, rowwarp_form). Float32 products as
  cupy_float's, summed in another order: claim tolerance(). Its stated policy for every other call: one token of
  another type, or up to 8 tokens, runs cupy_float's kernel; more tokens (a prefill chunk) the torch plugin's float32
  linear (the weight dequantized once, cuBLAS), since a GEMV per token group would read the weight again for every 4
  tokens. A registry selects it per type (linear@Q4_K) so the other types keep theirs.
- "cupy_mma" (`linear_mma`): the one-token Q4_K GEMV on the tensor cores (kernels/linear_mma.cu): a weight's two codes
  become a bfloat16 pair in two instructions and mma.sync does the products, the scales applied once a sub-block.
  The activations are rounded to bfloat16 for the products: claim tolerance("bf16"). cupy_rowwarp's policy for the
  other calls. Two forms (MMA_FORMS): session 13's "tile" (the default: passed its GPU tests in session 14, and lost
  its rung, 0.985) and "pipe", which requests a tile's weights into shared memory before decoding any (slower per op
  in session 14: kept, tested, selected by nothing).
- "cupy_rowwarp_staged" (`linear_rowwarp_staged`): cupy_rowwarp in its "staged" form at every shape, a name of its own
  for an interleaved pair against cupy_rowwarp. Session 15: slower per op (586 against 503 µs a token) and a
  regression in the step (0.969), as its record forecast; Nsight Compute found the form issue-bound, not short of
  warps. Kept, tested, selected by nothing.
- "cupy_rowhalf" (`linear_rowhalf`): cupy_rowwarp's copy form for tall weights with its products in packed half2, two
  weights an instruction (kernels/q4k_half.cuh): session 15's counters found the float32 forms issue-bound. The
  activations are scaled by a power of two into fp16 and the products and partial sums round to fp16: claim
  tolerance("bf16"). Shorter weights take the float32 warp form. Session 16: a regression as a rung (0.943); with its
  staging mended, 13.0 against the copy form's 12.2 µs at 12288 x 2304. Kept, tested, selected by nothing.
- "cupy_rowwarp_copy2" (`linear_rowwarp_copy2`): cupy_rowwarp with tall weights in the "copy2" form (the rows copied
  in two groups, the first half decoded while the second lands); the same bits. Session 17: the copy form's time as a
  rung (0.995, none). Kept, tested, selected by nothing.
- "cupy_rowwarp_copy2x" (`linear_rowwarp_copy2x`): copy2 with each block's first activations requested before its
  weights ("copy2x"). The same bits. Session 17: a tie as a rung (0.995); x's wait is its own latency, not a queue.
  Kept, tested, selected by nothing.
- "cupy_rowwarp_pdl" (`linear_rowwarp_pdl`): cupy_rowwarp launched with programmatic dependent launch (_pdl.py): each
  block requests its weights before it waits for the kernel before it; the same bits. Session 17, x read from L2: a
  regression as a rung with the triggering norms (0.798). Session 18, x read through L1 after the wait: 1.007 at d=0
  and 1.008 at 32768 with the norms (none: under the 2% band); with session 23's other nones, in the step since.
- "cupy_rowwarp_pdl_q8" (`linear_rowwarp_pdl_q8`, written after GPU session 27): cupy_rowwarp_pdl's copy form on Q8
  activations and __dp4a at every shape (kernels/q4k_q8.cuh, as the experts' Q8 gate/up), 16 rows a block for tall
  weights and 8 for the others: claim tolerance("act_q8"). Session 28: per op x1.158 (a token's Q4_K GEMVs 420
  against 486 us), its rung 1.005 / 1.008 (none).
- "cupy_x16_pdl" (`linear_x16_pdl`, session 29): the one-token Q6_K GEMV (the lm_head) on activations held to 16
  bits in two int8 planes and __dp4a (kernels/linear_q6k_x16.cu): a quantize launch, then the GEMV with
  programmatic dependent launch, its rows copied before its wait. The planes keep x to ~1.5e-5 of each 16-group's
  largest value: ~2e-10 nmse at the lm_head's width, over the float row's 1e-10 and far inside the bf16 row's 5e-4
  (the step's activations are bfloat16, 8 bits), so the claim is tolerance("bf16"). Its stated policy for every
  other call is cupy_rowwarp's, and a Q6_K weight whose bytes do not end on a 16-byte boundary, or whose block of rows
  does not fit shared memory, goes to cupy_float's stream (the GEMV copies 16-byte spans). Session 29: the lm_head 94.8 against cupy_float's 144.0 us a token, its rung a win (1.029 / 1.028).
- "cupy_floatrow" (`linear_floatrow`): the same idea for float weights (F16, BF16, F32: the 48B's KDA low-rank gates),
  8 or 32 lanes a row (kernels/linear_floatrow.cu), with cupy_rowwarp's policy for every other call. Claim tolerance().
  Passed its GPU tests in session 14; its rung was none (0.996).
"""

from __future__ import annotations

import torch
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops.qweight import QWeight

from . import _runtime as rt
from ._weights import KernelWeight, iq1s_grid, kernel_weight

SOURCES = rt.source_files("linear.cu")
#: pipeline depth of the weight stream (LINEAR_STAGES in linear.cu)
STAGES = 3
#: bytes one pipeline stage aims at (a block keeps STAGES - 1 stages in flight)
STAGE_TARGET = 16 * 1024
#: rows a block computes at a time: 8 warps, one row per half-warp
ROWS_PER_PASS = 16


def linear(x, weight):
    """Implementation "cupy_dp4a": Q8_0-quantized activations, integer dot products."""
    return _linear(x, weight, float_act=False)


def linear_float(x, weight):
    """Implementation "cupy_float": float32 activations and products (no quantization of the activations)."""
    return _linear(x, weight, float_act=True)


def linear_rowwarp(x, weight):
    """Implementation "cupy_rowwarp": one token times a Q4_K weight as one warp per row (kernels/linear_rowwarp.cu);
    every other call by the stated policy (`_one_token_q4k`)."""
    return _one_token_q4k(x, weight, launch_rowwarp)


def linear_rowwarp_staged(x, weight):
    """Implementation "cupy_rowwarp_staged": cupy_rowwarp with its "staged" form at every shape (a warp a row from
    staged activations, kernels/linear_rowwarp.cu's rowstg), every other call by the same stated policy. Its own name,
    so that a registry can put it beside cupy_rowwarp in one interleaved pair."""
    return _one_token_q4k(x, weight, _launch_staged)


def _launch_staged(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor) -> None:
    launch_rowwarp(x, code, kw, n, k, y, "staged")


def linear_rowwarp_copy2(x, weight):
    """Implementation "cupy_rowwarp_copy2": cupy_rowwarp with its tall weights (rowwarp_form: "copy") in the "copy2"
    form, the same rows copied in two groups so the first half decodes while the second lands (session 16's reading:
    the copy form's blocks all load, then all decode). The same bits as cupy_rowwarp at every shape."""
    return _one_token_q4k(x, weight, _launch_copy2)


def _launch_copy2(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor) -> None:
    form = rowwarp_form(n)
    launch_rowwarp(x, code, kw, n, k, y, "copy2" if form == "copy" else form)


def linear_rowwarp_copy2x(x, weight):
    """Implementation "cupy_rowwarp_copy2x": cupy_rowwarp_copy2 with each block's first activations requested before
    its weight copies (the "copy2x" form). Session 17's Nsight Compute source page of the copy form: a quarter of its
    warps' stall samples waited on x, requested after 20 KB of weights a block and queued behind them, so copy2's first
    half could not start early. The same bits as cupy_rowwarp at every shape."""
    return _one_token_q4k(x, weight, _launch_copy2x)


def _launch_copy2x(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor) -> None:
    form = rowwarp_form(n)
    launch_rowwarp(x, code, kw, n, k, y, "copy2x" if form == "copy" else form)


def linear_rowwarp_pdl(x, weight):
    """Implementation "cupy_rowwarp_pdl": cupy_rowwarp's one-token Q4_K GEMVs (copy form for tall weights, warp form
    for the others) launched with programmatic dependent launch (_pdl.py): each block requests its weights before it
    waits for the kernel before it, so they stream while that kernel finishes (when it lets this one start: the
    "triton_pdl" norms). The same bits as cupy_rowwarp at every shape."""
    return _one_token_q4k(x, weight, _launch_pdl)


def _launch_pdl(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor) -> None:
    launch_rowwarp(x, code, kw, n, k, y, rowwarp_form(n), pdl=True)


def linear_rowwarp_pdl_q8(x, weight):
    """Implementation "cupy_rowwarp_pdl_q8": one token times a Q4_K weight on Q8 activations and integer dots, launched
    with programmatic dependent launch (kernels/linear_rowwarp.cu's rowq8_q4_k: the block's rows copied into shared
    memory before the wait, x quantized once a block to Q8 blocks of 32, each lane's 32 weights of a super-block dotted
    by 8 __dp4a; 16 rows a block for tall weights, 8 for the others). The experts' Q8 gate/up (session 27) ran 15.5
    against the float copy form's 19.6 us alone; the Q4_K GEMVs are the step's next largest kernels. The activations'
    rounding is llama.cpp's: the claim is tolerance("act_q8"). Every other call by cupy_rowwarp's stated policy.
    Session 28: its GPU tests passed (29); timed alone a token's Q4_K GEMVs took 420 against 486 us (x1.158; the MLA
    q/kv_a projection slower, 8.36 against 7.31 us), the captured gate passed, and its rung over the Q8 hidden step
    was 1.005 / 1.008 (none): in the step the PDL GEMV's compute is mostly hidden behind the kernel before. Kept,
    selected by nothing."""
    return _one_token_q4k(x, weight, launch_rowwarp_q8)


#: rows a block of cupy_rowwarp_pdl_q8's GEMV: 16 (an octet a row) for weights of at least ROWWARP_TALL_ROWS rows, 8
#: (two octets a row) for the others, which would otherwise fill too few blocks
ROWQ8_ROWS = {"tall": 16, "short": 8}


def linear_rowwarp_pdl_q8_tall(x, weight):
    """Implementation "cupy_rowwarp_pdl_q8_tall": the Q8 GEMV (cupy_rowwarp_pdl_q8's rowq8 kernel, 16 rows a block) for
    the tall weights (at least ROWWARP_TALL_ROWS rows: q/k/v, MLA's q, the dense gate/up) and cupy_rowwarp_pdl's float
    warp form for the short ones (the o_proj shapes), all launched with PDL. Each kernel where the step's replays put
    it ahead (bench/probes/timeline_tails.py on session 30's H200 replays, bench/gpu-runs/2026-12-02-session30/call5):
    after add_rmsnorm the tall GEMV adds 9.50 us in its Q8 form against 11.33 in the float copy form; after the KDA
    recurrence the o_proj adds 5.26 us in the float warp form against 8.61 in the Q8 pair form (which takes 5.82 from
    a cold start after mla_up_deep). The tall outputs are cupy_rowwarp_pdl_q8's bits, the short ones cupy_rowwarp_pdl's;
    the claim is the Q8 form's, tolerance("act_q8"). Every other call by cupy_rowwarp's stated policy. Written in
    session 32; its rung (rungs39) won x1.025 / x1.025, then x1.026 / x1.025 (H100, 2026-12-05): in every step
    since."""
    return _one_token_q4k(x, weight, _launch_q8_tall)


def _launch_q8_tall(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor) -> None:
    if n >= ROWWARP_TALL_ROWS:
        launch_rowwarp_q8(x, code, kw, n, k, y)
    else:
        launch_rowwarp(x, code, kw, n, k, y, rowwarp_form(n), pdl=True)


def linear_rowwarp_pdl_q8_tall_xpf(x, weight):
    """Implementation "cupy_rowwarp_pdl_q8_tall_xpf": cupy_rowwarp_pdl_q8_tall with the short weights' float warp form
    prefetching x into L1 right after its PDL wait (kernels/linear_rowwarp.cu's XPF: every line of x each lane reads).
    Written after GPU session 38, whose disassembly of the PDL warp form showed each of a 4096-wide row's four rounds
    loading its share of x only after the round before was summed: four L2 round trips in turn, after the wait, for a
    vector the kernel before had just written (the norm folds' tail was the same pattern). The tall weights' Q8 GEMV
    is unchanged. The same loads and sums: cupy_rowwarp_pdl_q8_tall's bits. Every other call by cupy_rowwarp's stated
    policy. GPU session 39 (H200): its tests passed, but per op it took 17.21 against 7.33 us after the gated norm
    (x0.426), and its rung with the MoE down's xpf form timed x0.740 / x0.749. Kept as a measured form, selected by
    nothing; cupy_rowwarp_pdl_q8_tall_xr does what it meant to do with plain loads."""
    return _one_token_q4k(x, weight, _launch_q8_tall_xpf)


def _q8_tall_reading_x_early(option: str):
    """_launch_q8_tall with the short weights' warp form reading x early after its wait: launch_rowwarp's `option`
    ("xpf": prefetched into L1; "xr": into registers two rounds at a time). The same bits."""
    def launch(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor) -> None:
        if n >= ROWWARP_TALL_ROWS:
            launch_rowwarp_q8(x, code, kw, n, k, y)
        else:
            form = rowwarp_form(n)
            launch_rowwarp(x, code, kw, n, k, y, form, pdl=True, **{option: form == "warp"})
    return launch


_launch_q8_tall_xpf = _q8_tall_reading_x_early("xpf")
_launch_q8_tall_xr = _q8_tall_reading_x_early("xr")


def linear_rowwarp_pdl_q8_tall_xr(x, weight):
    """Implementation "cupy_rowwarp_pdl_q8_tall_xr": cupy_rowwarp_pdl_q8_tall with the short weights' float warp form
    loading x into registers two rounds at a time right after its PDL wait (kernels/linear_rowwarp.cu's XR), then
    summing them in order. Written in session 39, after the xpf form (the same aim, by L1 prefetches) timed x0.426 per
    op. The compiled plain PDL warp form waits out 8 L2 round trips in turn after its wait, this one 3
    (tests/cuda_sass.py's round_trips). The tall weights' Q8 GEMV is unchanged. The same values, products and sums:
    cupy_rowwarp_pdl_q8_tall's bits. Every other call by cupy_rowwarp's stated policy. GPU session 39 (H100): its 14
    tests passed; per op after the gated norm a tie (7.80 against 7.70 us, x0.987); stacked with the ids-once down
    over the s49 step its rung (rungs52) won x1.029 / x1.028, and over that down alone it timed x1.015 / x1.014 (a
    none). Why the per-op chain (the gated norm before it, not the step's KDA recurrence) shows no gain was not looked
    into."""
    return _one_token_q4k(x, weight, _launch_q8_tall_xr)


def linear_rowwarp_pdl_q8_shortplain(x, weight):
    """Implementation "cupy_rowwarp_pdl_q8_shortplain": cupy_rowwarp_pdl_q8's kernels, with the short weights (fewer
    than ROWWARP_TALL_ROWS rows: the o_proj shapes, 8 rows a block) launched plainly, after the kernel before has
    ended, and the tall ones still with PDL. GPU session 32's timeline (H100, bench/gpu-runs/2026-12-05-session32/
    call4) put the KDA layers' o_proj (2304 x 4096, 5.3 MB), launched 1.5 us into the KDA recurrence, at 8.4-8.7 us
    after the recurrence ended, where the MLA layers' o_proj of the same shape, after a kernel that lets nothing start
    early, took 6.1 us from its start, its weights' load included: the early start seemed to cost, not save. The same
    kernels, the same sums: the same bits as cupy_rowwarp_pdl_q8; every other call by cupy_rowwarp's stated policy.
    Not yet run on a GPU (stage proofs38 / rungs38)."""
    return _one_token_q4k(x, weight, _launch_q8_shortplain)


def _launch_q8_shortplain(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor) -> None:
    launch_rowwarp_q8(x, code, kw, n, k, y, pdl=n >= ROWWARP_TALL_ROWS)


def launch_rowwarp_q8(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor,
                      pdl: bool = True) -> None:
    """y[0, :n] = x[0] @ W^T for a Q4_K weight on Q8 activations (kernels/linear_rowwarp.cu's rowq8_q4_k), launched
    with programmatic dependent launch (pdl=False: a plain launch of the same kernel, whose wait then returns at once);
    x and the weight 16-byte aligned."""
    if kw.raw.data_ptr() % 16:
        raise BadInput(f"linear: the weight's data is not 16-byte aligned (offset {kw.raw.data_ptr() % 16}); "
                       f"give it its own allocation (QWeight(raw.clone(), ...))")
    rows = ROWQ8_ROWS["tall" if n >= ROWWARP_TALL_ROWS else "short"]
    kernel = "rowq8pdl" if rows == 16 else "rowq8pairpdl"
    smem = k + 4 * (k // 32) + 4 * (k // 16) + rows * kw.row_bytes  # codes, scales, sums of 16, the block's rows
    rt.launch("linear_rowwarp.cu", f"linear_q4_k_{kernel}_{_DT_SUFFIX[code]}", x.device, ((n + rows - 1) // rows,),
              (128,), (rt.ptr(x), rt.ptr(kw.raw), rt.i64(kw.row_bytes), rt.i32(k), rt.i32(n), rt.ptr(y)),
              shared_mem=smem, pdl=pdl)


def linear_rowhalf(x, weight):
    """Implementation "cupy_rowhalf": one token times a Q4_K weight of at least ROWWARP_TALL_ROWS rows in cupy_rowwarp's
    copy form with packed half2 products (kernels/q4k_half.cuh: the activations as fp16 scaled by a power of two,
    the products and their partial sums in fp16, float32 from each super-block on; claim tolerance("bf16")); a
    shorter weight runs cupy_rowwarp's warp form (float32), every other call cupy_rowwarp's stated policy."""
    return _one_token_q4k(x, weight, launch_rowhalf)


def launch_rowhalf(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor) -> None:
    """y[0, :n] = x[0] @ W^T for a Q4_K weight: the half copy form (`launch_rowhc`) for tall weights (rowwarp_form
    says "copy"), else the float32 warp form."""
    if rowwarp_form(n) == "copy":
        launch_rowhc(x, code, kw, n, k, y)
    else:
        launch_rowwarp(x, code, kw, n, k, y, "warp")


def launch_rowhc(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor) -> None:
    """The half copy form at any shape (kernels/linear_rowwarp.cu's rowhc); x and the weight 16-byte aligned."""
    if kw.raw.data_ptr() % 16:
        raise BadInput(f"linear: the weight's data is not 16-byte aligned (offset {kw.raw.data_ptr() % 16}); "
                       f"give it its own allocation (QWeight(raw.clone(), ...))")
    rows = ROWWARP_FORMS["copy"]
    smem = 2 * k + 4 * (k // 16) + rows * kw.row_bytes  # fp16 pairs (16 bytes a slot of 8), sums of 16, the rows
    rt.launch("linear_rowwarp.cu", f"linear_q4_k_rowhc_{_DT_SUFFIX[code]}", x.device, ((n + rows - 1) // rows,),
              (_ROWWARP_THREADS["copy"],),
              (rt.ptr(x), rt.ptr(kw.raw), rt.i64(kw.row_bytes), rt.i32(k), rt.i32(n), rt.ptr(y)), shared_mem=smem)


def _one_token_q4k(x, weight, launch):
    """The stated policy of the one-token Q4_K kernels (cupy_rowwarp, cupy_rowwarp_staged, cupy_rowhalf, cupy_mma): one
    token times a Q4_K weight runs `launch(x, code, kw, n, k, y)`; every other call as `_one_token` says."""
    return _one_token(x, weight, lambda w, kw: w.qtype == Q.Q4_K, launch)


def _one_token(x, weight, serves, launch):
    """The one-token GEMVs' stated policy: more than ROWWARP_GEMV_MAX_T tokens (a prefill chunk) run the torch
    plugin's float32 linear; one token times a weight the kernel `serves(weight, kw)` runs `launch(x, code, kw, n, k,
    y)`; every other call (up to ROWWARP_GEMV_MAX_T tokens, another type) cupy_float's kernel."""
    if x.dim() == 2 and x.shape[0] > ROWWARP_GEMV_MAX_T:
        from sparkops_torch.linear import linear as torch_linear

        return torch_linear(x, weight)
    if x.dim() != 2 or x.shape[0] != 1 or not isinstance(weight, QWeight):
        return _linear(x, weight, float_act=True)
    x, code, kw, n, k = _checked(x, weight)
    if not serves(weight, kw):
        return _streamed(x, code, kw, n, k, float_act=True)
    if x.data_ptr() % 16:  # the kernels read the activations 16 bytes at a time
        x = x.clone()
    y = torch.empty((1, n), dtype=x.dtype, device=x.device)
    launch(x, code, kw, n, k, y)
    return y


#: the one-token GEMVs: the most tokens a call hands to cupy_float's GEMV; more go to the torch plugin's GEMM
ROWWARP_GEMV_MAX_T = 8


def linear_x16_pdl(x, weight):
    """Implementation "cupy_x16_pdl": one token times a Q6_K weight on 16-bit activations and integer dots (kernels/
    linear_q6k_x16.cu: x quantized once to two int8 planes a value, 16 values a scale; the GEMV's rows copied into
    shared memory before its PDL wait, each 64 weights of a super-block dotted by 32 __dp4a). Why: the lm_head
    (163840 x 2304 Q6_K, 310 MB) ran cupy_float at 151 us a token, 49% of the read ceiling, and its float chunk loop
    is 6.8 instructions a weight (session 28), the whole issue budget of the read; this dot loop is ~3.6 (the SASS,
    tests/test_cuda_dot_loop.py). Session 6's gate refused int8 activations (cupy_dp4a's top-1 0.75 at depth 1): the
    two planes put the error ~1e5 times below int8's (nmse ~2e-10 against ~3e-5), claim tolerance("bf16").
    Every other call by `_one_token`'s stated policy; a Q6_K weight whose bytes do not end on 16, or too wide for
    shared memory (`x16_serves`), by cupy_float's stream. Session 29: per op 94.8 (89.4) against cupy_float's 144.0 us (81% of the read ceiling), its 13 GPU tests
    passed, and its rung over the Q8 hidden step won, 1.029 / 1.028 (forecast 1.028 / 1.026): in the step since."""
    return _one_token(x, weight, lambda w, kw: x16_serves(w), launch_x16)


#: cupy_x16_pdl's forms (kernels/linear_q6k_x16.cu): name -> (rows a block, threads a block); X16_FORM is the one it
#: runs, read at each call (the side-by-side times each). Session 29, the lm_head per op (bf16, two calls): r16t192
#: 89.4 / 94.8 us, r16t96 102.0 / 101.5, r32t384 102.5 / 102.6, r32t192 109.1 / 109.5 (cupy_float 143.9 / 144.0)
X16_FORMS = {"r16t96": (16, 96), "r16t192": (16, 192), "r32t192": (32, 192), "r32t384": (32, 384)}
X16_FORM = "r16t192"


#: the shared memory a block may have on an H100 / H200 (227 KB): x16_serves passes a weight too wide for the current
#: form's block to cupy_float's stream rather than fail its launch
X16_SMEM_LIMIT = 227 * 1024


def x16_serves(weight: QWeight) -> bool:
    """Whether cupy_x16_pdl's GEMV takes a one-token call on this weight: Q6_K, its bytes ending on a 16-byte
    boundary (the copy of a block's rows reads whole 16-byte spans), and a block of X16_FORM's rows fitting in
    shared memory."""
    if weight.qtype != Q.Q6_K:
        return False
    out_f, in_f = weight.shape
    row_bytes = in_f // 256 * 210
    return (out_f * row_bytes) % 16 == 0 and x16_fits(in_f, row_bytes, X16_FORMS.get(X16_FORM, (16, 0))[0])


def x16_scratch_bytes(k: int) -> int:
    """Bytes of the quantized activations for k inputs: hi and lo planes, then a float scale and an int sum per 16."""
    return 2 * k + 8 * (k // 16)


def x16_smem(k: int, row_bytes: int, rows: int) -> int:
    """Shared memory of one GEMV block: the quantized x, the block's unit sums (4 a super-block a row), its rows and
    32 bytes for their alignment."""
    return x16_scratch_bytes(k) + rows * (k // 64) * 4 + rows * row_bytes + 32


def x16_fits(k: int, row_bytes: int, rows: int) -> bool:
    return x16_smem(k, row_bytes, rows) <= X16_SMEM_LIMIT


def launch_x16(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor) -> None:
    """y[0, :n] = x[0] @ W^T for a Q6_K weight: q6k_x16_quantize (one block), then the GEMV in form X16_FORM with
    programmatic dependent launch; the weight 16-byte aligned."""
    if X16_FORM not in X16_FORMS:
        raise BadInput(f"linear: cupy_x16_pdl's forms are {list(X16_FORMS)}, not {X16_FORM!r} "
                       f"(sparkops_cupy.linear.X16_FORM)")
    if kw.raw.data_ptr() % 16:
        raise BadInput(f"linear: the weight's data is not 16-byte aligned (offset {kw.raw.data_ptr() % 16}); "
                       f"give it its own allocation (QWeight(raw.clone(), ...))")
    rows, threads = X16_FORMS[X16_FORM]
    xq = torch.empty(x16_scratch_bytes(k), dtype=torch.uint8, device=x.device)  # [2.5 K] bytes
    rt.launch("linear_q6k_x16.cu", "q6k_x16_quantize", x.device, (1,), (256,),
              (rt.ptr(x), rt.i32(code), rt.i32(k), rt.ptr(xq)))
    smem = x16_smem(k, kw.row_bytes, rows)
    rt.launch("linear_q6k_x16.cu", f"linear_q6_k_x16pdl_{X16_FORM}", x.device, ((n + rows - 1) // rows,),
              (threads,), (rt.ptr(xq), rt.ptr(kw.raw), rt.i64(kw.row_bytes), rt.i32(k), rt.i32(n), rt.ptr(y),
                           rt.i32(code)), shared_mem=smem, pdl=True)


def linear_floatrow(x, weight):
    """Implementation "cupy_floatrow": one token times a float weight (F16, BF16, F32) with LPR lanes a row
    (kernels/linear_floatrow.cu), where its rows are whole 16-byte vectors; every other call by the one-token GEMVs'
    stated policy (`_one_token`)."""
    return _one_token(x, weight, _floatrow_serves, lambda x, code, kw, n, k, y: launch_floatrow(x, code, kw, n, y))


def _floatrow_serves(weight: QWeight, kw: KernelWeight) -> bool:
    """cupy_floatrow's kernel reads whole 16-byte vectors of a float weight's rows."""
    return weight.is_float and not kw.row_bytes % 16 and not kw.raw.data_ptr() % 16


def linear_mma(x, weight):
    """Implementation "cupy_mma": one token times a Q4_K weight on the tensor cores (kernels/linear_mma.cu: the codes as
    bfloat16 128 + q, the activations rounded to bfloat16, float32 sums; claim tolerance("bf16")); every other call by
    cupy_rowwarp's stated policy (`_one_token_q4k`)."""
    return _one_token_q4k(x, weight, launch_mma)


#: cupy_mma's forms (kernels/linear_mma.cu). "tile": 4 warps a 16-row tile split K, each super-block loaded into
#: registers as it is decoded (session 13). "pipe": every super-block of the tile requested into shared memory first
#: (cp.async), each decoded as soon as it lands, 4, 8 or 16 warps a tile (mma_pipe_warps). Session 14's Nsight Compute
#: run on "tile" at 12288 x 2304: 12.9 us, DRAM 26%, SM 50%, 4.4 warps a scheduler - each warp waiting on its weights,
#: then decoding them, in turn
MMA_FORMS = ("tile", "pipe")
#: the form cupy_mma runs. Session 14 (bf16, graph, the 48B's decode linears, us a token): tile 578, pipe 652,
#: cupy_rowwarp 507; at 12288 x 2304 tile 12.3, pipe 15.0 us (Nsight Compute on pipe: 16.1 us, DRAM 21%, 4.8 warps a
#: scheduler, 1.1 eligible, an instruction every 2.1 cycles - the copy's own instructions added, nothing overlapped)
MMA_FORM = "tile"
#: the pipe form's choices of warps a tile, and the warps an SM its grid aims at: the fewest warps a tile that give
#: the grid MMA_PIPE_WARPS_PER_SM warps an SM (2304 rows make 144 tiles: 16 warps each), never more than super-blocks
MMA_PIPE_WARPS = (4, 8, 16)
MMA_PIPE_WARPS_PER_SM = 16


def mma_pipe_warps(n: int, k: int, sms: int) -> int:
    """Warps a 16-row tile for the pipe form on an [n, k] weight and a device of `sms` SMs (MMA_PIPE_WARPS)."""
    tiles, nsb = (n + 15) // 16, k // 256
    best = MMA_PIPE_WARPS[0]
    for warps in MMA_PIPE_WARPS:
        if warps > nsb:
            break
        best = warps
        if tiles * warps >= MMA_PIPE_WARPS_PER_SM * sms:
            break
    return best


def mma_pipe_smem(k: int, row_bytes: int, warps: int) -> int:
    """Shared memory of the pipe form: 16 staged rows (padded to an odd number of 16-byte words), the bf16
    activations, their sums of 32, the warps' row sums."""
    stride = row_bytes + (0 if (k // 256) % 2 else 16)
    return 16 * stride + 2 * k + 4 * (k // 32) + 4 * 16 * warps


def launch_mma(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor,
               form: str | None = None) -> None:
    """y[0, :n] = x[0] @ W^T for a Q4_K weight on the tensor cores (kernels/linear_mma.cu), 16 rows a block.
    `form`: "tile" or "pipe" (MMA_FORMS); None runs MMA_FORM."""
    form = form or MMA_FORM
    if form not in MMA_FORMS:
        raise BadInput(f"linear: the tensor-core GEMV has the forms {list(MMA_FORMS)}, not {form!r}")
    if kw.raw.data_ptr() % 16:
        raise BadInput(f"linear: the weight's data is not 16-byte aligned (offset {kw.raw.data_ptr() % 16}); "
                       f"give it its own allocation (QWeight(raw.clone(), ...))")
    args = (rt.ptr(x), rt.ptr(kw.raw), rt.i64(kw.row_bytes), rt.i32(k), rt.i32(n), rt.ptr(y))
    if form == "tile":
        smem = 2 * k + 4 * (k // 32) + 4 * 64  # bf16 activations, their sums of 32, the 4 warps' 16 row sums
        rt.launch("linear_mma.cu", f"linear_q4_k_mma_{_DT_SUFFIX[code]}", x.device, ((n + 15) // 16,), (128,),
                  args, shared_mem=smem)
        return
    idx = x.device.index if x.device.index is not None else torch.cuda.current_device()
    warps = mma_pipe_warps(n, k, rt.sm_count(idx))
    rt.launch("linear_mma.cu", f"linear_q4_k_mmapipe{warps}_{_DT_SUFFIX[code]}", x.device, ((n + 15) // 16,),
              (32 * warps,), args, shared_mem=mma_pipe_smem(k, kw.row_bytes, warps))


#: cupy_floatrow: rows of at most this many 16-byte vectors take 8 lanes (4 rows a warp), longer ones a whole warp
FLOATROW_SHORT_VECTORS = 64
#: the float weight's kernel suffix per element type code (KernelWeight.wdt)
_W_SUFFIX = {0: "f32", 1: "bf16", 2: "f16"}


def floatrow_lanes(row_bytes: int) -> int:
    """Lanes a row of `row_bytes` gets in cupy_floatrow's kernel (FLOATROW_SHORT_VECTORS)."""
    return 8 if row_bytes // 16 <= FLOATROW_SHORT_VECTORS else 32


def launch_floatrow(x: torch.Tensor, code: int, kw: KernelWeight, n: int, y: torch.Tensor,
                    lanes: int | None = None) -> None:
    """y[0, :n] = x[0] @ W^T for a float weight (kernels/linear_floatrow.cu); x, the weight and its rows 16-byte
    aligned. `lanes`: 8 or 32 a row; None picks by the row's length (floatrow_lanes)."""
    lanes = lanes or floatrow_lanes(kw.row_bytes)
    if lanes not in (8, 32) or not kw.is_float or kw.row_bytes % 16:
        raise BadInput(f"linear: the float row GEMV takes 8 or 32 lanes a row and float weights of whole 16-byte "
                       f"vectors a row, not {lanes} lanes on {kw.suffix} rows of {kw.row_bytes} bytes")
    rows = 4 * 32 // lanes  # a block of 128 threads
    rt.launch("linear_floatrow.cu", f"linear_floatrow{lanes}_{_W_SUFFIX[kw.wdt]}", x.device, ((n + rows - 1) // rows,),
              (128,), (rt.ptr(x), rt.i32(code), rt.ptr(kw.raw), rt.i64(kw.row_bytes), rt.i32(n), rt.ptr(y)))


#: the row-warp kernels' dtype suffix per activation dtype code (rt.DTYPE_CODE)
_DT_SUFFIX = {0: "f32", 1: "bf16", 2: "f16"}
#: the five forms of kernels/linear_rowwarp.cu and the rows one block computes (128 threads; the staged form 256,
#: _ROWWARP_THREADS): "warp", a warp per row
#: (each row's loads all at once); "octet", a warp per 4 rows (the activations staged once a block in shared memory,
#: one read serving the warp's 4 rows, 4 super-blocks a row in flight in registers); "copy", the octet form with the
#: block's 16 rows copied whole into shared memory first (every weight byte in flight at once); "staged", the warp form
#: reading the octet form's staged activations (a warp a row, 4x the octet form's warps; session 15: slower,
#: issue-bound); "copy2", the copy form with its weight copy in two groups, decoding the first half of every row while
#: the second lands (session 17: the copy form's time, 0.995 as a rung; the copy form's bits); "copyx" and "copy2x", the
#: copy and copy2 forms with each block's first activations requested before its weights (session 17: no faster; the
#: same bits)
ROWWARP_FORMS = {"warp": 4, "octet": 16, "copy": 16, "copy2": 16, "copyx": 16, "copy2x": 16, "staged": 8}
#: threads a block of each form (the staged form: a warp a row, 8 rows sharing one staging of the activations)
_ROWWARP_THREADS = {"warp": 128, "octet": 128, "copy": 128, "copy2": 128, "copyx": 128, "copy2x": 128,
                    "staged": 256}
#: weights of at least this many rows take the "copy" form, the others the "warp" form. One warp per row reads 16 bytes
#: of activations from L1 per weight byte, which binds once the rows no longer fit one wave; the forms that stage the
#: activations in shared memory win there. Session 13 (bf16 activations, graph; bench/gpu-runs/2026-11-30-session13):
#: 12288 x 2304 warp 16.0 us, octet 13.0, copy 12.3 (triton_lastblock 13.9); 6144 x 2304 9.6 / 8.5 / 7.4 (10.3);
#: 2304 x 4096 6.6 / 11.7 / 7.5 (11.2); 2048 x 2304 4.7 / 6.8 / 4.7; 576 x 2304 3.1 / 4.9 / 3.5 (4.0)
ROWWARP_TALL_ROWS = 4096


def rowwarp_form(n: int) -> str:
    """The row-warp form for a weight of n rows (ROWWARP_TALL_ROWS): "copy" for tall weights, else "warp"."""
    return "copy" if n >= ROWWARP_TALL_ROWS else "warp"


def launch_rowwarp(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor,
                   form: str | None = None, pdl: bool = False, xpf: bool = False, xr: bool = False) -> None:
    """y[0, :n] = x[0] @ W^T for a Q4_K weight (kernels/linear_rowwarp.cu); x and the weight 16-byte aligned.
    `form`: "warp", "octet", "copy", "copy2", "copyx", "copy2x" or "staged" (ROWWARP_FORMS); None picks by the rows
    (rowwarp_form). `pdl` (the copy and warp forms): the form's kernel written for programmatic dependent launch,
    launched so (its weight copy, or its first group of weight loads, requested before it waits for the kernel before
    it; x then read through L1 with ld.global.ca, not the read-only path; the same bits as the form). `xpf` (the warp
    form with PDL only): x's lines prefetched into L1 right after the wait (the same bits). `xr` (likewise): x loaded
    into registers two rounds at a time after the wait, then summed in order (the same bits)."""
    form = form or rowwarp_form(n)
    if form not in ROWWARP_FORMS:
        raise BadInput(f"linear: the row-warp GEMV has the forms {sorted(ROWWARP_FORMS)}, not {form!r}")
    if pdl and form not in ("copy", "warp"):
        raise BadInput(f"linear: programmatic dependent launch is written for the row-warp GEMV's copy and warp forms "
                       f"only, not the {form!r} form; pass form='copy' or 'warp' with pdl=True")
    if xpf and not (pdl and form == "warp"):
        raise BadInput(f"linear: the x prefetch is written for the row-warp GEMV's warp form with programmatic "
                       f"dependent launch only, not the {form!r} form with pdl={pdl}; pass form='warp' with pdl=True")
    if xr and not (pdl and form == "warp"):
        raise BadInput(f"linear: x in registers is written for the row-warp GEMV's warp form with programmatic "
                       f"dependent launch only, not the {form!r} form with pdl={pdl}; pass form='warp' with pdl=True")
    if xpf and xr:
        raise BadInput("linear: the row-warp GEMV takes x either prefetched (xpf) or in registers (xr), not both")
    if kw.raw.data_ptr() % 16:
        raise BadInput(f"linear: the weight's data is not 16-byte aligned (offset {kw.raw.data_ptr() % 16}); "
                       f"give it its own allocation (QWeight(raw.clone(), ...))")
    rows = ROWWARP_FORMS[form]
    kernel = {"warp": "rowwarp", "octet": "rowoct", "copy": "rowcp", "copy2": "rowcp2", "copyx": "rowcpx",
              "copy2x": "rowcp2x", "staged": "rowstg"}[form]
    kernel += ("pdl" if pdl else "") + ("xpf" if xpf else "") + ("xr" if xr else "")
    name = f"linear_q4_k_{kernel}_{_DT_SUFFIX[code]}"
    smem = 0 if form == "warp" else 4 * k + 4 * (k // 16)  # the staged activations and their sums of 16
    if form in ("copy", "copy2", "copyx", "copy2x"):
        smem += rows * kw.row_bytes  # and the block's rows of weights
    rt.launch("linear_rowwarp.cu", name, x.device, ((n + rows - 1) // rows,), (_ROWWARP_THREADS[form],),
              (rt.ptr(x), rt.ptr(kw.raw), rt.i64(kw.row_bytes), rt.i32(k), rt.i32(n), rt.ptr(y)), shared_mem=smem,
              pdl=pdl)


def _checked(x, weight) -> tuple[torch.Tensor, int, KernelWeight, int, int]:
    """A linear call's arguments checked: (x dense, its dtype code, the kernel's view of the weight, OUT, IN)."""
    dev = rt.cuda_device("linear", x=x)
    kw = kernel_weight("linear", "weight", weight, dev)
    if len(weight.shape) != 2:
        raise BadInput(f"linear: 'weight' ({weight.name}) has shape {list(weight.shape)}, expected a 2-D "
                       f"[OUT, IN] weight")
    n, k = weight.shape
    rt.expect_shape("linear", "x", x, (None, k), f"rows of the weight's {k} input features")
    code = rt.act_code("linear", "x", x)
    return rt.contiguous(x), code, kw, n, k


def _linear(x, weight, float_act: bool):
    return _streamed(*_checked(x, weight), float_act)


def _streamed(x, code, kw: KernelWeight, n: int, k: int, float_act: bool) -> torch.Tensor:
    """The shared-memory weight stream of cupy_dp4a / cupy_float (kernels/linear.cu) on checked arguments."""
    y = torch.empty((x.shape[0], n), dtype=x.dtype, device=x.device)
    launch_linear(x, code, kw, n, k, y, float_act)
    return y


def staging_bytes(k: int, tokens: int, is_float: bool, float_act: bool = False) -> int:
    """Shared memory a block needs to stage `tokens` activation rows of length k: floats for float weights; for
    block weights Q8_0 codes with a scale and a sum per 32, or (float_act) floats with a sum per 32."""
    if is_float:
        return tokens * k * 4
    if float_act:
        return tokens * k * 4 + tokens * (k // 32) * 4
    return tokens * k + 2 * tokens * (k // 32) * 4


def tile_rows(n: int, row_bytes: int, sms: int) -> int:
    """Rows per streamed tile: ~STAGE_TARGET bytes in whole passes of 16 rows, but small enough that a
    small matrix still gives every multiprocessor two tiles."""
    p = ROWS_PER_PASS
    rt = p * max(1, min(4, STAGE_TARGET // (p * row_bytes)))
    spread = max(p, (n // (2 * sms) + p - 1) // p * p)
    return max(1, min(rt, spread))


def launch_linear(x: torch.Tensor, code: int, kw: KernelWeight, n: int, k: int, y: torch.Tensor,
                  float_act: bool = False) -> None:
    t = x.shape[0]
    dev = x.device
    idx = dev.index if dev.index is not None else torch.cuda.current_device()
    if kw.raw.data_ptr() % 16:
        raise BadInput(f"linear: the weight's data is not 16-byte aligned (offset {kw.raw.data_ptr() % 16}); "
                       f"give it its own allocation (QWeight(raw.clone(), ...))")
    limit = rt.max_shared_memory(idx)
    sms = rt.sm_count(idx)
    nt = 1 if t == 1 else 4
    rows = tile_rows(n, kw.row_bytes, sms)
    while True:
        stage = (rows * kw.row_bytes + 16 + 15) // 16 * 16
        smem = STAGES * stage + staging_bytes(k, nt, kw.is_float, float_act)
        if smem <= limit:
            break
        if rows > 1:
            rows = max(1, rows // 2)
        elif nt > 1:
            nt = 1
        else:
                raise BadInput(f"linear: rows of {kw.row_bytes} bytes ({k} inputs) do not fit the cupy GEMV's shared "
                           f"memory ({smem} > {limit} bytes); use another implementation for this weight")
    n_tiles = (n + rows - 1) // rows
    per_sm = max(1, min(8, rt.shared_memory_per_sm(idx) // smem))
    grid_x = min(n_tiles, sms * per_sm)
    table = iq1s_grid(dev) if kw.suffix == "iq1_s" else None
    name = f"linear_{kw.suffix}_f_t{nt}" if float_act and not kw.is_float else f"linear_{kw.suffix}_t{nt}"
    rt.launch("linear.cu", name, dev, (grid_x, (t + nt - 1) // nt), (256,),
              (rt.ptr(x), rt.i32(code), rt.i32(t), rt.i32(k), rt.ptr(kw.raw), rt.i64(kw.row_bytes), rt.i32(kw.wdt),
               rt.i32(n), rt.i32(rows), rt.i32(stage), rt.ptr(y), rt.ptr(table)), shared_mem=smem)
