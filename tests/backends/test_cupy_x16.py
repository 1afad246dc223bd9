"""linear=cupy_x16_pdl on CUDA: the one-token Q6_K GEMV (the lm_head) on 16-bit activations in two int8 planes.

What it must show before its rung is timed: at the lm_head's shape and at small and partial-block shapes it is within
the bf16 row of the float64 product (its claim) and, on float32 activations, within 1e-8 nmse (the 16-bit planes' ~2e-10;
cupy_dp4a's int8 activations sit ~1e5 times above); every
form (rows a block x threads a block) gives the same bits; the quantize launch and the PDL GEMV keep their order when
replayed from a CUDA graph with new activations; a NaN or an inf in x makes every output NaN; and its stated policy
takes the calls it does not (several tokens, a weight whose bytes do not end on 16). Outputs are pre-filled with NaN
where a kernel writes into a given buffer, so that an unwritten row cannot pass.
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

pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")

from sparkops_cupy import linear as cl  # noqa: E402
from sparkops_cupy._runtime import DTYPE_CODE, cuda_device  # noqa: E402
from sparkops_cupy._weights import kernel_weight  # noqa: E402

DEV = torch.device("cuda")
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _weight(rows: int, k: int, seed: int) -> QWeight:
    raw = random_blocks(np.random.default_rng(seed), (rows, k), Q.Q6_K, 0.02)
    return QWeight(torch.from_numpy(np.ascontiguousarray(raw)).to(DEV), Q.Q6_K, (rows, k), "w_q6k")


def _x(k: int, seed: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(1, k, generator=torch.Generator().manual_seed(seed)).to(DEV, dtype)  # [1, K]


def _nmse(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    assert torch.isfinite(got).all(), "NaN/Inf in the output (unwritten or overflowing rows)"
    return float(((got - want) ** 2).sum() / (want ** 2).sum())


def _launch(x: torch.Tensor, w: QWeight, form: str) -> torch.Tensor:
    """The two launches in form FORM, into an output pre-filled with NaN."""
    dev = cuda_device("linear", x=x)  # the activations' device as the kernels name it ("cuda:0", not "cuda")
    y = torch.full((1, w.shape[0]), float("nan"), dtype=x.dtype, device=dev)
    kw = kernel_weight("linear", "weight", w, dev)
    was = cl.X16_FORM
    cl.X16_FORM = form
    try:
        cl.launch_x16(x, DTYPE_CODE[x.dtype], kw, w.shape[0], w.shape[1], y)
    finally:
        cl.X16_FORM = was
    return y


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16", "fp16"])
def test_x16_lm_head_is_close_and_every_form_gives_the_same_bits(dtype):
    """At the 48B's lm_head (163840 x 2304) the sampled rows are within the bf16 row of the float64 product of the
    activations as given, on float32 activations within 1e-8 nmse where cupy_dp4a's int8 activations are 1000 times
    further; the four forms agree byte for byte and write every row."""
    w = _weight(163840, 2304, 29)
    x = _x(2304, 29, dtype)
    some = torch.arange(0, 163840, 641)
    w_some = QWeight(w.raw[some.to(DEV)].cpu(), Q.Q6_K, (len(some), 2304))
    want = x.float().cpu().double() @ w_some.dequantize().double().T  # [1, rows sampled]
    outs = {form: _launch(x, w, form) for form in cl.X16_FORMS}
    first = next(iter(outs.values()))
    for form, y in outs.items():
        assert torch.isfinite(y).all(), f"{form}: a row left unwritten (NaN)"
        assert torch.equal(y.view(torch.int16 if dtype != torch.float32 else torch.int32),
                           first.view(torch.int16 if dtype != torch.float32 else torch.int32)), form
    err = _nmse(first[:, some.to(DEV)].float(), want)
    assert err <= rule_for("linear", "bf16").limit, err
    if dtype == torch.float32:
        err_q = _nmse(cl.linear(x, w)[:, some.to(DEV)], want)  # cupy_dp4a: int8 activations
        assert err < 1e-8 and err_q > 1000 * err, (err, err_q)


@pytest.mark.parametrize("rows,k", [(40, 512), (8, 256), (17 * 16, 1024), (4096, 2304), (2304, 9216)])
def test_x16_small_and_partial_shapes_match_the_reference(rows, k):
    """Odd and partial blocks of rows (40 rows: two blocks of 16 and a half one; 8 rows: one part-filled block), one
    super-block a row, and the widest shape that fits shared memory at 16 rows."""
    w = _weight(rows, k, rows + k)
    x = _x(k, rows + k)
    want = x.double().cpu() @ w.to("cpu").dequantize().double().T
    for form, (block_rows, _) in cl.X16_FORMS.items():
        if not cl.x16_fits(k, w.shape[1] // 256 * 210, block_rows):
            continue
        got = _launch(x, w, form)
        assert _nmse(got, want) < 1e-8, form


def test_x16_through_the_implementation_and_its_policy():
    """The registered function takes one token on a Q6_K weight whose bytes end on 16 itself; several tokens and a
    weight whose bytes do not (33 rows of 420) go by the stated policy, still correct; the policy function says so."""
    from sparkops_cupy._policies import x16_passes

    fn = load_catalog().get("linear", "cupy_x16_pdl").resolve()
    w_ok, w_odd = _weight(64, 512, 1), _weight(33, 512, 2)
    for w, t, own in ((w_ok, 1, True), (w_odd, 1, False), (w_ok, 3, False)):
        x = torch.randn(t, 512, generator=torch.Generator().manual_seed(t)).to(DEV)
        want = x.double().cpu() @ w.to("cpu").dequantize().double().T
        assert _nmse(fn(x, w), want) <= rule_for("linear", "bf16").limit
        assert (x16_passes(x, w) is None) == own, (w.shape, t, x16_passes(x, w))


def test_x16_non_finite_activations_make_every_output_nan():
    """A NaN or an inf anywhere in x: every row NaN (a float GEMV's answer), not a silently finite one."""
    w = _weight(64, 512, 3)
    for bad in (float("nan"), float("inf")):
        x = _x(512, 3)
        x[0, 300] = bad
        y = _launch(x, w, cl.X16_FORM)
        assert torch.isnan(y).all(), bad


def test_x16_replayed_from_a_graph_follows_new_activations():
    """Captured once and replayed with new activations copied into the captured input, the output is the eager one's
    for those activations, bit for bit: the GEMV waits for the quantize launch (PDL) before it reads x, in a graph
    too, and a replay does not reuse the quantized activations of the capture."""
    w = _weight(163840 // 8, 2304, 4)
    x_static = _x(2304, 40, torch.bfloat16)
    fn = load_catalog().get("linear", "cupy_x16_pdl").resolve()
    fn(x_static, w)  # warm-up: compiles and loads the kernels outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_static = fn(x_static, w)
    for seed in (41, 42, 43):
        x_new = _x(2304, seed, torch.bfloat16)
        x_static.copy_(x_new)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y_static.view(torch.int16), fn(x_new, w).view(torch.int16)), seed


def test_x16_refuses_a_form_it_does_not_have():
    w = _weight(16, 256, 5)
    with pytest.raises(BadInput, match=r"cupy_x16_pdl's forms are .*not 'r64t64'"):
        _launch(_x(256, 5), w, "r64t64")
