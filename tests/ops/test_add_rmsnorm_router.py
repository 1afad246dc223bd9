"""add_rmsnorm_router: every implementation against the reference; the reference is exactly the composition of the
add_rmsnorm and moe_router references as the graph chains them (the router reads normed rounded to x's dtype); the
metric judges the routing of the normed row an implementation returned, and fails a wrong norm, a routing of another
row and an unwritten output."""

import pytest
import torch

from sparkops.errors import BadInput
from sparkops.gate import metrics
from sparkops.gate.tolerances import rule_for
from sparkops.ops import get_contract
from sparkops_numpy.add_rmsnorm import add_rmsnorm
from sparkops_numpy.add_rmsnorm_router import add_rmsnorm_router
from sparkops_numpy.moe_router import moe_router

from ._check import check_against_reference

OP = "add_rmsnorm_router"
NORM = ("x", "residual", "weight", "eps")


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_reference_is_the_composition_bit_for_bit(seed, dtype):
    """The fused reference's four outputs are the unfused references' outputs, byte for byte, in every activation
    dtype: the router is handed normed as add_rmsnorm returns it (rounded to x's dtype), nothing more exact."""
    for case in get_contract(OP).cases(seed):
        call = dict(case.calls[0], x=case.calls[0]["x"].to(dtype), residual=case.calls[0]["residual"].to(dtype))
        normed, summed, w, ids = add_rmsnorm_router(**call)
        want_n, want_s = add_rmsnorm(*(call[k] for k in NORM))
        want_w, want_ids = moe_router(want_n, call["router_weight"], call["bias"], call["top_k"], call["n_group"],
                                      call["topk_group"], call["scale"], call["renorm_eps"])
        assert normed.dtype == summed.dtype == dtype and w.dtype == torch.float32 and ids.dtype == torch.int64
        for got, want in ((normed, want_n), (summed, want_s), (w, want_w), (ids, want_ids)):
            assert torch.equal(got, want), case.name


def test_cases_cover_one_token_odd_rows_expert_counts_and_groups():
    """The sweep the kernels need: T = 1 and a call past the decode kernels' 8 tokens, rows that are odd multiples of
    4 and one past a CUDA lane's round of loads, 16 to 256 experts, top-1 to top-8, one group and several."""
    calls = [c.calls[0] for c in get_contract(OP).cases(0)]
    ts = {c["x"].shape[0] for c in calls}
    ds = {c["x"].shape[1] for c in calls}
    es = {c["router_weight"].shape[0] for c in calls}
    assert 1 in ts and max(ts) > 8 and 8 in ts
    assert any(d % 8 == 4 for d in ds) and 2304 in ds and max(ds) > 2304 and all(d % 4 == 0 for d in ds)
    assert {16, 64, 256} <= es
    assert {c["top_k"] for c in calls} >= {1, 8} and {c["n_group"] for c in calls} >= {1, 4, 8}


def _call(seed=3, t=2, d=64, e=32, k=4):
    """One call's inputs, as the contract's cases draw them (a residual 3x the block output, a gain near one)."""
    g = torch.Generator().manual_seed(seed)
    return dict(x=torch.randn(t, d, generator=g), residual=torch.randn(t, d, generator=g) * 3,
                weight=1.0 + 0.2 * torch.randn(d, generator=g), eps=1e-5,
                router_weight=torch.randn(e, d, generator=g) * d ** -0.5, bias=torch.randn(e, generator=g) * 0.1,
                top_k=k, n_group=1, topk_group=1, scale=2.446, renorm_eps=1e-20)


def _verdicts(call, got, variant=None):
    ref = add_rmsnorm_router(**call)
    return metrics.norm_router("out", got, ref, call, rule_for(OP, variant), exact_dtype=True)


def test_the_metric_passes_the_reference_and_fails_what_is_wrong():
    call = _call()
    ref = add_rmsnorm_router(**call)
    assert all(v.passed for v in _verdicts(call, ref))
    normed, summed, w, ids = ref
    unwritten = normed.clone()
    unwritten[1, 5] = float("nan")  # a value never stored (the poison is NaN)
    assert not all(v.passed for v in _verdicts(call, (unwritten, summed, w, ids)))
    assert not all(v.passed for v in _verdicts(call, (normed, summed * 1.01, w, ids)))  # a wrong residual stream
    unscaled = w / 2.446  # the routed scaling factor forgotten
    assert not all(v.passed for v in _verdicts(call, (normed, summed, unscaled, ids)))
    flipped = ids.flip(-1)  # the right experts in the wrong order
    assert not all(v.passed for v in _verdicts(call, (normed, summed, w.flip(-1), flipped)))
    assert _verdicts(call, (normed, summed, w))[0].metric == "structure"


def test_the_routing_is_judged_on_the_normed_row_returned():
    """Routing the unrounded float32 row while returning it rounded to bfloat16 is a router reading another row than
    the one the op hands on: the routing verdicts fail it, though each output alone sits near the reference."""
    call = _call(seed=5, t=4, d=256, e=64, k=8)
    x16 = dict(call, x=call["x"].bfloat16(), residual=call["residual"].bfloat16())
    ref32 = add_rmsnorm_router(**dict(x16, x=x16["x"].float(), residual=x16["residual"].float()))
    own = add_rmsnorm_router(**x16)  # routed on its own bf16 normed row: right
    wrong = (own[0], own[1], ref32[2], ref32[3])  # the float32 row's routing beside the bf16 row
    rule = rule_for(OP, "bf16")
    assert all(v.passed for v in metrics.norm_router("o", own, ref32, x16, rule))
    assert not all(v.passed for v in metrics.norm_router("o", wrong, ref32, x16, rule))


def test_the_row_is_the_composition_of_its_parts():
    """The fused op's numbers are its parts' rows: add_rmsnorm's for the norm outputs, moe_router's for the routing."""
    for variant in ("fp32", "bf16"):
        rule, norm, router = rule_for(OP, variant), rule_for("add_rmsnorm", variant), rule_for("moe_router", variant)
        assert rule.metric == "norm_router" and rule.norm == norm.limit
        assert (rule.limit, rule.tie) == (router.limit, router.tie)


def test_a_router_weight_of_another_width_is_named(impl_fn):
    call = _call()
    with pytest.raises(BadInput, match="router_weight"):
        impl_fn(**dict(call, router_weight=call["router_weight"][:, :-4]))


def test_the_router_reads_the_normed_row_not_x(impl_fn):
    """Scaling x and the residual together leaves the normed row (an RMS norm is scale-free) and so the routing as
    they were; summed scales with them. A router fed x, or the sum before the norm, would route otherwise."""
    call = _call(seed=7, t=3, d=128, e=64, k=6)
    base = impl_fn(**call)
    scaled = impl_fn(**dict(call, x=call["x"] * 8.0, residual=call["residual"] * 8.0, eps=0.0))
    plain = impl_fn(**dict(call, eps=0.0))
    assert torch.equal(scaled[3], plain[3]) and torch.allclose(scaled[2], plain[2], rtol=1e-5)
    assert torch.allclose(scaled[1], 8.0 * base[1]) and torch.allclose(scaled[0], plain[0], rtol=1e-5, atol=1e-6)
