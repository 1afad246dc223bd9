"""sample=triton: the gate on the contract's cases and on every path of the kernel (greedy, unfiltered noise,
top-k/top-p from sorted candidates, the exact binary-search fallback) in Triton's interpreter (CPU); on a
GPU, the same on CUDA and the 48B vocabulary (163840) timed for each path."""

import pytest
import torch

from tests.backends.triton_support import check_case, interpreted_fixture, prove_contract

OP, NAME = "sample", "triton"
kernels = interpreted_fixture("sample")


def rows(b, v, temperature, top_k, top_p, seed, std=3.0, steps=(0, 5)):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, v, generator=g) * std
    return [dict(logits=logits, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                 step=torch.tensor([s])) for s in steps]


def test_contract_cases_in_interpreter(kernels):
    prove_contract(OP, NAME, kernels.sample)


@pytest.mark.parametrize("b,v,temperature,top_k,top_p,std", [
    (2, 700, 0.9, 64, 1.0, 3.0),  # top-k at the candidate limit
    (1, 300, 1.1, 100, 0.8, 3.0),  # top-k above the candidate limit: the exact fallback
    (2, 600, 1.0, 0, 0.95, 0.3),  # flat logits: the top candidates' mass stays under top_p, fallback
    (3, 257, 0.5, 7, 0.5, 3.0),  # top-k and top-p together
    (1, 1000, 2.0, 0, 1.0, 3.0),  # temperature only: argmax of the noisy scores over every token
])
def test_filter_paths_in_interpreter(kernels, b, v, temperature, top_k, top_p, std):
    calls = rows(b, v, temperature, top_k, top_p, b * v + top_k, std=std)
    check_case(OP, NAME, kernels.sample, calls, label=f"B{b}_V{v}_k{top_k}_p{top_p}")


def test_greedy_ties_go_to_the_lowest_id_in_interpreter(kernels):
    logits = torch.randn(2, 5000)
    logits[0, [77, 3001, 4999]] = 50.0
    logits[1, [4096, 4097]] = 50.0  # across a chunk boundary
    out = kernels.sample(logits, 0.0, 0, 1.0, 1, torch.tensor([0]))
    assert out.tolist() == [77, 4096]


def test_the_noise_follows_step_from_device_memory_in_interpreter(kernels):
    """Same logits, different step tensors: the draws differ, and each equals the reference's."""
    calls = rows(4, 200, 1.0, 0, 1.0, 3, std=0.5, steps=(0, 1, 2, 3))
    drawn = [kernels.sample(**c).tolist() for c in calls]
    assert len({tuple(d) for d in drawn}) > 1
    check_case(OP, NAME, kernels.sample, calls, label="steps")


@pytest.mark.gpu
def test_gpu_contract_cases_and_48b_vocabulary():
    from sparkops_triton._workloads import sample_args, time_calls
    from sparkops_triton.sample import sample

    prove_contract(OP, NAME, sample, "cuda", seeds=(0, 1))
    for temperature, top_k, top_p in ((0.0, 0, 1.0), (0.8, 0, 1.0), (0.8, 50, 0.9), (0.8, 0, 0.9), (1.0, 300, 1.0)):
        check_case(OP, NAME, sample, rows(2, 163840, temperature, top_k, top_p, 5), device="cuda",
                   label=f"48b_T{temperature}_k{top_k}_p{top_p}")
        sets, nbytes = sample_args(temperature, top_k, top_p)
        timing = time_calls(sample, sets, nbytes)
        print(f"\nsample=triton V=163840 T={temperature} top_k={top_k} top_p={top_p}: {timing}")
