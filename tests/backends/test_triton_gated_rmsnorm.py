"""gated_rmsnorm=triton: the gate on the contract's cases and awkward heads in Triton's interpreter (CPU);
the same on CUDA, and the 48B shapes timed, on a GPU."""

import pytest
import torch

from tests.backends.triton_support import check_case, interpreted_fixture, prove_contract

OP, NAME = "gated_rmsnorm", "triton"
kernels = interpreted_fixture("gated_rmsnorm")


def heads(t, h, d, seed):
    g = torch.Generator().manual_seed(seed)
    return dict(x=torch.randn(t, h, d, generator=g) * 2, gate=torch.randn(t, h, d, generator=g) * 3,
                weight=torch.randn(d, generator=g), eps=1e-5)


def test_contract_cases_in_interpreter(kernels):
    prove_contract(OP, NAME, kernels.gated_rmsnorm)


@pytest.mark.parametrize("t,h,d", [(1, 1, 5), (3, 7, 24), (2, 5, 200), (17, 3, 16)])
def test_awkward_heads_in_interpreter(kernels, t, h, d):
    check_case(OP, NAME, kernels.gated_rmsnorm, [heads(t, h, d, t * 100 + h * 10 + d)], label=f"T{t}_H{h}_D{d}")


def test_norm_is_per_head_and_gate_is_sigmoid_in_interpreter(kernels):
    """Scaling one head's x changes no output (per-head norm, spec classic bug 5); the gate is a sigmoid."""
    call = heads(2, 4, 32, 9)
    x, gate, w = call["x"], call["gate"], call["weight"]
    base = kernels.gated_rmsnorm(x, gate, w, 1e-5)
    x2 = x.clone()
    x2[:, 1] *= 9.0
    assert torch.allclose(kernels.gated_rmsnorm(x2, gate, w, 1e-5), base, rtol=1e-5, atol=1e-6)
    rms = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * w
    assert torch.allclose(base, rms * torch.sigmoid(gate), rtol=1e-5, atol=1e-6)


def test_the_triggering_form_is_the_same_function_in_interpreter(kernels):
    """triton_pdl only adds griddepcontrol.launch_dependents on the GPU; in the interpreter it is "triton" itself."""
    for t, h, d in ((1, 32, 128), (3, 7, 24)):
        call = heads(t, h, d, t + h + d)
        assert torch.equal(kernels.gated_rmsnorm_trigger(**call), kernels.gated_rmsnorm(**call))


@pytest.mark.gpu
def test_gpu_the_triggering_form_gives_the_same_bits():
    """gated_rmsnorm=triton_pdl claims bit-identity to "triton": the 48B's decode row (T = 1, 32 heads of 128) and a
    prefill chunk, bf16."""
    from sparkops_triton.gated_rmsnorm import gated_rmsnorm, gated_rmsnorm_trigger

    for t in (1, 4096):
        call = {k: (v.cuda().to(torch.bfloat16) if k != "weight" else v.cuda()) if torch.is_tensor(v) else v
                for k, v in heads(t, 32, 128, t).items()}
        got, want = gated_rmsnorm_trigger(**call), gated_rmsnorm(**call)
        torch.cuda.synchronize()
        assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@pytest.mark.gpu
def test_gpu_contract_cases_and_48b_timing():
    from sparkops_triton._workloads import norm_args, time_calls
    from sparkops_triton.gated_rmsnorm import gated_rmsnorm

    prove_contract(OP, NAME, gated_rmsnorm, "cuda", seeds=(0, 1))
    for t in (1, 4096):
        sets, nbytes = norm_args(OP, t)
        print(f"\n{OP}=triton T={t} H=32 D=128 bf16: {time_calls(gated_rmsnorm, sets, nbytes)}")
