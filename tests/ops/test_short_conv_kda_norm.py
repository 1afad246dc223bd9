"""short_conv_kda_norm: every implementation against the reference; the reference is exactly the composition of the
short_conv and kda_norm references as the graph chains them (the conv's output in x's dtype), both states updated as
the two ops update them; a refused call writes neither state."""

import pytest
import torch

from sparkops.errors import BadInput
from sparkops.ops import get_contract
from sparkops_numpy.kda_norm import kda_norm
from sparkops_numpy.short_conv import short_conv
from sparkops_numpy.short_conv_kda_norm import short_conv_kda_norm

from ._check import check_against_reference, rel_l2

OP = "short_conv_kda_norm"


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


def chained(call, window, state):
    """The unfused chain as graph._qkv and kda_norm run it: one conv over q|k|v, then kda_norm on its column blocks."""
    t, h, d = call["g"].shape
    p = h * d
    qkv = short_conv(call["x"], call["conv_weight"], window)  # [T, 3P]
    q, k, v = (qkv[:, j * p:(j + 1) * p].reshape(t, h, d) for j in range(3))
    rest = {n: call[n] for n in ("g", "beta", "a", "dt_bias", "scale", "l2_eps", "gate", "weight", "eps")}
    return kda_norm(q, k, v, **rest, state=state)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_reference_is_the_chain_bit_for_bit(seed, dtype):
    """float64 (nothing can hide a reordering) and bfloat16 activations (the conv's output rounded to bfloat16 before
    the recurrence reads it, in both)."""
    for case in get_contract(OP).cases(seed):
        fused = {k: v.double().clone() for k, v in case.state.items()}
        chain = {k: v.double().clone() for k, v in case.state.items()}
        for call in case.calls:
            call = {k: v.to(dtype if k in ("x", "g", "beta", "gate") else torch.float64) if torch.is_tensor(v) else v
                    for k, v in call.items()}
            got = short_conv_kda_norm(**call, **fused)
            want = chained(call, chain["window"], chain["state"])
            assert got.dtype == dtype and torch.equal(got, want), case.name
            for name in ("window", "state"):
                assert torch.equal(fused[name], chain[name]), f"{case.name}: {name} is not updated as the chain does"


def test_the_conv_output_is_rounded_to_x_dtype_before_the_recurrence():
    """Fed bfloat16 x, the reference differs from the same call on x upcast to float32 (where nothing is rounded
    between the conv and the recurrence): the rounding the contract names is there."""
    case = get_contract(OP).cases(5)[0]
    call = dict(case.calls[0], x=case.calls[0]["x"].to(torch.bfloat16))
    low = short_conv_kda_norm(**call, **{k: v.clone() for k, v in case.state.items()})
    high = short_conv_kda_norm(**dict(call, x=call["x"].float()), **{k: v.clone() for k, v in case.state.items()})
    assert 0 < rel_l2(low.float(), high) < 1e-2


def test_cases_cover_the_engines_range_and_the_48b_shape():
    names = [c.name for c in get_contract(OP).cases(0)]
    shapes = [c.calls[0]["g"].shape[1:] for c in get_contract(OP).cases(0)]
    assert (32, 128) in [tuple(s) for s in shapes], names  # the 48B's heads: the Triton grid of 32 x 4 programs
    counts = {call["x"].shape[0] for c in get_contract(OP).cases(0) for call in c.calls}
    assert {1, 2, 8} <= counts and max(counts) > 100, counts  # decode, a few tokens, a prefill
    widths = {c.calls[0]["conv_weight"].shape[1] for c in get_contract(OP).cases(0)}
    assert {2, 3, 4} <= widths


def inputs(seed, t=2, h=2, d=32, w=4):
    g = torch.Generator().manual_seed(seed)
    p = h * d
    call = dict(x=torch.randn(t, 3 * p, generator=g) * 2, conv_weight=torch.randn(3 * p, w, generator=g) * 0.5,
                g=torch.randn(t, h, d, generator=g), beta=torch.randn(t, h, generator=g),
                a=-torch.rand(h, generator=g) - 0.1, dt_bias=torch.randn(p, generator=g) * 0.5, scale=d ** -0.5,
                l2_eps=1e-6, gate=torch.randn(t, h, d, generator=g) * 2, weight=torch.randn(d, generator=g), eps=1e-5)
    return call, dict(window=torch.randn(w - 1, 3 * p, generator=g), state=torch.randn(h, d, d, generator=g) * 0.1)


@pytest.mark.parametrize("t", [1, 2, 5])
def test_the_window_holds_the_last_raw_rows_of_all_three_blocks(impl_fn, t):
    """After a call the window is exactly the last W-1 raw rows of [window ; x] over all 3P channels (q's, k's and
    v's): the conv's inputs, not its outputs, and not only the channels one head's program reads."""
    call, states = inputs(12, t=t)
    want = torch.cat([states["window"], call["x"]])[-(states["window"].shape[0]):]  # [W-1, 3P]
    impl_fn(**call, **states)
    assert torch.equal(states["window"], want)


@pytest.mark.parametrize("bad", ["x", "conv_weight", "window", "gate", "weight", "dt_bias"])
def test_a_wrong_shape_is_named_and_leaves_both_states_alone(impl_fn, bad):
    """Refused before the conv writes the window or the recurrence the state: nothing half-written."""
    call, states = inputs(13)
    before = {k: v.clone() for k, v in states.items()}
    wrong = {"x": call["x"][:, :-1], "conv_weight": call["conv_weight"][:-1], "window": states["window"][:, :-1],
             "gate": call["gate"][:, :1], "weight": call["weight"][:-1], "dt_bias": call["dt_bias"][:-1]}[bad]
    if bad == "window":
        states = dict(states, window=wrong)
        call_args = call
    else:
        call_args = dict(call, **{bad: wrong})
    with pytest.raises(BadInput, match=bad):
        impl_fn(**call_args, **states)
    for name in ("window", "state"):
        if not (bad == "window" and name == "window"):
            assert torch.equal(states[name], before[name]), f"{name} written by a refused call"
