"""short_conv: every implementation against the reference; the reference against torch's conv1d over
the concatenated window; the window holds the last W-1 RAW inputs afterwards (spec 7 bug 9), and a
sequence split over several calls equals one call."""

import pytest
import torch
import torch.nn.functional as F

from sparkops.errors import BadInput
from sparkops_numpy.short_conv import short_conv

from ._check import check_against_reference, rel_l2

OP = "short_conv"


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


def torch_conv(x, weight, window):
    """silu(depthwise conv1d over [window ; x]) with torch: cross-correlation, so tap W-1 meets the current token."""
    ext = torch.cat([window.double(), x.double()]).T[None]  # [1, C, W-1+T]
    y = F.conv1d(ext, weight.double()[:, None, :], groups=weight.shape[0])  # [1, C, T]
    return F.silu(y[0].T)


def data(seed, t, c, w, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(t, c, generator=g, dtype=torch.float64).to(dtype) * 2,
            torch.randn(c, w, generator=g, dtype=torch.float64).to(dtype) * 0.5,
            torch.randn(w - 1, c, generator=g, dtype=torch.float64).to(dtype))


@pytest.mark.parametrize("t,c,w", [(1, 16, 4), (2, 8, 4), (9, 24, 4), (5, 12, 3), (6, 10, 2)])
def test_reference_matches_torch_conv1d_over_the_window(t, c, w):
    x, weight, window = data(t * 10 + w, t, c, w)
    state = window.clone()
    out = short_conv(x, weight, state)
    assert out.dtype == torch.float64 and out.shape == (t, c)
    assert rel_l2(out, torch_conv(x, weight, window)) < 1e-14
    assert torch.equal(state, torch.cat([window, x])[-(w - 1):])


def test_fresh_window_is_a_zero_padded_causal_conv():
    x, weight, _ = data(1, 7, 16, 4)
    out = short_conv(x, weight, torch.zeros(3, 16, dtype=torch.float64))
    causal = F.conv1d(x.T[None], weight[:, None, :], groups=16, padding=3)[0, :, :7].T  # left pad of W-1
    assert rel_l2(out, F.silu(causal)) < 1e-14


def test_window_keeps_the_last_raw_inputs(impl_fn):
    """After each call the state is the last W-1 pre-conv inputs, including when T < W-1."""
    x, weight, window = data(2, 6, 32, 4, dtype=torch.float32)
    state = window.clone()
    impl_fn(x[:1], weight, state)
    assert torch.equal(state, torch.cat([window[1:], x[:1]]))
    impl_fn(x[1:6], weight, state)
    assert torch.equal(state, x[3:6])


def test_split_calls_equal_one_call(impl_fn):
    x, weight, window = data(3, 11, 32, 4, dtype=torch.float32)
    whole_state = window.clone()
    whole = impl_fn(x, weight, whole_state)
    state = window.clone()
    parts = [impl_fn(x[lo:hi], weight, state) for lo, hi in [(0, 1), (1, 3), (3, 4), (4, 11)]]
    assert rel_l2(torch.cat(parts), whole) < 1e-6
    assert torch.equal(state, whole_state)
    assert rel_l2(whole, torch_conv(x, weight, window)) < 1e-6


def test_window_of_the_wrong_size_is_a_named_error():
    x, weight, window = data(4, 3, 8, 4)
    with pytest.raises(BadInput, match="state"):
        short_conv(x, weight, window[:2])
