"""cupy_rowwarp_pdl_q8_iq1s and its _short form, the one-token IQ1_S GEMV on Q8 activations (kernels/linear_iq1s_q8.cu),
on CUDA: every row of the 48B's IQ1_S shapes and of ragged ones (a last block of fewer than 16 rows, whose copy ends
mid-chunk) within the act_q8 claim of the NumPy reference, the same bits call after call and in a CUDA graph, and the
calls its stated policy hands on going where it says. Skipped with a reason where there is no CUDA device or no CuPy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops.gate.tolerances import rule_for
from sparkops.gguf.quants import random_blocks
from sparkops.plugins import load_catalog
from sparkops.qweight import QWeight

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")

from sparkops_cupy._policies import iq1s_gemv_passes  # noqa: E402
from sparkops_cupy.linear import linear_float  # noqa: E402
from sparkops_cupy.linear_iq1s import linear_rowwarp_pdl_q8_iq1s as gemv  # noqa: E402
from sparkops_cupy.linear_iq1s import linear_rowwarp_pdl_q8_iq1s_sg as gemv_sg  # noqa: E402
from sparkops_cupy.linear_iq1s import linear_rowwarp_pdl_q8_iq1s_sg_mixed as gemv_mixed  # noqa: E402
from sparkops_cupy.linear_iq1s import linear_rowwarp_pdl_q8_iq1s_sg_short as gemv_sg_short  # noqa: E402
from sparkops_cupy.linear_iq1s import linear_rowwarp_pdl_q8_iq1s_short as gemv_short  # noqa: E402
from sparkops_cupy.linear_iq1s import linear_rowwarp_pdl_q8_iq1s_t2 as gemv_t2  # noqa: E402
from sparkops_cupy.linear_iq1s import linear_rowwarp_pdl_q8_iq1s_t2_rows16 as gemv_t2_rows16  # noqa: E402

#: the implementations: 16 rows a block; short weights (under 4096 rows) 8 rows a block, two octets a row; each of the
#: two with the grid in shared memory (session 51); per shape one of those (session 51)
FORMS = {"rows16": gemv, "short": gemv_short, "sg": gemv_sg, "sg_short": gemv_sg_short, "mixed": gemv_mixed,
         "t2": gemv_t2, "t2_rows16": gemv_t2_rows16}
#: the shared-grid forms and the global-grid form whose bits each claims; the t2 forms (the weight repacked two bits
#: a weight) and the grid form whose bits each claims
SG_TWIN = {"sg": "rows16", "sg_short": "short", "t2": "sg_short", "t2_rows16": "rows16"}

DEV = torch.device("cuda")


def weight(out_f: int, in_f: int, qtype=Q.IQ1_S, seed: int = 0) -> QWeight:
    raw = random_blocks(np.random.default_rng(seed + out_f + in_f), (out_f, in_f), qtype, 0.02)
    return QWeight(torch.from_numpy(np.ascontiguousarray(raw)).to(DEV), qtype, (out_f, in_f))


def nmse(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    assert torch.isfinite(got).all(), "NaN/Inf in the output (unwritten or overflowing values)"
    return float(((got - want) ** 2).sum() / (want ** 2).sum())


def reference(x: torch.Tensor, w: QWeight) -> torch.Tensor:
    return load_catalog().reference("linear").resolve()(x.float().cpu(), w.to("cpu"))


def replayed(gemv, x: torch.Tensor, w: QWeight) -> torch.Tensor:
    """gemv(x, w) captured in a CUDA graph, its output filled with NaN, then replayed: what the replay wrote."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = gemv(x, w)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("out_f,in_f", [(12288, 2304), (2304, 4096), (6720, 2304), (18432, 2304), (2304, 9216),
                                        (33, 256), (17, 512), (5, 1280), (1, 2304)])
def test_every_row_of_a_one_token_iq1s_gemv_is_within_the_act_q8_claim(dtype, out_f, in_f, form):
    gemv = FORMS[form]
    w = weight(out_f, in_f)
    x = torch.randn(1, in_f, generator=torch.Generator().manual_seed(out_f)).to(DEV, dtype)
    y = gemv(x, w)
    assert y.shape == (1, out_f) and y.dtype == dtype
    want = reference(x, w)
    limit = max(rule_for("linear", "act_q8").limit, rule_for("linear", "bf16").limit if dtype != torch.float32 else 0)
    assert nmse(y, want) <= limit
    # each row on its own too (Q8's error a row is ~1% of the outputs' RMS): a row the kernel skipped or wrote from
    # another row's sum cannot hide in a large tensor's error
    err = (y.double().cpu() - want.double()).abs()[0]
    assert float(err.max()) <= 0.25 * float(want.double().pow(2).mean().sqrt())


@pytest.mark.parametrize("form", list(FORMS))
def test_the_same_bits_call_after_call_and_in_a_cuda_graph(form):
    gemv = FORMS[form]
    w = weight(2304 if form.endswith("short") or form == "t2" else 12288, 2304)
    x = torch.randn(1, 2304, generator=torch.Generator().manual_seed(1)).to(DEV, torch.bfloat16)
    first = gemv(x, w)
    assert torch.equal(gemv(x, w), first)
    assert torch.equal(replayed(gemv, x, w), first)


@pytest.mark.parametrize("form", list(FORMS))
def test_the_calls_it_hands_on_go_where_its_stated_policy_says(form):
    gemv = FORMS[form]
    x = torch.randn(1, 2304, generator=torch.Generator().manual_seed(2)).to(DEV)
    q4k = weight(256, 2304, Q.Q4_K)
    assert "cupy_float" in iq1s_gemv_passes(x, q4k)
    assert torch.equal(gemv(x, q4k), linear_float(x, q4k))  # another type: cupy_float's kernel, its bits
    w = weight(256, 2304)
    x5 = torch.randn(5, 2304, generator=torch.Generator().manual_seed(3)).to(DEV)
    assert "cupy_float" in iq1s_gemv_passes(x5, w)
    assert torch.equal(gemv(x5, w), linear_float(x5, w))  # five tokens: cupy_float
    assert iq1s_gemv_passes(x, w) is None  # one token times IQ1_S: its own kernel


@pytest.mark.parametrize("form", [f for f in FORMS if not f.startswith("t2")])
def test_a_weight_off_16_byte_alignment_is_refused_by_name(form):
    gemv = FORMS[form]
    w = weight(64, 2304)
    raw = torch.empty(w.raw.numel() + 2, dtype=torch.uint8, device=DEV)[2:]  # 2 bytes past an aligned start
    raw.copy_(w.raw.reshape(-1))
    shifted = QWeight(raw.view(w.raw.shape), Q.IQ1_S, (64, 2304))
    x = torch.randn(1, 2304, device=DEV)
    with pytest.raises(BadInput, match="not 16-byte aligned"):
        gemv(x, shifted)


def test_the_short_form_takes_tall_weights_as_the_16_row_form_does():
    """At ROWWARP_TALL_ROWS rows or more the short form launches the 16-row kernel: the same bits."""
    w = weight(4096, 2304)
    x = torch.randn(1, 2304, generator=torch.Generator().manual_seed(6)).to(DEV, torch.bfloat16)
    assert torch.equal(gemv_short(x, w), gemv(x, w))


@pytest.mark.parametrize("form", list(SG_TWIN))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("out_f,in_f", [(12288, 2304), (2304, 4096), (6720, 2304), (2304, 9216), (33, 256),
                                        (5, 1280)])
def test_the_shared_grid_and_repacked_forms_give_their_twins_bits(form, dtype, out_f, in_f):
    """The nibble grid's sums are g + 1 against the codes and its delta one less: the same exact value a sub-block,
    so the same bits (kernels/iq1s_q8.cuh); the t2 codes are the same g + 1 (kernels/iq1s_t2.cuh). At every shape the
    step runs and ragged ones."""
    w = weight(out_f, in_f, seed=7)
    x = torch.randn(1, in_f, generator=torch.Generator().manual_seed(in_f + 7)).to(DEV, dtype)
    got = FORMS[form](x, w)
    assert torch.equal(got, FORMS[SG_TWIN[form]](x, w))
    assert torch.isfinite(got).all()


def test_the_nibble_grid_holds_the_grid_plus_one_in_the_order_the_kernels_read_it():
    from sparkops.gguf.quants import iq1s_grid
    from sparkops_cupy._weights import NIB_GRID_BYTES, iq1s_grid_nibbles

    g = iq1s_grid_nibbles(DEV)
    assert g.data_ptr() % 16 == 0 and g.numel() * 4 == NIB_GRID_BYTES
    assert iq1s_grid_nibbles(DEV) is g  # uploaded once
    b = g.cpu().numpy().view(np.uint8).reshape(2048, 4).astype(np.int16)
    assert np.array_equal(np.concatenate([b & 15, b >> 4], axis=1) - 1, iq1s_grid())


@pytest.mark.parametrize("out_f,in_f,twin", [(2304, 4096, "rows16"), (2304, 2304, "rows16"), (2304, 9216, "sg_short"),
                                             (12288, 2304, "sg_short"), (6720, 2304, "sg_short")])
def test_the_mixed_form_runs_the_form_its_shape_policy_names(out_f, in_f, twin):
    """Short weights of at most 4096 inputs (the o_proj) on the global grid, 16 rows a block; everything else the
    shared-grid short form: each shape's bits those of the form it names."""
    w = weight(out_f, in_f, seed=9)
    x = torch.randn(1, in_f, generator=torch.Generator().manual_seed(in_f + 9)).to(DEV, torch.bfloat16)
    assert torch.equal(gemv_mixed(x, w), FORMS[twin](x, w))


def test_the_t2_copy_is_made_once_and_refused_inside_a_capture_before_it_exists():
    """The repacked copy is made on the first call and reused; a weight first met inside a CUDA graph capture is
    refused by name (its copy cannot be made there), and the same weight captures once it has been run eagerly."""
    from sparkops_cupy import _iq1s_t2

    w = weight(64, 2304, seed=11)
    x = torch.randn(1, 2304, generator=torch.Generator().manual_seed(12)).to(DEV, torch.bfloat16)
    g = torch.cuda.CUDAGraph()
    with pytest.raises(BadInput, match="cannot be inside a CUDA graph capture"):
        with torch.cuda.graph(g):
            gemv_t2(x, w)
    first = gemv_t2(x, w)
    copy = _iq1s_t2.repacked(w.raw)
    assert _iq1s_t2.repacked(w.raw) is copy and copy.shape == (64, 9 * 72)
    assert torch.equal(replayed(gemv_t2, x, w), first)


@pytest.mark.parametrize("form", ["t2", "t2_rows16"])
def test_the_t2_forms_take_a_weight_off_16_byte_alignment(form):
    """The t2 kernels read the repacked copy (its own allocation), not the IQ1_S bytes: a weight 2 bytes past an aligned
    start gives the aligned weight's bits."""
    w = weight(64, 2304, seed=13)
    raw = torch.empty(w.raw.numel() + 2, dtype=torch.uint8, device=DEV)[2:]
    raw.copy_(w.raw.reshape(-1))
    shifted = QWeight(raw.view(w.raw.shape), Q.IQ1_S, (64, 2304))
    x = torch.randn(1, 2304, generator=torch.Generator().manual_seed(14)).to(DEV, torch.bfloat16)
    assert torch.equal(FORMS[form](x, shifted), FORMS[form](x, w))
