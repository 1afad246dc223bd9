"""attention=cupy_splitk_bf16_qreg_active_pdl: the CuPy MLA attention with the queries-in-registers split.

The split (kernels/attention.cu, mla_split_qreg) is mla_split_mma with each warp's quarter of the absorbed queries'
dims held in registers across the slice (mma_load_qfrags) and each tile's scores computed as four partial sums over
the dims (two of them written over the queries' shared memory once the fragments are loaded). Everything else is
attention_deep_active_pdl's; the partial sums round differently, so it claims the bf16 tolerance.

On the CPU: the registration and its claim, the shared memory, the stated policy, and the compiled kernels (nvcc: no
stack, no spills; the PDL split touches no global memory before its wait). On CUDA (skipped with the reason without a
device or CuPy): the output against a float64 reference at one to sixteen tiles a slice (a second tile is the first
whose scores are written over the queries), rows past pos NaN and never read, NaN-filled scratch; the PDL form the
plain sibling's bits; a captured call replayed at other positions; and the side-by-side record against the step's
one-group form.
"""

from __future__ import annotations

import pytest
import torch

from sparkops.gate.tolerances import rule_for
from sparkops.plugins import load_catalog
from sparkops_cupy import attention as cu_attention  # importable without cupy
from tests.backends.cupy_support import (MLA_CASES, mla_forms_same_bits, mla_inputs, mla_reference, mla_replays_match,
                                         mla_side_by_side, nmse, on_device, pdl_split_waits_first,
                                         split_kernels_compile_clean, tiles_a_slice, uses_opcode)

NAME = "cupy_splitk_bf16_qreg_active_pdl"
QREG_KERNELS = ("mla_split_qreg", "mla_split_qreg_pdl")


# ---- on the CPU ------------------------------------------------------------------------------------------------

def test_the_qreg_form_is_registered_with_the_bf16_claim():
    impl = load_catalog().get("attention", NAME)
    assert impl.backend == "cupy" and impl.devices == ("cuda",)
    assert impl.claim.kind == "tolerance" and impl.claim.variant == "bf16"
    assert impl.resolve() is cu_attention.attention_qreg_active_pdl
    assert {"attention.py", "attention.cu", "common.cuh", "_runtime.py", "_pdl.py"} <= {
        p.name for p in impl.source_files()}
    assert impl.policy_name == "sparkops_cupy._policies:attention_deep_pdl_passes"


def test_the_two_extra_score_parts_fit_where_the_queries_were():
    """The split takes mla_split_mma's shared memory: its third and fourth score parts ([32, MMA_SS] float32 each) are
    written over the queries ([32, MMA_DP] bf16), which no warp reads once its fragments are in registers."""
    assert 2 * 32 * 68 * 4 <= 32 * 584 * 2


def _args(t=1):
    return dict(q=torch.zeros(t, 32, 192, dtype=torch.bfloat16), latent=torch.zeros(t, 576, dtype=torch.bfloat16),
                cache=torch.zeros(64, 576, dtype=torch.bfloat16), pos=torch.tensor([0]),
                w_uk=torch.zeros(32, 128, 512), w_uv=torch.zeros(32, 128, 512), scale=1.0)


def test_the_policy_is_the_deep_pdl_form_s():
    """None at the 48B's one-token MLA (the qreg split, every kernel PDL); the generic split named for several
    tokens, which the qreg split does not take."""
    impl = load_catalog().get("attention", NAME)
    assert impl.resolve_policy()(**_args()) is None
    said = impl.resolve_policy()(**_args(t=3))
    assert said.startswith("launched plainly") and "mla_split_generic" in said


def test_the_qreg_kernels_compile_without_stack_or_spills(tmp_path):
    """One block of 256 threads an SM leaves 255 registers a thread: the 72 of the query fragments, the 64 of the P.C
    accumulators and the 32 of a tile's scores must fit without stack or spills."""
    split_kernels_compile_clean(tmp_path, QREG_KERNELS)


def test_the_qreg_pdl_split_touches_no_global_memory_before_its_wait(tmp_path):
    """mla_split_qreg_pdl reads pos, the queries and the cache (cp.async: LDGSTS) and writes the partials: all after
    griddepcontrol.wait (ACQBULK) on every path; it runs the tensor cores."""
    functions = pdl_split_waits_first(tmp_path, "mla_split_qreg_pdl")
    assert all(uses_opcode(functions, name, "HMMA") for name in QREG_KERNELS)


# ---- on CUDA ---------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("lmax,pos", MLA_CASES,
                         ids=[f"L{lmax}-pos{pos}-tiles{tiles_a_slice(pos)}" for lmax, pos in MLA_CASES])
def test_the_qreg_forms_match_the_reference(lmax, pos, cuda, nan_scratch):
    """The registered form and its plain sibling against float64: within a tenth of the bf16 row's 1e-3, the new row
    the latent's, every other row's bits as they were."""
    args = mla_inputs(lmax + pos, lmax, pos)
    want = mla_reference(**args)
    limit = rule_for("attention", "bf16").limit / 10
    for fn in (cu_attention.attention_qreg_active_pdl, cu_attention.attention_qreg_active):
        dev = on_device(args)
        got = fn(**dev)
        torch.cuda.synchronize()
        assert got.dtype == torch.bfloat16 and got.shape == want.shape
        assert nmse(got, want) <= limit, fn.__name__
        cache = dev["cache"].cpu()
        assert torch.equal(cache[pos], args["latent"][0]), "the new latent row was not written at pos"
        others = torch.ones(lmax, dtype=torch.bool)
        others[pos] = False
        assert torch.equal(cache[others].view(torch.int16), args["cache"][others].view(torch.int16))


@pytest.mark.gpu
@pytest.mark.parametrize("lmax,pos", [(200, 63), (13000, 12000), (131072, 131071)])
def test_the_pdl_form_gives_the_plain_qreg_split_s_bits(lmax, pos, cuda, nan_scratch):
    """cupy_splitk_bf16_qreg_active_pdl against attention_qreg_active (the plain absorb, combine and up projection, the
    qreg split launched plainly): the same output and cache bits."""
    args = mla_inputs(lmax - pos, lmax, pos)
    mla_forms_same_bits(args, cu_attention.attention_qreg_active, cu_attention.attention_qreg_active_pdl)


@pytest.mark.gpu
def test_a_captured_call_replays_at_other_positions_as_the_eager_call(cuda, nan_scratch):
    """One captured call of the registered form, replayed at positions with 0 to 3 tiles a slice: the output and the
    cache of the same call made eagerly there."""
    args = mla_inputs(23, 20001, 0)
    args["cache"] = torch.randn(20001, 576, generator=torch.Generator().manual_seed(24)).to(torch.bfloat16)
    fn = cu_attention.attention_qreg_active_pdl
    mla_replays_match(fn, fn, on_device(args), (63, 12000, 500, 20000))


@pytest.mark.gpu
def test_the_qreg_form_side_by_side_with_the_one_group_one(cuda):
    """The rung's per-op evidence: the step's cupy_splitk_bf16_deep_active_pdl and the qreg form on a bf16 cache
    (perop-attnqreg-bfloat16.json at 131072 rows; cupy_support.mla_side_by_side)."""
    mla_side_by_side({"cupy_splitk_bf16_deep_active_pdl": torch.bfloat16, NAME: torch.bfloat16}, "attnqreg-bfloat16",
                     "one-group vs queries-in-registers split")
