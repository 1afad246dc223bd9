"""attention=cupy_splitk_bf16_ring_active_pdl: the queries-in-registers MLA split with its tiles in a ring.

The split (kernels/attention.cu, mla_split_ring) is mla_split_qreg with each 64-row tile held as two 32-row half-tiles
in a ring of five slots (region C's four, and the queries' bytes once every warp holds its query fragments): while one
tile is computed, the next three half-tiles stream in, one and a half tiles in flight where mla_split_qreg has one.
The same scores, softmax and sums on the same rows, so it claims mla_split_qreg's bits.

On the CPU: the registration and its claim, the shared memory, the stated policy, and the compiled kernels (nvcc: no
stack, no spills; the PDL split touches no global memory before its wait). On CUDA (skipped with the reason without a
device or CuPy): the qreg form's bits at one to sixteen tiles a slice (every slot of the ring, the queries' included,
holding rows by the third tile), rows past pos NaN and NaN-filled scratch; a captured call replayed at other
positions; and the side-by-side record against the step's one-group form.
"""

from __future__ import annotations

import pytest
import torch

from sparkops.plugins import load_catalog
from sparkops_cupy import attention as cu_attention  # importable without cupy
from tests.backends.cupy_support import (MLA_CASES, mla_forms_same_bits, mla_inputs, mla_replays_match,
                                         mla_side_by_side, on_device, pdl_split_waits_first,
                                         split_kernels_compile_clean, tiles_a_slice, uses_opcode)

NAME = "cupy_splitk_bf16_ring_active_pdl"
KERNELS = ("mla_split_ring", "mla_split_ring_pdl")


# ---- on the CPU ------------------------------------------------------------------------------------------------

def test_the_ring_form_is_registered_with_the_qreg_form_s_bits():
    impl = load_catalog().get("attention", NAME)
    assert impl.backend == "cupy" and impl.devices == ("cuda",)
    assert impl.claim.kind == "bit_identical" and impl.claim.to == "cupy_splitk_bf16_qreg_active_pdl"
    assert impl.resolve() is cu_attention.attention_ring_active_pdl
    assert impl.policy_name == "sparkops_cupy._policies:attention_ring_pdl_passes"


def test_the_ring_s_five_slots_are_region_c_and_the_queries():
    """Four 32-row slots (32 x 584 bf16) fill region C (mla_split_mma's two 64-row stages); the fifth is the queries'
    bytes; the third and fourth score parts sit after mla_split_mma's bytes, within an sm_90 block."""
    slot = 32 * 584 * 2
    assert 4 * slot == 2 * 64 * 584 * 2 and slot == 32 * 584 * 2
    assert cu_attention.QF8_SMEM_BYTES == cu_attention.MMA_SMEM_BYTES + 2 * 32 * 68 * 4 <= 232448


def _args(t=1):
    return dict(q=torch.zeros(t, 32, 192, dtype=torch.bfloat16), latent=torch.zeros(t, 576, dtype=torch.bfloat16),
                cache=torch.zeros(64, 576, dtype=torch.bfloat16), pos=torch.tensor([0]),
                w_uk=torch.zeros(32, 128, 512), w_uv=torch.zeros(32, 128, 512), scale=1.0)


def test_the_policy_names_the_qreg_split_on_a_small_block(monkeypatch):
    from sparkops_cupy import _policies

    assert _policies.attention_ring_pdl_passes(**_args()) is None
    said = _policies.attention_ring_pdl_passes(**_args(t=3))
    assert said.startswith("launched plainly") and "mla_split_generic" in said and "qreg" not in said
    monkeypatch.setattr(_policies, "qf8_fits", lambda device: False)
    said = _policies.attention_ring_pdl_passes(**_args())
    assert "the qreg split (mla_split_qreg_pdl, the same bits)" in said and str(cu_attention.QF8_SMEM_BYTES) in said


def test_the_ring_kernels_compile_without_stack_or_spills(tmp_path):
    split_kernels_compile_clean(tmp_path, KERNELS)


def test_the_ring_pdl_split_touches_no_global_memory_before_its_wait(tmp_path):
    functions = pdl_split_waits_first(tmp_path, "mla_split_ring_pdl")
    assert all(uses_opcode(functions, name, "HMMA") for name in KERNELS)


# ---- on CUDA ---------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("lmax,pos", MLA_CASES,
                         ids=[f"L{lmax}-pos{pos}-tiles{tiles_a_slice(pos)}" for lmax, pos in MLA_CASES])
def test_the_ring_form_gives_the_qreg_form_s_bits(lmax, pos, cuda, nan_scratch):
    """Against cupy_splitk_bf16_qreg_active_pdl: the same output and cache bits (the rows past pos NaN: a row the ring
    read from the wrong slot, or before it landed, would show)."""
    args = mla_inputs(lmax + 3 * pos, lmax, pos)
    mla_forms_same_bits(args, cu_attention.attention_qreg_active_pdl, cu_attention.attention_ring_active_pdl)


@pytest.mark.gpu
def test_a_captured_call_replays_at_other_positions_as_the_eager_call(cuda, nan_scratch):
    args = mla_inputs(43, 40001, 0)
    args["cache"] = torch.randn(40001, 576, generator=torch.Generator().manual_seed(44)).to(torch.bfloat16)
    fn = cu_attention.attention_ring_active_pdl
    mla_replays_match(fn, fn, on_device(args), (63, 12000, 500, 40000))


@pytest.mark.gpu
def test_the_ring_form_side_by_side_with_the_one_group_one(cuda):
    """The rung's per-op evidence: the step's cupy_splitk_bf16_deep_active_pdl and the ring form
    (perop-attnring-bfloat16.json at 131072 rows)."""
    mla_side_by_side({"cupy_splitk_bf16_deep_active_pdl": torch.bfloat16, NAME: torch.bfloat16}, "attnring-bfloat16",
                     "one-group vs ring split")
