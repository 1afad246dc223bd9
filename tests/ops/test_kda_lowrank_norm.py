"""kda_lowrank_norm: every implementation against the reference; the reference is exactly the linear reference's
two up-projections handed to the kda_norm reference (nothing rounded in between), and it refuses bad shapes before
the recurrence writes the state."""

import pytest
import torch

from sparkops.errors import BadInput
from sparkops.ops import get_contract
from sparkops_numpy.kda_lowrank_norm import kda_lowrank_norm
from sparkops_numpy.kda_norm import kda_norm
from sparkops_numpy.linear import linear

from ._check import check_against_reference

OP = "kda_lowrank_norm"


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


def test_reference_is_the_composition_bit_for_bit(seed):
    for case in get_contract(OP).cases(seed):
        s_fused, s_chain = case.state["state"].double(), case.state["state"].double()
        for call in case.calls:
            call = {k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v for k, v in call.items()}
            t, h, d = call["v"].shape
            got = kda_lowrank_norm(**call, state=s_fused)
            core = {k: v for k, v in call.items() if k not in ("f", "f_b", "ga", "g_b")}
            g = linear(call["f"], call["f_b"]).view(t, h, d)
            gate = linear(call["ga"], call["g_b"]).view(t, h, d)
            want = kda_norm(**core, g=g, gate=gate, state=s_chain)
            assert got.dtype == torch.float64 and torch.equal(got, want), case.name
        assert torch.equal(s_fused, s_chain), case.name


def test_cases_are_kda_norm_s_with_the_gates_made_by_their_up_projections(seed):
    from sparkops.ops import kda_norm as kn

    for mine, theirs in zip(get_contract(OP).cases(seed), kn.cases(seed)):
        assert mine.name == theirs.name and torch.equal(mine.state["state"], theirs.state["state"])
        for a, b in zip(mine.calls, theirs.calls):
            assert torch.equal(a["q"], b["q"]) and "g" not in a and "gate" not in a
            t, h, d = a["v"].shape
            assert tuple(a["f_b"].shape) == (h * d, a["f"].shape[1]) and tuple(a["f"].shape) == (t, a["f"].shape[1])
    types = {c.calls[0]["f_b"].qtype.name for c in get_contract(OP).cases(seed)}
    assert types == {"F16", "F32"}  # the mix's F16, and one case in F32


@pytest.mark.parametrize("bad", ["f", "ga", "f_b", "weight"])
def test_a_wrong_shape_is_named_and_leaves_the_state_alone(impl_fn, bad):
    case = get_contract(OP).cases(0)[0]
    call, state = dict(case.calls[0]), case.state["state"].clone()
    before = state.clone()
    if bad in ("f", "ga"):
        call[bad] = call[bad][:, :-1]
    elif bad == "weight":
        call[bad] = call[bad][:-1]
    else:
        from sparkops.qweight import QWeight

        call[bad] = QWeight.from_float(torch.randn(call[bad].shape[0] - 1, call[bad].shape[1]), call[bad].qtype)
    with pytest.raises(BadInput, match=bad):
        impl_fn(**call, state=state)
    assert torch.equal(state, before)
