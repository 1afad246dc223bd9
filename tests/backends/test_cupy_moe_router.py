"""moe_router=cupy_rowwarp on CUDA beyond the contract's cases: the 48B's shape (2304 x 256, top-8) and grouped
shapes against the NumPy reference by the gate's router rule, rows longer than one round trip of loads, the arrival
counters left at zero, a captured CUDA graph replayed, and the stated policy for the calls it does not take.

Skipped with a reason where there is no CUDA device (tests/conftest.py) or no CuPy.
"""

from __future__ import annotations

import pytest
import torch

from sparkops.gate.metrics import router as router_verdicts
from sparkops.gate.tolerances import rule_for
from sparkops.plugins import load_catalog

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")

from sparkops_cupy import moe_router as cmr  # noqa: E402  (after the skip)

DEV = torch.device("cuda")


def _args(seed, t, d, e, k, n_group=1, topk_group=1, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return dict(x=torch.randn(t, d, generator=g).to(dtype),
                weight=torch.randn(e, d, generator=g) * d ** -0.5,
                bias=torch.randn(e, generator=g) * 0.1,
                top_k=k, n_group=n_group, topk_group=topk_group, scale=2.446, renorm_eps=1e-20)


def _judge(args, got):
    """The gate's router verdicts of `got` against the NumPy reference on the same (CPU) inputs."""
    ref = load_catalog().reference("moe_router").resolve()(**args)
    inputs = {k: (v.float() if isinstance(v, torch.Tensor) else v) for k, v in args.items()}
    verdicts = router_verdicts("moe_router", got, ref, inputs, rule_for("moe_router", None))
    assert all(v.passed for v in verdicts), [str(v) for v in verdicts]


def _on(args, device):
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in args.items()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("t", [1, 3, 8])
@pytest.mark.parametrize("d,e,k,n_group,topk_group", [
    (2304, 256, 8, 1, 1),  # the 48B: one round trip of loads a row
    (4096, 64, 6, 8, 4),  # groups (DeepSeek-V3's 8 keep 4), a row of two round trips
    (7168, 512, 32, 32, 7),  # the limits: 512 experts, top-32, 32 groups of 16; three round trips
    (12, 37, 5, 1, 1),  # a row shorter than a warp's first chunk, experts not a multiple of the warps a block
    (64, 20, 3, 5, 3),  # the contract's odd grouped case: groups of 4
])
def test_rowwarp_router_matches_the_reference(dtype, t, d, e, k, n_group, topk_group):
    args = _args(d + e + t, t, d, e, k, n_group, topk_group, dtype)
    weights, ids = cmr.moe_router_rowwarp(**_on(args, DEV))
    torch.cuda.synchronize()
    assert weights.shape == (t, k) and weights.dtype == torch.float32 and ids.dtype == torch.int64
    _judge(args, (weights.cpu(), ids.cpu()))
    assert not cmr.pool_on(DEV).any(), "a launch left an arrival counter above zero"


def test_rowwarp_router_breaks_exact_ties_to_the_lower_expert():
    """Experts whose weight rows and biases are equal get equal scores bit for bit: the lower id must come first, as
    the reference's stable sort orders them. One group of four is kept; its experts 8..15 choose below zero, so the
    dropped groups' 0.0 (not -inf) beats them and their lowest ids fill the last picks."""
    args = _args(5, 2, 256, 64, 12, n_group=4, topk_group=1)
    args["weight"][1:6] = args["weight"][0]  # experts 0..5: one row
    args["bias"][:16] += 1.0  # group 0 kept
    args["bias"][1:6] = args["bias"][0]
    args["bias"][8:16] = -5.0
    weights, ids = cmr.moe_router_rowwarp(**_on(args, DEV))
    ref_w, ref_ids = load_catalog().reference("moe_router").resolve()(**args)
    assert ref_ids[:, :6].sort().values.tolist() == [list(range(6))] * 2 and ref_ids[:, 8:].tolist() == [
        [16, 17, 18, 19]] * 2, ref_ids  # the case is what it says
    assert torch.equal(ids.cpu(), ref_ids), (ids.cpu(), ref_ids)
    _judge(args, (weights.cpu(), ids.cpu()))


def test_rowwarp_router_replays_from_a_cuda_graph():
    """The decode step is one captured graph: the counters must return to zero so that each replay routes afresh."""
    args = _on(_args(11, 1, 2304, 256, 8), DEV)
    x = args.pop("x")
    cmr.moe_router_rowwarp(x, **args)  # the warm-up call creates the counters outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            w_out, id_out = cmr.moe_router_rowwarp(x, **args)
        for seed in (1, 2, 3):
            x.copy_(torch.randn(x.shape, generator=torch.Generator().manual_seed(seed)).to(DEV))
            graph.replay()
            torch.cuda.synchronize()
            want_w, want_ids = cmr.moe_router_rowwarp(x, **args)
            assert torch.equal(id_out, want_ids) and torch.equal(w_out, want_w), seed
        assert not cmr.pool_on(DEV).any()
    finally:  # not left to the garbage collector: a graph freed during a later test's capture breaks that capture
        graph.reset()


@pytest.mark.parametrize("change", ["tokens", "bf16 weight", "odd row", "experts", "top_k"])
def test_rowwarp_router_hands_other_calls_to_the_torch_plugin(change):
    """The stated policy: a call the kernel does not take runs the torch plugin's moe_router, whose result it returns
    unchanged."""
    from sparkops_torch.moe_router import moe_router as torch_router

    t, d, e, k = {"tokens": (20, 256, 64, 8), "odd row": (1, 258, 64, 8), "experts": (1, 64, 520, 8),
                  "top_k": (1, 64, 64, 33)}.get(change, (1, 256, 64, 8))
    args = _on(_args(3, t, d, e, k), DEV)
    if change == "bf16 weight":
        args["weight"] = args["weight"].bfloat16()
    assert not cmr.rowwarp_serves(args["x"], args["weight"], args["top_k"], args["n_group"])
    got, want = cmr.moe_router_rowwarp(**args), torch_router(**args)
    assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0])


# ---- the other routing forms: the sorted tail (cupy_rowwarp_pdl_sorted) and the merged picks
# (cupy_rowwarp_pdl_merge), each cupy_rowwarp's bits; -k sorted or -k merge picks one form's tests ----

#: form id -> its launch (the ids are what the suite's proofs select by)
ROUTING_FORMS = {"sorted": cmr.moe_router_rowwarp_pdl_sorted, "merge": cmr.moe_router_rowwarp_pdl_merge}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("t", [1, 3, 8])
@pytest.mark.parametrize("d,e,k,n_group,topk_group", [
    (2304, 256, 8, 1, 1),  # the 48B: 8 experts a routing lane
    (2304, 256, 1, 1, 1),  # top-1: only lane 0 picks
    (4096, 64, 6, 8, 4),  # groups
    (7168, 512, 32, 32, 7),  # the limits: 16 experts a lane, top-32 (every lane a pick), 32 groups (merge: rt_route's)
    (1024, 257, 8, 1, 1),  # one expert past 8 a lane: merge hands the routing to rt_route
    (12, 37, 5, 1, 1),  # experts not a multiple of 32: lanes whose lists end early
    (64, 20, 3, 5, 3),
    (64, 9, 8, 1, 1),  # top-8 of 9 experts: 23 lanes with no expert at all
])
@pytest.mark.parametrize("form", sorted(ROUTING_FORMS))
def test_routing_form_gives_cupy_rowwarps_bits(form, dtype, t, d, e, k, n_group, topk_group):
    """A routing form changes how the routing warp finds its picks, not which: its weights and ids equal
    cupy_rowwarp's bit for bit (outputs pre-filled: the launch writes every element), and the counters end at zero."""
    args = _on(_args(d + e + t + 1, t, d, e, k, n_group, topk_group, dtype), DEV)
    want_w, want_ids = cmr.moe_router_rowwarp(**args)
    got_w, got_ids = ROUTING_FORMS[form](**args)
    torch.cuda.synchronize()
    assert torch.equal(got_ids, want_ids), (got_ids, want_ids)
    assert torch.equal(got_w, want_w)
    assert not cmr.pool_on(DEV).any(), "a launch left an arrival counter above zero"


@pytest.mark.parametrize("form", sorted(ROUTING_FORMS))
def test_routing_form_breaks_exact_ties_as_the_reference_does(form):
    """Experts 1, 2 and 33 get one weight row and one bias, the largest: 1 and 33 sit in one routing lane (its list
    must keep them in slot order), 2 in another (a tie of keys across lanes: the sorted form's second reduction, the
    merge's id half of the rank). The reference's stable sort orders them 1, 2, 33; the form must too, and give
    cupy_rowwarp's bits. Then the grouped tie case of test_rowwarp_router_breaks_exact_ties_to_the_lower_expert the
    same way."""
    route = ROUTING_FORMS[form]
    args = _args(5, 2, 256, 64, 12)
    for e in (2, 33):
        args["weight"][e] = args["weight"][1]
    args["bias"][[1, 2, 33]] = 2.0
    _, ref_ids = load_catalog().reference("moe_router").resolve()(**args)
    assert ref_ids[:, :3].tolist() == [[1, 2, 33]] * 2, ref_ids  # the case is what it says
    got_w, got_ids = route(**_on(args, DEV))
    assert torch.equal(got_ids.cpu(), ref_ids), (got_ids.cpu(), ref_ids)
    assert torch.equal(got_w, cmr.moe_router_rowwarp(**_on(args, DEV))[0])
    _judge(args, (got_w.cpu(), got_ids.cpu()))
    grouped = _args(5, 2, 256, 64, 12, n_group=4, topk_group=1)
    grouped["weight"][1:6] = grouped["weight"][0]
    grouped["bias"][:16] += 1.0
    grouped["bias"][1:6] = grouped["bias"][0]
    grouped["bias"][8:16] = -5.0
    got = route(**_on(grouped, DEV))
    want = cmr.moe_router_rowwarp(**_on(grouped, DEV))
    assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0])


@pytest.mark.parametrize("form", sorted(ROUTING_FORMS))
def test_routing_form_replays_from_a_cuda_graph_as_cupy_rowwarp_routes(form):
    route = ROUTING_FORMS[form]
    args = _on(_args(13, 1, 2304, 256, 8, dtype=torch.bfloat16), DEV)
    x = args.pop("x")
    route(x, **args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            w_out, id_out = route(x, **args)
        for seed in (1, 2, 3):
            x.copy_(torch.randn(x.shape, generator=torch.Generator().manual_seed(seed)).to(DEV, x.dtype))
            graph.replay()
            torch.cuda.synchronize()
            want_w, want_ids = cmr.moe_router_rowwarp(x, **args)
            assert torch.equal(id_out, want_ids) and torch.equal(w_out, want_w), seed
        assert not cmr.pool_on(DEV).any()
    finally:
        graph.reset()


@pytest.mark.parametrize("form", sorted(ROUTING_FORMS))
def test_routing_form_routes_a_nan_token_to_distinct_experts_in_range(form):
    """A NaN in token 0's x: its logits and weights are NaN, its ids still distinct experts in range (keys order NaN
    differently from float compares, so the picks may differ from cupy_rowwarp's there); token 1 as without it."""
    route = ROUTING_FORMS[form]
    args = _on(_args(17, 2, 2304, 256, 8), DEV)
    clean_w, clean_ids = route(**args)
    args["x"][0, 5] = float("nan")
    w, ids = route(**args)
    torch.cuda.synchronize()
    assert torch.isnan(w[0]).all()
    assert bool(((ids >= 0) & (ids < 256)).all()) and len(set(ids[0].tolist())) == 8, ids
    assert torch.equal(ids[1], clean_ids[1]) and torch.equal(w[1], clean_w[1])
    assert not cmr.pool_on(DEV).any()
