"""rmsnorm: every implementation against the reference; the reference against torch's formula;
statistics over the last dimension only; the output dtype is x's."""

import torch

from sparkops_numpy.rmsnorm import rmsnorm

from ._check import check_against_reference, rel_l2

OP = "rmsnorm"


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


def torch_rmsnorm(x, weight, eps):
    x = x.double()
    return weight.double() * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def test_reference_matches_torch_formula():
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(9, 80, generator=g, dtype=torch.float64) * 5, torch.randn(80, generator=g, dtype=torch.float64)
    out = rmsnorm(x, w, 1e-5)
    assert out.dtype == torch.float64
    assert rel_l2(out, torch_rmsnorm(x, w, 1e-5)) < 1e-14
    assert rel_l2(out, torch.nn.functional.rms_norm(x, (80,), w, 1e-5)) < 1e-14


def test_rows_are_independent_and_eps_matters(impl_fn):
    g = torch.Generator().manual_seed(4)
    x, w = torch.randn(4, 64, generator=g), torch.randn(64, generator=g)
    out = impl_fn(x, w, 1e-5)
    x2 = x.clone()
    x2[1:] *= 100.0  # other rows change; row 0 must not
    assert torch.equal(impl_fn(x2, w, 1e-5)[0], out[0])
    small = x * 1e-3  # mean square 1e-6: eps is comparable and must be inside the sqrt
    assert rel_l2(impl_fn(small, w, 1e-5), torch_rmsnorm(small, w, 1e-5)) < 1e-5


def test_output_dtype_is_x_dtype():
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(3, 32, generator=g).to(torch.bfloat16), torch.randn(32, generator=g)
    out = rmsnorm(x, w, 1e-5)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, torch_rmsnorm(x, w, 1e-5).to(torch.bfloat16))  # float64 maths, one final rounding
