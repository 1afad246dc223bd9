"""attention=cupy_splitk_bf16_bulk_active_pdl: the CuPy MLA attention with the bulk split.

The bulk split (kernels/attention.cu, mla_split_bulk) is mla_split_mma with each 64-row tile fetched by one bulk copy
a row (cp.async.bulk, kernels/bulk_copy.cuh, completing on the stage's mbarrier) where mla_split_mma's threads issue
4608 16-byte cp.async; the rows past the slice's end are zeroed in shared memory. The same stages, tiles and
arithmetic, so it claims the one-group split's bits.

On the CPU: the registration and its claim, the shared memory, the stated policy (a cache whose rows do not start on
16 bytes takes the CUDA-core split), and the compiled kernels (nvcc: no stack, no spills; the bulk copies in the SASS;
the PDL split touches no global memory and starts no copy before its wait). On CUDA (skipped with the reason without a
device or CuPy): the one-group form's bits at one to sixteen tiles a slice with partial last tiles, rows past pos NaN
and NaN-filled scratch; the plain form's bits through the policy's misaligned cache; a captured call replayed at
other positions; and the side-by-side record against the one-group form.
"""

from __future__ import annotations

import pytest
import torch

from sparkops.plugins import load_catalog
from sparkops_cupy import attention as cu_attention  # importable without cupy
from sparkops.gate.tolerances import rule_for
from tests.backends.cupy_support import (DEV, MLA_CASES, mla_forms_same_bits, mla_inputs, mla_reference,
                                         mla_replays_match, mla_side_by_side, nmse, on_device, pdl_split_waits_first,
                                         split_kernels_compile_clean)

NAME = "cupy_splitk_bf16_bulk_active_pdl"
BULK_KERNELS = ("mla_split_bulk", "mla_split_bulk_pdl")


# ---- on the CPU ------------------------------------------------------------------------------------------------

def test_the_bulk_form_is_registered_with_the_one_group_split_s_bits():
    impl = load_catalog().get("attention", NAME)
    assert impl.backend == "cupy" and impl.devices == ("cuda",)
    assert impl.claim.kind == "bit_identical" and impl.claim.to == "cupy_splitk_bf16"
    assert impl.resolve() is cu_attention.attention_bulk_active_pdl
    assert {"attention.py", "attention.cu", "common.cuh", "bulk_copy.cuh", "_runtime.py", "_pdl.py"} <= {
        p.name for p in impl.source_files()}
    assert impl.policy_name == "sparkops_cupy._policies:attention_bulk_pdl_passes"


def test_the_bulk_split_fits_a_hopper_block():
    """mla_split_mma's layout and two 8-byte mbarriers after it."""
    assert cu_attention.BULK_SMEM_BYTES == cu_attention.MMA_SMEM_BYTES + 16 == 209040 <= 232448


def _args(t=1, cache=None):
    cache = torch.zeros(64, 576, dtype=torch.bfloat16) if cache is None else cache
    return dict(q=torch.zeros(t, 32, 192, dtype=torch.bfloat16), latent=torch.zeros(t, 576, dtype=torch.bfloat16),
                cache=cache, pos=torch.tensor([0]), w_uk=torch.zeros(32, 128, 512), w_uv=torch.zeros(32, 128, 512),
                scale=1.0)


def test_the_policy_names_the_cuda_core_split_for_a_misaligned_cache_and_the_one_group_for_a_small_block(monkeypatch):
    """A cache whose rows do not start on 16 bytes takes no tensor-core split (uses_tensor_cores: the one-group split's
    16-byte copies would fault, GPU session 55), so the deep PDL form's words name the CUDA-core split; a device short
    of the bulk split's shared memory takes the one-group split."""
    from sparkops_cupy import _policies
    from sparkops_cupy._policies import attention_bulk_pdl_passes

    assert attention_bulk_pdl_passes(**_args()) is None
    offset = torch.zeros(64 * 576 + 4, dtype=torch.bfloat16)[4:].view(64, 576)  # 8 bytes off a 16-byte boundary
    assert offset.data_ptr() % 16 == 8 and not cu_attention.bulk_fits(offset)
    said = attention_bulk_pdl_passes(**_args(cache=offset))
    assert said.startswith("launched plainly") and "mla_split_generic" in said and "one-group" not in said
    said = attention_bulk_pdl_passes(**_args(t=3))
    assert said.startswith("launched plainly") and "mla_split_generic" in said and "one-group" not in said
    monkeypatch.setattr(_policies, "bulk_fits", lambda cache: False)  # an aligned cache on a device short of room
    said = attention_bulk_pdl_passes(**_args())
    assert "one-group split (mla_split_mma_pdl)" in said and str(cu_attention.BULK_SMEM_BYTES) in said


def test_the_bulk_kernels_compile_without_stack_or_spills(tmp_path):
    split_kernels_compile_clean(tmp_path, BULK_KERNELS)


def test_the_bulk_pdl_split_copies_nothing_before_its_wait(tmp_path):
    """mla_split_bulk_pdl reads pos, starts the queries' cp.async (LDGSTS) and the tiles' bulk copies (UBLKCP) and
    sets up its mbarriers (SYNCS) only after griddepcontrol.wait (ACQBULK), on every path; both bulk kernels copy by
    UBLKCP and wait on the mbarrier's phase."""
    functions = pdl_split_waits_first(tmp_path, "mla_split_bulk_pdl", also=("UBLKCP", "SYNCS"))
    for name in BULK_KERNELS:
        ops = [i.opcode for i in functions[name].instructions]
        assert any(o.startswith("UBLKCP") for o in ops) and any(o.startswith("SYNCS.PHASECHK") for o in ops), name
    assert not any(i.opcode.startswith("UBLKCP") for i in functions["mla_split_mma"].instructions)


# ---- on CUDA ---------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("lmax,pos", MLA_CASES, ids=[f"L{lmax}-pos{pos}" for lmax, pos in MLA_CASES])
def test_the_bulk_form_gives_the_one_group_form_s_bits(lmax, pos, cuda, nan_scratch):
    """The output and the written cache bitwise those of cupy_splitk_bf16_deep_active_pdl (the one-group split, the
    step's) and of the plain cupy_splitk_bf16 (its claim's target)."""
    args = mla_inputs(lmax + pos, lmax, pos)
    mla_forms_same_bits(args, cu_attention.attention, cu_attention.attention_deep_active_pdl,
                        cu_attention.attention_bulk_active_pdl)


@pytest.mark.gpu
def test_a_misaligned_cache_takes_the_cuda_core_split_with_the_plain_form_s_bits(cuda, nan_scratch):
    """The stated policy on the device: a cache view 8 bytes off a 16-byte boundary runs the CUDA-core split in both
    the plain form and this one (session 55's first run had it reach mla_split_mma, whose 16-byte copies faulted), the
    same bits, near the reference."""
    args = mla_inputs(7, 9000, 8500)
    outs = []
    for fn in (cu_attention.attention, cu_attention.attention_bulk_active_pdl):
        dev = on_device(args)
        flat = torch.empty(9000 * 576 + 4, dtype=torch.bfloat16, device=DEV)
        dev["cache"] = flat[4:].view(9000, 576)
        dev["cache"].copy_(args["cache"].to(DEV))
        assert dev["cache"].data_ptr() % 16 == 8
        outs.append(fn(**dev))
    torch.cuda.synchronize()
    assert torch.isfinite(outs[0].float()).all() and torch.equal(outs[0], outs[1])
    assert nmse(outs[0], mla_reference(**args)) <= rule_for("attention", "bf16").limit / 10


@pytest.mark.gpu
def test_a_captured_call_replays_at_other_positions_as_the_eager_call(cuda, nan_scratch):
    """One captured call, replayed at positions with 0 to 3 tiles a slice (the mbarriers' phases start afresh each
    launch): the output and the cache of the plain form's eager call there."""
    args = mla_inputs(31, 20001, 0)
    args["cache"] = torch.randn(20001, 576, generator=torch.Generator().manual_seed(32)).to(torch.bfloat16)
    mla_replays_match(cu_attention.attention_bulk_active_pdl, cu_attention.attention, on_device(args),
                      (63, 12000, 500, 20000))


@pytest.mark.gpu
def test_the_bulk_form_side_by_side_with_the_one_group_one(cuda):
    """The rung's per-op evidence: the step's cupy_splitk_bf16_deep_active_pdl and the bulk form on a bf16 cache
    (perop-attnbulk-bfloat16.json at 131072 rows; cupy_support.mla_side_by_side)."""
    mla_side_by_side({"cupy_splitk_bf16_deep_active_pdl": torch.bfloat16, NAME: torch.bfloat16}, "attnbulk-bfloat16",
                     "one-group split: cp.async vs bulk copies")