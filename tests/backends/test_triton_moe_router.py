"""moe_router=triton: the gate on the contract's cases, grouped routing and ties in Triton's interpreter
(CPU); the same on CUDA, and the 48B shapes timed, on a GPU. moe_router=triton_lastblock (decode routes
inside the logits GEMV, in each token's last program to finish) against "triton" bit for bit: in the
interpreter with the programs shuffled, and on a GPU eagerly and replayed from CUDA graphs.
moe_router=triton_prefetch (that GEMV with every D tile's loads issued before its first multiply) against
"triton_lastblock" bit for bit the same ways, and the three timed at the 48B shape in one CUDA graph."""

import sys

import pytest
import torch

from tests.backends.triton_support import (assert_pool_clean, assert_same_bits_replayed, check_case,  # noqa: F401
                                           interpreted_fixture, poisoned, prove_contract, same_bits,
                                           shuffled_programs)

OP, NAME = "moe_router", "triton"
LASTBLOCK = "triton_lastblock"
PREFETCH = "triton_prefetch"
kernels = interpreted_fixture("moe_router")
#: the decode token counts the bitwise tests run: one token, a few, and the most the decode GEMV takes (T < 16)
DECODE_T = (1, 3, 15)


def tokens(t, d, e, k, ng, tg, seed):
    g = torch.Generator().manual_seed(seed)
    return dict(x=torch.randn(t, d, generator=g), weight=torch.randn(e, d, generator=g) * d ** -0.5,
                bias=torch.randn(e, generator=g) * 0.1, top_k=k, n_group=ng, topk_group=tg, scale=2.446,
                renorm_eps=1e-20)


@pytest.mark.parametrize("name,fn", [(NAME, "moe_router"), (LASTBLOCK, "moe_router_lastblock"),
                                     (PREFETCH, "moe_router_prefetch")])
def test_contract_cases_in_interpreter(kernels, name, fn):
    prove_contract(OP, name, getattr(kernels, fn))


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
            check_case(OP, LASTBLOCK, kernels.moe_router_lastblock, [tokens(2, 1100, 37, 4, 1, 1, 9)],
                       label=f"tune {variant}")
            check_case(OP, PREFETCH, kernels.moe_router_prefetch, [tokens(2, 1100, 37, 4, 1, 1, 9)],
                       label=f"tune {variant}")
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


@pytest.mark.parametrize("d,e,k,ng,tg", [(64, 24, 5, 3, 2), (48, 64, 8, 1, 1), (20, 6, 6, 6, 6), (1100, 37, 4, 1, 1)])
def test_lastblock_is_bitwise_the_two_launch_router_in_interpreter(kernels, poisoned, d, e, k, ng, tg):
    """moe_router_lastblock gives moe_router's bits (weights and ids) for T = 1, 3, 15 (all decode: T < 16; one token,
    a few, the most the GEMV takes), grouped and ungrouped, groups of one expert, an expert count no block divides;
    programs run in a shuffled order, so the token's last program is not the highest block; the counters are zero
    after every call. (T only sizes the grid's token axis and the counters; T = 8 as well ran the same code again.)"""
    arrival = sys.modules[kernels.counters.__module__]  # the interpreted copy of sparkops_triton._arrival
    with shuffled_programs(e + d) as shuffled:
        for t in DECODE_T:
            call = tokens(t, d, e, k, ng, tg, t + d)
            w1, i1 = kernels.moe_router(**call)
            w2, i2 = kernels.moe_router_lastblock(**call)
            assert torch.isfinite(w1).all() and same_bits(w2, w1) and same_bits(i2, i1), t
            assert_pool_clean(arrival)
    assert shuffled


class LaunchSpy:
    """Stands in for a kernel: records each launch's keyword arguments, then launches the kernel."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append(kwargs)
            return self.kernel[grid](*args, **kwargs)

        return launch


@pytest.mark.parametrize("d,e,k,ng,tg", [(64, 24, 5, 3, 2), (48, 64, 8, 1, 1), (20, 6, 6, 6, 6), (1100, 37, 4, 1, 1),
                                         (2300, 16, 4, 4, 2), (4100, 6, 2, 1, 1)])
def test_prefetch_is_bitwise_the_lastblock_router_in_interpreter(kernels, poisoned, monkeypatch, d, e, k, ng, tg):
    """moe_router_prefetch gives moe_router_lastblock's bits (weights and ids) for T = 1, 3, 15, with D never a
    multiple of the 512-wide tile (the last tile's mask runs; 1100: three tiles, 2300: five), grouped and ungrouped,
    an expert count no block divides, the programs shuffled, the counters zero after every call; the GEMV took the
    PREFETCH path with NT = cdiv(D, 512), except past ROUTER_PREFETCH_MAX_TILES tiles (4100: 9), where it runs the
    loop. At T = 16 (prefill) both are the two-launch router."""
    arrival = sys.modules[kernels.counters.__module__]  # the interpreted copy of sparkops_triton._arrival
    spy = LaunchSpy(kernels._logits_gemv_kernel)
    monkeypatch.setattr(kernels, "_logits_gemv_kernel", spy)
    tiles = -(-d // kernels.ROUTER_GEMV_BD)
    deep = tiles <= kernels.ROUTER_PREFETCH_MAX_TILES
    with shuffled_programs(e + d + 1) as shuffled:
        for t in DECODE_T:
            call = tokens(t, d, e, k, ng, tg, t + d)
            w1, i1 = kernels.moe_router_lastblock(**call)
            w2, i2 = kernels.moe_router_prefetch(**call)
            assert torch.isfinite(w1).all() and same_bits(w2, w1) and same_bits(i2, i1), t
            assert_pool_clean(arrival)
            plain, prefetch = spy.launches[-2:]
            assert not plain["PREFETCH"] and (prefetch["PREFETCH"], prefetch["NT"]) == (deep, tiles if deep else 0)
    assert shuffled
    call = tokens(16, d, e, k, ng, tg, d)
    w1, i1 = kernels.moe_router_lastblock(**call)
    w2, i2 = kernels.moe_router_prefetch(**call)
    assert same_bits(w2, w1) and same_bits(i2, i1)


@pytest.mark.gpu
def test_gpu_contract_cases_and_48b_timing():
    from sparkops_triton._workloads import router_args, time_calls
    from sparkops_triton.moe_router import moe_router, moe_router_lastblock

    prove_contract(OP, NAME, moe_router, "cuda", seeds=(0, 1))
    check_case(OP, NAME, moe_router, [tokens(300, 2304, 256, 8, 1, 1, 8)], device="cuda", label="48b_300_tokens")
    for t in (1, 4096):
        sets, nbytes = router_args(t)
        print(f"\n{OP}=triton T={t} E=256 D=2304 k=8: {time_calls(moe_router, sets, nbytes)}")
    prove_contract(OP, LASTBLOCK, moe_router_lastblock, "cuda", seeds=(0, 1))
    for t in (1, 8):
        sets, nbytes = router_args(t)
        print(f"\n{OP}=triton_lastblock T={t} E=256 D=2304 k=8: {time_calls(moe_router_lastblock, sets, nbytes)}")


@pytest.mark.gpu
@pytest.mark.parametrize("ng,tg", [(1, 1), (8, 4)])
def test_gpu_lastblock_is_bitwise_the_two_launch_router(ng, tg):
    """E = 256, D = 2304, top-8 (the 48B's router; n_group 1, and grouped 8/4), bfloat16 x, T = 1, 3, 8, 15:
    moe_router_lastblock gives moe_router's bits eagerly, and replayed from CUDA graphs with new activations each
    replay (the arrival counters reset themselves)."""
    from sparkops_triton.moe_router import moe_router, moe_router_lastblock

    assert_router_bits_replayed(moe_router, moe_router_lastblock, ng, tg, 48)


def assert_router_bits_replayed(old, new, ng: int, tg: int, seed: int) -> None:
    """The 48B's router (E = 256, D = 2304, top-8, grouping ng/tg), bfloat16 x, T = 1, 3, 8, 15: `new` gives `old`'s
    bits eagerly and replayed from CUDA graphs with new activations each replay (`assert_same_bits_replayed`)."""
    dev = torch.device("cuda")
    base = tokens(15, 2304, 256, 8, ng, tg, seed)
    weight, bias = base["weight"].to(dev), base["bias"].to(dev)
    rest = (8, ng, tg, 2.446, 1e-20)
    for t in (1, 3, 8, 15):
        xs = [torch.randn(t, 2304, device=dev).to(torch.bfloat16) for _ in range(2)]

        def change(r, xs=xs):
            for x in xs:
                x.copy_(torch.randn_like(x, dtype=torch.float32))

        assert_same_bits_replayed(lambda i, xs=xs: old(xs[i], weight, bias, *rest),
                                  lambda i, xs=xs: new(xs[i], weight, bias, *rest), change)


@pytest.mark.gpu
@pytest.mark.parametrize("ng,tg", [(1, 1), (8, 4)])
def test_gpu_prefetch_is_bitwise_the_lastblock_router(ng, tg):
    """E = 256, D = 2304 (5 tiles, all loads up front), top-8, n_group 1 and grouped 8/4, bfloat16 x, T = 1, 3, 8, 15:
    moe_router_prefetch passes the gate's contract cases and gives moe_router_lastblock's bits eagerly, and replayed
    from CUDA graphs with new activations each replay."""
    from sparkops_triton.moe_router import moe_router_lastblock, moe_router_prefetch

    if (ng, tg) == (1, 1):
        prove_contract(OP, PREFETCH, moe_router_prefetch, "cuda", seeds=(0, 1))
    assert_router_bits_replayed(moe_router_lastblock, moe_router_prefetch, ng, tg, 49)


@pytest.mark.gpu
@pytest.mark.parametrize("t", [1, 8])
def test_gpu_prefetch_timing(t):
    """Does issuing the loads up front pay? The 48B's 26 routers (26 float32 weights of 256 x 2304, 61 MB: beyond
    the L2) called in rotation in one CUDA graph: triton (GEMV + routing launch), triton_lastblock and
    triton_prefetch, microseconds per call (median of the replays). Bits checked against triton_lastblock once."""
    from sparkops_triton._workloads import router_args
    from sparkops_triton.moe_router import moe_router, moe_router_lastblock, moe_router_prefetch
    from tests.backends.test_triton_linear import time_in_graph

    sets, _ = router_args(t, n_sets=26)
    for args in sets[:2]:
        assert all(same_bits(a, b) for a, b in zip(moe_router_lastblock(*args), moe_router_prefetch(*args)))
    times = {name: time_in_graph(lambda i, fn=fn: fn(*sets[i]), len(sets))
             for name, fn in ((NAME, moe_router), (LASTBLOCK, moe_router_lastblock), (PREFETCH, moe_router_prefetch))}
    print(f"\n{OP} T={t} E=256 D=2304 k=8, {len(sets)} routers in one graph, us per call: "
          + ", ".join(f"{name} {sec * 1e6:.2f}" for name, sec in times.items())
          + f"; prefetch/lastblock {times[PREFETCH] / times[LASTBLOCK]:.3f}")
