"""linear_add_rmsnorm: every implementation against the reference; the reference is exactly the composition of the
linear and add_rmsnorm references as the graph chains them (the projection's output rounded to x's dtype before the
add); the row is linear's own; the metric fails a wrong norm, a wrong stream and an unwritten output."""

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops.gate import metrics
from sparkops.gate.tolerances import rule_for
from sparkops.ops import get_contract
from sparkops.qweight import QWeight
from sparkops_numpy.add_rmsnorm import add_rmsnorm
from sparkops_numpy.linear import linear
from sparkops_numpy.linear_add_rmsnorm import linear_add_rmsnorm

from ._check import check_against_reference

OP = "linear_add_rmsnorm"


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_reference_is_the_composition_bit_for_bit(seed, dtype):
    """The fused reference's two outputs are the unfused references' outputs, byte for byte, in every activation
    dtype: add_rmsnorm is handed the projection's output as linear returns it (rounded to x's dtype)."""
    for case in get_contract(OP).cases(seed):
        call = dict(case.calls[0], x=case.calls[0]["x"].to(dtype), residual=case.calls[0]["residual"].to(dtype))
        normed, summed = linear_add_rmsnorm(**call)
        want_n, want_s = add_rmsnorm(linear(call["x"], call["weight"]), call["residual"], call["norm_weight"],
                                     call["eps"])
        assert normed.dtype == summed.dtype == dtype
        assert torch.equal(normed, want_n) and torch.equal(summed, want_s), case.name


def test_cases_are_linear_s_with_a_stream_a_gain_and_a_partial_block_of_rows():
    """The projection's inputs are linear's own cases (every weight type, one token and more), plus a one-token Q4_K
    call of 42 rows (the GEMV's last block of four rows half idle); each adds a residual [T, OUT] and a gain [OUT]."""
    fused = get_contract(OP).cases(0)
    plain = get_contract("linear").cases(0)
    assert [c.name for c in fused[:len(plain)]] == [c.name for c in plain]
    for f, p in zip(fused, plain):
        (fc,), (pc,) = f.calls, p.calls
        assert torch.equal(fc["x"], pc["x"]) and torch.equal(fc["weight"].raw, pc["weight"].raw)
    for case in fused:
        (c,) = case.calls
        t, n = c["x"].shape[0], c["weight"].shape[0]
        assert c["residual"].shape == (t, n) and c["norm_weight"].shape == (n,)
    one_token_q4k = [c.calls[0] for c in fused if c.calls[0]["x"].shape[0] == 1 and c.calls[0]["weight"].qtype == Q.Q4_K]
    assert {c["weight"].shape[0] % 4 for c in one_token_q4k} >= {0, 2}


def test_the_row_is_linear_s_row():
    """The fused op's limits are linear's for every variant it may claim (the norm adds ~1e-14)."""
    for variant in ("fp32", "bf16", "act_q8"):
        rule, plain = rule_for(OP, variant), rule_for("linear", variant)
        assert rule.metric == plain.metric == "nmse" and rule.limit == plain.limit


def test_the_metric_passes_the_reference_and_fails_what_is_wrong():
    g = torch.Generator().manual_seed(21)
    w = QWeight.from_float(torch.randn(40, 256, generator=g) * 0.05, Q.Q4_K, name="o_proj")
    call = dict(x=torch.randn(2, 256, generator=g), weight=w, residual=3 * 0.8 * torch.randn(2, 40, generator=g),
                norm_weight=1 + 0.2 * torch.randn(40, generator=g), eps=1e-5)
    ref = linear_add_rmsnorm(**call)
    limit = rule_for(OP, "fp32").limit

    def passed(got):
        return all(metrics.nmse(f"out{i}", g_, r, limit).passed for i, (g_, r) in enumerate(zip(got, ref)))

    assert passed(ref)
    normed, summed = ref
    unwritten = normed.clone()
    unwritten[1, 5] = float("nan")  # a value never stored (the poison is NaN)
    assert not passed((unwritten, summed))
    assert not passed((normed, summed - linear(call["x"], w)))  # the projection left out
    no_gain = add_rmsnorm(linear(call["x"], w), call["residual"], torch.ones(40), 1e-5)
    assert not passed(no_gain)  # the norm's gain forgotten


def test_a_residual_of_another_width_is_named(impl_fn):
    call = get_contract(OP).cases(0)[0].calls[0]
    with pytest.raises(BadInput, match="residual"):
        impl_fn(**dict(call, residual=call["residual"][:, :-1]))


def test_the_norm_reads_the_sum_not_the_residual_alone(impl_fn):
    """summed is the residual plus the projection (rounded once), and normed follows it: a kernel that normed the
    residual alone, or the projection alone, gives another row."""
    call = [c.calls[0] for c in get_contract(OP).cases(0) if c.calls[0]["weight"].qtype == Q.Q4_K][0]
    normed, summed = impl_fn(**call)
    y = linear(call["x"], call["weight"])
    assert torch.allclose(summed, call["residual"] + y, rtol=1e-5, atol=1e-5)
    alone = add_rmsnorm(torch.zeros_like(y), call["residual"], call["norm_weight"], call["eps"])[0]
    assert not torch.allclose(normed, alone, rtol=1e-3, atol=1e-3)
