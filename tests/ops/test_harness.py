"""The per-op harness itself: implementations that are wrong in the ways the harness exists to catch
(wrong maths, one ulp off under a bit-identity claim, an unwritten output, a written input, a state
not updated) are registered through an in-process plugin, and each must fail."""

import pytest
import torch
import torch.nn.functional as F

from sparkops.plugins import bit_identical, hookimpl, load_catalog, tolerance

from ._check import check_against_reference


def swapped_swiglu(gate, up):
    return F.silu(up) * gate


def float32_swiglu(gate, up):
    return F.silu(gate) * up  # float32 arithmetic: not the bytes of the float64 reference rounded once


def unwritten_swiglu(gate, up):
    out = torch.empty_like(gate)  # NaN under poisoning
    out[:, :-1] = (F.silu(gate.double()) * up.double())[:, :-1].to(gate.dtype)
    return out


def scribbling_swiglu(gate, up):
    out = (F.silu(gate.double()) * up.double()).to(gate.dtype)
    up.mul_(0.5)  # writes to an input it may only read
    return out


def forgetful_short_conv(x, weight, state):
    width = weight.shape[1]
    ext = torch.cat([state.to(x.dtype), x])
    y = sum(weight[:, i] * ext[i:i + x.shape[0]] for i in range(width))
    return F.silu(y)  # the window is never rolled


class BrokenPlugin:
    @hookimpl
    def register_implementations(self, register):
        swiglus = [("swapped", swapped_swiglu, tolerance()), ("f32", float32_swiglu, bit_identical("numpy")),
                   ("f32_tol", float32_swiglu, tolerance()), ("unwritten", unwritten_swiglu, tolerance()),
                   ("scribbling", scribbling_swiglu, tolerance())]
        for name, fn, claim in swiglus:
            register(op="swiglu", name=name, backend="test", devices=("cpu",), fn=fn, claim=claim)
        register(op="short_conv", name="forgetful", backend="test", devices=("cpu",), fn=forgetful_short_conv,
                 claim=tolerance())


@pytest.fixture(scope="module")
def broken_catalog():
    return load_catalog(extra=[("broken", BrokenPlugin())])


@pytest.mark.parametrize("op,impl,why", [("swiglu", "swapped", "nmse"), ("swiglu", "f32", "bits"),
                                         ("swiglu", "unwritten", "NaN"), ("swiglu", "scribbling", "modified its input"),
                                         ("short_conv", "forgetful", "state 'state'")])
def test_wrong_implementations_fail(broken_catalog, op, impl, why):
    with pytest.raises(AssertionError, match=why):
        check_against_reference(op, impl, 0, cat=broken_catalog)


def test_a_correct_float32_implementation_passes_under_a_tolerance_claim(broken_catalog):
    """The same float32 swiglu that fails bit-identity is within the table's tolerance."""
    check_against_reference("swiglu", "f32_tol", 0, cat=broken_catalog)
