"""Routing pinned to the golden run (sparkops.gate.routing): decisions judged as decisions, logits as numbers.

The tape is indexed by (MoE layer, position), so chunking cannot misalign it; a near-tie flip takes the
golden's experts, weighted by the contract's formula on the candidate's own scores; a router whose choice
is not a top-k of its own scores is refused, whatever the golden chose. On k3-nano, bfloat16 activations
free-running reach KL ~0.7 from flipped decisions; pinned, the same numbers are within ~1e-3.
"""

from __future__ import annotations

import pytest
import torch

from sparkops.cli import main
from sparkops.gate.model_gate import model_check
from sparkops.gate.routing import RoutingPin, selection_scores

from .test_gate_model import torch_registry

E, D, K = 8, 4, 2


def _router(bias_used: bool = True):
    """The contract's router in float64 (n_group 1), optionally without the selection bias (a wrong one)."""

    def route(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
        s, sel = selection_scores(x, weight, bias if bias_used else torch.zeros_like(bias), n_group, topk_group)
        ids = torch.sort(sel, dim=-1, descending=True, stable=True).indices[:, :top_k]
        w = s.gather(1, ids)
        return w / (w.sum(-1, keepdim=True) + renorm_eps) * scale, ids

    return route


def _inputs(t: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(t, D, generator=g, dtype=torch.float64), torch.randn(E, D, generator=g, dtype=torch.float64),
            torch.randn(E, generator=g, dtype=torch.float64) * 0.1)


def _call(fn, x, w, b):
    return fn(x, w, b, K, 1, 1, 2.5, 1e-20)


def test_the_tape_follows_positions_whatever_the_chunking():
    x, w, b = _inputs(8)
    rec = RoutingPin(n_moe=2, tie=1e-5)
    rec.start(5, replay=False)
    router = rec.wrap(_router())
    for lo, hi in ((0, 5), (5, 8)):  # two chunks, each through both MoE layers
        _call(router, x[lo:hi], w, b)
        _call(router, x[lo:hi] * 2, w, b)
    rep = RoutingPin(n_moe=2, tie=1e-5)
    rep.tape = rec.tape
    rep.start(5, replay=True)
    router = rep.wrap(_router())
    for lo, hi in ((0, 2), (2, 8)):  # other chunks: same positions
        _call(router, x[lo:hi], w, b)
        _call(router, x[lo:hi] * 2, w, b)
    r = rep.finish()
    assert (r.decisions, r.flips, r.inconsistent) == (16, 0, 0) and r.passed


def test_a_flip_takes_the_golden_experts_weighted_by_the_candidates_scores():
    x, w, b = _inputs(6, seed=3)
    rec = RoutingPin(n_moe=1, tie=1e-5)
    rec.start(1, replay=False)
    golden_w, golden_ids = _call(rec.wrap(_router()), x, w, b)
    # the candidate's input differs a little; pick the perturbation so that token 0's k-th choice changes
    s, sel = selection_scores(x, w, b, 1, 1)
    order = torch.sort(sel[0], descending=True).indices
    x2 = x.clone()
    rep = RoutingPin(n_moe=1, tie=1e-5)
    rep.tape = rec.tape
    rep.start(1, replay=True)
    # a candidate router that swaps token 0's k-th expert for the (k+1)-th, consistent with its own scores:
    # raise the (k+1)-th expert's bias just past the k-th in the candidate's call
    b2 = b.clone()
    gap = float(sel[0, order[K - 1]] - sel[0, order[K]])
    b2[order[K]] += gap * 1.001 + 1e-12
    cw, cids = _call(rep.wrap(_router()), x2, w, b2)
    r = rep.finish()
    assert r.flips >= 1 and r.inconsistent == 0 and r.max_flip_margin > 0
    assert torch.equal(torch.sort(cids[0]).values, torch.sort(golden_ids[0]).values)  # the golden's experts
    s2, _ = selection_scores(x2, w, b2, 1, 1)
    want = s2[0, golden_ids[0]] / s2[0, golden_ids[0]].sum() * 2.5
    assert torch.allclose(cw[0].double(), want)


def test_a_router_that_does_not_choose_its_own_top_k_is_refused():
    x, w, b = _inputs(16, seed=5)
    b = b * 20  # a bias that matters
    rec = RoutingPin(n_moe=1, tie=1e-5)
    rec.start(1, replay=False)
    _call(rec.wrap(_router()), x, w, b)
    rep = RoutingPin(n_moe=1, tie=1e-5)
    rep.tape = rec.tape
    rep.start(1, replay=True)
    _call(rep.wrap(_router(bias_used=False)), x, w, b)
    r = rep.finish()
    assert r.inconsistent > 0 and not r.passed and r.worst_inconsistency > 0
    assert "not a top-k of the router's own scores" in r.line()


def test_a_replay_needs_the_depth_recorded():
    pin = RoutingPin(n_moe=1, tie=1e-5)
    with pytest.raises(KeyError, match="depth 7"):
        pin.start(7, replay=True)


@pytest.fixture(scope="module")
def weights():
    from sparkops.engine import load_model

    return load_model("k3-nano")


def test_bf16_activations_pinned_compare_numbers_not_flips(tmp_path, catalog, weights):
    reg = torch_registry(tmp_path / "r.toml")
    args = dict(depths=(1, 129, 1024), decode_steps=3, catalog=catalog, weights=weights, dtype=torch.bfloat16)
    free = model_check("k3-nano", reg, free_routing=True, **args)
    pinned = model_check("k3-nano", reg, **args)
    assert not free.routing.pinned and free.worst.kl_max > 0.1  # flips, carried by the state, dominate
    assert pinned.routing.pinned and pinned.routing.flips > 0 and pinned.routing.passed
    assert pinned.worst.kl_max < 0.01 < free.worst.kl_max and pinned.passed
    assert pinned.routing.decisions == sum(d + 3 for d in (1, 129, 1024)) * 3  # k3-nano: 3 MoE layers
    assert "flipped" in pinned.report


def test_float32_under_the_pin_flips_nothing(tmp_path, catalog, weights):
    out = model_check("k3-nano", torch_registry(tmp_path / "r.toml"), depths=(1, 65), decode_steps=2,
                      catalog=catalog, weights=weights)
    assert out.passed and out.routing.flips == 0 and out.routing.decisions == (3 + 67) * 3


def test_check_model_cli_free_routing(tmp_path, capsys):
    reg = torch_registry(tmp_path / "r.toml")
    reg.save()
    assert main(["check", "--model", "k3-nano", "--registry", str(reg.path), "--depths", "1", "--free-routing"]) == 0
    assert "routing: free (asked for (--free-routing))" in capsys.readouterr().out
    assert main(["check", "--model", "k3-nano", "--registry", str(reg.path), "--depths", "1"]) == 0
    assert "routing pinned to the golden run: 0 of" in capsys.readouterr().out
    assert main(["check", "rmsnorm=torch", "--free-routing"]) == 2  # a model-gate option without --model
    assert "--free-routing" in capsys.readouterr().err
