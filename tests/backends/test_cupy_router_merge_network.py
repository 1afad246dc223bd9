"""The merged routing picks of moe_router=cupy_rowwarp_pdl_merge (router_route.cuh's rt_route_merge), checked on the
CPU from the header's own constants: the sorting network RT_SORT8 sorts every input (the 0-1 principle), and the
kernel's algorithm, a lane list of 8 sorted by it then 5 butterfly rounds keeping the top 8 of two lists, leaves
every lane holding the warp's top 8 in the reference's order (choosers descending, ties to the lower expert).

The GPU tests (test_cupy_moe_router.py, -k merge) hold the kernel to cupy_rowwarp's bits; these hold the design,
where a wrong exchange would show only on some inputs.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from tests.cuda_sass import KERNEL_DIR

HEADER = (KERNEL_DIR / "router_route.cuh").read_text()


def _network() -> list[tuple[int, int]]:
    body = re.search(r"#define RT_SORT8 \\\n((?:.*\\\n)*.*\n)", HEADER)
    assert body, "RT_SORT8 is not defined in router_route.cuh"
    return [(int(i), int(j)) for i, j in re.findall(r"\{(\d+), (\d+)\}", body.group(1))]


def _merge_k() -> int:
    return int(re.search(r"#define RT_MERGE_K (\d+)", HEADER).group(1))


def _sort(values: list[int], net: list[tuple[int, int]]) -> list[int]:
    """The network applied as the kernel's rt_exchange does: the larger to the first place."""
    v = list(values)
    for i, j in net:
        v[i], v[j] = max(v[i], v[j]), min(v[i], v[j])
    return v


def test_the_network_has_batchers_19_exchanges_and_sorts_every_0_1_input():
    net = _network()
    assert _merge_k() == 8 and len(net) == 19 and all(0 <= i < j < 8 for i, j in net), net
    for bits in itertools.product((0, 1), repeat=8):  # the 0-1 principle: then it sorts every input
        assert _sort(list(bits), net) == sorted(bits, reverse=True), bits


def test_a_network_missing_an_exchange_fails_the_0_1_check():
    """The check above can fail: without any one of its exchanges the network leaves some 0-1 input unsorted."""
    net = _network()
    for drop in range(len(net)):
        partial = net[:drop] + net[drop + 1:]
        assert any(_sort(list(b), partial) != sorted(b, reverse=True)
                   for b in itertools.product((0, 1), repeat=8)), drop


def _warp_top(ranks: np.ndarray, k: int, net: list[tuple[int, int]]) -> list[list[int]]:
    """rt_route_merge's algorithm on one warp: lane l holds ranks[j * 32 + l] (j < 8), sorts them, then 5 butterfly
    rounds (o = 16 .. 1) in which lane and partner l ^ o each keep max(A[i], B[k - 1 - i]) and sort it with the
    bitonic merge (pairs h apart, h = k / 2 .. 1). Each lane's final list."""
    lists = [_sort([int(ranks[j * 32 + lane]) for j in range(8)], net) for lane in range(32)]
    o = 16
    while o:
        new = []
        for lane in range(32):
            a, b = lists[lane], lists[lane ^ o]
            c = [max(a[i], b[k - 1 - i]) for i in range(k)]
            h = k // 2
            while h:
                for i in range(k):
                    if i & h == 0:
                        c[i], c[i + h] = max(c[i], c[i + h]), min(c[i], c[i + h])
                h //= 2
            new.append(c)
        lists = new
        o //= 2
    return lists


@pytest.mark.parametrize("experts", [256, 200, 37, 9])
@pytest.mark.parametrize("seed", range(6))
def test_every_lane_ends_with_the_warps_top_8_in_the_references_order(experts, seed):
    """Choosers with many exact ties (a few distinct values), the rank a chooser's order then the lower id (rt_rank);
    slots past the experts rank 0. Every lane's list is the top 8 by (chooser desc, id asc), as the reference's
    stable sort picks them."""
    rng = np.random.default_rng(seed)
    choosers = rng.integers(0, 12 if seed % 2 else 1 << 20, size=256)
    ids = np.arange(256)
    ranks = np.where(ids < experts, (choosers.astype(np.int64) + 1) << 32 | (0xFFFFFFFF - ids), 0)
    order = sorted(range(experts), key=lambda e: (-choosers[e], e))[:8]
    want = [int(ranks[e]) for e in order] + [0] * (8 - min(8, experts))
    for lane, got in enumerate(_warp_top(ranks, _merge_k(), _network())):
        assert got == want, (lane, got, want)
