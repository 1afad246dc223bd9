"""moe_experts_add_rmsnorm: every implementation against the reference; the reference is exactly the composition of the
moe_experts and add_rmsnorm references as the graph chains them (the experts' output rounded to x's dtype before the
add); the row is moe_experts' own; the metric fails a wrong norm, a wrong stream and an unwritten output."""

import functools

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops.gate import metrics
from sparkops.gate.tolerances import rule_for
from sparkops.ops import get_contract
from sparkops_numpy.add_rmsnorm import add_rmsnorm
from sparkops_numpy.moe_experts import moe_experts
from sparkops_numpy.moe_experts_add_rmsnorm import moe_experts_add_rmsnorm

from ._check import check_against_reference
from .test_moe_experts import make_moe

OP = "moe_experts_add_rmsnorm"
EXPERTS = ("x", "weights", "ids", "w_gate", "w_up", "w_down", "s_gate", "s_up", "s_down")


@functools.cache
def _cases(op: str, seed: int):
    """An op's contract cases for a seed, made once a test run (quantizing the stacked expert weights takes seconds;
    no test here changes a case's tensors)."""
    return get_contract(op).cases(seed)


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


def test_reference_is_the_composition_bit_for_bit(seed):
    """The fused reference's two outputs are the unfused references' outputs, byte for byte, in every activation
    dtype: add_rmsnorm is handed the experts' output as moe_experts returns it (rounded to x's dtype)."""
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        for case in _cases(OP, seed):
            call = dict(case.calls[0], x=case.calls[0]["x"].to(dtype), residual=case.calls[0]["residual"].to(dtype))
            normed, summed = moe_experts_add_rmsnorm(**call)
            y = moe_experts(*(call[k] for k in EXPERTS))
            want_n, want_s = add_rmsnorm(y, call["residual"], call["norm_weight"], call["eps"])
            assert normed.dtype == summed.dtype == dtype
            assert torch.equal(normed, want_n) and torch.equal(summed, want_s), (case.name, dtype)


def test_cases_are_the_experts_cases_with_a_stream_and_a_gain():
    """The experts' inputs are moe_experts' own cases (every weight type, the one-token Q4_K calls the CUDA kernels
    take, with and without a shared expert); each adds a residual of x's shape and a gain of x's width."""
    fused = _cases(OP, 0)
    plain = _cases("moe_experts", 0)
    assert [c.name for c in fused] == [c.name for c in plain]
    for f, p in zip(fused, plain):
        (fc,), (pc,) = f.calls, p.calls
        for k in EXPERTS:  # QWeights by their bytes and type, tensors by value
            a, b = (getattr(v, "raw", v) for v in (fc[k], pc[k]))
            assert (a is None and b is None) or (getattr(fc[k], "qtype", None) == getattr(pc[k], "qtype", None)
                                                 and torch.equal(a, b)), (f.name, k)
        assert fc["residual"].shape == fc["x"].shape and fc["norm_weight"].shape == (fc["x"].shape[1],)
    one_token_q4k = [c.calls[0] for c in fused if c.calls[0]["x"].shape[0] == 1
                     and c.calls[0]["w_gate"].qtype == Q.Q4_K]
    assert {c["s_gate"] is None for c in one_token_q4k} == {True, False}


def test_the_row_is_the_experts_row():
    """The fused op's limits are moe_experts' for every variant it may claim (the norm adds ~1e-14)."""
    for variant in ("fp32", "bf16", "act_q8"):
        rule, experts = rule_for(OP, variant), rule_for("moe_experts", variant)
        assert rule.metric == experts.metric == "nmse" and rule.limit == experts.limit


def test_the_metric_passes_the_reference_and_fails_what_is_wrong():
    call = dict(make_moe(11, t=2, d=64, f=32, e=6, k=2), eps=1e-5)
    g = torch.Generator().manual_seed(12)
    call.update(residual=3 * torch.randn(2, 64, generator=g), norm_weight=1 + 0.2 * torch.randn(64, generator=g))
    ref = moe_experts_add_rmsnorm(**call)
    rule = rule_for(OP, "fp32")

    def passed(got):
        return all(metrics.nmse(f"out{i}", g_, r, rule.limit).passed for i, (g_, r) in enumerate(zip(got, ref)))

    assert passed(ref)
    normed, summed = ref
    unwritten = normed.clone()
    unwritten[1, 5] = float("nan")  # a value never stored (the poison is NaN)
    assert not passed((unwritten, summed))
    assert not passed((normed, summed - moe_experts(*(call[k] for k in EXPERTS))))  # the experts left out
    no_gain = add_rmsnorm(moe_experts(*(call[k] for k in EXPERTS)), call["residual"], torch.ones(64), 1e-5)
    assert not passed(no_gain)  # the norm's gain forgotten


def _small_call(seed=13):
    """One call at a small F32 shape (make_moe's), with a stream and a gain: what the checks of a call's arguments
    need, without quantizing the contract's stacked experts."""
    call = dict(make_moe(seed, t=2, d=64, f=32, e=6, k=2), eps=1e-5)
    g = torch.Generator().manual_seed(seed + 1)
    return dict(call, residual=3 * torch.randn(2, 64, generator=g), norm_weight=1 + 0.2 * torch.randn(64, generator=g))


def test_a_residual_of_another_shape_is_named(impl_fn):
    call = _small_call()
    with pytest.raises(BadInput, match="residual"):
        impl_fn(**dict(call, residual=call["residual"][:, :-4]))


def test_the_norm_reads_the_sum_not_the_experts_alone(impl_fn):
    """Scaling the residual and the expert input x moves the sum; the normed row follows the sum (an RMS norm of
    residual + y), so a kernel that normed y alone, or the residual alone, gives another row."""
    call = _small_call(17)
    normed, summed = impl_fn(**call)
    y = moe_experts(*(call[k] for k in EXPERTS))
    assert torch.allclose(summed, call["residual"] + y, rtol=1e-5, atol=1e-5)
    alone = add_rmsnorm(torch.zeros_like(y), call["residual"], call["norm_weight"], call["eps"])[0]
    assert not torch.allclose(normed, alone, rtol=1e-3, atol=1e-3)
