"""The CuPy kernels on CUDA beyond the contract's cases: the 48B's real shapes against the NumPy
reference, the tensor-core attention split at long contexts and at every tile / slice boundary, the
fused rmsnorm + quantize kernel byte for byte against its two unfused kernels, no host
synchronisation inside an op, and a whole decode-like step captured in one CUDA graph and replayed.

Thresholds are the gate's (sparkops/gate/tolerances.py) for the claim each implementation makes.
Skipped with a reason where there is no CUDA device (tests/conftest.py) or no CuPy.
"""

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

from sparkops_cupy import attention as cu_attention  # noqa: E402  (after the skip: needs nothing of cupy)
from sparkops_cupy import linear as cl  # noqa: E402
from sparkops_cupy.kda import kda as cu_kda  # noqa: E402
from sparkops_cupy.linear import linear as cu_linear  # noqa: E402
from sparkops_cupy.linear import linear_float as cu_linear_float  # noqa: E402
from sparkops_cupy.linear import linear_floatrow as cu_linear_floatrow  # noqa: E402
from sparkops_cupy.linear import linear_mma as cu_linear_mma  # noqa: E402
from sparkops_cupy.linear import linear_rowhalf as cu_linear_rowhalf  # noqa: E402
from sparkops_cupy.linear import linear_rowwarp as cu_linear_rowwarp  # noqa: E402
from sparkops_cupy.linear import linear_rowwarp_staged as cu_linear_rowwarp_staged  # noqa: E402
from sparkops_cupy.moe_experts import moe_experts as cu_moe  # noqa: E402
from sparkops_cupy.moe_experts import moe_experts_mma as cu_moe_mma  # noqa: E402
from sparkops_cupy.moe_experts import moe_experts_rowhalf as cu_moe_rowhalf  # noqa: E402
from sparkops_cupy.moe_experts import moe_experts_rowwarp as cu_moe_rowwarp  # noqa: E402
from sparkops_cupy.quantize_act import quantize_act as cu_quantize  # noqa: E402
from sparkops_cupy.rmsnorm import rmsnorm as cu_rmsnorm  # noqa: E402
from sparkops_cupy.rmsnorm_quantize import rmsnorm_quantize, rmsnorm_quantize_unfused  # noqa: E402

DEV = torch.device("cuda")


def ref(op: str):
    return load_catalog().reference(op).resolve()


def nmse(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    assert torch.isfinite(got).all(), "NaN/Inf in the output (unwritten or overflowing values)"
    return float(((got - want) ** 2).sum() / (want ** 2).sum())


def qweight(rng, shape, qtype, std, device=DEV, name="w") -> QWeight:
    raw = random_blocks(rng, shape, qtype, std)
    if qtype == Q.BF16:
        t = torch.from_numpy(raw.view(np.int16).copy()).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.ascontiguousarray(raw))
    return QWeight(t.to(device), qtype, shape, name)


def on_cpu(v):
    if isinstance(v, (torch.Tensor, QWeight)):
        return v.to("cpu")
    return v


# ---- linear ----------------------------------------------------------------------------------------------

#: the linear implementations and the claim variant each is judged by
LINEARS = {"cupy_dp4a": (cu_linear, "act_q8"), "cupy_float": (cu_linear_float, "fp32"),
           "cupy_rowwarp": (cu_linear_rowwarp, "fp32"), "cupy_rowwarp_staged": (cu_linear_rowwarp_staged, "fp32"),
           "cupy_floatrow": (cu_linear_floatrow, "fp32"), "cupy_mma": (cu_linear_mma, "bf16"),
           "cupy_rowhalf": (cu_linear_rowhalf, "bf16")}


@pytest.mark.parametrize("impl", list(LINEARS))
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.IQ1_S, Q.Q6_K, Q.Q8_0, Q.F32, Q.BF16])
@pytest.mark.parametrize("out_f,in_f", [(4096, 2304), (2304, 9216), (333, 512)])
@pytest.mark.parametrize("t", [1, 5])
def test_linear_at_48b_shapes(impl, qtype, out_f, in_f, t):
    fn, variant = LINEARS[impl]
    rng = np.random.default_rng(out_f + in_f + t + int(qtype))
    g = torch.Generator().manual_seed(int(qtype) * 7 + t)
    w = qweight(rng, (out_f, in_f), qtype, 0.02)
    x = torch.randn(t, in_f, generator=g).to(DEV)
    y = fn(x, w)
    want = ref("linear")(x.cpu(), w.to("cpu"))
    assert y.shape == (t, out_f) and y.dtype == x.dtype
    assert nmse(y, want) <= rule_for("linear", variant).limit


@pytest.mark.parametrize("impl", list(LINEARS))
def test_linear_bf16_activations_give_bf16(impl):
    fn, variant = LINEARS[impl]
    rng = np.random.default_rng(3)
    w = qweight(rng, (256, 2304), Q.Q4_K, 0.02)
    x = torch.randn(2, 2304, generator=torch.Generator().manual_seed(3))
    got = fn(x.to(DEV, torch.bfloat16), w)
    assert got.dtype == torch.bfloat16
    want = ref("linear")(x.to(torch.bfloat16).float(), w.to("cpu"))
    assert nmse(got, want) <= rule_for("linear", "bf16" if variant == "fp32" else variant).limit


@pytest.mark.parametrize("form", ["warp", "octet", "copy", "copy2", "copyx", "copy2x", "staged"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("out_f,in_f", [(12288, 2304), (2304, 4096), (1027, 1024), (5, 3072), (7, 4352),
                                        (2, 256), (19, 1280)])
def test_rowwarp_writes_every_row_of_a_one_token_q4k_gemv(form, dtype, out_f, in_f):
    """cupy_rowwarp's kernels (one token, Q4_K), every form: rows that fill whole blocks and rows that do not (the
    octet and copy forms' last block with 1-15 rows), inputs of 1 to 17 super-blocks (the one-row form's group of 16
    in flight and a second group; the octet form's ring of 4, wrapped or not; the copy form's block of 16 rows at
    17 super-blocks is 39 KB of shared memory; the staged form's block of 8 warps, part of it past the end), every
    activation dtype. The output starts as NaN, so a row no warp wrote fails; the sums are float32 up to their
    order."""
    from sparkops_cupy._weights import kernel_weight
    from sparkops_cupy.linear import launch_rowwarp, rowwarp_form
    from sparkops_cupy._runtime import DTYPE_CODE

    rng = np.random.default_rng(out_f * 7 + in_f)
    w = qweight(rng, (out_f, in_f), Q.Q4_K, 0.02)
    x = torch.randn(1, in_f, generator=torch.Generator().manual_seed(in_f)).to(DEV, dtype)
    kw = kernel_weight("linear", "weight", w, x.device)
    y = torch.full((1, out_f), float("nan"), dtype=dtype, device=DEV)
    launch_rowwarp(x, DTYPE_CODE[dtype], kw, out_f, in_f, y, form)
    want = ref("linear")(x.float().cpu(), w.to("cpu"))
    variant = "fp32" if dtype == torch.float32 else "bf16"
    assert nmse(y.float(), want) <= rule_for("linear", variant).limit
    if form == rowwarp_form(out_f):
        assert torch.equal(cu_linear_rowwarp(x, w), y), "the op's result differs from its kernel's (same launch)"
    y2 = torch.full_like(y, float("nan"))
    launch_rowwarp(x, DTYPE_CODE[dtype], kw, out_f, in_f, y2, form)
    assert torch.equal(y, y2), "two launches on the same inputs disagree: the row sums must be in a fixed order"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("out_f,in_f", [(12288, 2304), (6720, 2304), (18432, 2304), (4097, 256), (4100, 4352),
                                        (4096, 9216)])
def test_copy2_gives_the_copy_forms_bits(dtype, out_f, in_f):
    """The copy form with its weight copy in two groups (copy2, session 16) adds the same products in the same order
    as the copy form: the same bits, at the 48B's tall projections and at 1, 17 and 36 super-blocks a row (a first
    group of 1, 9 and 18). So do copyx and copy2x (session 17: each block's first activations requested before its
    weights; at 9216 inputs a thread stages a third item the plain way)."""
    from sparkops_cupy._runtime import DTYPE_CODE
    from sparkops_cupy._weights import kernel_weight
    from sparkops_cupy.linear import launch_rowwarp

    w = qweight(np.random.default_rng(out_f + in_f), (out_f, in_f), Q.Q4_K, 0.02)
    x = torch.randn(1, in_f, generator=torch.Generator().manual_seed(out_f)).to(DEV, dtype)
    kw = kernel_weight("linear", "weight", w, x.device)
    ys = {}
    for form in ("copy", "copy2", "copyx", "copy2x"):
        ys[form] = torch.full((1, out_f), float("nan"), dtype=dtype, device=DEV)
        launch_rowwarp(x, DTYPE_CODE[dtype], kw, out_f, in_f, ys[form], form)
    assert torch.isfinite(ys["copy"].float()).all()
    for form in ("copy2", "copyx", "copy2x"):
        assert torch.equal(ys[form], ys["copy"]), form


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("out_f,in_f", [(12288, 2304), (6720, 2304), (18432, 2304), (4097, 1280), (4100, 256),
                                        (4096, 9216), (2304, 4096)])
def test_rowhalf_writes_every_row_of_a_one_token_q4k_gemv(dtype, out_f, in_f):
    """cupy_rowhalf's kernels (one token, Q4_K, packed half2 products): the 48B's tall projections, a last block of 1
    and of 4 rows, 1 and 36 super-blocks (the copy form's 16 rows of 36 are 81 KB of shared memory), and a short
    weight (the float32 warp form), every activation dtype. The output starts as NaN. Against the reference on the
    same activations the fp16 arithmetic costs NMSE ~1e-6 (tests/backends/test_cupy_half_layout.py emulates it): 1e-5
    here, where a wrong code, slot or scale costs ~1e-1. Two launches give the same bits."""
    from sparkops_cupy._runtime import DTYPE_CODE
    from sparkops_cupy._weights import kernel_weight

    rng = np.random.default_rng(out_f * 3 + in_f)
    w = qweight(rng, (out_f, in_f), Q.Q4_K, 0.02)
    x = torch.randn(1, in_f, generator=torch.Generator().manual_seed(in_f + 2)).to(DEV, dtype)
    kw = kernel_weight("linear", "weight", w, x.device)
    y = torch.full((1, out_f), float("nan"), dtype=dtype, device=DEV)
    cl.launch_rowhalf(x, DTYPE_CODE[dtype], kw, out_f, in_f, y)
    want = ref("linear")(x.float().cpu(), w.to("cpu"))
    assert nmse(y.float(), want) <= 1e-5
    assert torch.equal(cu_linear_rowhalf(x, w), y), "the op's result differs from its kernel's (same launch)"
    y2 = torch.full_like(y, float("nan"))
    cl.launch_rowhalf(x, DTYPE_CODE[dtype], kw, out_f, in_f, y2)
    assert torch.equal(y, y2), "two launches on the same inputs disagree: the row sums must be in a fixed order"


@pytest.mark.parametrize("scale", [1e-6, 1.0, 3000.0])
def test_rowhalf_scales_activations_of_any_size_into_fp16(scale):
    """The power of two the block picks keeps fp16 partial sums finite and out of the subnormals: activations of
    1e-6, 1 and 3000 (where unscaled products would overflow fp16) give the same relative error."""
    from sparkops_cupy._runtime import DTYPE_CODE
    from sparkops_cupy._weights import kernel_weight

    rng = np.random.default_rng(11)
    w = qweight(rng, (12288, 2304), Q.Q4_K, 0.02)
    x = (torch.randn(1, 2304, generator=torch.Generator().manual_seed(5)) * scale).to(DEV, torch.bfloat16)
    kw = kernel_weight("linear", "weight", w, x.device)
    y = torch.full((1, 12288), float("nan"), dtype=torch.float32, device=DEV)
    cl.launch_rowhalf(x.float(), DTYPE_CODE[torch.float32], kw, 12288, 2304, y)
    assert torch.isfinite(y).all()
    assert nmse(y, ref("linear")(x.float().cpu(), w.to("cpu"))) <= 1e-5


@pytest.mark.parametrize("lanes", [8, 32])
@pytest.mark.parametrize("wtype", [Q.F16, Q.BF16, Q.F32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("out_f,in_f", [(288, 2304), (4096, 128), (7, 64), (3, 1032), (33, 4096)])
def test_floatrow_writes_every_row_of_a_one_token_float_gemv(lanes, wtype, dtype, out_f, in_f):
    """cupy_floatrow's kernels (one token, float weights), 8 and 32 lanes a row: the 48B's low-rank gate shapes (the
    stacked f_a|g_a|beta, and f_b) and odd ones (rows that leave a warp's 4 row slots part empty; rows of 129 vectors,
    past one group in flight; 4096 F32 inputs, 1024 vectors a row), every weight and activation dtype. The output
    starts as NaN; two launches give the same bits."""
    from sparkops_cupy._runtime import DTYPE_CODE
    from sparkops_cupy._weights import kernel_weight
    from sparkops_cupy.linear import floatrow_lanes, launch_floatrow

    rng = np.random.default_rng(out_f * 3 + in_f + int(wtype))
    w = qweight(rng, (out_f, in_f), wtype, 0.05)
    x = torch.randn(1, in_f, generator=torch.Generator().manual_seed(in_f)).to(DEV, dtype)
    kw = kernel_weight("linear", "weight", w, x.device)
    y = torch.full((1, out_f), float("nan"), dtype=dtype, device=DEV)
    launch_floatrow(x, DTYPE_CODE[dtype], kw, out_f, y, lanes)
    want = ref("linear")(x.float().cpu(), w.to("cpu"))
    assert nmse(y.float(), want) <= rule_for("linear", "fp32" if dtype == torch.float32 else "bf16").limit
    if lanes == floatrow_lanes(kw.row_bytes):
        assert torch.equal(cu_linear_floatrow(x, w), y), "the op's result differs from its kernel's (same launch)"
    y2 = torch.full_like(y, float("nan"))
    launch_floatrow(x, DTYPE_CODE[dtype], kw, out_f, y2, lanes)
    assert torch.equal(y, y2), "two launches on the same inputs disagree: the row sums must be in a fixed order"


def test_floatrow_hands_rows_of_partial_vectors_and_other_types_to_cupy_float():
    """The stated policy: rows that are no whole number of 16-byte vectors (100 F16 inputs: 200 bytes) and block types
    run cupy_float's kernel, more than 8 tokens the torch plugin's linear."""
    from sparkops_torch.linear import linear as torch_linear

    rng = np.random.default_rng(17)
    g = torch.Generator().manual_seed(17)
    for wtype, in_f in ((Q.F16, 100), (Q.Q4_K, 256)):
        w = qweight(rng, (40, in_f), wtype, 0.05)
        x = torch.randn(1, in_f, generator=g).to(DEV)
        assert torch.equal(cu_linear_floatrow(x, w), cu_linear_float(x, w)), wtype
    w = qweight(rng, (40, 256), Q.F16, 0.05)
    x = torch.randn(12, 256, generator=g).to(DEV)
    assert torch.equal(cu_linear_floatrow(x, w), torch_linear(x, w))


@pytest.mark.parametrize("form", ["tile", "pipe"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("out_f,in_f", [(12288, 2304), (2304, 4096), (6720, 2304), (33, 256), (5, 1280), (17, 9216)])
def test_mma_writes_every_row_of_a_one_token_q4k_gemv(form, dtype, out_f, in_f):
    """cupy_mma's kernel in each form (one token, Q4_K, the tensor cores): the 48B's projections and odd shapes (a
    last block of 1 to 15 rows; 1 super-block, so three of a block's four warps add nothing; 5 and 36, split unevenly
    over the warps; the pipe form at 4, 8 and 16 warps a tile and with rows of odd and even super-block counts),
    every activation dtype, against the reference on the bfloat16-rounded activations the kernel uses. The output
    starts as NaN; two launches give the same bits."""
    from sparkops_cupy._runtime import DTYPE_CODE
    from sparkops_cupy._weights import kernel_weight
    from sparkops_cupy.linear import launch_mma

    rng = np.random.default_rng(out_f * 5 + in_f)
    w = qweight(rng, (out_f, in_f), Q.Q4_K, 0.02)
    x = torch.randn(1, in_f, generator=torch.Generator().manual_seed(in_f + 1)).to(DEV, dtype)
    kw = kernel_weight("linear", "weight", w, x.device)
    y = torch.full((1, out_f), float("nan"), dtype=dtype, device=DEV)
    launch_mma(x, DTYPE_CODE[dtype], kw, out_f, in_f, y, form)
    want = ref("linear")(x.to(torch.bfloat16).float().cpu(), w.to("cpu"))  # the kernel's products take bf16 x
    # against the activations it used, the kernel's error is its float32 sums' (and the 128 offset's cancellation):
    # far inside 1e-8 with a float32 output, where a wrong code, scale or lane would cost ~1e-1. A 16-bit output adds
    # its own rounding (~1e-6): the claim's row then
    limit = 1e-8 if dtype == torch.float32 else rule_for("linear", "bf16").limit
    assert nmse(y.float(), want) <= limit
    if form == cl.MMA_FORM:
        assert torch.equal(cu_linear_mma(x, w), y), "the op's result differs from its kernel's (same launch)"
    y2 = torch.full_like(y, float("nan"))
    launch_mma(x, DTYPE_CODE[dtype], kw, out_f, in_f, y2, form)
    assert torch.equal(y, y2), "two launches on the same inputs disagree: the row sums must be in a fixed order"


@pytest.mark.parametrize("out_f,in_f", [(12288, 2304), (33, 256), (5, 1280)])
def test_mma_pipe_at_four_warps_gives_the_tile_form_s_bits(out_f, in_f):
    """At 4 warps a tile the pipe form makes the tile form's sums in the tile form's order (the same super-blocks a
    warp, mma_superblock_lean's products and per-sub-block formula, the warps added 0..3): the same bits, so the
    pipe form changes when the weights arrive, not what is computed."""
    from sparkops_cupy._runtime import DTYPE_CODE, sm_count
    from sparkops_cupy._weights import kernel_weight

    assert cl.mma_pipe_warps(out_f, in_f, sm_count(torch.cuda.current_device())) == 4
    rng = np.random.default_rng(out_f + 3 * in_f)
    w = qweight(rng, (out_f, in_f), Q.Q4_K, 0.02)
    x = torch.randn(1, in_f, generator=torch.Generator().manual_seed(out_f)).to(DEV, torch.bfloat16)
    kw = kernel_weight("linear", "weight", w, x.device)
    ys = {}
    for form in ("tile", "pipe"):
        ys[form] = torch.full((1, out_f), float("nan"), dtype=torch.float32, device=DEV)
        cl.launch_mma(x.float(), DTYPE_CODE[torch.float32], kw, out_f, in_f, ys[form], form)
    assert torch.equal(ys["tile"], ys["pipe"])


def test_mma_refuses_a_form_it_does_not_have():
    from sparkops_cupy._runtime import DTYPE_CODE
    from sparkops_cupy._weights import kernel_weight

    w = qweight(np.random.default_rng(1), (16, 256), Q.Q4_K, 0.02)
    x = torch.randn(1, 256).to(DEV)
    kw = kernel_weight("linear", "weight", w, x.device)
    with pytest.raises(BadInput, match="forms"):
        cl.launch_mma(x, DTYPE_CODE[torch.float32], kw, 16, 256, torch.empty(1, 16, device=DEV), "flat")


def test_rowwarp_reads_an_unaligned_activation_row():
    """A one-token x that starts off a 16-byte boundary (a row view into a larger buffer) gives the aligned result."""
    rng = np.random.default_rng(5)
    w = qweight(rng, (64, 512), Q.Q4_K, 0.02)
    buf = torch.randn(1, 513, generator=torch.Generator().manual_seed(5)).to(DEV)
    x = buf[:, 1:]
    assert x.data_ptr() % 16 == 4, "the test needs an activation row off a 16-byte boundary"
    assert torch.equal(cu_linear_rowwarp(x, w), cu_linear_rowwarp(x.clone(), w))


def test_float_linear_is_float32_accurate_where_the_integer_one_is_not():
    """cupy_float keeps the activations: at the lm_head's type and width its error is float32 rounding (the
    integer kernel's Q8_0 activations sit decades above), and every row of a 163840-row Q6_K weight is written."""
    rng = np.random.default_rng(11)
    w = qweight(rng, (163840, 2304), Q.Q6_K, 0.02)
    x = torch.randn(1, 2304, generator=torch.Generator().manual_seed(11)).to(DEV)
    some = torch.arange(0, 163840, 997)
    w_some = QWeight(w.raw[some.to(DEV)].cpu(), Q.Q6_K, (len(some), 2304))
    want = x.cpu().double() @ w_some.dequantize().double().T
    got_f, got_q = cu_linear_float(x, w), cu_linear(x, w)
    assert torch.isfinite(got_f).all()
    err_f, err_q = nmse(got_f[:, some.to(DEV)], want), nmse(got_q[:, some.to(DEV)], want)
    assert err_f < 1e-10 and err_q > 100 * err_f, (err_f, err_q)


# ---- attention: the tensor-core split at the 48B decode shape -----------------------------------------------

def _mla_inputs(g, lmax, pos, t=1, n=32, dn=128, r=64, lkv=512, dv=128, dtype=torch.bfloat16):
    cache = torch.randn(lmax, lkv + r, generator=g).to(dtype)  # rows past pos hold garbage on purpose
    return dict(q=torch.randn(t, n, dn + r, generator=g).to(dtype), latent=torch.randn(t, lkv + r, generator=g).to(dtype),
                cache=cache, pos=torch.tensor([pos]), w_uk=torch.randn(n, dn, lkv, generator=g) * lkv ** -0.5,
                w_uv=torch.randn(n, dv, lkv, generator=g) * lkv ** -0.5, scale=(dn + r) ** -0.5)


@pytest.mark.parametrize("lmax,pos", [(70, 0), (200, 63), (200, 64), (4000, 130), (9000, 8447), (20000, 19999)])
def test_attention_tensor_core_split_matches_reference(lmax, pos):
    g = torch.Generator().manual_seed(lmax + pos)
    args = _mla_inputs(g, lmax, pos)
    cpu = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    dev = {k: v.to(DEV) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    assert cu_attention.uses_tensor_cores(1, 32, 512, 64, dev["cache"])
    got = cu_attention.attention(**dev)
    want = ref("attention")(cpu["q"].float(), cpu["latent"].float(), cpu["cache"].float(), cpu["pos"],
                            cpu["w_uk"], cpu["w_uv"], cpu["scale"])
    assert got.dtype == torch.bfloat16
    assert nmse(got, want) <= rule_for("attention", "bf16").limit
    cache = dev["cache"].cpu()
    assert torch.equal(cache[pos], args["latent"][0]), "the new latent row was not written at pos"
    untouched = torch.ones(lmax, dtype=torch.bool)
    untouched[pos] = False
    assert torch.equal(cache[untouched], args["cache"][untouched]), "rows other than pos changed"


def test_attention_fp32_generic_split_long_context():
    g = torch.Generator().manual_seed(11)
    args = _mla_inputs(g, 3000, 2500, t=2, dtype=torch.float32)
    dev = {k: v.to(DEV) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    got = cu_attention.attention(**dev)
    want = ref("attention")(**{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()})
    assert nmse(got, want) <= rule_for("attention", "fp32").limit


def test_attention_position_past_the_cache_gives_nan_not_a_crash():
    g = torch.Generator().manual_seed(5)
    args = _mla_inputs(g, 64, 64)  # writing row 64 of a 64-row cache
    dev = {k: v.to(DEV) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    out = cu_attention.attention(**dev)
    assert torch.isnan(out.float()).all()


@pytest.fixture
def nan_scratch(monkeypatch):
    """attention's intermediate buffers NaN-filled: a value read that no kernel wrote shows in the output."""
    monkeypatch.setattr(cu_attention, "_scratch",
                        lambda shape, dtype, device: torch.full(shape, float("nan"), dtype=dtype, device=device))


@pytest.mark.parametrize("lmax,pos", [(70, 0), (200, 63), (200, 64), (4000, 130), (9000, 8447), (20000, 19999)])
def test_attention_active_gives_the_default_s_bits_from_nan_filled_buffers(lmax, pos, nan_scratch):
    """cupy_splitk_bf16_active at the 48B decode shape: the same bits as cupy_splitk_bf16, short contexts (most slices
    empty: their sums are never written, so they must never be read) to full ones, and the same cache row written."""
    g = torch.Generator().manual_seed(lmax * 7 + pos)
    args = _mla_inputs(g, lmax, pos)
    outs, caches = [], []
    for fn in (cu_attention.attention, cu_attention.attention_active, cu_attention.attention_deep_active):
        dev = {k: v.to(DEV) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
        outs.append(fn(**dev))
        caches.append(dev["cache"])
    assert all(torch.isfinite(o.float()).all() for o in outs)
    for o, c in zip(outs[1:], caches[1:]):  # the active form, then the deep active one
        assert torch.equal(outs[0], o) and torch.equal(caches[0], c)


@pytest.mark.parametrize("form", ["attention_active", "attention_deep_active", "attention_deep_active_pdl"])
def test_attention_active_replays_from_one_graph_at_every_position(nan_scratch, form):
    """One captured call of the active form (and of the deep active one, and its PDL form) replayed at positions that
    leave 131, 130, ... 0 slices empty gives what the default form gives eagerly there (the skip is decided on the
    device, from pos)."""
    fn = getattr(cu_attention, form)
    g = torch.Generator().manual_seed(3)
    args = _mla_inputs(g, 9000, 0)
    dev = {k: v.to(DEV) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    cache0 = dev["cache"].clone()
    fn(**dev)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(**dev)
    try:
        for p in (0, 63, 64, 500, 4095, 8999):
            dev["cache"].copy_(cache0)
            dev["pos"].fill_(p)
            graph.replay()
            got = out.clone()
            dev["cache"].copy_(cache0)
            want = cu_attention.attention(**dev)
            assert torch.equal(got, want), p
    finally:
        graph.reset()  # a failed assertion must not leave the graph to be freed inside the next test's capture


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16], ids=["bf16", "fp32", "fp16"])
@pytest.mark.parametrize("lmax,pos,t,dn,lkv", [(200, 63, 1, 128, 512), (9000, 8447, 1, 128, 512),
                                               (300, 40, 3, 128, 512), (300, 40, 1, 96, 512), (300, 40, 1, 128, 256)])
def test_attention_deep_gives_the_default_s_bits(lmax, pos, t, dn, lkv, dtype, nan_scratch):
    """cupy_splitk_bf16_deep (the absorb's, the combine's and the up projection's loads in flight): the same output and
    cache row as cupy_splitk_bf16, for each activation dtype (one dtype branch a call, outside the products) on the
    tensor-core split (bf16, T = 1) and the generic one (fp32, or three tokens); Dn = 96 takes the plain absorb and
    Lkv = 256 the plain up projection (the stated policy: the deep kernels are compiled for Dn = 128, Lkv = 512)."""
    g = torch.Generator().manual_seed(lmax + pos + t + dn + lkv)
    args = _mla_inputs(g, lmax, pos, t=t, dn=dn, lkv=lkv, dtype=dtype)
    if dtype == torch.float16:  # the cache is float32 or bfloat16; q alone takes float16
        args = {**args, "cache": args["cache"].float(), "latent": args["latent"].float()}
    outs, caches = [], []
    for fn in (cu_attention.attention, cu_attention.attention_deep, cu_attention.attention_deep_active):
        dev = {k: v.to(DEV) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
        outs.append(fn(**dev))
        caches.append(dev["cache"])
    assert torch.isfinite(outs[0].float()).all()
    for o, c in zip(outs[1:], caches[1:]):  # the deep form, then the deep active one
        assert torch.equal(outs[0], o) and torch.equal(caches[0], c)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("lmax,pos,t,dn,lkv", [(200, 63, 1, 128, 512), (9000, 8447, 1, 128, 512),
                                               (300, 40, 3, 128, 512), (300, 40, 1, 96, 512), (300, 40, 1, 128, 256)])
def test_attention_deep_pdl_gives_the_default_s_bits(lmax, pos, t, dn, lkv, dtype, nan_scratch):
    """cupy_splitk_bf16_deep_pdl (the deep kernels in their PDL forms, launched with programmatic dependent launch) and
    cupy_splitk_bf16_deep_active_pdl (that with the empty slices skipped: 130 of 132 at pos 63): the same output and
    cache row as cupy_splitk_bf16, eagerly, on the tensor-core split (bf16, T = 1: all four PDL kernels) and the
    shapes whose kernels launch plainly by its stated policy (three tokens or fp32: the CUDA-core split; Dn = 96: the
    plain absorb; Lkv = 256: the plain up projection)."""
    g = torch.Generator().manual_seed(lmax + pos + t + dn + lkv + 1)
    args = _mla_inputs(g, lmax, pos, t=t, dn=dn, lkv=lkv, dtype=dtype)
    outs, caches = [], []
    for fn in (cu_attention.attention, cu_attention.attention_deep_pdl, cu_attention.attention_deep_active_pdl):
        dev = {k: v.to(DEV) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
        outs.append(fn(**dev))
        caches.append(dev["cache"])
    torch.cuda.synchronize()
    assert torch.isfinite(outs[0].float()).all()
    for o, c in zip(outs[1:], caches[1:]):  # the PDL form, then the active PDL one
        assert torch.equal(outs[0], o) and torch.equal(caches[0], c)


@pytest.mark.parametrize("form,plain", [("attention_deep_pdl", "attention"), ("attention_deep_active_pdl", "attention"),
                                        ("attention_twin_active_pdl", "attention_twin_active"),
                                        ("attention_bulk_active_pdl", "attention"),
                                        ("attention_qreg_active_pdl", "attention_qreg_active"),
                                        ("attention_l2pf_active_pdl", "attention"),
                                        ("attention_ring_active_pdl", "attention_qreg_active")])
def test_attention_deep_pdl_waits_for_its_producers_in_a_captured_chain(form, plain):
    """Four MLA layers chained as the step chains them - a PDL Q4_K GEMV (linear@Q4_K=cupy_rowwarp_pdl_q8_tall) makes
    each layer's q from the layer before's attention output, then the PDL attention - captured in one CUDA graph and
    replayed at three positions: each layer's output and written cache bitwise those of the same chain run eagerly
    with the plain cupy_splitk_bf16. A PDL kernel that read before its wait would read a stale q, qa, partial or obar
    (the last replay's, or the last layer's). The active form too (`form`): its combine reads only the slices the
    replay's position fills, the others holding the last replay's sums. The twin form against its own plain sibling
    (`plain`: the twin split launched plainly, the plain absorb, combine and up projection). No NaN-filled scratch
    here: its fill kernels would sit between the PDL launches and break the chain this tests."""
    attention = getattr(cu_attention, form)
    from sparkops_cupy._workloads import linear_workload

    linear = load_catalog().get("linear", "cupy_rowwarp_pdl_q8_tall").resolve()
    g = torch.Generator().manual_seed(35)
    layers = [{k: v.to(DEV) if isinstance(v, torch.Tensor) else v for k, v in _mla_inputs(g, 4096, 0).items()}
              for _ in range(4)]
    sets, _ = linear_workload(Q.Q4_K, 32 * 192, 4096, "mla q-sized", dtype=torch.bfloat16).build(torch.device(DEV), 35)
    w_q = [s["weight"] for s in sets[:4]]  # [N * (Dn + R), N * Dv] Q4_K: the next layer's q from this one's output
    caches0 = [a["cache"].clone() for a in layers]
    x0 = torch.randn(1, 4096, generator=g).to(DEV, torch.bfloat16)

    def chain(attn, x):
        outs = []
        for a, w in zip(layers, w_q):
            q = linear(x, w).view(1, 32, 192)  # [T, N, Dn+R]
            o = attn(q, a["latent"], a["cache"], a["pos"], a["w_uk"], a["w_uv"], a["scale"])  # [T, N, Dv]
            x = o.reshape(1, 4096)
            outs.append(o)
        return outs

    def restore(pos):
        for a, c in zip(layers, caches0):
            a["cache"].copy_(c)
            a["pos"].fill_(pos)

    restore(0)
    chain(attention, x0)  # compile, load the tables
    torch.cuda.synchronize()
    restore(0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = chain(attention, x0)
    try:
        for p in (5, 63, 4000):
            restore(p)
            want = [o.clone() for o in chain(getattr(cu_attention, plain), x0)]
            want_caches = [a["cache"].clone() for a in layers]
            restore(p)
            for o in captured:
                o.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            for i, (got, exp) in enumerate(zip(captured, want)):
                assert torch.equal(got, exp), f"pos {p}, layer {i}: the output"
                assert torch.equal(layers[i]["cache"], want_caches[i]), f"pos {p}, layer {i}: the cache"
    finally:
        graph.reset()


# ---- kda and moe at the 48B's shapes --------------------------------------------------------------------

@pytest.mark.parametrize("steps", [(1, 1, 1), (5, 1)])
def test_kda_at_48b_shape(steps):
    g = torch.Generator().manual_seed(sum(steps))
    h, d = 32, 128
    a = -torch.exp(torch.rand(h, generator=g) * 2 - 1)
    dt_bias = torch.randn(h * d, generator=g) * 0.5
    state = torch.randn(h, d, d, generator=g) * 0.1
    s_dev, s_ref = state.to(DEV), state.clone()
    for t in steps:
        args = dict(q=torch.randn(t, h, d, generator=g), k=torch.randn(t, h, d, generator=g),
                    v=torch.randn(t, h, d, generator=g), g=torch.randn(t, h, d, generator=g),
                    beta=torch.randn(t, h, generator=g) * 2, a=a, dt_bias=dt_bias)
        got = cu_kda(**{k: v.to(DEV) for k, v in args.items()}, state=s_dev, scale=d ** -0.5, l2_eps=1e-6)
        want = ref("kda")(**args, state=s_ref, scale=d ** -0.5, l2_eps=1e-6)
        assert nmse(got, want) <= rule_for("kda", "fp32").limit
        assert nmse(s_dev, s_ref) <= rule_for("kda", "fp32").limit


@pytest.mark.parametrize("qtype,shared_qtype", [(Q.Q4_K, Q.Q4_K), (Q.IQ1_S, Q.IQ1_S), (Q.Q6_K, Q.Q6_K),
                                                (Q.Q8_0, Q.Q8_0), (Q.Q4_K, Q.Q8_0), (Q.F32, None)])
@pytest.mark.parametrize("t", [1, 3])
def test_moe_experts_at_48b_shape(qtype, shared_qtype, t):
    rng = np.random.default_rng(int(qtype) * 10 + t)
    g = torch.Generator().manual_seed(int(qtype) + t)
    d, f, e, k = 2304, 1024, 24, 8
    w = dict(w_gate=qweight(rng, (e, f, d), qtype, d ** -0.5), w_up=qweight(rng, (e, f, d), qtype, d ** -0.5),
             w_down=qweight(rng, (e, d, f), qtype, f ** -0.5))
    if shared_qtype is None:
        w.update(s_gate=None, s_up=None, s_down=None)
    else:
        w.update(s_gate=qweight(rng, (f, d), shared_qtype, d ** -0.5), s_up=qweight(rng, (f, d), shared_qtype, d ** -0.5),
                 s_down=qweight(rng, (d, f), shared_qtype, f ** -0.5))
    ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)])
    x, weights = torch.randn(t, d, generator=g), torch.rand(t, k, generator=g) + 0.1
    got = cu_moe(x.to(DEV), weights.to(DEV), ids.to(DEV), **w)
    want = ref("moe_experts")(x, weights, ids, **{n: on_cpu(v) for n, v in w.items()})
    variant = "fp32" if qtype == Q.F32 else "act_q8"
    assert nmse(got, want) <= rule_for("moe_experts", variant).limit


def _moe_args(seed, t, d, f, e, k, qtype, shared_qtype, device=DEV):
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    w = dict(w_gate=qweight(rng, (e, f, d), qtype, d ** -0.5, device), w_up=qweight(rng, (e, f, d), qtype, d ** -0.5,
                                                                                    device),
             w_down=qweight(rng, (e, d, f), qtype, f ** -0.5, device))
    if shared_qtype is None:
        w.update(s_gate=None, s_up=None, s_down=None)
    else:
        w.update(s_gate=qweight(rng, (f, d), shared_qtype, d ** -0.5, device),
                 s_up=qweight(rng, (f, d), shared_qtype, d ** -0.5, device),
                 s_down=qweight(rng, (d, f), shared_qtype, f ** -0.5, device))
    ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)])
    x, weights = torch.randn(t, d, generator=g), torch.rand(t, k, generator=g) + 0.1
    return x, weights, ids, w


@pytest.mark.parametrize("forms", [("octet", "warp"), ("copy", "copy"), ("staged", "warp")],
                         ids=["octet-warp", "copy-copy", "staged-warp"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("d,f,e,k", [(2304, 1024, 256, 8), (512, 256, 6, 3), (1280, 768, 9, 5)])
def test_rowwarp_moe_one_token_q4k_matches_reference(monkeypatch, forms, dtype, shared, d, f, e, k):
    """cupy_rowwarp's kernels (one token, every expert Q4_K): the 48B's shape (256 experts, top-8, a shared expert of
    1024) and small odd ones (a gate/up ring of 4 super-blocks that wraps after 5, down units that end 2 into a group
    of 16), with and without the shared expert, float32 and bf16 activations, each pair of forms (ROWWARP_GATEUP,
    ROWWARP_DOWN); two runs give the same bits."""
    import sparkops_cupy.moe_experts as cm

    monkeypatch.setattr(cm, "ROWWARP_GATEUP", forms[0])
    monkeypatch.setattr(cm, "ROWWARP_DOWN", forms[1])
    x, weights, ids, w = _moe_args(d + f + e + k, 1, d, f, e, k, Q.Q4_K, Q.Q4_K if shared else None)
    xd = x.to(DEV, dtype)
    got = cu_moe_rowwarp(xd, weights.to(DEV), ids.to(DEV), **w)
    assert got.dtype == dtype and got.shape == (1, d)
    want = ref("moe_experts")(xd.float().cpu(), weights, ids, **{n: on_cpu(v) for n, v in w.items()})
    variant = "fp32" if dtype == torch.float32 else "bf16"
    assert nmse(got.float(), want) <= rule_for("moe_experts", variant).limit
    again = cu_moe_rowwarp(xd, weights.to(DEV), ids.to(DEV), **w)
    assert torch.equal(got, again), "two runs disagree: every sum must be in a fixed order"


@pytest.mark.parametrize("down", ["warp", "copy"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("d,f,e,k", [(2304, 1024, 256, 8), (512, 256, 6, 3), (1280, 768, 9, 5)])
def test_rowhalf_moe_one_token_q4k_matches_reference(monkeypatch, down, dtype, shared, d, f, e, k):
    """cupy_rowhalf's experts (gate/up in packed half2, down in float32 in either form): the 48B's shape and small odd
    ones, with and without the shared expert, float32 and bf16 activations. The fp16 arithmetic of gate/up costs NMSE
    ~1e-6 a GEMV (test_cupy_half_layout.py), about doubled through SwiGLU: 3e-5 here, where a wrong code, slot or row
    costs ~1e-1, and the claim's row (bf16) allows 1e-3. Two runs give the same bits."""
    import sparkops_cupy.moe_experts as cm

    monkeypatch.setattr(cm, "ROWWARP_DOWN", down)
    x, weights, ids, w = _moe_args(d + f + e + k + 1, 1, d, f, e, k, Q.Q4_K, Q.Q4_K if shared else None)
    xd = x.to(DEV, dtype)
    got = cu_moe_rowhalf(xd, weights.to(DEV), ids.to(DEV), **w)
    assert got.dtype == dtype and got.shape == (1, d)
    want = ref("moe_experts")(xd.float().cpu(), weights, ids, **{n: on_cpu(v) for n, v in w.items()})
    assert nmse(got.float(), want) <= 3e-5
    again = cu_moe_rowhalf(xd, weights.to(DEV), ids.to(DEV), **w)
    assert torch.equal(got, again), "two runs disagree: every sum must be in a fixed order"


def test_rowhalf_moe_an_expert_id_out_of_range_gives_nan():
    x, weights, ids, w = _moe_args(8, 1, 512, 256, 6, 3, Q.Q4_K, Q.Q4_K)
    ids[0, 2] = -1
    got = cu_moe_rowhalf(x.to(DEV), weights.to(DEV), ids.to(DEV), **w)
    assert torch.isnan(got).all(), "an expert id outside [0, E) must poison the token's output, not read past it"


def test_rowwarp_moe_refuses_the_half_form_under_its_float32_claim(monkeypatch):
    """ROWWARP_GATEUP = "half" would run fp16 products under cupy_rowwarp's float32 claim: refused, naming the fix."""
    import sparkops_cupy.moe_experts as cm

    monkeypatch.setattr(cm, "ROWWARP_GATEUP", "half")
    x, weights, ids, w = _moe_args(9, 1, 512, 256, 6, 3, Q.Q4_K, Q.Q4_K)
    with pytest.raises(BadInput, match="ROWWARP_GATEUP"):
        cu_moe_rowwarp(x.to(DEV), weights.to(DEV), ids.to(DEV), **w)


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).float()


@pytest.mark.parametrize("form", ["tile", "pipe"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("d,f,e,k", [(2304, 1024, 256, 8), (512, 256, 6, 3), (1280, 768, 9, 5)])
def test_mma_moe_one_token_q4k_matches_a_bf16_rounding_reference(monkeypatch, form, dtype, shared, d, f, e, k):
    """cupy_mma's MoE kernels in each form (one token, every expert Q4_K, the tensor cores) against the reference
    arithmetic with the kernel's two roundings made explicit: the activations and the hidden vector in bfloat16 for
    the products. Within 1e-6 with a float32 output (a wrong code, scale, lane or slot costs ~1e-1), the claim's bf16
    row with a bf16 output; the 48B's shape and odd ones (super-blocks split unevenly over the warps: 2, 4 or 16 of
    them), with and without the shared expert; two runs give the same bits."""
    import sparkops_cupy.moe_experts as cm
    from sparkops.gguf.quants import dequantize

    monkeypatch.setattr(cm, "MOE_MMA_FORM", form)

    x, weights, ids, w = _moe_args(d * 3 + f + e + k, 1, d, f, e, k, Q.Q4_K, Q.Q4_K if shared else None)
    xd = x.to(DEV, dtype)
    got = cu_moe_mma(xd, weights.to(DEV), ids.to(DEV), **w)
    assert got.dtype == dtype and got.shape == (1, d)

    def mat(weight, i=None):  # one expert's (or the shared) matrix, dequantized (float64)
        raw = weight.raw.cpu().numpy() if i is None else weight.raw[i].cpu().numpy()
        shape = tuple(weight.shape[-2:])
        return torch.from_numpy(np.asarray(dequantize(raw, Q.Q4_K, shape), np.float64))

    xb = _bf16(xd.float().cpu()).double()[0]  # [D]
    want = torch.zeros(d, dtype=torch.float64)
    experts = [(int(ids[0, j]), float(weights[0, j])) for j in range(k)]
    for ex, wt in experts:
        hid = torch.nn.functional.silu(mat(w["w_gate"], ex) @ xb) * (mat(w["w_up"], ex) @ xb)
        want += wt * (mat(w["w_down"], ex) @ _bf16(hid).double())
    if shared:
        hid = torch.nn.functional.silu(mat(w["s_gate"]) @ xb) * (mat(w["s_up"]) @ xb)
        want += mat(w["s_down"]) @ _bf16(hid).double()
    limit = 1e-6 if dtype == torch.float32 else rule_for("moe_experts", "bf16").limit
    assert nmse(got.float()[0], want) <= limit
    assert torch.equal(got, cu_moe_mma(xd, weights.to(DEV), ids.to(DEV), **w)), "two runs disagree"


@pytest.mark.parametrize("form", ["tile", "pipe"])
def test_mma_moe_an_expert_id_out_of_range_gives_nan(monkeypatch, form):
    import sparkops_cupy.moe_experts as cm

    monkeypatch.setattr(cm, "MOE_MMA_FORM", form)
    x, weights, ids, w = _moe_args(9, 1, 512, 256, 6, 3, Q.Q4_K, Q.Q4_K)
    ids[0, 2] = -1
    got = cu_moe_mma(x.to(DEV), weights.to(DEV), ids.to(DEV), **w)
    assert torch.isnan(got).all(), "an expert id outside [0, E) must poison the token's output, not read past it"


def test_mma_moe_refuses_a_form_it_does_not_have(monkeypatch):
    import sparkops_cupy.moe_experts as cm

    monkeypatch.setattr(cm, "MOE_MMA_FORM", "flat")
    x, weights, ids, w = _moe_args(9, 1, 512, 256, 6, 3, Q.Q4_K, Q.Q4_K)
    with pytest.raises(BadInput, match="MOE_MMA_FORM"):
        cu_moe_mma(x.to(DEV), weights.to(DEV), ids.to(DEV), **w)


@pytest.mark.parametrize("forms", [("octet", "warp"), ("copy", "copy"), ("staged", "warp")],
                         ids=["octet-warp", "copy-copy", "staged-warp"])
def test_rowwarp_moe_an_expert_id_out_of_range_gives_nan(monkeypatch, forms):
    import sparkops_cupy.moe_experts as cm

    monkeypatch.setattr(cm, "ROWWARP_GATEUP", forms[0])
    monkeypatch.setattr(cm, "ROWWARP_DOWN", forms[1])
    x, weights, ids, w = _moe_args(7, 1, 512, 256, 6, 3, Q.Q4_K, Q.Q4_K)
    ids[0, 1] = 6  # one past the last expert
    got = cu_moe_rowwarp(x.to(DEV), weights.to(DEV), ids.to(DEV), **w)
    assert torch.isnan(got).all(), "an expert id outside [0, E) must poison the token's output, not read past it"


@pytest.mark.parametrize("t,qtype", [(3, Q.Q4_K), (1, Q.Q6_K), (1, Q.Q8_0), (20, Q.Q4_K)])
def test_rowwarp_moe_hands_other_calls_to_the_torch_plugin(t, qtype):
    """The stated policy: more than one token, or experts of another type, run the torch plugin's float32
    moe_experts - the same result as calling it, within the float32 row of the reference."""
    from sparkops_torch.moe_experts import moe_experts as torch_moe

    x, weights, ids, w = _moe_args(11 + t, t, 512, 256, 6, 3, qtype, qtype)
    args = (x.to(DEV), weights.to(DEV), ids.to(DEV))
    got = cu_moe_rowwarp(*args, **w)
    assert torch.equal(got, torch_moe(*args, **w))
    want = ref("moe_experts")(x, weights, ids, **{n: on_cpu(v) for n, v in w.items()})
    assert nmse(got, want) <= rule_for("moe_experts", "fp32").limit


def test_rowwarp_linear_hands_a_prefill_to_the_torch_plugin():
    """The stated policy of linear's cupy_rowwarp: up to 8 tokens cupy_float's GEMV, more the torch plugin's linear."""
    from sparkops_torch.linear import linear as torch_linear

    rng = np.random.default_rng(13)
    w = qweight(rng, (256, 512), Q.Q4_K, 0.02)
    g = torch.Generator().manual_seed(13)
    for t, same in ((5, cu_linear_float), (40, torch_linear)):
        x = torch.randn(t, 512, generator=g).to(DEV)
        assert torch.equal(cu_linear_rowwarp(x, w), same(x, w)), t


# ---- the fused rmsnorm + quantize kernel -----------------------------------------------------------------

@pytest.mark.parametrize("t,d", [(1, 64), (7, 96), (33, 256), (3, 512), (1, 1024), (1, 2304), (5, 2304), (2, 4096),
                                 (3, 9216)])
def test_fused_rmsnorm_quantize_is_byte_identical_to_the_unfused_pair(t, d):
    g = torch.Generator().manual_seed(t * 1000 + d)
    x = (torch.randn(t, d, generator=g) * (1 + 10 * torch.rand(1, generator=g))).to(DEV)
    x[0, :32] = 0.0  # an all-zero block: its scale is 0 in both
    w = torch.randn(d, generator=g).to(DEV)
    q1, d1 = rmsnorm_quantize(x, w, 1e-5)
    q2, d2 = rmsnorm_quantize_unfused(x, w, 1e-5)
    assert torch.equal(q1, q2) and torch.equal(d1.view(torch.int32), d2.view(torch.int32))
    # and the pair is what its parts mean: quantize_act of the reference norm, up to norm rounding
    y = ref("rmsnorm")(x.cpu(), w.cpu(), 1e-5)
    qr, dr = ref("quantize_act")(y)
    assert (q1.cpu().int() - qr.int()).abs().max() <= 1
    assert torch.allclose(d1.cpu(), dr, rtol=1e-3, atol=0)


def test_quantize_act_matches_reference_bit_for_bit_at_48b_width():
    g = torch.Generator().manual_seed(9)
    x = torch.randn(4, 2304, generator=g) * 5
    x[1, 64:96] = 0.0
    x[2, :32] = torch.randint(-5, 6, (32,), generator=g).float() * 0.5  # exact half-way points
    q, d = cu_quantize(x.to(DEV))
    qr, dr = ref("quantize_act")(x)
    assert torch.equal(q.cpu(), qr) and torch.equal(d.cpu().view(torch.int32), dr.view(torch.int32))


# ---- launch discipline: no host synchronisation, one capturable decode step --------------------------------

def _decode_step_inputs(g):
    rng = np.random.default_rng(1)
    h, d = 32, 128
    return dict(
        x=torch.randn(1, 2304, generator=g).to(DEV), norm_w=torch.randn(2304, generator=g).to(DEV),
        w_q=qweight(rng, (h * d, 2304), Q.Q4_K, 0.02), w_o=qweight(rng, (2304, h * d), Q.IQ1_S, 0.02),
        kda=dict(a=(-torch.exp(torch.rand(h, generator=g))).to(DEV), dt_bias=torch.randn(h * d, generator=g).to(DEV),
                 state=(torch.randn(h, d, d, generator=g) * 0.1).to(DEV)),
        mla={k: v.to(DEV) if isinstance(v, torch.Tensor) else v for k, v in _mla_inputs(g, 4096, 1000).items()},
        moe=dict(weights=(torch.rand(1, 8, generator=g) + 0.1).to(DEV), ids=torch.randperm(16, generator=g)[:8][None].to(DEV),
                 w_gate=qweight(rng, (16, 1024, 2304), Q.Q4_K, 0.02), w_up=qweight(rng, (16, 1024, 2304), Q.Q4_K, 0.02),
                 w_down=qweight(rng, (16, 2304, 1024), Q.Q4_K, 0.03), s_gate=qweight(rng, (1024, 2304), Q.Q4_K, 0.02),
                 s_up=qweight(rng, (1024, 2304), Q.Q4_K, 0.02), s_down=qweight(rng, (2304, 1024), Q.Q4_K, 0.03)),
    )


def _decode_step(s):
    """A decode-shaped chain through every cupy op (not the model: a launch-discipline harness)."""
    h = cu_rmsnorm(s["x"], s["norm_w"], 1e-5)
    q8, _ = cu_quantize(h)
    qkv = cu_linear(h, s["w_q"]).view(1, 32, 128)
    kd = s["kda"]
    o = cu_kda(qkv, qkv * 0.5, qkv, qkv, qkv[:, :, 0].contiguous(), kd["a"], kd["dt_bias"], kd["state"], 128 ** -0.5,
               1e-6)
    y = cu_linear(o.reshape(1, -1), s["w_o"])
    m = s["mla"]
    att = cu_attention.attention(m["q"], m["latent"], m["cache"], m["pos"], m["w_uk"], m["w_uv"], m["scale"])
    f = cu_moe(y + att.float().reshape(1, -1)[:, :2304] + q8[:, :2304].float(), **s["moe"])
    return f


def test_ops_never_synchronise_the_host():
    s = _decode_step_inputs(torch.Generator().manual_seed(2))
    _decode_step(s)  # compile, upload tables
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        _decode_step(s)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def test_decode_step_captures_in_one_cuda_graph_and_replays_exactly():
    s = _decode_step_inputs(torch.Generator().manual_seed(4))
    state0 = s["kda"]["state"].clone()
    cache0 = s["mla"]["cache"].clone()
    _decode_step(s)
    torch.cuda.synchronize()
    s["kda"]["state"].copy_(state0)
    s["mla"]["cache"].copy_(cache0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _decode_step(s)
    results = []
    for p in (1000, 2000):  # the position is read on the device: the same graph serves both
        s["kda"]["state"].copy_(state0)
        s["mla"]["cache"].copy_(cache0)
        s["mla"]["pos"].fill_(p)
        graph.replay()
        torch.cuda.synchronize()
        results.append((out.clone(), s["kda"]["state"].clone(), s["mla"]["cache"].clone()))
        s["kda"]["state"].copy_(state0)
        s["mla"]["cache"].copy_(cache0)
        eager = _decode_step(s)
        torch.cuda.synchronize()
        assert torch.equal(results[-1][0], eager), f"graph replay at pos {p} differs from the eager step"
        assert torch.equal(results[-1][1], s["kda"]["state"]) and torch.equal(results[-1][2], s["mla"]["cache"])
    assert not torch.equal(results[0][0], results[1][0]), "changing pos on the device changed nothing"
