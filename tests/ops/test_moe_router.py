"""moe_router: every implementation against the reference; the reference against a direct torch
implementation of spec 5 (grouped top-k included); the rules that catch spec 7 bug 11 (bias only
chooses, renormalise, scale) and the contract's ordering and masking details."""

import re

import pytest
import torch

from sparkops.errors import BadInput
from sparkops_numpy.moe_router import moe_router

from ._check import check_against_reference, rel_l2

OP = "moe_router"


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


def torch_router(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
    """Spec 5 steps 1-4 with torch ops, float64."""
    s = torch.sigmoid(x.double() @ weight.double().T)  # [T, E]
    chooser = s + bias.double()
    t, e = s.shape
    per_group = chooser.view(t, n_group, e // n_group)
    group_score = per_group.topk(min(2, e // n_group), dim=-1).values.sum(-1)  # [T, G]
    kept = torch.zeros(t, n_group, dtype=torch.bool)
    kept.scatter_(1, group_score.topk(topk_group, dim=-1).indices, True)
    chooser = chooser.masked_fill(~kept.repeat_interleave(e // n_group, dim=1), 0.0)
    ids = chooser.topk(top_k, dim=-1, sorted=True).indices
    w = s.gather(1, ids)
    return w / (w.sum(-1, keepdim=True) + renorm_eps) * scale, ids


def make_router(seed, t, d, e, bias_std=0.1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(t, d, generator=g), torch.randn(e, d, generator=g) * d ** -0.5,
            torch.randn(e, generator=g) * bias_std)


@pytest.mark.parametrize("t,d,e,k,ng,tg", [(6, 64, 16, 4, 1, 1), (9, 48, 32, 8, 4, 2), (5, 32, 20, 3, 5, 3),
                                           (4, 64, 64, 6, 8, 3)])
def test_reference_matches_direct_torch_routing(t, d, e, k, ng, tg):
    x, w, b = make_router(t * e + ng, t, d, e)
    got_w, got_ids = moe_router(x, w, b, k, ng, tg, 2.446, 1e-20)
    want_w, want_ids = torch_router(x, w, b, k, ng, tg, 2.446, 1e-20)
    assert got_w.dtype == torch.float32 and got_ids.dtype == torch.int64 and got_ids.shape == (t, k)
    assert torch.equal(got_ids, want_ids)
    assert rel_l2(got_w, want_w) < 1e-6


def test_group_limit_changes_the_choice_when_it_should():
    """With 4 groups and 1 kept, every chosen id lies in one group, and this data picks differently
    from plain top-k (so the grouped path is really exercised)."""
    x, w, b = make_router(11, 8, 48, 32)
    _, grouped = moe_router(x, w, b, 6, 4, 1, 1.0, 1e-20)
    _, plain = moe_router(x, w, b, 6, 1, 1, 1.0, 1e-20)
    assert ((grouped // 8) == (grouped[:, :1] // 8)).all()
    assert not torch.equal(grouped, plain)
    assert torch.equal(grouped, torch_router(x, w, b, 6, 4, 1, 1.0, 1e-20)[1])


def test_bias_chooses_but_never_weighs(impl_fn):
    """A large bias forces experts in; their weights are still their unbiased sigmoid scores, renormalised
    and scaled (spec 7 bug 11)."""
    x, w, _ = make_router(12, 3, 64, 16)
    bias = torch.zeros(16)
    bias[[2, 9, 13]] = torch.tensor([10.0, 12.0, 11.0])  # s' order: 9, 13, 2
    weights, ids = impl_fn(x, w, bias, 3, 1, 1, 2.446, 1e-20)
    assert torch.equal(ids, torch.tensor([[9, 13, 2]] * 3))
    s = torch.sigmoid(x.double() @ w.double().T)[:, [9, 13, 2]]
    assert rel_l2(weights, s / s.sum(-1, keepdim=True) * 2.446) < 1e-6
    assert torch.allclose(weights.double().sum(-1), torch.full((3,), 2.446, dtype=torch.float64), rtol=1e-6)
    biased = s + bias[[9, 13, 2]].double()
    assert rel_l2(biased / biased.sum(-1, keepdim=True) * 2.446, s / s.sum(-1, keepdim=True) * 2.446) > 1e-2


def test_ties_go_to_the_lower_expert_id(impl_fn):
    x, w, _ = make_router(13, 2, 32, 8)
    w[6] = w[1]  # experts 1 and 6 score identically
    bias = torch.zeros(8)
    bias[[1, 6]] = 5.0
    _, ids = impl_fn(x, w, bias, 2, 1, 1, 1.0, 1e-20)
    assert torch.equal(ids, torch.tensor([[1, 6], [1, 6]]))


def test_masked_groups_score_zero_not_minus_infinity():
    """The contract follows the reference code: other groups' s' are set to 0.0. With negative s' in the
    kept group, zeroed experts outrank them (lowest ids first)."""
    x, w, _ = make_router(14, 1, 32, 8)
    bias = torch.tensor([-3.0] * 4 + [-5.0] * 4)  # group 0 (ids 0-3) wins the group vote, all its s' < 0
    _, ids = moe_router(x, w, bias, 2, 2, 1, 1.0, 1e-20)
    assert torch.equal(ids, torch.tensor([[4, 5]]))


def test_bad_grouping_is_a_named_error():
    x, w, b = make_router(15, 2, 32, 12)
    with pytest.raises(BadInput, match="n_group"):
        moe_router(x, w, b, 2, 5, 1, 1.0, 1e-20)
    with pytest.raises(BadInput, match="top_k"):
        moe_router(x, w, b, 13, 1, 1, 1.0, 1e-20)


@pytest.mark.parametrize("args,says", [((16, 4, 3, 1), "n_group=3 does not divide the 16 experts"),
                                       ((16, 4, 4, 5), "topk_group=5 must lie in [1, n_group=4]"),
                                       ((16, 17, 1, 1), "top_k=17 must lie in [1, 16]")])
def test_the_routing_arguments_the_routing_kernels_refuse_are_named(args, says):
    """ops/_routing.check_routing, which the cupy and Triton routers and the fused norm-router check their calls with."""
    from sparkops.ops._routing import check_routing

    with pytest.raises(BadInput, match=re.escape(f"my_op: {says}")):
        check_routing("my_op", *args)
    assert check_routing("my_op", 16, 4.0, 4, 2) == (4, 4, 2)
