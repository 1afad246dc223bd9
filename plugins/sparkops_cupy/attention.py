"""attention on CUDA: MLA decode split over the context with a separate combine (kernels/attention.cu).

Four launches: absorb (writes the new cache rows at pos, forms the absorbed queries), split (each
block one slice of the context, a running softmax per head), combine (merges the slices), up (w_uv).
`attention_active` (cupy_splitk_bf16_active) is the same with the empty slices neither written nor read: the same
bits. `attention_deep` (cupy_splitk_bf16_deep) is the same with the absorb's, the combine's and the up projection's
loads in flight at once: the same bits. `attention_deep_active` (cupy_splitk_bf16_deep_active) is both at once. `attention_deep_pdl`
(cupy_splitk_bf16_deep_pdl) is the deep form with its four launches made with programmatic dependent launch: the same
bits. `attention_deep_active_pdl` (cupy_splitk_bf16_deep_active_pdl) is that with the active form's skip: the same bits.
The position is read on the device, so the host never synchronises and a captured decode step
replays at any depth. For Kimi-Linear's decode shape with a bf16 cache (32 heads, Lkv 512, R 64,
one token) the split runs on the tensor cores (`mla_split_mma`, bf16 operands, fp32 accumulation,
one block per multiprocessor); everything else (fp32 caches, other shapes, several tokens) takes
the CUDA-core split, in float32 throughout.

`attention_fp8_deep_active_pdl` (cupy_splitk_fp8_deep_active_pdl) reads an MLA cache in float8_e4m3fn
(sparkops/kvcache.py: the engine rounds each new row before the call, so `latent` arrives in fp8 too). Why: at long
contexts the split streams the whole cache each step, and fp8 halves those bytes (a decode step of the 48B reads 7
layers x 576 values a token). The same launches as `attention_deep_active_pdl`: the absorb copies the latent's bytes
into the cache as they are, and the split decodes every cache value exactly (each e4m3fn value, subnormals included, is
a bf16 value): at the decode shape `mla_split_mma_fp8` streams 576-byte fp8 rows into shared memory (two fp8 stages)
and converts each tile into one bf16 tile that the tensor-core code of `mla_split_mma` reads; elsewhere
`mla_split_generic_fp8`, in float32. So it computes what the bf16 form computes on the fp8 values (the claim
variant fp8_cache, judged by the bf16 row against the reference on the same fp8 values). The bf16 forms refuse an fp8
cache, and this one any other.

`attention_twin_active_pdl` (cupy_splitk_bf16_twin_active_pdl) is `attention_deep_active_pdl` with the twin split
(`mla_split_twin`): 16 warps a block in two groups of 8, each streaming its own tiles with its own barrier, so that one
group's loads and barriers overlap the other's MMAs. GPU session 53 found the one-group split latency-bound (50% of
DRAM, one block of 8 warps an SM). Its partials are merged once more inside the block, so it claims the bf16 tolerance,
not bit-identity. GPU session 54 (H100): it ties, 74.94 against 73.97 µs a layer at 131072 rows.

`attention_bulk_active_pdl` (cupy_splitk_bf16_bulk_active_pdl) is `attention_deep_active_pdl` with the bulk split
(`mla_split_bulk`): each 64-row tile fetched by one bulk copy a row (the copy engine, on an mbarrier) instead of the
threads' 4608 16-byte cp.async, which share the load/store pipeline with the tile's ldmatrix loads. The same tiles and
arithmetic: the one-group split's bits.

`attention_l2pf_active_pdl` (cupy_splitk_bf16_l2pf_active_pdl) is `attention_deep_active_pdl` with each tile's rows
prefetched into the L2 a tile ahead of their copies into shared memory (`mla_split_l2pf`), so two tiles' bytes leave
DRAM while one is computed: the one-group split's bits.

`attention_ring_active_pdl` (cupy_splitk_bf16_ring_active_pdl) is the qreg form below with its tiles in a ring of
five 32-row slots (`mla_split_ring`), one and a half tiles in flight: the qreg form's bits.

`attention_qreg_active_pdl` (cupy_splitk_bf16_qreg_active_pdl) is `attention_deep_active_pdl` with the
queries-in-registers split (`mla_split_qreg`): each warp holds its quarter of the absorbed queries' dims in registers,
so a tile's scores read only the tile from shared memory (144 ldmatrix a tile for the scores where the one-group split
issues 432, 288 of them re-reading the queries). Its scores are four partial sums over the dims rather than two, so
it claims the bf16 tolerance, not bit-identity. GPU session 55 (H100): it ties (74.37 against 74.19 µs a layer at
131072 rows): the split's loads, not its shared-memory reads, bind it.
"""

from __future__ import annotations

import math

import torch

from sparkops.errors import BadInput

from . import _runtime as rt

SOURCES = rt.source_files("attention.cu")
LOG2E = 1.4426950408889634
#: shared memory of mla_split_mma and of mla_split_mma_fp8, which lays out the same bytes otherwise: one bf16 tile and
#: two fp8 stages where mla_split_mma has two bf16 stages (mirrors MMA_SMEM_BYTES in attention.cu)
MMA_SMEM_BYTES = 32 * 584 * 2 + 2 * 64 * 584 * 2 + 2 * 32 * 68 * 4 + 32 * 72 * 2 + 32 * 4
#: shared memory of mla_split_twin: the queries, then two groups' one-stage tile, score halves, probabilities and
#: rescales (mirrors TW_SMEM_BYTES in attention.cu; 231168 bytes of the 232448 an sm_90 block may opt into)
TW_SMEM_BYTES = 32 * 584 * 2 + 2 * (64 * 584 * 2 + 2 * 32 * 68 * 4 + 32 * 72 * 2 + 32 * 4)
#: shared memory of mla_split_bulk: mla_split_mma's and its two stages' mbarriers (mirrors BULK_SMEM_BYTES)
BULK_SMEM_BYTES = MMA_SMEM_BYTES + 16
#: the generic split keeps Lkv / 32 accumulators per lane and the query row in shared memory
MAX_LKV, MAX_ROW = 512, 1024
#: the Dn mla_absorb_deep and the Lkv mla_up_deep are built for (Kimi-Linear's): a thread's Dn / 4 weights, a lane's
#: Lkv / 32, are requested at once
DEEP_DN, DEEP_LKV = 128, 512


def uses_tensor_cores(t: int, n: int, lkv: int, r: int, cache: torch.Tensor) -> bool:
    """The bf16 forms' tensor-core splits take the call: one token of Kimi-Linear's decode shape on a bf16 cache whose
    rows start on 16 bytes (their copies are 16 bytes; a view at another offset takes the CUDA-core split, as
    uses_fp8_tensor_cores says for the fp8 one: GPU session 55 found such a view crashing mla_split_mma)."""
    return (cache.dtype == torch.bfloat16 and t == 1 and n == 32 and lkv == 512 and r == 64
            and cache.data_ptr() % 16 == 0)


#: the MLA cache's fp8 dtype (sparkops/kvcache.py), and its code in kernels/attention.cu (DT_FP8_E4M3), beside
#: _runtime.DTYPE_CODE's activation codes 0 / 1 / 2
FP8 = torch.float8_e4m3fn
DT_FP8 = 3
#: the registered fp8 form, and the bf16 form to select instead for a bf16 cache (named in the refusals)
FP8_FORM, BF16_FORM = "cupy_splitk_fp8_deep_active_pdl", "cupy_splitk_bf16_deep_active_pdl"
#: the fp8 form with the queries-in-registers split (mla_split_qreg_fp8)
FP8_QREG_FORM = "cupy_splitk_fp8_qreg_active_pdl"
#: shared memory of mla_split_qreg_fp8: mla_split_mma_fp8's and its third and fourth score parts (mirrors
#: QF8_SMEM_BYTES in attention.cu; the third fp8 stage takes the queries' bytes); mla_split_ring's too (its fifth
#: 32-row slot is the queries' bytes)
QF8_SMEM_BYTES = MMA_SMEM_BYTES + 2 * 32 * 68 * 4


def uses_fp8_tensor_cores(t: int, n: int, lkv: int, r: int, cache: torch.Tensor) -> bool:
    """The fp8 form's tensor-core split (mla_split_mma_fp8) takes the call: one token of Kimi-Linear's decode shape on
    an fp8 cache whose rows start on 16 bytes (its copies are 16 bytes; a view at another offset takes the CUDA-core
    split, the same values)."""
    return (cache.dtype == FP8 and t == 1 and n == 32 and lkv == 512 and r == 64
            and cache.data_ptr() % 16 == 0)


#: the most the split's partial sums may take (part_acc: splits x T x N x Lkv float32)
SPLIT_WORKSPACE_BYTES = 256 << 20


def generic_splits(lmax: int, t: int = 1, n: int = 32, lkv: int = 512) -> int:
    """Slices of the context for the CUDA-core split: about 32 rows each, at most 64, and no more than keep the
    partial sums within SPLIT_WORKSPACE_BYTES (at T = 32768 uncapped they would take 137 GB: a prefill has
    T x N blocks of parallelism already and needs no split)."""
    per_split = t * n * lkv * 4
    return max(1, min(64, math.ceil(lmax / 32), SPLIT_WORKSPACE_BYTES // per_split))


def _scratch(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The launches' intermediate buffers (absorbed queries, partials, merged latent), uninitialised. One seam, so
    that a test can hand the kernels NaN-filled buffers and see that nothing reads a value no kernel wrote."""
    return torch.empty(shape, dtype=dtype, device=device)


def attention(q, latent, cache, pos, w_uk, w_uv, scale):
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=False)


def attention_active(q, latent, cache, pos, w_uk, w_uv, scale):
    """The same four launches, but the slices a short context leaves empty cost nothing past their launch: the split
    writes only their (m = -inf, l = 0) and the combine never reads their sums. The same bits as `attention`: an
    empty slice's term in the combine is fmaf(0, 0, sum) = sum (attention.cu, mla_combine). At d = 64 the 48B's
    split has 132 slices of which 2 hold rows; the default writes and then reads 130 x 64 KB of zeros a layer."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=True)


def attention_deep(q, latent, cache, pos, w_uk, w_uv, scale):
    """The same four launches with the absorb's w_uk reads all in flight at once (mla_absorb_deep): GPU session 21's
    diagnosis of the 48B step put the absorb at 7.6 us a layer for 8.4 MB of float32 weights (27% of the read
    ceiling). Its compiled code showed why: ~5 loads ahead of the products, then a load beside each product, so a
    thread waits out a chain of round trips. Here each thread requests its 32 weights and 32 query values, then
    multiplies in the same order (the same bits; tests/test_cuda_load_schedule.py holds the schedule). The up
    projection likewise (mla_up_deep: a lane's 16 w_uv and obar values at once, where the plain loop makes two round
    trips; 3.9 us a layer for 8.4 MB in the same diagnosis), and the combine (mla_combine_deep: 16 slices' sums in
    flight a lane where the plain loop keeps 4; 5.3 us a layer for 8.6 MB). Its stated policy for another Dn or Lkv:
    the plain absorb / up kernel (those deep ones are compiled for Dn = 128 and Lkv = 512 only)."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=False, deep=True)


def attention_deep_active(q, latent, cache, pos, w_uk, w_uv, scale):
    """Both: the deep kernels (`attention_deep`) with the empty slices neither written nor read (`attention_active`).
    GPU session 22 timed the deep form 1.009 / 1.011 over the plain one (d = 0 / 32768), and session 19 the active
    form 1.007 / 1.001: the two change different kernels' loads (the absorb, combine and up projection's schedule; the
    split's and combine's empty slices), so their gains at a short context should add. The same bits as `attention`."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=True, deep=True)


def attention_deep_pdl(q, latent, cache, pos, w_uk, w_uv, scale):
    """`attention_deep` with its kernels launched with programmatic dependent launch (kernels/attention.cu's _pdl
    kernels): each may start while the kernel before it runs, the absorb and the up projection requesting their
    float32 weights (8.4 MB each on the 48B) before they wait for it, and each lets the next start before its wait. In
    session 33's step timeline the four MLA launches followed each other 0.4-0.6 us apart, and the o_proj GEMV after
    the up projection (a PDL kernel, which requests its weights early only when the kernel before lets it start) took
    7.2 us there against 5.3 after the KDA recurrence, which does. The same bits as `attention`. Its stated policy
    (the deep form's, and one more): a kernel without a PDL form for the call - the plain absorb (Dn other than 128),
    the CUDA-core split (not the one-token bf16 tensor-core shape), the plain up projection (Lkv other than 512) - is
    launched plainly, as `attention_deep` launches it."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=False, deep=True, pdl=True)


def attention_deep_active_pdl(q, latent, cache, pos, w_uk, w_uv, scale):
    """`attention_deep_pdl` with the empty slices neither written nor read (`attention_active`'s skip, decided on the
    device from pos). The step's attention (the PDL form, in the step since s49) left that skip behind. At d = 0+64
    the 48B's tensor-core split has 132 slices of which 2 hold rows, and the PDL form still writes, then its combine
    reads, 130 x 64 KB of zero sums a layer (17 MB of the MLA layer's traffic); session 40's timeline has the split
    and the combine adding 6.5 and 6.1 us a layer on the critical path at d = 0. At full depth no slice is empty and
    nothing changes. The same kernels and arguments but skip_empty: the same bits as `attention`. Its stated policy:
    `attention_deep_pdl`'s. GPU session 42 (H100): its GPU tests passed (gpu-tests-attn-act-pdl, 15) and the
    captured gate's bit-identity claim held; side by side before the o_proj at pos 63, 27.79 against the PDL form's
    29.34 us a layer; stacked with the l2pf experts over s52 (rungs55) it won x1.030 at d=0, x1.012 at 32768."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=True, deep=True, pdl=True)


def attention_fp8(q, latent, cache, pos, w_uk, w_uv, scale):
    """The plain four launches (`attention`'s kernels: plain absorb, combine and up projection) over a float8_e4m3fn
    cache: the fp8 split (mla_split_mma_fp8 at the decode shape, mla_split_generic_fp8 elsewhere) launched plainly.
    Not registered: the fp8 forms' plain sibling, whose bits `attention_fp8_deep_active_pdl` must give (the deep
    kernels, the skip and PDL change no sum: the bf16 forms' claims), which the GPU tests hold it to."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=False, fp8="attention_fp8")


def attention_fp8_deep_active_pdl(q, latent, cache, pos, w_uk, w_uv, scale):
    """`attention_deep_active_pdl` over an MLA cache in float8_e4m3fn (cupy_splitk_fp8_deep_active_pdl): `cache` and
    `latent` must be float8_e4m3fn (the engine's --cache-dtype float8_e4m3fn rounds the new rows before the call), q
    float32, bfloat16 or float16. The same absorb (copying the latent's bytes into the cache), combine and up kernels;
    the split is mla_split_mma_fp8_pdl at the decode shape (the fp8 tiles streamed by cp.async, each value converted
    exactly to the bf16 that mla_split_mma's tensor-core code reads), else mla_split_generic_fp8 launched plainly.
    Its stated policy: `attention_deep_pdl`'s, with the fp8 tensor-core split's shape (uses_fp8_tensor_cores).
    GPU session 53 (H100): all its GPU tests passed; x1.02 per op at 131072 (session 55's probe_split: one half-size
    tile in flight an SM, half the bytes a second)."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=True, deep=True, pdl=True, fp8=FP8_FORM)


def attention_fp8_qreg_active_pdl(q, latent, cache, pos, w_uk, w_uv, scale):
    """`attention_fp8_deep_active_pdl` with the queries-in-registers split (mla_split_qreg_fp8_pdl at the decode shape:
    each tile converted exactly to bf16 as mla_split_mma_fp8 does, three fp8 stages where it has two, the third in the
    queries' bytes once each warp holds its quarter of them in registers; the scores as four partial sums). Why: GPU
    session 55's probe_split had the one-group split's loads alone at 59.0 of its 64.6 us (131072 rows) with one tile
    in flight an SM, so the fp8 split, one half-size tile in flight, moved half the bytes a second (x1.02, session
    53); two in flight stream the bf16 split's bytes in flight for half its bytes. Its stated policy: the fp8 form's,
    and on a device whose blocks cannot opt into QF8_SMEM_BYTES the fp8 one-group split (mla_split_mma_fp8_pdl)
    (`_policies.attention_fp8_qreg_pdl_passes`). Written without a GPU: its GPU tests
    (tests/backends/test_cupy_attention_fp8_qreg.py) have not run yet."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=True, deep=True, pdl=True,
                      fp8=FP8_QREG_FORM, qreg=True)


def attention_fp8_qreg_active(q, latent, cache, pos, w_uk, w_uv, scale):
    """The fp8 queries-in-registers split with the plain absorb, combine and up projection, every kernel launched
    plainly. Not registered: the plain sibling whose bits `attention_fp8_qreg_active_pdl` must give."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=True, fp8=FP8_QREG_FORM, qreg=True)


def qf8_fits(device: torch.device) -> bool:
    """Whether mla_split_qreg_fp8's and mla_split_ring's shared memory (QF8_SMEM_BYTES) fits one block on `device`
    (sm_90: 232448)."""
    if device.type != "cuda":
        return True
    idx = device.index if device.index is not None else torch.cuda.current_device()
    return rt.max_shared_memory(idx) >= QF8_SMEM_BYTES


def attention_twin_active_pdl(q, latent, cache, pos, w_uk, w_uv, scale):
    """`attention_deep_active_pdl` with the twin split at the tensor-core shape (mla_split_twin_pdl: 512 threads a
    block, two groups of 8 warps each streaming every other 64-row tile of the slice, merged in the block; the same
    grid of one block an SM and the same partials, combine and up projection). Why: the one-group split runs one
    block of 8 warps an SM, and each tile's chain of barriers, score MMAs, softmax and PV MMAs binds it (GPU session
    53: 50% of DRAM, ~7.6 cycles between issues, x1.02 from halving its bytes). Its stated policy: the deep PDL form's,
    and on a device whose blocks cannot opt into TW_SMEM_BYTES of shared memory the one-group split
    (mla_split_mma_pdl) runs instead, the step's own (`_policies.attention_twin_pdl_passes` says which)."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=True, deep=True, pdl=True, twin=True)


def attention_bulk_active_pdl(q, latent, cache, pos, w_uk, w_uv, scale):
    """`attention_deep_active_pdl` with the bulk split at the tensor-core shape (mla_split_bulk_pdl: warp 0 fetches
    each tile by one cp.async.bulk a row, 64 a tile, where mla_split_mma's threads issue 4608 16-byte cp.async; the
    same stages, tiles and arithmetic, so the same bits). Why: neither the twin split's extra warps (GPU session 54)
    nor an fp8 cache's halved bytes (session 53) moved the split, whose warps all wait on one shared pipeline; the
    tile loads are the part of that pipeline's work the copy engine can take. Its stated policy: the deep PDL form's
    (a cache whose rows do not start on 16 bytes takes the CUDA-core split, as in every bf16 form), and a device
    whose blocks cannot opt into BULK_SMEM_BYTES takes the one-group split (`_policies.attention_bulk_pdl_passes`).
    GPU session 55 (H100): the one-group split's bits at all 8 cases, and
    slower (75.7 against 64.6 us for the split alone at 131072): a measured loss, kept as the record."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=True, deep=True, pdl=True, bulk=True)


def attention_l2pf_active_pdl(q, latent, cache, pos, w_uk, w_uv, scale):
    """`attention_deep_active_pdl` with the L2-prefetching split at the tensor-core shape (mla_split_l2pf_pdl: each
    tile's rows asked of the L2 by bulk prefetches when the tile before is copied into shared memory; the same copies,
    arithmetic and bits). Why: GPU session 55's probe_split had the one-group split's loads alone at 59.0 of its 64.6
    us at 131072 rows, with one 64-row tile in flight an SM and no room for a second in shared memory. Its stated
    policy: the deep PDL form's. Written without a GPU: its GPU tests (tests/backends/test_cupy_attention_l2pf.py)
    have not run yet."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=True, deep=True, pdl=True, l2pf=True)


def attention_qreg_active_pdl(q, latent, cache, pos, w_uk, w_uv, scale):
    """`attention_deep_active_pdl` with the queries-in-registers split at the tensor-core shape (mla_split_qreg_pdl:
    each warp's quarter of the queries' dims held in 72 registers a thread across the slice, its scores over 32 rows
    of each tile; the same grid, shared memory, stages, softmax, P.C, partials, combine and up projection). Why: GPU
    session 54 left the one-group split bound by its shared-memory pipeline (twice the warps issued at the same rate;
    half the bytes, an fp8 cache, x1.02), and 288 of a tile's 624 ldmatrix re-read the same 37 KB of queries. Session
    55 measured it tied (74.37 against 74.19 us at 131072): the loads bind (probe_split), which the ring form takes
    on. Its stated policy: the deep PDL form's (the same shape and shared memory as mla_split_mma_pdl)."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=True, deep=True, pdl=True, qreg=True)


def attention_ring_active_pdl(q, latent, cache, pos, w_uk, w_uv, scale):
    """`attention_qreg_active_pdl` with its tiles in a ring of five 32-row slots (mla_split_ring_pdl: region C's four
    and the queries' bytes once each warp holds its fragments), so one and a half tiles stream in while one is computed
    where mla_split_mma has one; the same arithmetic on the same rows, so mla_split_qreg's bits. Why: GPU session 55's
    probe_split timed the one-group split's loads alone at 59.0 of its 64.6 us (131072 rows), one tile in flight an
    SM. Its stated policy: the deep PDL form's, and on a device whose blocks cannot opt into QF8_SMEM_BYTES the qreg
    split (mla_split_qreg_pdl, the same bits) (`_policies.attention_ring_pdl_passes`). Written without a GPU: its GPU
    tests (tests/backends/test_cupy_attention_ring.py) have not run yet."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=True, deep=True, pdl=True, qreg=True,
                      ring=True)


def attention_qreg_active(q, latent, cache, pos, w_uk, w_uv, scale):
    """The queries-in-registers split with the plain absorb, combine and up projection, every kernel launched plainly.
    Not registered: the plain sibling whose bits `attention_qreg_active_pdl` must give (the deep kernels and PDL change
    no sum), as `attention_twin_active` is the twin form's."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=True, qreg=True)


def bulk_fits(cache: torch.Tensor) -> bool:
    """Whether the bulk split can take `cache`: each row starts on 16 bytes (its base does; a row is 1152 bytes), and
    on a CUDA device its blocks can opt into BULK_SMEM_BYTES of shared memory."""
    if cache.data_ptr() % 16:
        return False
    if cache.device.type != "cuda":
        return True
    idx = cache.device.index if cache.device.index is not None else torch.cuda.current_device()
    return rt.max_shared_memory(idx) >= BULK_SMEM_BYTES


def attention_twin_active(q, latent, cache, pos, w_uk, w_uv, scale):
    """The twin split with the plain absorb, combine and up projection, every kernel launched plainly. Not registered:
    the twin form's plain sibling, whose bits `attention_twin_active_pdl` must give (the deep kernels and PDL change no
    sum), which the GPU tests hold it to, as `attention` is for the bf16 forms."""
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty=True, twin=True)


def twin_fits(device: torch.device) -> bool:
    """Whether the twin split's shared memory (TW_SMEM_BYTES) fits one block on `device` (sm_90: 232448 bytes). A
    device that is not CUDA launches nothing, so only a CUDA device can fall short."""
    if device.type != "cuda":
        return True
    idx = device.index if device.index is not None else torch.cuda.current_device()
    return rt.max_shared_memory(idx) >= TW_SMEM_BYTES


def _attention(q, latent, cache, pos, w_uk, w_uv, scale, skip_empty: bool, deep: bool = False, pdl: bool = False,
               fp8: str | None = None, twin: bool = False, bulk: bool = False, qreg: bool = False,
               l2pf: bool = False, ring: bool = False):
    """The four launches. `deep`: the deep absorb / combine / up kernels where built for the shape; `pdl` (with deep):
    each of those and the tensor-core split in its PDL form, launched with programmatic dependent launch. `fp8`: the
    name of an fp8 form (its cache and latent float8_e4m3fn, its split the fp8 one), None for the others. `twin`: the
    tensor-core split in its two-group form (mla_split_twin) where the device's blocks have its shared memory. `bulk`:
    the tensor-core split fetching its tiles by bulk copies (mla_split_bulk) where the cache's rows start on 16 bytes.
    `qreg`: the tensor-core split with each warp's share of the queries in registers (mla_split_qreg; over an fp8
    cache mla_split_qreg_fp8, where the device's blocks have its shared memory). `l2pf`: the tensor-core split with
    each tile prefetched into the L2 a tile ahead (mla_split_l2pf). `ring` (with qreg): the qreg split's tiles in a
    ring of five 32-row slots (mla_split_ring) where the device's blocks have its shared memory."""
    op = "attention"
    dev = rt.cuda_device(op, q=q, latent=latent, cache=cache, w_uk=w_uk, w_uv=w_uv)
    rt.expect_shape(op, "q", q, (None, None, None), "[T, N, Dn+R]")
    t, n, dqh = q.shape
    rt.expect_shape(op, "w_uk", w_uk, (n, None, None), "[N, Dn, Lkv]")
    _, dn, lkv = w_uk.shape
    r = dqh - dn
    if r < 0:
        raise BadInput(f"{op}: q has {dqh} values per head but w_uk has Dn = {dn} rows; q must be [q_nope ; q_pe]")
    dq = lkv + r
    rt.expect_shape(op, "w_uv", w_uv, (n, None, lkv), "[N, Dv, Lkv]")
    dv = w_uv.shape[1]
    rt.expect_shape(op, "latent", latent, (t, dq), "[T, Lkv+R]")
    rt.expect_shape(op, "cache", cache, (None, dq), "[Lmax, Lkv+R]")
    if not isinstance(pos, torch.Tensor) or pos.numel() != 1:
        raise BadInput(f"{op}: 'pos' must be a one-element int64 tensor on the device (the first new position)")
    if lkv > MAX_LKV or dq > MAX_ROW:
        raise BadInput(f"{op}: Lkv {lkv} / row {dq} exceed the cupy kernels' {MAX_LKV} / {MAX_ROW}; use another "
                       f"implementation")
    if fp8 is not None:
        if cache.dtype != FP8 or latent.dtype != FP8:
            raise BadInput(f"{op} ({fp8}): 'cache' and 'latent' must be float8_e4m3fn (got {cache.dtype}, "
                           f"{latent.dtype}); run with --cache-dtype float8_e4m3fn, or select {BF16_FORM} for a "
                           f"bf16 cache")
    elif cache.dtype not in (torch.float32, torch.bfloat16) or latent.dtype != cache.dtype:
        hint = (f"; a float8_e4m3fn cache is read by attention={FP8_FORM}" if FP8 in (cache.dtype, latent.dtype)
                else "")
        raise BadInput(f"{op}: 'cache' and 'latent' must share one dtype, float32 or bfloat16 (got {cache.dtype}, "
                       f"{latent.dtype}){hint}")
    if not cache.is_contiguous():
        raise BadInput(f"{op}: 'cache' must be contiguous (its rows are written in place)")
    q_code = rt.act_code(op, "q", q)
    c_code = DT_FP8 if fp8 is not None else rt.DTYPE_CODE[cache.dtype]
    if pos.device != dev or pos.dtype != torch.int64:
        pos = pos.to(device=dev, dtype=torch.int64)  # kept on the device thereafter by a well-built step
    pos = pos.reshape(1)
    q, latent = rt.contiguous(q), rt.contiguous(latent)
    w_uk, w_uv = rt.contiguous(w_uk.float()), rt.contiguous(w_uv.float())
    lmax = cache.shape[0]
    idx = dev.index if dev.index is not None else torch.cuda.current_device()
    fits = uses_fp8_tensor_cores if fp8 is not None else uses_tensor_cores
    mma = fits(t, n, lkv, r, cache) and rt.max_shared_memory(idx) >= MMA_SMEM_BYTES

    qa = _scratch((t, n, dq), torch.bfloat16 if mma else torch.float32, dev)
    deep_absorb = deep and dn == DEEP_DN
    absorb = ("mla_absorb_deep_pdl" if pdl else "mla_absorb_deep") if deep_absorb else "mla_absorb"
    rt.launch("attention.cu", absorb, dev, (n, (dq + 63) // 64, t), (256,),
              (rt.ptr(q), rt.i32(q_code), rt.ptr(w_uk), rt.ptr(latent), rt.ptr(cache), rt.i32(c_code), rt.ptr(pos),
               rt.i32(t), rt.i32(n), rt.i32(dn), rt.i32(r), rt.i32(lkv), rt.i64(lmax), rt.f32(scale * LOG2E),
               rt.ptr(qa), rt.i32(1 if mma else 0)), pdl=pdl and deep_absorb)

    splits = rt.sm_count(idx) if mma else generic_splits(lmax, t, n, lkv)
    part_m = _scratch((splits, t, n), torch.float32, dev)
    part_l = _scratch((splits, t, n), torch.float32, dev)
    part_acc = _scratch((splits, t, n, lkv), torch.float32, dev)
    if mma:
        two = twin and fp8 is None and twin_fits(dev)
        by_bulk = bulk and fp8 is None and bulk_fits(cache)
        split, smem = ("mla_split_twin", TW_SMEM_BYTES) if two else ("mla_split_bulk", BULK_SMEM_BYTES) if by_bulk \
            else ("mla_split_ring", QF8_SMEM_BYTES) if ring and fp8 is None and qf8_fits(dev) \
            else ("mla_split_qreg", MMA_SMEM_BYTES) if qreg and fp8 is None \
            else ("mla_split_l2pf", MMA_SMEM_BYTES) if l2pf and fp8 is None \
            else ("mla_split_qreg_fp8", QF8_SMEM_BYTES) if qreg and qf8_fits(dev) \
            else ("mla_split_mma_fp8" if fp8 is not None else "mla_split_mma", MMA_SMEM_BYTES)
        rt.launch("attention.cu", split + "_pdl" if pdl else split, dev, (splits,), (512 if two else 256,),
                  (rt.ptr(qa), rt.ptr(cache), rt.ptr(pos), rt.i64(lmax), rt.ptr(part_m), rt.ptr(part_l),
                   rt.ptr(part_acc), rt.i32(int(skip_empty))), shared_mem=smem, pdl=pdl)
    else:
        rt.launch("attention.cu", "mla_split_generic_fp8" if fp8 is not None else "mla_split_generic", dev,
                  (splits, n, t), (128,),
                  (rt.ptr(qa), rt.ptr(cache), rt.i32(c_code), rt.ptr(pos), rt.i32(t), rt.i32(n), rt.i32(lkv),
                   rt.i32(r), rt.i64(lmax), rt.ptr(part_m), rt.ptr(part_l), rt.ptr(part_acc)))

    obar = _scratch((t, n, lkv), torch.float32, dev)
    combine = ("mla_combine_deep_pdl" if pdl else "mla_combine_deep") if deep else "mla_combine"
    rt.launch("attention.cu", combine, dev, (n, t, (lkv + 31) // 32), (256,),
              (rt.ptr(part_m), rt.ptr(part_l), rt.ptr(part_acc), rt.i32(splits), rt.i32(t), rt.i32(n), rt.i32(lkv),
               rt.ptr(obar), rt.i32(int(skip_empty))), pdl=pdl and deep)
    out = torch.empty((t, n, dv), dtype=q.dtype, device=dev)
    deep_up = deep and lkv == DEEP_LKV
    up = ("mla_up_deep_pdl" if pdl else "mla_up_deep") if deep_up else "mla_up"
    rt.launch("attention.cu", up, dev, (n, (dv + 7) // 8, t), (256,),
              (rt.ptr(obar), rt.ptr(w_uv), rt.i32(t), rt.i32(n), rt.i32(dv), rt.i32(lkv), rt.ptr(out),
               rt.i32(q_code), rt.ptr(pos), rt.i64(lmax)), pdl=pdl and deep_up)
    return out
