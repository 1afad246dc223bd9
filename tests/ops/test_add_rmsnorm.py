"""add_rmsnorm: every implementation against the reference; the reference is the composition of the
unfused references (an add, then rmsnorm) and returns (normed, summed) in that order."""

import torch

from sparkops_numpy.add_rmsnorm import add_rmsnorm
from sparkops_numpy.rmsnorm import rmsnorm

from ._check import check_against_reference, rel_l2

OP = "add_rmsnorm"


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


def test_reference_is_rmsnorm_of_the_sum():
    g = torch.Generator().manual_seed(6)
    x, res = torch.randn(7, 96, generator=g, dtype=torch.float64), torch.randn(7, 96, generator=g, dtype=torch.float64)
    w = torch.randn(96, generator=g, dtype=torch.float64)
    normed, summed = add_rmsnorm(x, res, w, 1e-5)
    assert torch.equal(summed, res + x)
    assert rel_l2(normed, rmsnorm(res + x, w, 1e-5)) < 1e-15


def test_returns_normed_then_summed_in_x_dtype(impl_fn):
    g = torch.Generator().manual_seed(7)
    x, res, w = torch.randn(3, 64, generator=g), torch.randn(3, 64, generator=g) * 4, torch.randn(64, generator=g)
    normed, summed = impl_fn(x, res, w, 1e-5)
    assert normed.dtype == summed.dtype == torch.float32
    assert rel_l2(summed, res.double() + x.double()) < 1e-6
    assert rel_l2(normed, rmsnorm(res.double() + x.double(), w.double(), 1e-5)) < 1e-5
    assert rel_l2(normed, summed) > 0.1  # not swapped
