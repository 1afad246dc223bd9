"""rmsnorm=triton: the gate on the contract's cases and on awkward rows in Triton's interpreter (CPU);
the same on CUDA, and the 48B shapes timed, on a GPU."""

import pytest
import torch

from sparkops.errors import BadInput
from tests.backends.triton_support import check_case, interpreted_fixture, prove_contract

OP, NAME = "rmsnorm", "triton"
kernels = interpreted_fixture("rmsnorm")


def rows(t, d, seed, dtype=torch.float32, strided=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, 2 * d if strided else d, generator=g, dtype=torch.float64) * 5
    x = (x[:, ::2] if strided else x).to(dtype)  # a strided view: the kernel must not assume a row stride of D
    return dict(x=x, weight=torch.randn(d, generator=g), eps=1e-5)


def test_contract_cases_in_interpreter(kernels):
    prove_contract(OP, NAME, kernels.rmsnorm)


@pytest.mark.parametrize("t,d,strided", [(1, 1, False), (3, 17, True), (2, 1000, False), (5, 4097, False)])
def test_awkward_rows_in_interpreter(kernels, t, d, strided):
    check_case(OP, NAME, kernels.rmsnorm, [rows(t, d, t * 7919 + d, strided=strided)], label=f"T{t}_D{d}")


def test_bf16_rows_keep_their_dtype_in_interpreter(kernels):
    call = rows(4, 96, 3, dtype=torch.bfloat16)
    y = kernels.rmsnorm(**call)
    assert y.dtype == torch.bfloat16 and y.shape == (4, 96)
    x = call["x"].double()
    want = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * call["weight"].double()
    assert ((y.double() - want) ** 2).sum() / (want ** 2).sum() < 1e-4


def test_bad_input_is_named(kernels):
    with pytest.raises(BadInput, match="weight"):
        kernels.rmsnorm(torch.randn(2, 8), torch.randn(7), 1e-5)


@pytest.mark.gpu
def test_gpu_contract_cases_and_48b_timing():
    from sparkops_triton._workloads import norm_args, time_calls
    from sparkops_triton.rmsnorm import rmsnorm

    prove_contract(OP, NAME, rmsnorm, "cuda", seeds=(0, 1))
    check_case(OP, NAME, rmsnorm, [rows(3, 2304, 5, strided=True)], device="cuda", label="strided_48b_rows")
    for t in (1, 4096):
        sets, nbytes = norm_args(OP, t)
        print(f"\n{OP}=triton T={t} D=2304 bf16: {time_calls(rmsnorm, sets, nbytes)}")
