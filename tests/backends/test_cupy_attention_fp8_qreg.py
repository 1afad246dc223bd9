"""attention=cupy_splitk_fp8_qreg_active_pdl: the fp8-cache MLA attention with the queries-in-registers split.

The split (kernels/attention.cu, mla_split_qreg_fp8) is mla_split_mma_fp8 (each fp8 tile converted exactly into the
bf16 tile the tensor-core code reads) with mla_split_qreg's scores (each warp's quarter of the queries in registers,
four partial sums) and three fp8 stages where mla_split_mma_fp8 has two: the third in the queries' bytes, refilled
from the loop's first barrier on. So two tiles stream in while one is computed. It claims the fp8 cache's tolerance.

On the CPU: the registration and its claim, the shared memory, the stated policy, and the compiled kernels (nvcc: no
stack, no spills; the PDL split touches no global memory before its wait). On CUDA (skipped with the reason without a
device or CuPy): the output against a float64 reference on the same fp8 values at one to sixteen tiles a slice (from
the third tile on, every third tile lands where the queries were), the new row written byte for byte, rows past pos
(NaN codes) never read, NaN-filled scratch; the PDL form the plain sibling's bits; a captured call replayed at other
positions; and the side-by-side record against the step's bf16 split and the fp8 one-group split.
"""

from __future__ import annotations

import pytest
import torch

from sparkops.gate.tolerances import rule_for
from sparkops.kvcache import FP8
from sparkops.plugins import load_catalog
from sparkops_cupy import attention as cu_attention  # importable without cupy
from tests.backends.cupy_support import (MLA_CASES, mla_forms_same_bits, mla_fp8_inputs, mla_reference,
                                         mla_replays_match, mla_side_by_side, nmse, on_device, pdl_split_waits_first,
                                         split_kernels_compile_clean, tiles_a_slice, uses_opcode)

NAME = "cupy_splitk_fp8_qreg_active_pdl"
KERNELS = ("mla_split_qreg_fp8", "mla_split_qreg_fp8_pdl")


# ---- on the CPU ------------------------------------------------------------------------------------------------

def test_the_fp8_qreg_form_is_registered_with_the_fp8_cache_claim():
    impl = load_catalog().get("attention", NAME)
    assert impl.backend == "cupy" and impl.devices == ("cuda",)
    assert impl.claim.kind == "tolerance" and impl.claim.variant == "fp8_cache"
    assert impl.resolve() is cu_attention.attention_fp8_qreg_active_pdl
    assert impl.policy_name == "sparkops_cupy._policies:attention_fp8_qreg_pdl_passes"


def test_the_third_stage_takes_the_queries_bytes_and_the_block_fits_hopper():
    """An fp8 stage (64 rows of 576 bytes) within the queries' 32 x 584 bf16; mla_split_mma_fp8's bytes and two more
    [32, 68] float32 score parts within the 232448 bytes an H100 / H200 block may opt into."""
    assert 64 * 576 <= 32 * 584 * 2
    assert cu_attention.QF8_SMEM_BYTES == cu_attention.MMA_SMEM_BYTES + 2 * 32 * 68 * 4 == 226432 <= 232448


def _args(t=1):
    return dict(q=torch.zeros(t, 32, 192, dtype=torch.bfloat16), latent=torch.zeros(t, 576, dtype=FP8),
                cache=torch.zeros(64, 576, dtype=FP8), pos=torch.tensor([0]), w_uk=torch.zeros(32, 128, 512),
                w_uv=torch.zeros(32, 128, 512), scale=1.0)


def test_the_policy_says_which_split_runs(monkeypatch):
    """None at the 48B's one-token MLA; the CUDA-core fp8 split for several tokens; the fp8 one-group split on a
    device whose blocks cannot opt into QF8_SMEM_BYTES."""
    from sparkops_cupy import _policies

    assert _policies.attention_fp8_qreg_pdl_passes(**_args()) is None
    said = _policies.attention_fp8_qreg_pdl_passes(**_args(t=3))
    assert said.startswith("launched plainly") and "mla_split_generic_fp8" in said and "one-group" not in said
    monkeypatch.setattr(_policies, "qf8_fits", lambda device: False)
    said = _policies.attention_fp8_qreg_pdl_passes(**_args())
    assert "fp8 one-group split (mla_split_mma_fp8_pdl)" in said and str(cu_attention.QF8_SMEM_BYTES) in said


def test_the_fp8_qreg_kernels_compile_without_stack_or_spills(tmp_path):
    split_kernels_compile_clean(tmp_path, KERNELS)


def test_the_fp8_qreg_pdl_split_touches_no_global_memory_before_its_wait(tmp_path):
    functions = pdl_split_waits_first(tmp_path, "mla_split_qreg_fp8_pdl")
    assert all(uses_opcode(functions, name, "HMMA") for name in KERNELS)


# ---- on CUDA ---------------------------------------------------------------------------------------------------

def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().view(torch.uint8)


@pytest.mark.gpu
@pytest.mark.parametrize("lmax,pos", MLA_CASES,
                         ids=[f"L{lmax}-pos{pos}-tiles{tiles_a_slice(pos)}" for lmax, pos in MLA_CASES])
def test_the_fp8_qreg_forms_match_the_reference_on_the_same_fp8_values(lmax, pos, cuda, nan_scratch):
    """The registered form and its plain sibling against float64 on the decoded cache: within a tenth of the fp8 row's
    1e-3; the new row the latent's bytes, every other row's bytes as they were."""
    args = mla_fp8_inputs(lmax * 7 + pos, lmax, pos)
    want = mla_reference(**args)
    limit = rule_for("attention", "fp8_cache").limit / 10
    for fn in (cu_attention.attention_fp8_qreg_active_pdl, cu_attention.attention_fp8_qreg_active):
        dev = on_device(args)
        got = fn(**dev)
        torch.cuda.synchronize()
        assert got.dtype == torch.bfloat16 and got.shape == want.shape
        assert nmse(got, want) <= limit, fn.__name__
        written, before = _bytes(dev["cache"]), _bytes(args["cache"])
        assert torch.equal(written[pos], _bytes(args["latent"])[0]), "the new row is not the latent's bytes"
        others = torch.ones(lmax, dtype=torch.bool)
        others[pos] = False
        assert torch.equal(written[others], before[others]), "rows other than the new one changed"


@pytest.mark.gpu
@pytest.mark.parametrize("lmax,pos", [(200, 63), (20001, 20000), (131072, 131071)])
def test_the_pdl_form_gives_the_plain_fp8_qreg_split_s_bits(lmax, pos, cuda, nan_scratch):
    args = mla_fp8_inputs(lmax - pos, lmax, pos)
    mla_forms_same_bits(args, cu_attention.attention_fp8_qreg_active, cu_attention.attention_fp8_qreg_active_pdl)


@pytest.mark.gpu
def test_a_captured_call_replays_at_other_positions_as_the_eager_call(cuda, nan_scratch):
    """One captured call, replayed at positions with 0 to 3 tiles a slice: the eager call's output and cache there."""
    from sparkops.kvcache import to_cache

    args = mla_fp8_inputs(29, 40001, 0)
    args["cache"] = to_cache(torch.randn(40001, 576, generator=torch.Generator().manual_seed(30)), FP8)
    fn = cu_attention.attention_fp8_qreg_active_pdl
    mla_replays_match(fn, fn, on_device(args), (63, 12000, 500, 40000))


@pytest.mark.gpu
def test_the_fp8_qreg_form_side_by_side_with_the_bf16_and_fp8_splits(cuda):
    """The rung's per-op evidence: the step's cupy_splitk_bf16_deep_active_pdl on a bf16 cache, the fp8 one-group form
    and this form on the same rows rounded to fp8 (perop-attnfp8_qreg-bfloat16.json at 131072 rows)."""
    mla_side_by_side({"cupy_splitk_bf16_deep_active_pdl": torch.bfloat16, "cupy_splitk_fp8_deep_active_pdl": FP8,
                      NAME: FP8}, "attnfp8_qreg-bfloat16", "bf16 vs fp8 one-group vs fp8 queries-in-registers split")
