"""linear: every implementation against the reference; the reference against a float64 torch matmul
of the dequantized weight, for every supported type; dequantization equals gguf-py's."""

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops.qweight import QWeight
from sparkops_numpy.linear import linear

from ._check import check_against_reference, rel_l2

OP = "linear"

TYPES = [(Q.F32, 96), (Q.F16, 64), (Q.BF16, 64), (Q.Q8_0, 96), (Q.Q4_K, 256), (Q.Q6_K, 256), (Q.IQ1_S, 256)]


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


@pytest.mark.parametrize("qtype,k", TYPES, ids=[t.name for t, _ in TYPES])
def test_reference_is_a_float64_matmul_of_the_dequantized_weight(qtype, k):
    g = torch.Generator().manual_seed(int(qtype))
    w = QWeight.from_float(torch.randn(24, k, generator=g) * 0.05, qtype, name=f"w_{qtype.name}")
    x = torch.randn(5, k, generator=g, dtype=torch.float64)
    out = linear(x, w)
    assert out.dtype == torch.float64 and out.shape == (5, 24)
    want = x @ w.dequantize().double().T
    assert rel_l2(out, want) < 1e-14
    x32 = x.float()
    assert linear(x32, w).dtype == torch.float32


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.IQ1_S], ids=lambda t: t.name)
def test_dequantization_is_gguf_py_dequantization(qtype):
    g = torch.Generator().manual_seed(int(qtype) + 100)
    w = QWeight.from_float(torch.randn(8, 256, generator=g) * 0.05, qtype)
    ours = w.dequantize().numpy()
    theirs = gguf.quants.dequantize(w.raw.numpy(), qtype)
    assert np.array_equal(ours, theirs)


def test_output_follows_x_dtype(impl_fn):
    g = torch.Generator().manual_seed(12)
    w = QWeight.from_float(torch.randn(16, 64, generator=g) * 0.1, Q.Q8_0)
    x = torch.randn(3, 64, generator=g)
    out = impl_fn(x, w)
    assert out.dtype == torch.float32 and out.shape == (3, 16)
    assert rel_l2(out, x.double() @ w.dequantize().double().T) < 3e-2  # loose enough for quantized activations


def test_wrong_input_width_is_a_named_error():
    w = QWeight.from_float(torch.randn(4, 64), Q.F32)
    with pytest.raises(BadInput, match="'x'"):
        linear(torch.randn(2, 32), w)
