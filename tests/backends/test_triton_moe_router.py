"""moe_router=triton: the gate on the contract's cases, grouped routing and ties in Triton's interpreter
(CPU); the same on CUDA, and the 48B shapes timed, on a GPU."""

import pytest
import torch

from tests.backends.triton_support import check_case, interpreted_fixture, prove_contract

OP, NAME = "moe_router", "triton"
kernels = interpreted_fixture("moe_router")


def tokens(t, d, e, k, ng, tg, seed):
    g = torch.Generator().manual_seed(seed)
    return dict(x=torch.randn(t, d, generator=g), weight=torch.randn(e, d, generator=g) * d ** -0.5,
                bias=torch.randn(e, generator=g) * 0.1, top_k=k, n_group=ng, topk_group=tg, scale=2.446,
                renorm_eps=1e-20)


def test_contract_cases_in_interpreter(kernels):
    prove_contract(OP, NAME, kernels.moe_router)


@pytest.mark.parametrize("t,d,e,k,ng,tg", [(37, 64, 24, 5, 3, 2), (16, 48, 256, 8, 1, 1), (1, 20, 6, 6, 6, 6),
                                           (3, 16, 12, 2, 12, 1)])
def test_grouped_and_tiled_routing_in_interpreter(kernels, t, d, e, k, ng, tg):
    """T >= 16 takes the tiled logits kernel; groups of one expert; every expert chosen; one group kept."""
    check_case(OP, NAME, kernels.moe_router, [tokens(t, d, e, k, ng, tg, t + e)], label=f"T{t}_E{e}_g{ng}-{tg}")


def test_every_gemv_tuning_variant_passes_the_gate_in_interpreter(kernels):
    """`python -m sparkops_triton._tune router_gemv` times launch shapes of the decode logits GEMV; each one is
    judged here as the gate judges the op (D not a multiple of any slice, an expert count no tile divides)."""
    from sparkops_triton import _tune

    saved = {k: getattr(kernels, k) for k in ("ROUTER_GEMV_BE", "ROUTER_GEMV_BD", "ROUTER_GEMV_WARPS")}
    try:
        for variant in _tune.STUDIES["router_gemv"][1]:
            for k, v in variant.items():
                setattr(kernels, k, v)
            check_case(OP, NAME, kernels.moe_router, [tokens(2, 1100, 37, 4, 1, 1, 9)], label=f"tune {variant}")
    finally:
        for k, v in saved.items():
            setattr(kernels, k, v)


def test_ties_go_to_the_lower_expert_in_interpreter(kernels):
    call = tokens(2, 32, 16, 4, 1, 1, 4)
    call["weight"][5] = call["weight"][3]  # experts 3 and 5: identical scores
    call["weight"][9] = call["weight"][3]
    call["bias"][[3, 5, 9]] = 5.0  # and chosen first
    _, ids = kernels.moe_router(**call)
    assert ids[:, :3].tolist() == [[3, 5, 9], [3, 5, 9]]


@pytest.mark.gpu
def test_gpu_contract_cases_and_48b_timing():
    from sparkops_triton._workloads import router_args, time_calls
    from sparkops_triton.moe_router import moe_router

    prove_contract(OP, NAME, moe_router, "cuda", seeds=(0, 1))
    check_case(OP, NAME, moe_router, [tokens(300, 2304, 256, 8, 1, 1, 8)], device="cuda", label="48b_300_tokens")
    for t in (1, 4096):
        sets, nbytes = router_args(t)
        print(f"\n{OP}=triton T={t} E=256 D=2304 k=8: {time_calls(moe_router, sets, nbytes)}")
