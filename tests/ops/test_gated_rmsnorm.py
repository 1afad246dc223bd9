"""gated_rmsnorm: every implementation against the reference; the reference against torch; the norm
runs per head over D channels and the gate is a sigmoid, not a swish (spec 7 bug 5)."""

import pytest
import torch

from sparkops.errors import BadInput
from sparkops_numpy.gated_rmsnorm import gated_rmsnorm

from ._check import check_against_reference, rel_l2

OP = "gated_rmsnorm"


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


def torch_gated(x, gate, weight, eps):
    x = x.double()
    return weight.double() * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * torch.sigmoid(gate.double())


def inputs(seed, t=4, h=3, d=32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(t, h, d, generator=g) * 2, torch.randn(t, h, d, generator=g) * 2,
            torch.randn(d, generator=g))


def test_reference_matches_torch():
    x, gate, w = (v.double() for v in inputs(9))
    out = gated_rmsnorm(x, gate, w, 1e-5)
    assert out.dtype == torch.float64 and out.shape == x.shape
    assert rel_l2(out, torch_gated(x, gate, w, 1e-5)) < 1e-14


def test_norm_is_per_head_and_gate_is_sigmoid(impl_fn):
    x, gate, w = inputs(10)
    out = impl_fn(x, gate, w, 1e-5)
    x2 = x.clone()
    x2[:, 1] *= 50.0  # another head's scale must not reach head 0 (a norm over H*D would)
    assert rel_l2(impl_fn(x2, gate, w, 1e-5)[:, 0], out[:, 0]) < 1e-6
    big = torch.full_like(gate, 30.0) + gate.abs()  # sigmoid -> 1: the plain norm; a swish would grow with the gate
    assert rel_l2(impl_fn(x, big, w, 1e-5), torch_gated(x, big, w, 1e-5)) < 1e-5
    swish = torch_gated(x, gate, w, 1e-5) * gate.double()
    assert rel_l2(out, torch_gated(x, gate, w, 1e-5)) < 1e-5 and rel_l2(swish, out.double()) > 0.1


def test_weight_of_the_wrong_width_is_a_named_error():
    x, gate, w = inputs(11)
    with pytest.raises(BadInput, match="weight"):
        gated_rmsnorm(x, gate, torch.ones(96), 1e-5)
