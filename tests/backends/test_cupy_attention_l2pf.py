"""attention=cupy_splitk_bf16_l2pf_active_pdl: the CuPy MLA attention with the L2-prefetching split.

The split (kernels/attention.cu, mla_split_l2pf) is mla_split_mma with each tile's rows asked of the L2 (one bulk
prefetch a row, cp.async.bulk.prefetch.L2) when the tile before them is copied into shared memory: two tiles' bytes
leave DRAM while one is computed, where shared memory has room for only one in flight. A prefetch is a hint: the same
copies and arithmetic, so it claims the one-group split's bits.

On the CPU: the registration and its claim, the stated policy, and the compiled kernels (nvcc: no stack, no spills;
the prefetches in the SASS, none before the PDL wait). On CUDA (skipped with the reason without a device or CuPy): the
one-group form's bits at one to sixteen tiles a slice (the last tile of a slice prefetches nothing past it), rows
past pos NaN and NaN-filled scratch; a captured call replayed at other positions; and the side-by-side record against
the one-group form.
"""

from __future__ import annotations

import pytest
import torch

from sparkops.plugins import load_catalog
from sparkops_cupy import attention as cu_attention  # importable without cupy
from tests.backends.cupy_support import (MLA_CASES, mla_forms_same_bits, mla_inputs, mla_replays_match,
                                         mla_side_by_side, on_device, pdl_split_waits_first,
                                         split_kernels_compile_clean, uses_opcode)

NAME = "cupy_splitk_bf16_l2pf_active_pdl"
KERNELS = ("mla_split_l2pf", "mla_split_l2pf_pdl")


# ---- on the CPU ------------------------------------------------------------------------------------------------

def test_the_l2pf_form_is_registered_with_the_one_group_split_s_bits():
    impl = load_catalog().get("attention", NAME)
    assert impl.backend == "cupy" and impl.devices == ("cuda",)
    assert impl.claim.kind == "bit_identical" and impl.claim.to == "cupy_splitk_bf16"
    assert impl.resolve() is cu_attention.attention_l2pf_active_pdl
    assert {"attention.cu", "common.cuh", "bulk_copy.cuh", "_pdl.py"} <= {p.name for p in impl.source_files()}
    assert impl.policy_name == "sparkops_cupy._policies:attention_deep_pdl_passes"


def test_the_l2pf_kernels_compile_without_stack_or_spills(tmp_path):
    split_kernels_compile_clean(tmp_path, KERNELS)


def test_the_l2pf_pdl_split_prefetches_nothing_before_its_wait(tmp_path):
    """mla_split_l2pf_pdl reads pos, the queries and the cache (LDGSTS), prefetches rows (UBLKPF) and writes the
    partials only after griddepcontrol.wait (ACQBULK); both kernels prefetch, mla_split_mma does not."""
    functions = pdl_split_waits_first(tmp_path, "mla_split_l2pf_pdl", also=("UBLK",))
    assert all(uses_opcode(functions, name, "UBLKPF") for name in KERNELS)
    assert not uses_opcode(functions, "mla_split_mma", "UBLKPF")


# ---- on CUDA ---------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("lmax,pos", MLA_CASES, ids=[f"L{lmax}-pos{pos}" for lmax, pos in MLA_CASES])
def test_the_l2pf_form_gives_the_one_group_form_s_bits(lmax, pos, cuda, nan_scratch):
    """Against cupy_splitk_bf16_deep_active_pdl (the step's, the same copies and arithmetic): output and cache bits."""
    args = mla_inputs(lmax + pos, lmax, pos)
    mla_forms_same_bits(args, cu_attention.attention_deep_active_pdl, cu_attention.attention_l2pf_active_pdl)


@pytest.mark.gpu
def test_a_captured_call_replays_at_other_positions_as_the_eager_call(cuda, nan_scratch):
    args = mla_inputs(41, 20001, 0)
    args["cache"] = torch.randn(20001, 576, generator=torch.Generator().manual_seed(42)).to(torch.bfloat16)
    fn = cu_attention.attention_l2pf_active_pdl
    mla_replays_match(fn, fn, on_device(args), (63, 12000, 500, 20000))


@pytest.mark.gpu
def test_the_l2pf_form_side_by_side_with_the_one_group_one(cuda):
    """The rung's per-op evidence: the step's cupy_splitk_bf16_deep_active_pdl and the L2-prefetching form
    (perop-attnl2pf-bfloat16.json at 131072 rows)."""
    mla_side_by_side({"cupy_splitk_bf16_deep_active_pdl": torch.bfloat16, NAME: torch.bfloat16}, "attnl2pf-bfloat16",
                     "one-group vs L2-prefetching split")
