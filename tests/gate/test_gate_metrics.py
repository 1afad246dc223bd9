"""The gate's pieces on their own: metrics, tie handling, poisoning, case names, the model-level verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.utils.deterministic as deterministic

from sparkops.errors import BadInput
from sparkops.gate import metrics
from sparkops.gate.cases import PINNED_SEEDS, default_seeds, find_case, split_name
from sparkops.gate.model_gate import DepthResult, judge_depths, parse_depths, prompt_tokens, worst_depth
from sparkops.gate.poison import poisoned, spoil
from sparkops.gate.tolerances import MODEL_RULES, Rule, loosest, rule_for


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_nmse_value_and_the_worst_element():
    ref = _randn(4, 8)
    got = ref.clone()
    got[2, 5] += 0.5
    v = metrics.nmse("output", got, ref, 1e-10)
    assert not v.passed and math.isclose(v.value, 0.25 / float((ref.double() ** 2).sum()), rel_tol=1e-6)
    assert "worst at [2, 5]" in v.detail and f"expected {float(ref[2, 5]):.9g}" in v.detail
    assert metrics.nmse("output", ref.clone(), ref, 0.0).passed


def test_nan_where_the_reference_is_finite_fails_outright():
    ref = _randn(3, 4)
    got = ref.clone()
    got[1, 2] = float("nan")
    v = metrics.nmse("output", got, ref, 1.0)
    assert not v.passed and v.value == math.inf and "never written" in v.detail and "[1, 2]" in v.detail


def test_structure_shape_and_dtype():
    ref = _randn(3, 4)
    assert "shape [4, 3]" in metrics.structure("o", _randn(4, 3), ref, exact_dtype=True).detail
    assert "dtype torch.bfloat16" in metrics.structure("o", ref.bfloat16(), ref, exact_dtype=True).detail
    assert metrics.structure("o", ref.bfloat16(), ref, exact_dtype=False) is None  # a bf16 claim's output
    ids = torch.arange(4)
    assert "dtype torch.int32" in metrics.structure("o", ids.int(), ids, exact_dtype=False).detail
    assert "expected a torch.Tensor" in metrics.structure("o", [1, 2], ids, exact_dtype=False).detail


def test_same_bytes_sees_a_last_bit_difference_and_negative_zero():
    a = _randn(16)
    b = a.clone()
    b[3] = torch.nextafter(b[3], torch.tensor(float("inf")))
    v = metrics.same_bytes("output", b, a, "chain")
    assert not v.passed and v.value == 1 and "[3]" in v.detail
    z = torch.zeros(2)
    assert not metrics.same_bytes("o", -z, z, "chain").passed  # equal values, different bits
    assert metrics.same_bytes("o", a.clone(), a, "chain").passed


def _router_inputs(e=8, d=16, t=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return dict(x=torch.randn(t, d, generator=g), weight=torch.randn(e, d, generator=g) * d ** -0.5,
                bias=torch.zeros(e), top_k=2, n_group=1, topk_group=1, scale=2.0, renorm_eps=1e-20)


def _route(inp, ids):
    s = torch.sigmoid(inp["x"].double() @ inp["weight"].double().T)
    chosen = s.gather(1, ids)
    return (chosen / chosen.sum(-1, keepdim=True) * inp["scale"]).float(), ids


def test_router_excuses_a_near_tie_and_refuses_a_real_swap():
    inp = _router_inputs()
    s = torch.sigmoid(inp["x"].double() @ inp["weight"].double().T)
    order = torch.argsort(s, dim=-1, descending=True)
    ref = _route(inp, order[:, :2].contiguous())
    rule = Rule("router", 1e-10, tie=1e-5)
    assert all(v.passed for v in metrics.router("out", ref, ref, inp, rule))
    swapped = order[:, [0, 2]].contiguous()  # both tokens pick their 3rd expert instead of the 2nd
    verdicts = metrics.router("out", _route(inp, swapped), ref, inp, rule)
    assert not verdicts[0].passed and "not a tie" in verdicts[0].detail

    one = _router_inputs(t=1)
    s = torch.sigmoid(one["x"].double() @ one["weight"].double().T)[0]
    order = torch.argsort(s, descending=True)
    bias = torch.zeros(8, dtype=torch.float64)
    bias[order[2]] = s[order[1]] - s[order[2]] - 1e-9  # the 3rd expert's selection score now ties the 2nd's
    one["bias"] = bias.float()
    ref = _route(one, order[None, :2].contiguous())
    other = _route(one, order[None, [0, 2]].contiguous())  # the other side of the tie, with its own weights
    verdicts = metrics.router("out", other, ref, one, rule)
    assert all(v.passed for v in verdicts), [v.line() for v in verdicts]
    assert "near-ties (excused)" in verdicts[0].detail


def test_router_checks_the_weights_of_the_chosen_ids():
    inp = _router_inputs()
    s = torch.sigmoid(inp["x"].double() @ inp["weight"].double().T)
    ids = torch.argsort(s, dim=-1, descending=True)[:, :2].contiguous()
    ref = _route(inp, ids)
    unscaled = (ref[0] / inp["scale"], ids)  # the missing routed scaling factor
    verdicts = metrics.router("out", unscaled, ref, inp, Rule("router", 1e-10, tie=1e-5))
    assert verdicts[0].passed and not verdicts[1].passed


def test_sample_excuses_only_near_ties_among_tokens_that_may_survive():
    logits = torch.tensor([[5.0, 5.0 + 1e-9, 1.0, -3.0]])
    inp = dict(logits=logits, temperature=0.0, top_k=0, top_p=1.0, seed=0, step=torch.tensor([0]))
    rule = Rule("sample", tie=1e-5)
    assert metrics.sample("out", torch.tensor([0]), torch.tensor([1]), inp, rule)[0].passed  # greedy near-tie
    assert not metrics.sample("out", torch.tensor([2]), torch.tensor([1]), inp, rule)[0].passed
    # with temperature: token 3 can never survive top_k = 2, whatever the noise
    hot = dict(inp, temperature=1.0, top_k=2)
    v = metrics.sample("out", torch.tensor([3]), torch.tensor([1]), hot, rule)[0]
    assert not v.passed and "not a tie" in v.detail


def test_poisoning_fills_fresh_memory_and_restores_every_setting():
    before = (torch.are_deterministic_algorithms_enabled(), deterministic.fill_uninitialized_memory)
    with poisoned():
        assert torch.isnan(torch.empty(5)).all() and (torch.empty(3, dtype=torch.int64) == 2**63 - 1).all()
        assert np.isnan(np.empty(4)).all()
    assert (torch.are_deterministic_algorithms_enabled(), deterministic.fill_uninitialized_memory) == before
    out, keep = torch.ones(3), torch.ones(2)
    spoil((out, keep[:1]), [keep])  # a result that aliases an input is never spoiled
    assert torch.isnan(out).all() and (keep == 1).all()


def test_pinned_and_fresh_seeds_and_case_names():
    seeds = default_seeds()
    assert seeds[:2] == PINNED_SEEDS and len(seeds) == 3 and seeds[2] not in PINNED_SEEDS
    assert len({default_seeds()[2] for _ in range(5)}) > 1  # fresh on every run: not a constant
    assert split_name("T5_D96@1234") == ("T5_D96", 1234)
    with pytest.raises(BadInput, match="@SEED"):
        split_name("T5_D96")
    case = find_case("swiglu", "T9_F200@77")
    assert case.name == "T9_F200@77" and case.calls[0]["gate"].shape == (9, 200)
    with pytest.raises(BadInput, match="its cases are"):
        find_case("swiglu", "T9_F201@77")


def test_the_tolerance_table_answers_for_every_op_and_refuses_unknown_variants():
    from sparkops.ops import OP_NAMES

    for op in OP_NAMES:
        assert rule_for(op, None).metric in ("nmse", "exact", "router", "sample", "qdq", "norm_router")
    with pytest.raises(BadInput, match="no tolerance row for variant 'act_q8'"):
        rule_for("rmsnorm", "act_q8")
    assert loosest([None, "act_q8", None]) == "act_q8" and loosest([None, "bf16", "act_q8"]) == "bf16"


def test_kl_and_top1_on_synthetic_logits():
    ref = _randn(6, 50) * 3
    kl, agree = metrics.kl_and_top1(ref, ref.clone(), tie=1e-4)
    assert np.allclose(kl, 0.0, atol=1e-15) and agree.all()
    cand = ref.clone()
    cand[2] *= 2.0  # sharper distribution at one position
    cand[4] = float("nan")  # a poisoned row
    best = ref[5].argmax()
    cand[5, best] -= 100.0  # the top-1 moves away at position 5
    kl, agree = metrics.kl_and_top1(ref, cand, tie=1e-4)
    assert kl[2] > 1e-3 and kl[4] == math.inf and kl[5] > 0.1
    assert list(agree) == [True, True, True, True, False, False]


def test_the_verdict_is_the_worst_depth():
    rule = MODEL_RULES["fp32"]
    ref = {d: _randn(d + 3, 40, seed=d) for d in (1, 64, 65)}
    cand = {d: r.clone() for d, r in ref.items()}
    cand[64][10] += 0.01 * _randn(40, seed=99)  # a small error at one position of one depth
    results = judge_depths(ref, cand, rule)
    assert [r.passed for r in results] == [True, False, True]
    w = worst_depth(results)
    assert w.depth == 64 and w.worst_position == 10 and w.kl_max > rule.kl_max
    assert worst_depth([DepthResult(1, 4, 0.0, 0.0, 1.0, 0, True)]).depth == 1


def test_depth_arguments_and_the_seeded_prompt():
    assert parse_depths("1, 63,64 131072") == (1, 63, 64, 131072)
    with pytest.raises(BadInput):
        parse_depths("0,5")
    with pytest.raises(BadInput):
        parse_depths("131073")
    long, short = prompt_tokens(320, 3000), prompt_tokens(320, 100)
    assert long[:100] == short and len(set(long)) > 200 and max(long) < 320
