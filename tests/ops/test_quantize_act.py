"""quantize_act: every implementation bit-identical to the reference; the reference bit-identical to
gguf-py's Q8_0 quantizer (itself written to match ggml's quantize_row_q8_0_ref); half-way values round
away from zero; an all-zero block gives zeros, not NaN."""

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops_numpy.quantize_act import quantize_act

from ._check import check_against_reference

OP = "quantize_act"


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


def as_q8_0_bytes(q: torch.Tensor, d: torch.Tensor) -> np.ndarray:
    """Our (q, d) laid out as GGUF Q8_0 blocks: fp16 scale then 32 int8 values, per block."""
    t, width = q.shape
    scales = d.numpy().astype(np.float16).view(np.uint8).reshape(t, width // 32, 2)
    values = q.numpy().view(np.uint8).reshape(t, width // 32, 32)
    return np.concatenate([scales, values], axis=-1).reshape(t, -1)


@pytest.mark.parametrize("std", [1e-3, 1.0, 40.0, 3e3])
def test_bit_identical_to_gguf_py_q8_0(std):
    g = torch.Generator().manual_seed(int(std * 1000) % 9973)
    x = torch.randn(6, 512, generator=g) * std
    x[1, 64:96] = 0.0  # an all-zero block
    x[2, :32] = torch.randint(-5, 6, (32,), generator=g).float() * 0.5 + 0.0  # many exact half-way points
    q, d = quantize_act(x)
    assert q.dtype == torch.int8 and d.dtype == torch.float32 and d.shape == (6, 16)
    assert np.array_equal(as_q8_0_bytes(q, d), gguf.quants.quantize(x.numpy(), Q.Q8_0))


def test_half_way_values_round_away_from_zero(impl_fn):
    x = torch.tensor([[127.0, -127.0, 0.5, -0.5, 2.5, -2.5, 3.5, 100.5] + [1.0] * 24])  # max 127: d = 1, exact
    q, d = impl_fn(x)
    assert float(d[0, 0]) == 1.0
    assert q[0, :8].tolist() == [127, -127, 1, -1, 3, -3, 4, 101]  # half-to-even would give 0, 0, 2, -2, 4, 100


def test_zero_block_gives_zero_scale_and_values(impl_fn):
    x = torch.randn(2, 64)
    x[0, :32] = 0.0
    q, d = impl_fn(x)
    assert float(d[0, 0]) == 0.0 and not q[0, :32].any()
    assert torch.isfinite(d).all() and q[1].abs().max() == 127


def test_dequantized_blocks_approximate_the_input():
    x = torch.randn(3, 256) * 7
    q, d = quantize_act(x)
    back = q.double().view(3, 8, 32) * d.double()[..., None]
    # half a step of rounding, plus 127 steps times the fp16 rounding of the scale (2^-11 relative)
    bound = (0.5 + 127 * 2.0**-11) * d.double()[..., None] * (1 + 1e-6)
    assert bool(((back - x.double().view(3, 8, 32)).abs() <= bound).all())


def test_row_not_a_multiple_of_32_is_a_named_error():
    with pytest.raises(BadInput, match="multiple of 32"):
        quantize_act(torch.randn(2, 48))
