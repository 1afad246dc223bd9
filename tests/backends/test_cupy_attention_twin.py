"""attention=cupy_splitk_bf16_twin_active_pdl: the CuPy MLA attention with the twin split.

The twin split (kernels/attention.cu, mla_split_twin) runs 16 warps a block in two groups of 8: group g takes tiles
g, g + 2, ... of the block's slice into its own one-stage tile, with its own scores, probabilities and barrier, and at
the end group 1's running softmax and sums are merged into group 0's, which writes the slice's one partial. Everything
else is attention_deep_active_pdl's.

On the CPU: the registration and its claim, the shared memory, the stated policy, and the compiled kernels (nvcc: no
stack, no spills, at most 128 registers for 512 threads; the PDL split touches no global memory before its wait). On
CUDA (skipped with the reason without a device or CuPy): the output against a float64 reference at one to sixteen
tiles a slice (odd counts leave group 1 a tile short; one tile leaves it none), rows past pos NaN and never read,
NaN-filled scratch; the one-group split's bits where every slice has one tile (the merge is then exact); the PDL form
the plain twin's bits; a captured call replayed at other positions; and the side-by-side record against the step's
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

NAME = "cupy_splitk_bf16_twin_active_pdl"
TWIN_KERNELS = ("mla_split_twin", "mla_split_twin_pdl")


# ---- on the CPU ------------------------------------------------------------------------------------------------

def test_the_twin_form_is_registered_with_the_bf16_claim():
    impl = load_catalog().get("attention", NAME)
    assert impl.backend == "cupy" and impl.devices == ("cuda",)
    assert impl.claim.kind == "tolerance" and impl.claim.variant == "bf16"
    assert impl.resolve() is cu_attention.attention_twin_active_pdl
    assert {"attention.py", "attention.cu", "common.cuh", "_runtime.py", "_pdl.py"} <= {
        p.name for p in impl.source_files()}
    assert impl.policy_name == "sparkops_cupy._policies:attention_twin_pdl_passes"


def test_the_twin_split_fits_a_hopper_block():
    """The queries once, then two groups of (a 64-row bf16 tile, two fp32 score halves, bf16 probabilities, rescales):
    within the 232448 bytes an H100 / H200 block may opt into; group 1's sums (32 x 512 float32) fit group 0's tile,
    where the merge puts them."""
    group = 64 * 584 * 2 + 2 * 32 * 68 * 4 + 32 * 72 * 2 + 32 * 4
    assert cu_attention.TW_SMEM_BYTES == 32 * 584 * 2 + 2 * group == 231168 <= 232448
    assert 32 * 512 * 4 <= 64 * 584 * 2


def _args(t=1, n=32, dn=128, r=64, lkv=512, dv=128, dtype=torch.bfloat16):
    return dict(q=torch.zeros(t, n, dn + r, dtype=dtype), latent=torch.zeros(t, lkv + r, dtype=dtype),
                cache=torch.zeros(64, lkv + r, dtype=dtype), pos=torch.tensor([0]),
                w_uk=torch.zeros(n, dn, lkv), w_uv=torch.zeros(n, dv, lkv), scale=1.0)


def test_the_policy_says_which_split_runs(monkeypatch):
    """attention_twin_pdl_passes: None at the 48B's one-token MLA (the twin split, every kernel PDL); the deep PDL
    form's words elsewhere; and, on a device whose blocks cannot opt into TW_SMEM_BYTES, the one-group split named."""
    from sparkops_cupy import _policies

    assert _policies.attention_twin_pdl_passes(**_args()) is None
    said = _policies.attention_twin_pdl_passes(**_args(t=3))
    assert said.startswith("launched plainly") and "mla_split_generic" in said and "one-group" not in said
    monkeypatch.setattr(_policies, "twin_fits", lambda device: False)
    said = _policies.attention_twin_pdl_passes(**_args())
    assert "one-group split (mla_split_mma_pdl)" in said and str(cu_attention.TW_SMEM_BYTES) in said
    assert "one-group" not in _policies.attention_twin_pdl_passes(**_args(t=3))  # not the tensor-core shape


def test_the_twin_kernels_compile_within_their_registers(tmp_path):
    """512 threads a block leave 128 registers a thread: ptxas must fit the two groups' accumulators (64 a thread)
    and the tile's fragments there without stack or spills."""
    split_kernels_compile_clean(tmp_path, TWIN_KERNELS, max_registers=128)


def test_the_twin_pdl_split_touches_no_global_memory_before_its_wait(tmp_path):
    """mla_split_twin_pdl reads pos, the queries and the cache (cp.async: LDGSTS) and writes the partials: all after
    griddepcontrol.wait (ACQBULK) on every path; it runs the tensor cores and both groups' named barriers."""
    functions = pdl_split_waits_first(tmp_path, "mla_split_twin_pdl")
    for name in TWIN_KERNELS:
        assert uses_opcode(functions, name, "HMMA"), name
        assert any(i.opcode.startswith("BAR.SYNC") and "R" in i.operands for i in functions[name].instructions), name


# ---- on CUDA ---------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("lmax,pos", MLA_CASES,
                         ids=[f"L{lmax}-pos{pos}-tiles{tiles_a_slice(pos)}" for lmax, pos in MLA_CASES])
def test_the_twin_forms_match_the_reference(lmax, pos, cuda, nan_scratch):
    """The registered form and its plain sibling against float64: within a tenth of the bf16 row's 1e-3 (bf16 queries,
    qa, probabilities and output), the new row the latent's, every other row as it was; and against the one-group
    form within the same bound."""
    args = mla_inputs(lmax + pos, lmax, pos)
    want = mla_reference(**args)
    limit = rule_for("attention", "bf16").limit / 10
    for fn in (cu_attention.attention_twin_active_pdl, cu_attention.attention_twin_active,
               cu_attention.attention_deep_active_pdl):
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
@pytest.mark.parametrize("lmax,pos", [(200, 63), (9000, 8191), (4096, 4000)])
def test_one_tile_a_slice_gives_the_one_group_split_s_bits(lmax, pos, cuda, nan_scratch):
    """Where no slice has a second tile, group 1 has none: its m is -inf, so the merge scales group 0 by 2^0 = 1 and
    adds 0 x 0, which changes no bit. The twin form then gives the one-group form's bits."""
    assert tiles_a_slice(pos) == 1
    args = mla_inputs(pos, lmax, pos)
    outs = [fn(**on_device(args)) for fn in (cu_attention.attention_deep_active_pdl,
                                               cu_attention.attention_twin_active_pdl)]
    torch.cuda.synchronize()
    assert torch.isfinite(outs[0].float()).all()
    assert torch.equal(outs[0], outs[1])


@pytest.mark.gpu
@pytest.mark.parametrize("lmax,pos", [(200, 63), (13000, 12000), (40000, 39999)])
def test_the_pdl_form_gives_the_plain_twin_s_bits(lmax, pos, cuda, nan_scratch):
    """cupy_splitk_bf16_twin_active_pdl against attention_twin_active (the plain absorb, combine and up projection, the
    twin split launched plainly): the same output and cache bits."""
    args = mla_inputs(lmax - pos, lmax, pos)
    mla_forms_same_bits(args, cu_attention.attention_twin_active, cu_attention.attention_twin_active_pdl)


@pytest.mark.gpu
def test_a_captured_call_replays_at_other_positions_as_the_eager_call(cuda, nan_scratch):
    """One captured call of the registered form, replayed at positions with 0 to 3 tiles a slice: the output and the
    cache of the same call made eagerly there (the slices, the empty ones and each group's tiles come from pos on the
    device)."""
    args = mla_inputs(21, 20001, 0)
    args["cache"] = torch.randn(20001, 576, generator=torch.Generator().manual_seed(22)).to(torch.bfloat16)
    fn = cu_attention.attention_twin_active_pdl
    mla_replays_match(fn, fn, on_device(args), (63, 12000, 500, 20000))


@pytest.mark.gpu
def test_the_twin_form_side_by_side_with_the_one_group_one(cuda):
    """The rung's per-op evidence: the step's cupy_splitk_bf16_deep_active_pdl and the twin form on a bf16 cache
    (perop-attntwin-bfloat16.json at 131072 rows; cupy_support.mla_side_by_side)."""
    mla_side_by_side({"cupy_splitk_bf16_deep_active_pdl": torch.bfloat16, NAME: torch.bfloat16}, "attntwin-bfloat16",
                     "one-group vs twin split")