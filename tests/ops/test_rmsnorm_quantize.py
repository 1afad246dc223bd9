"""rmsnorm_quantize: every implementation against the reference (the gate's qdq rule); the reference is
exactly the composition of the unfused references (rmsnorm rounded to float32, then quantize_act);
all-zero blocks and rows give zeros, not NaN; q * d stays within a quantization step of the norm."""

import pytest
import torch

from sparkops.errors import BadInput
from sparkops.ops import get_contract
from sparkops_numpy.quantize_act import quantize_act
from sparkops_numpy.rmsnorm import rmsnorm
from sparkops_numpy.rmsnorm_quantize import rmsnorm_quantize

from ._check import check_against_reference

OP = "rmsnorm_quantize"


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


def test_reference_is_exactly_the_composition_of_the_unfused_references(seed):
    for case in get_contract(OP).cases(seed):
        kw = case.calls[0]
        q, d = rmsnorm_quantize(**kw)
        normed = rmsnorm(**kw)
        assert normed.dtype == torch.float32  # the norm is rounded to float32 before it is quantized
        q_ref, d_ref = quantize_act(normed)
        assert q.dtype == torch.int8 and d.dtype == torch.float32, case.name
        assert torch.equal(q, q_ref), case.name
        assert torch.equal(d.view(torch.int32), d_ref.view(torch.int32)), case.name


def test_the_norm_is_rounded_to_float32_before_it_is_quantized(impl_fn):
    """A row built so that one normalised value is 2.5 - 2^-24 in exact arithmetic: float32 rounds it to
    2.5, which quantizes to 3 (half away from zero); quantizing the unrounded value would give 2."""
    w_odd = 13981013 * 2.0**-24  # a float32 with 3 * w_odd = 2.5 - 2^-24 exactly
    x, w = torch.zeros(1, 32), torch.ones(32)
    x[0, :7] = torch.tensor([127.0, 3.0, 100.0, -81.0, 8.0, -2.0, 1.0])  # squares sum to 32768: rms 32 exactly
    w[1] = w_odd
    assert float(w[1]) == w_odd and 3 * w_odd == 2.5 - 2.0**-24
    q, d = impl_fn(x, w, 0.0)
    assert float(d[0, 0]) == 1 / 32  # max 127/32, so 1/d = 32 and q = round(32 * y) exactly
    assert q[0, :7].tolist() == [127, 3, 100, -81, 8, -2, 1]


def test_contract_cases_cover_the_awkward_shapes_and_zeros():
    cases = get_contract(OP).cases(0)
    shapes = {tuple(c.calls[0]["x"].shape) for c in cases}
    assert {(1, 32), (7, 96), (5, 2304)} <= shapes and any(d >= 9216 for _, d in shapes)
    zero_blocks = [c for c in cases if (c.calls[0]["x"].view(-1, 32).abs().amax(-1) == 0).any()]
    assert len(zero_blocks) >= 3
    for c in cases:  # never constant data otherwise
        x = c.calls[0]["x"]
        assert x.std() > 0.5 and c.calls[0]["weight"].std() > 0.5


def test_zero_blocks_and_rows_give_zero_not_nan(impl_fn):
    g = torch.Generator().manual_seed(11)
    x, w = torch.randn(3, 128, generator=g) * 3, torch.randn(128, generator=g)
    x[0, 64:96] = 0.0  # one all-zero block
    x[2] = 0.0  # an all-zero row: 0 * rsqrt(eps)
    q, d = impl_fn(x, w, 1e-5)
    assert torch.isfinite(d).all()
    assert float(d[0, 2]) == 0.0 and not q[0, 64:96].any()
    assert not d[2].any() and not q[2].any()
    assert bool((d[1] > 0).all()) and int(q[1].abs().max()) == 127


def test_dequantized_values_are_within_a_step_of_the_norm(impl_fn):
    g = torch.Generator().manual_seed(12)
    x, w = torch.randn(4, 256, generator=g) * 7, torch.randn(256, generator=g)
    q, d = impl_fn(x, w, 1e-5)
    normed = rmsnorm(x.double(), w.double(), 1e-5).view(4, 8, 32)  # float64
    back = q.double().view(4, 8, 32) * d.double()[..., None]
    # half a step of rounding, one more step for a float32 norm an ulp away, the float16 rounding of d
    bound = (1.5 + 127 * 2.0**-11) * d.double()[..., None]
    assert bool(((back - normed).abs() <= bound).all())
    assert bool((d == d.half().float()).all())  # the scales are float16 values


def test_normalises_before_quantizing(impl_fn):
    """Scaling a row changes nothing (the norm divides it out); quantizing x itself would change d."""
    g = torch.Generator().manual_seed(13)
    x, w = torch.randn(2, 64, generator=g), torch.randn(64, generator=g)
    q1, d1 = impl_fn(x, w, 0.0)
    q2, d2 = impl_fn(x * 64.0, w, 0.0)  # a power of two: the float32 norm is exactly the same
    assert torch.equal(q1, q2) and torch.equal(d1, d2)


def test_bad_shapes_are_named_errors():
    with pytest.raises(BadInput, match="multiple of 32"):
        rmsnorm_quantize(torch.randn(2, 48), torch.randn(48), 1e-5)
    with pytest.raises(BadInput, match="'weight' has shape"):
        rmsnorm_quantize(torch.randn(2, 64), torch.randn(32), 1e-5)
