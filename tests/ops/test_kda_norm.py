"""kda_norm: every implementation against the reference; the reference is exactly the composition of the kda and
gated_rmsnorm references (nothing rounded between them) and updates the state as kda does; the norm runs per head
over the whole head and its gate is a sigmoid."""

import pytest
import torch

from sparkops.errors import BadInput
from sparkops.ops import get_contract
from sparkops_numpy.gated_rmsnorm import gated_rmsnorm
from sparkops_numpy.kda import kda
from sparkops_numpy.kda_norm import kda_norm

from ._check import check_against_reference, rel_l2

OP = "kda_norm"
NORM = ("gate", "weight", "eps")


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


def float64_calls(seed):
    """The contract's cases with every float tensor in float64 (the reference's own precision: no rounding between
    kda and the norm can hide)."""
    for case in get_contract(OP).cases(seed):
        calls = [{k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v for k, v in c.items()}
                 for c in case.calls]
        yield case.name, calls, case.state["state"].double()


def test_reference_is_the_composition_bit_for_bit(seed):
    for label, calls, state in float64_calls(seed):
        s_fused, s_chain = state.clone(), state.clone()
        for call in calls:
            core = {k: v for k, v in call.items() if k not in NORM}
            got = kda_norm(**call, state=s_fused)
            want = gated_rmsnorm(kda(**core, state=s_chain), call["gate"], call["weight"], call["eps"])
            assert got.dtype == torch.float64 and torch.equal(got, want), label
            assert torch.equal(s_fused, s_chain), f"{label}: the state is not updated as kda updates it"


def test_cases_are_kda_s_with_a_gate_and_a_gain():
    """The core inputs are kda's own cases (one generator apart), each call adds a gate, each case one gain."""
    for mine, theirs in zip(get_contract(OP).cases(3), get_contract("kda").cases(3)):
        assert mine.name == theirs.name and torch.equal(mine.state["state"], theirs.state["state"])
        for a, b in zip(mine.calls, theirs.calls):
            assert all(torch.equal(a[k], b[k]) if torch.is_tensor(b[k]) else a[k] == b[k] for k in b)
            assert a["gate"].shape == a["q"].shape and a["weight"] is mine.calls[0]["weight"]


def inputs(seed, t=3, h=3, d=32):
    g = torch.Generator().manual_seed(seed)
    return dict(q=torch.randn(t, h, d, generator=g), k=torch.randn(t, h, d, generator=g),
                v=torch.randn(t, h, d, generator=g), g=torch.randn(t, h, d, generator=g),
                beta=torch.randn(t, h, generator=g), a=-torch.rand(h, generator=g) - 0.1,
                dt_bias=torch.randn(h * d, generator=g) * 0.5, scale=d ** -0.5, l2_eps=1e-6,
                gate=torch.randn(t, h, d, generator=g) * 2, weight=torch.randn(d, generator=g), eps=1e-5), \
        torch.randn(h, d, d, generator=g) * 0.1


def test_norm_is_per_head_and_gate_is_sigmoid(impl_fn):
    """Scaling one head's values moves no other head's output (a norm over H*D would); a gate of +30 leaves the
    plain norm (a sigmoid saturates at 1; a swish would grow with the gate)."""
    call, state = inputs(10)
    base = impl_fn(**call, state=state.clone())
    v2 = call["v"].clone()
    v2[:, 1] *= 50.0
    moved = impl_fn(**dict(call, v=v2), state=state.clone())
    assert rel_l2(moved[:, 0], base[:, 0]) < 1e-6 and rel_l2(moved[:, 2], base[:, 2]) < 1e-6
    assert rel_l2(moved[:, 1], base[:, 1]) > 1e-3  # head 1 itself did change
    ones = impl_fn(**dict(call, gate=torch.full_like(call["gate"], 30.0), eps=1e-12), state=state.clone())
    plain = ones / torch.sigmoid(torch.tensor(30.0))
    assert rel_l2(ones, plain) < 1e-6
    x_hat = plain.double() / call["weight"].double()  # the normed row before its gain
    ms = x_hat.pow(2).mean(-1)  # [T, H]
    assert torch.allclose(ms, torch.ones_like(ms), rtol=1e-4)  # unit RMS per (token, head): a norm over D


@pytest.mark.parametrize("bad", ["gate", "weight"])
def test_a_norm_input_of_the_wrong_shape_is_named_and_leaves_the_state_alone(impl_fn, bad):
    """Refused before the recurrence runs: nothing half-written (the state is kda's to update, not a failed call's)."""
    call, state = inputs(11)
    before = state.clone()
    wrong = call["gate"][:, :2] if bad == "gate" else call["weight"][:-1]
    with pytest.raises(BadInput, match=bad):
        impl_fn(**dict(call, **{bad: wrong}), state=state)
    assert torch.equal(state, before)
