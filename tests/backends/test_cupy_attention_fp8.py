"""attention=cupy_splitk_fp8_deep_active_pdl: the CuPy MLA attention over a cache in float8_e4m3fn.

The engine rounds each new latent row into fp8 before the call (sparkops/kvcache.py), so `latent` and `cache` both
arrive as float8_e4m3fn; the op copies the latent's bytes into rows pos.. of the cache and attends over the cache's
values, each decoded exactly (every e4m3fn value is a bf16 value): mla_split_mma_fp8(_pdl) at the decode shape (fp8
tiles by cp.async, converted into the bf16 tile the tensor-core code of mla_split_mma reads), mla_split_generic_fp8
elsewhere.

On the CPU: the registration and its claim, the refusals (the bf16 forms of an fp8 cache, the fp8 form of any other),
the stated policy, and the compiled kernels (nvcc: no stack, no spills; the PDL split touches no global memory before
its wait). On CUDA (skipped with the reason without a device or CuPy): the output against a float64 reference on the
same fp8 values decoded by torch, the new rows written byte for byte, rows past pos (NaN codes) never read, scratch
buffers NaN-filled, every fp8 code carried exactly to the output, the PDL form bitwise the plain fp8 form, and a
captured graph replayed at other positions bitwise the eager call.
"""

from __future__ import annotations

import pytest
import torch

from sparkops.errors import BadInput
from sparkops.gate.tolerances import rule_for
from sparkops.kvcache import FP8, to_cache
from sparkops.plugins import load_catalog
from sparkops_cupy import _runtime as rt
from sparkops_cupy import attention as cu_attention  # importable without cupy
from tests.backends.cupy_support import (DEV, FP8_NAN_CODE, mla_forms_same_bits, mla_fp8_inputs, mla_reference,
                                         mla_replays_match, mla_side_by_side, nmse, on_device, pdl_split_waits_first,
                                         split_kernels_compile_clean)

NAME = "cupy_splitk_fp8_deep_active_pdl"
FP8_KERNELS = ("mla_split_mma_fp8", "mla_split_mma_fp8_pdl", "mla_split_generic_fp8")


# ---- on the CPU ------------------------------------------------------------------------------------------------

def test_the_fp8_form_is_registered_with_the_fp8_cache_claim():
    impl = load_catalog().get("attention", NAME)
    assert impl.backend == "cupy" and impl.devices == ("cuda",)
    assert impl.claim.kind == "tolerance" and impl.claim.variant == "fp8_cache"
    assert impl.resolve() is cu_attention.attention_fp8_deep_active_pdl
    names = {p.name for p in impl.source_files()}
    assert {"attention.py", "attention.cu", "common.cuh", "_runtime.py", "_pdl.py"} <= names
    assert impl.policy_name == "sparkops_cupy._policies:attention_fp8_pdl_passes"
    # its row is the bf16 one: the reference attends the very same fp8 values
    assert rule_for("attention", "fp8_cache").limit == rule_for("attention", "bf16").limit == 1e-3


def test_every_fp8_value_is_a_bf16_value():
    """Why the split may convert the cache to bf16 exactly: each of the 254 finite e4m3fn values (subnormals and both
    zeros included) survives bf16 and back bit for bit; the two NaN codes are NaN."""
    codes = torch.arange(256, dtype=torch.uint8).view(FP8)
    values = codes.float()
    nan = torch.isnan(values)
    assert torch.nonzero(nan).flatten().tolist() == [0x7F, 0xFF]
    back = values[~nan].to(torch.bfloat16).float()
    assert torch.equal(back.view(torch.int32), values[~nan].view(torch.int32))


def _args(t=1, n=32, dn=128, r=64, lkv=512, dv=128, lmax=64, cache_dtype=FP8, latent_dtype=None,
          q_dtype=torch.bfloat16):
    """A call's arguments on the CPU, zeros (for the host checks and the policy)."""
    latent_dtype = latent_dtype or cache_dtype
    return dict(q=torch.zeros(t, n, dn + r, dtype=q_dtype), latent=torch.zeros(t, lkv + r).to(latent_dtype),
                cache=torch.zeros(lmax, lkv + r).to(cache_dtype), pos=torch.zeros(1, dtype=torch.int64),
                w_uk=torch.zeros(n, dn, lkv), w_uv=torch.zeros(n, dv, lkv), scale=0.1)


@pytest.fixture
def refusals_on_the_cpu(monkeypatch):
    """The host checks run before anything touches a device: with the device check answering CUDA, CPU tensors reach
    the dtype checks, whose refusals are what these tests read (nothing would launch: each case is refused)."""
    monkeypatch.setattr(rt, "cuda_device", lambda op, **tensors: torch.device("cuda", 0))


@pytest.mark.parametrize("form", ["attention", "attention_deep_pdl", "attention_deep_active_pdl"])
def test_the_bf16_forms_refuse_an_fp8_cache_and_name_the_fp8_form(form, refusals_on_the_cpu):
    with pytest.raises(BadInput, match=f"float32 or bfloat16.*attention={NAME}"):
        getattr(cu_attention, form)(**_args())
    with pytest.raises(BadInput, match=f"attention={NAME}"):  # the latent alone in fp8
        getattr(cu_attention, form)(**_args(cache_dtype=torch.bfloat16, latent_dtype=FP8))


@pytest.mark.parametrize("cache_dtype,latent_dtype", [(torch.bfloat16, None), (torch.float32, None),
                                                      (FP8, torch.bfloat16), (torch.bfloat16, FP8)])
def test_the_fp8_form_refuses_any_other_cache_and_names_the_fix(cache_dtype, latent_dtype, refusals_on_the_cpu):
    for fn, name in ((cu_attention.attention_fp8_deep_active_pdl, NAME), (cu_attention.attention_fp8, "attention_fp8")):
        with pytest.raises(BadInput) as err:
            fn(**_args(cache_dtype=cache_dtype, latent_dtype=latent_dtype))
        said = str(err.value)
        assert said.startswith(f"attention ({name}): 'cache' and 'latent' must be float8_e4m3fn"), said
        assert "run with --cache-dtype float8_e4m3fn, or select cupy_splitk_bf16_deep_active_pdl" in said


def test_the_fp8_form_takes_float_queries_only(refusals_on_the_cpu):
    with pytest.raises(BadInput, match="'q' has dtype torch.float8_e4m3fn"):
        cu_attention.attention_fp8_deep_active_pdl(**_args(q_dtype=FP8))


def test_the_fp8_tensor_core_split_takes_the_aligned_decode_shape_only():
    fits = cu_attention.uses_fp8_tensor_cores
    cache = torch.zeros(64, 576, dtype=FP8)
    assert fits(1, 32, 512, 64, cache)
    assert not fits(1, 32, 512, 64, cache.to(torch.bfloat16))  # the bf16 split's cache
    assert not cu_attention.uses_tensor_cores(1, 32, 512, 64, cache)  # and the bf16 split is not fp8's
    assert not fits(2, 32, 512, 64, cache) and not fits(1, 16, 512, 64, cache) and not fits(1, 32, 256, 64, cache)
    offset = torch.zeros(64 * 576 + 8, dtype=FP8)[8:].view(64, 576)  # rows 8 bytes off a 16-byte boundary
    assert offset.data_ptr() % 16 == 8 and not fits(1, 32, 512, 64, offset)


def test_the_fp8_split_fits_a_hopper_block():
    """mla_split_mma_fp8 takes the bf16 split's shared memory (one bf16 tile and two fp8 stages where that one has
    two bf16 stages), within the 227 KB an H100 / H200 block may opt into."""
    assert cu_attention.MMA_SMEM_BYTES == 209024 <= 227 * 1024
    tile, stage = 64 * 584 * 2, 64 * 576
    assert tile + 2 * stage <= 2 * tile  # both fit the bf16 split's two stages


def test_the_policy_says_which_kernels_launch_plainly():
    """attention_fp8_pdl_passes: None on the 48B's one-token MLA (all four kernels in their PDL form, the split the fp8
    tensor-core one); otherwise the plain absorb / up (the deep form's policy) and the fp8 CUDA-core split."""
    from sparkops_cupy._policies import attention_fp8_pdl_passes

    assert attention_fp8_pdl_passes(**_args()) is None
    said = attention_fp8_pdl_passes(**_args(t=3))
    assert said.startswith("launched plainly") and "mla_split_generic_fp8" in said and "mla_absorb" not in said
    said = attention_fp8_pdl_passes(**_args(dn=96))
    assert "mla_absorb" in said and "Dn 96" in said and "mla_split_generic" not in said


def test_the_fp8_kernels_compile_without_stack_or_spills(tmp_path):
    """The fp8 kernels as ptxas reports them for sm_90 (tests/test_cuda_sources.py holds every kernel of the file to
    its budget; this names the fp8 ones, so that a file that lost one fails here)."""
    split_kernels_compile_clean(tmp_path, FP8_KERNELS)


def test_the_fp8_pdl_split_touches_no_global_memory_before_its_wait(tmp_path):
    """mla_split_mma_fp8_pdl reads the absorb's qa and cache row (cp.async: LDGSTS) and pos, and writes the partials:
    all after griddepcontrol.wait (ACQBULK) on every path. tests/test_cuda_pdl_order.py checks the read-only loads;
    this checks every global access, the copies included. Its hardware conversion is there (F2FP ... E4M3), and the
    bf16 split has none."""
    functions = pdl_split_waits_first(tmp_path, "mla_split_mma_fp8_pdl")
    for name in ("mla_split_mma_fp8", "mla_split_mma_fp8_pdl"):
        assert any("E4M3" in i.opcode for i in functions[name].instructions), name
        assert any(i.opcode.startswith("HMMA") for i in functions[name].instructions), name
    assert not any("E4M3" in i.opcode for i in functions["mla_split_mma"].instructions)


# ---- on CUDA ---------------------------------------------------------------------------------------------------

def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().view(torch.uint8)


#: (lmax, pos, t, shape): the decode shape on the tensor-core split (a fresh cache, a tile's last row and the next
#: tile's first, a long context of 8192 rows, a short one past 19870 stale rows), and on the CUDA-core split (three
#: tokens; a small model's shape, one token and three)
KIMI = dict(n=32, dn=128, r=64, lkv=512, dv=128)
SMALL = dict(n=4, dn=16, r=8, lkv=32, dv=16)
CASES = [(200, 0, 1, KIMI), (200, 63, 1, KIMI), (200, 64, 1, KIMI), (9000, 8191, 1, KIMI), (20000, 130, 1, KIMI),
         (8300, 8000, 3, KIMI), (300, 0, 1, SMALL), (300, 40, 1, SMALL), (300, 250, 3, SMALL)]
IDS = [f"{'kimi' if s is KIMI else 'small'}-L{lmax}-pos{pos}-T{t}" for lmax, pos, t, s in CASES]


@pytest.mark.gpu
@pytest.mark.parametrize("lmax,pos,t,shape", CASES, ids=IDS)
def test_the_fp8_forms_match_the_reference_on_the_same_fp8_values(lmax, pos, t, shape, cuda, nan_scratch):
    """The registered form and its plain sibling against float64 on the decoded cache: a tenth of the bf16 row's 1e-3 on
    the tensor cores (bf16 queries, qa, probabilities and output: ~7e-6 in a float64 emulation of those roundings),
    the float32 row's 1e-10 on the CUDA-core split (float32 queries and output: the fp8 values decoded exactly, the
    arithmetic float32); the new rows byte for byte the latent's, every other row's bytes as they were."""
    tensor_cores = t == 1 and shape is KIMI
    q_dtype = torch.bfloat16 if tensor_cores else torch.float32
    args = mla_fp8_inputs(lmax * 31 + pos + t, lmax, pos, t=t, q_dtype=q_dtype, **shape)
    want = mla_reference(**args)
    limit = rule_for("attention", "fp8_cache").limit / 10 if tensor_cores else rule_for("attention", "fp32").limit
    for fn in (cu_attention.attention_fp8_deep_active_pdl, cu_attention.attention_fp8):
        dev = on_device(args)
        assert cu_attention.uses_fp8_tensor_cores(t, shape["n"], shape["lkv"], shape["r"], dev["cache"]) == tensor_cores
        got = fn(**dev)
        torch.cuda.synchronize()
        assert got.dtype == q_dtype and got.shape == want.shape
        assert nmse(got, want) <= limit, fn.__name__
        written, before = _bytes(dev["cache"]), _bytes(args["cache"])
        assert torch.equal(written[pos:pos + t], _bytes(args["latent"])), "the new rows are not the latent's bytes"
        others = torch.ones(lmax, dtype=torch.bool)
        others[pos:pos + t] = False
        assert torch.equal(written[others], before[others]), "rows other than the new ones changed"


@pytest.mark.gpu
@pytest.mark.parametrize("lmax,pos,t,dn,lkv", [(200, 63, 1, 128, 512), (9000, 8447, 1, 128, 512),
                                               (300, 40, 3, 128, 512), (300, 40, 1, 96, 512), (300, 40, 1, 128, 256)])
def test_the_pdl_form_gives_the_plain_fp8_forms_bits(lmax, pos, t, dn, lkv, cuda, nan_scratch):
    """cupy_splitk_fp8_deep_active_pdl against attention_fp8 (the plain kernels, the split launched plainly): the same
    output and cache bits, as the bf16 deep, active and PDL forms give the plain bf16 form's - on the tensor-core
    split and on the shapes its stated policy launches plainly (three tokens: the CUDA-core split; Dn = 96: the plain
    absorb; Lkv = 256: the plain up projection, and the CUDA-core split)."""
    args = mla_fp8_inputs(lmax + pos + t + dn + lkv, lmax, pos, t=t, dn=dn, lkv=lkv)
    mla_forms_same_bits(args, cu_attention.attention_fp8, cu_attention.attention_fp8_deep_active_pdl)


@pytest.mark.gpu
@pytest.mark.parametrize("t", [1, 2], ids=["tensor-cores", "cuda-cores"])
def test_every_fp8_code_reaches_the_output_exactly(t, cuda, nan_scratch):
    """Each of the 254 finite fp8 codes (subnormals, both zeros, +-448) carried to the output bit for bit: every row
    the same (column j holding code j mod 254), q = 0 (every score 0, every weight 1: each sum is count x value,
    exact), w_uv one-hot (head h's output v < 16 is obar[16 h + v]), float32 output. A decode that flushed a
    subnormal, lost a sign or rounded a mantissa shows as a wrong value in its column (compared as values: -0 sums to
    +0)."""
    codes = torch.tensor([c for c in range(256) if c not in (0x7F, 0xFF)], dtype=torch.uint8)
    row = codes[torch.arange(576) % len(codes)]
    lmax, pos = 4000, 3000
    cache = torch.full((lmax, 576), FP8_NAN_CODE, dtype=torch.uint8)
    cache[:pos] = row
    w_uv = torch.zeros(32, 128, 512)
    for h in range(32):
        w_uv[h, torch.arange(16), 16 * h + torch.arange(16)] = 1.0
    args = dict(q=torch.zeros(t, 32, 192), latent=row.repeat(t, 1).view(FP8), cache=cache.view(FP8),
                pos=torch.tensor([pos]), w_uk=torch.randn(32, 128, 512), w_uv=w_uv, scale=192 ** -0.5)
    want = row[:512].view(FP8).float().view(32, 16)
    for fn in (cu_attention.attention_fp8_deep_active_pdl, cu_attention.attention_fp8):
        dev = on_device(args)
        got = fn(**dev).cpu()
        assert got.dtype == torch.float32
        for i in range(t):
            assert torch.equal(got[i, :, :16], want), (fn.__name__, i, (got[i, :, :16] != want).nonzero()[:8])
            assert torch.equal(got[i, :, 16:], torch.zeros(32, 112)), (fn.__name__, i)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [KIMI, SMALL], ids=["kimi", "small"])
def test_a_captured_call_replays_at_other_positions_as_the_eager_call(shape, cuda, nan_scratch):
    """One captured call of the registered form, replayed at positions that leave most slices empty and at a long
    context: the output and the cache bytes of the same call made eagerly there (the position is read on the device;
    the empty slices are decided from it)."""
    fn = cu_attention.attention_fp8_deep_active_pdl
    args = mla_fp8_inputs(17, 9000, 0, **shape)
    args["cache"] = to_cache(torch.randn(9000, shape["lkv"] + shape["r"], generator=torch.Generator().manual_seed(18)),
                             FP8)  # a full history: each replay's rows before its position are real values
    mla_replays_match(fn, fn, on_device(args), (63, 8191, 500))


@pytest.mark.gpu
def test_the_refusals_on_cuda_tensors(cuda):
    dev = on_device(mla_fp8_inputs(3, 64, 5))
    for form in ("attention", "attention_deep_active_pdl"):
        with pytest.raises(BadInput, match=f"attention={NAME}"):
            getattr(cu_attention, form)(**dev)
    bf16 = {**dev, "cache": dev["cache"].to(torch.bfloat16), "latent": dev["latent"].to(torch.bfloat16)}
    with pytest.raises(BadInput, match="--cache-dtype float8_e4m3fn.*cupy_splitk_bf16_deep_active_pdl"):
        cu_attention.attention_fp8_deep_active_pdl(**bf16)


@pytest.mark.gpu
def test_a_position_past_the_cache_gives_nan_not_a_crash(cuda):
    args = mla_fp8_inputs(5, 64, 63)
    dev = {**on_device(args), "pos": torch.tensor([64], device=DEV)}  # writing row 64 of a 64-row cache
    out = cu_attention.attention_fp8_deep_active_pdl(**dev)
    assert torch.isnan(out.float()).all()
    assert torch.equal(_bytes(dev["cache"]), _bytes(args["cache"]))


@pytest.mark.gpu
def test_the_fp8_form_side_by_side_with_the_bf16_one(cuda):
    """The rung's per-op evidence (stage rungs_fp8): the step's cupy_splitk_bf16_deep_active_pdl on a bf16 cache and
    the fp8 form on the same rows rounded to fp8 (perop-attnfp8-bfloat16.json at 131072 rows; the rung's --expect;
    cupy_support.mla_side_by_side)."""
    mla_side_by_side({"cupy_splitk_bf16_deep_active_pdl": torch.bfloat16, NAME: FP8}, "attnfp8-bfloat16",
                     "bf16 vs fp8 cache")