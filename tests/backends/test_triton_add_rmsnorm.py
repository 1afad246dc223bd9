"""add_rmsnorm=triton: the gate on the contract's cases and awkward rows in Triton's interpreter (CPU);
the same on CUDA, and the 48B shapes timed, on a GPU."""

import pytest
import torch

from tests.backends.triton_support import check_case, interpreted_fixture, prove_contract

OP, NAME = "add_rmsnorm", "triton"
kernels = interpreted_fixture("add_rmsnorm")


def rows(t, d, seed):
    g = torch.Generator().manual_seed(seed)
    return dict(x=torch.randn(t, d, generator=g), residual=torch.randn(t, d, generator=g) * 4,
                weight=torch.randn(d, generator=g), eps=1e-5)


def test_contract_cases_in_interpreter(kernels):
    prove_contract(OP, NAME, kernels.add_rmsnorm)


@pytest.mark.parametrize("t,d", [(1, 3), (4, 333), (2, 2304)])
def test_awkward_rows_in_interpreter(kernels, t, d):
    check_case(OP, NAME, kernels.add_rmsnorm, [rows(t, d, t * 31 + d)], label=f"T{t}_D{d}")


def test_summed_is_the_stored_sum_in_interpreter(kernels):
    """The norm is taken of the residual stream as stored (x's dtype), like add-then-rmsnorm on the device."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 64, generator=g).to(torch.bfloat16)
    r = (torch.randn(3, 64, generator=g) * 3).to(torch.bfloat16)
    w = torch.randn(64, generator=g)
    normed, summed = kernels.add_rmsnorm(x, r, w, 1e-5)
    assert torch.equal(summed, (x.float() + r.float()).to(torch.bfloat16))
    s = summed.double()
    want = s * torch.rsqrt((s * s).mean(-1, keepdim=True) + 1e-5) * w.double()
    assert ((normed.double() - want) ** 2).sum() / (want ** 2).sum() < 1e-4


def test_the_triggering_form_is_the_same_function_in_interpreter(kernels):
    """triton_pdl only adds griddepcontrol.launch_dependents on the GPU; in the interpreter it is "triton" itself."""
    for t, d in ((1, 2304), (3, 333)):
        a = rows(t, d, 7 * t + d)
        for got, want in zip(kernels.add_rmsnorm_trigger(**a), kernels.add_rmsnorm(**a)):
            assert torch.equal(got, want)


def test_the_dependent_form_is_the_same_function_in_interpreter(kernels):
    """triton_pdl_wait only differs on the GPU (a PDL launch, the gain before griddepcontrol.wait); in the
    interpreter it is "triton" itself."""
    for t, d in ((1, 2304), (3, 333)):
        a = rows(t, d, 11 * t + d)
        for got, want in zip(kernels.add_rmsnorm_wait(**a), kernels.add_rmsnorm(**a)):
            assert torch.equal(got, want)


def _bf16_rows(t, seed):
    """rows() at the 48B's D on the GPU: bf16 activations and residual, the float32 gain (the step's dtypes)."""
    return {k: (v.cuda().to(torch.bfloat16) if k != "weight" else v.cuda()) if torch.is_tensor(v) else v
            for k, v in rows(t, 2304, seed).items()}


@pytest.mark.gpu
def test_gpu_the_dependent_form_gives_the_same_bits():
    """add_rmsnorm=triton_pdl_wait claims bit-identity to "triton": where the gain is requested and when the kernel
    starts change no value. The 48B's row (T = 1) and a prefill chunk, in bf16 as the step runs them."""
    from sparkops_triton.add_rmsnorm import add_rmsnorm, add_rmsnorm_wait

    for t in (1, 4096):
        a = _bf16_rows(t, t + 3)
        want = add_rmsnorm(**a)
        torch.cuda.synchronize()
        got = add_rmsnorm_wait(**a)
        torch.cuda.synchronize()
        for g, w in zip(got, want):
            assert torch.equal(g.view(torch.int16), w.view(torch.int16))


@pytest.mark.gpu
def test_gpu_the_dependent_form_waits_for_its_producer_in_a_captured_chain():
    """A dependent form that read x before its producer ended would read the last replay's values, or the buffer's
    last tenant's. Twelve layers of the step's o_proj then the FFN norm - linear@Q4_K=cupy_rowwarp_pdl_q8_tall (a PDL
    kernel that lets the next one start early) writing x, the dependent norm reading it, the next layer's GEMV reading
    the norm's output - captured in one CUDA graph and replayed twice on new inputs copied into the captured ones: each
    layer's normed and summed rows bitwise those of the same chain run eagerly with add_rmsnorm=triton."""
    pytest.importorskip("cupy")
    from gguf import GGMLQuantizationType as Q

    from sparkops.plugins import load_catalog
    from sparkops_cupy._workloads import linear_workload
    from sparkops_triton.add_rmsnorm import add_rmsnorm, add_rmsnorm_wait

    linear = load_catalog().get("linear", "cupy_rowwarp_pdl_q8_tall").resolve()
    sets, _ = linear_workload(Q.Q4_K, 2304, 2304, "2304 x 2304", dtype=torch.bfloat16).build(torch.device("cuda"), 5)
    weights = [s["weight"] for s in sets][:12]
    g = torch.Generator().manual_seed(17)
    gains = [torch.randn(2304, generator=g).cuda() for _ in weights]  # [D] a layer's norm gain

    def chain(norm, x, h):
        out = []
        for w, gain in zip(weights, gains):
            y = linear(x, w)  # [1, D]
            x, h = norm(y, h, gain, 1e-5)
            out += [x, h]
        return out

    x0 = torch.empty(1, 2304, dtype=torch.bfloat16, device="cuda")
    h0 = torch.empty(1, 2304, dtype=torch.bfloat16, device="cuda")
    for _ in range(2):  # warm: compile both forms, load the GEMV's tables
        chain(add_rmsnorm_wait, x0.normal_(), h0.normal_())
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = chain(add_rmsnorm_wait, x0, h0)
    for replay in range(2):
        x = torch.randn(1, 2304, generator=g).to("cuda", torch.bfloat16)
        h = (3 * torch.randn(1, 2304, generator=g)).to("cuda", torch.bfloat16)
        want = chain(add_rmsnorm, x, h)
        torch.cuda.synchronize()
        for t in captured:
            t.fill_(float("nan"))
        x0.copy_(x)
        h0.copy_(h)
        graph.replay()
        torch.cuda.synchronize()
        for i, (got, exp) in enumerate(zip(captured, want)):
            assert torch.equal(got.view(torch.int16), exp.view(torch.int16)), f"replay {replay}, output {i}"


@pytest.mark.gpu
def test_gpu_the_triggering_form_gives_the_same_bits():
    """add_rmsnorm=triton_pdl claims bit-identity to "triton": the trigger changes when the next kernel may be
    scheduled, never a value. The 48B's row (T = 1, D = 2304, bf16) and a prefill chunk."""
    from sparkops_triton.add_rmsnorm import add_rmsnorm, add_rmsnorm_trigger

    for t in (1, 4096):
        a = {k: (v.cuda().to(torch.bfloat16) if k != "weight" else v.cuda()) if torch.is_tensor(v) else v
             for k, v in rows(t, 2304, t).items()}
        got, want = add_rmsnorm_trigger(**a), add_rmsnorm(**a)
        torch.cuda.synchronize()
        for g, w in zip(got, want):
            assert torch.equal(g.view(torch.int16), w.view(torch.int16))


@pytest.mark.gpu
def test_gpu_contract_cases_and_48b_timing():
    from sparkops_triton._workloads import norm_args, time_calls
    from sparkops_triton.add_rmsnorm import add_rmsnorm

    prove_contract(OP, NAME, add_rmsnorm, "cuda", seeds=(0, 1))
    for t in (1, 4096):
        sets, nbytes = norm_args(OP, t)
        print(f"\n{OP}=triton T={t} D=2304 bf16: {time_calls(add_rmsnorm, sets, nbytes)}")
