"""short_conv=triton: the gate on the contract's cases and awkward windows in Triton's interpreter (CPU);
the same on CUDA, and the 48B shapes timed (decode as a CUDA graph), on a GPU."""

import pytest
import torch

from tests.backends.triton_support import check_case, interpreted_fixture, prove_contract

OP, NAME = "short_conv", "triton"
kernels = interpreted_fixture("short_conv")


def calls(c, w, steps, seed, fresh=False):
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(c, w, generator=g) * 0.5
    state = torch.zeros(w - 1, c) if fresh else torch.randn(w - 1, c, generator=g)
    return [dict(x=torch.randn(t, c, generator=g) * 2, weight=weight) for t in steps], {"state": state}


def test_contract_cases_in_interpreter(kernels):
    prove_contract(OP, NAME, kernels.short_conv)


@pytest.mark.parametrize("c,w,steps", [(5, 4, (1, 2, 1)), (130, 4, (40, 1)), (33, 2, (3, 17)), (7, 1, (2,)),
                                       (300, 6, (2, 1, 19))])
def test_awkward_windows_in_interpreter(kernels, c, w, steps):
    """Calls shorter than the window (the old window survives in part), one tap, more time blocks than one."""
    cs, state = calls(c, w, steps, c * 13 + w)
    check_case(OP, NAME, kernels.short_conv, cs, state, label=f"C{c}_W{w}")


def test_state_is_updated_in_place_in_interpreter(kernels):
    cs, state = calls(64, 4, (5,), 1)
    s = state["state"]
    ptr = s.data_ptr()
    kernels.short_conv(cs[0]["x"], cs[0]["weight"], s)
    assert s.data_ptr() == ptr and torch.equal(s, cs[0]["x"][-3:].float())


@pytest.mark.gpu
def test_gpu_contract_cases_and_48b_timing():
    from sparkops_triton._workloads import short_conv_args, time_calls
    from sparkops_triton.short_conv import short_conv

    prove_contract(OP, NAME, short_conv, "cuda", seeds=(0, 1))
    cs, state = calls(4096, 4, (70, 1, 1), 3)
    check_case(OP, NAME, short_conv, cs, state, device="cuda", label="48b_channels")
    for t in (1, 4096):
        sets, nbytes = short_conv_args(t)
        timing = time_calls(short_conv, sets, nbytes)
        print(f"\n{OP}=triton T={t} C=4096 W=4 bf16: {timing}")
        assert t > 1 or timing.mode == "graph", "the decode step must be capturable in a CUDA graph"
