"""swiglu=triton: the gate on the contract's cases and on awkward sizes in Triton's interpreter (CPU); the gate is a
silu (not a sigmoid, not a plain product); on a GPU, the same on CUDA, and the 48B's dense row timed against the torch
plugin's five kernels in CUDA graphs (with SPARKOPS_PEROP_DIR set, the rung's forecast: perop-swiglu-bfloat16.json)."""

import pytest
import torch

from sparkops.errors import BadInput
from tests.backends.triton_support import check_case, interpreted_fixture, prove_contract, record_perop

OP, NAME = "swiglu", "triton"
kernels = interpreted_fixture("swiglu")


def pair(t, f, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return dict(gate=(torch.randn(t, f, generator=g) * 3).to(dtype), up=torch.randn(t, f, generator=g).to(dtype))


def test_contract_cases_in_interpreter(kernels):
    prove_contract(OP, NAME, kernels.swiglu)


@pytest.mark.parametrize("t,f", [(1, 1), (3, 1023), (2, 1025), (1, 9216)])
def test_awkward_sizes_in_interpreter(kernels, t, f):
    """One value, one short of a program's block, one past it, the 48B's dense row (9 programs)."""
    check_case(OP, NAME, kernels.swiglu, [pair(t, f, t * 31 + f)], label=f"T{t}_F{f}")


def test_the_gate_is_a_silu_and_the_dtype_is_kept_in_interpreter(kernels):
    call = pair(4, 96, 3, dtype=torch.bfloat16)
    y = kernels.swiglu(**call)
    assert y.dtype == torch.bfloat16 and y.shape == (4, 96)
    g, u = call["gate"].double(), call["up"].double()
    want = g * torch.sigmoid(g) * u
    assert ((y.double() - want) ** 2).sum() / (want ** 2).sum() < 1e-4
    for wrong in (torch.sigmoid(g) * u, g * u):
        assert ((y.double() - wrong) ** 2).sum() / (wrong ** 2).sum() > 1e-2


def test_bad_input_is_named(kernels):
    with pytest.raises(BadInput, match="up"):
        kernels.swiglu(torch.randn(2, 8), torch.randn(2, 7))
    with pytest.raises(BadInput, match="up"):
        kernels.swiglu(torch.randn(2, 8), torch.ones(2, 8, dtype=torch.int32))


@pytest.mark.gpu
def test_gpu_contract_cases_and_the_48b_dense_row_timed():
    from sparkops_torch.swiglu import swiglu as torch_swiglu
    from sparkops_triton._workloads import time_calls
    from sparkops_triton.swiglu import swiglu

    prove_contract(OP, NAME, swiglu, "cuda", seeds=(0, 1))
    gen = torch.Generator(device="cuda").manual_seed(5)
    sets = [((torch.randn(1, 9216, generator=gen, device="cuda") * 3).to(torch.bfloat16),
             torch.randn(1, 9216, generator=gen, device="cuda").to(torch.bfloat16)) for _ in range(16)]
    nbytes = 3 * 9216 * 2
    times = {name: time_calls(fn, sets, nbytes) for name, fn in (("torch", torch_swiglu), ("triton", swiglu))}
    assert all(t.mode == "graph" for t in times.values())
    record_perop("swiglu", "swiglu, the 48B's dense row (T=1, F=9216, bf16), once a token", times, 1,
                 [f"{n:<7} {t}" for n, t in times.items()])
