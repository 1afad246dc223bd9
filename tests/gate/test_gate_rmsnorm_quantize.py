"""The gate on the fused rmsnorm + quantize op: the qdq metric on its own (what it allows and what it
refuses), the torch chain passes under the tolerance row, a fusion that is truly the chain passes
its bit-identity claim, and one whose scales differ in the last bit is refused for exactly that (by
`sparkops check` and `sparkops swap`, which leaves the registry untouched)."""

from __future__ import annotations

import math
import types

import pytest
import torch

from sparkops.cli import main
from sparkops.gate import metrics
from sparkops.gate.check import prove
from sparkops.gate.tolerances import rule_for
from sparkops.plugins import bit_identical, hookimpl, load_catalog
from sparkops_numpy.rmsnorm_quantize import rmsnorm_quantize as reference

OP = "rmsnorm_quantize"
RULE = rule_for(OP, None)


@pytest.fixture(scope="module")
def ref():
    g = torch.Generator().manual_seed(21)
    x, w = torch.randn(3, 256, generator=g) * 4, torch.randn(256, generator=g)
    x[1, 32:64] = 0.0  # block 1 of row 1 is all zero
    return reference(x, w, 1e-5)


def _judge(q, d, ref):
    return {v.metric: v for v in metrics.qdq("outputs", (q, d), ref, RULE)}


def _bumped(d, steps):
    """d with its [0, 0] scale moved `steps` float16 steps up."""
    out = d.clone()
    h = out[0, 0].half().view(torch.int16)
    out[0, 0] = (h + steps).view(torch.float16).float()
    return out


def test_the_row_is_qdq_and_the_reference_passes_itself(ref):
    assert RULE.metric == "qdq" and RULE.limit <= 1e-4 and RULE.tie <= 2.0**-10
    verdicts = _judge(ref[0].clone(), ref[1].clone(), ref)
    assert set(verdicts) == {"steps", "scales", "qdq"}
    assert all(v.passed and v.value == 0 for v in verdicts.values())


def test_one_step_in_q_and_one_float16_step_in_d_are_allowed(ref):
    q, d = ref[0].clone(), ref[1].clone()
    q[0, 5] += 1 if q[0, 5] < 127 else -1
    assert all(v.passed for v in _judge(q, _bumped(d, 1), ref).values())


@pytest.mark.parametrize("spoil, metric, words", [
    (lambda q, d: (q.index_put_((torch.tensor(2), torch.tensor(7)), q[2, 7] + (2 if q[2, 7] < 100 else -2)), d),
     "steps", "more than one step"),
    (lambda q, d: (q.index_put_((torch.tensor(1), torch.tensor(40)), torch.tensor(1, dtype=torch.int8)), d),
     "steps", "expected 0, got 1"),  # a non-zero value in an all-zero block
    (lambda q, d: (torch.where(q == -127, torch.full_like(q, -128), q), d), "steps", "got -128"),
    (lambda q, d: (q, _bumped(d, 2)), "scales", "not a float16 value within"),
    (lambda q, d: (q, d.index_put_((torch.tensor(0), torch.tensor(3)), d[0, 3] * (1 + 2**-16))), "scales",
     "not a float16 value"),
    (lambda q, d: (q, d.index_put_((torch.tensor(1), torch.tensor(1)), torch.tensor(2.0**-14))), "scales",
     "expected 0.0"),  # a scale where the block is all zero
])
def test_each_kind_of_wrong_block_is_refused_and_named(ref, spoil, metric, words):
    q, d = spoil(ref[0].clone(), ref[1].clone())
    if metric == "steps" and words == "got -128":
        assert (ref[0] == -127).any()
    v = _judge(q, d, ref)[metric]
    assert not v.passed and v.value >= 1 and words in v.detail, v.line()


def test_an_unwritten_scale_fails_outright(ref):
    d = ref[1].clone()
    d[2, 4] = float("nan")  # the poison of an unwritten float
    verdicts = _judge(ref[0].clone(), d, ref)
    assert not verdicts["scales"].passed
    nmse = verdicts["qdq"]
    assert not nmse.passed and nmse.value == math.inf and "never written" in nmse.detail


def test_truncating_q_instead_of_rounding_exceeds_the_nmse_limit(ref):
    """Every value within one step, every scale exact: only the dequantized NMSE sees this bug."""
    t, width = ref[0].shape
    from sparkops_numpy.rmsnorm import rmsnorm

    g = torch.Generator().manual_seed(21)
    x, w = torch.randn(3, 256, generator=g) * 4, torch.randn(256, generator=g)
    x[1, 32:64] = 0.0
    y = rmsnorm(x, w, 1e-5).view(t, width // 32, 32)
    d = ref[1]
    inv = torch.where(d == 0, torch.zeros_like(d), 1 / torch.where(d == 0, torch.ones_like(d), d))
    q = torch.trunc(y * inv[..., None]).to(torch.int8).view(t, width)
    verdicts = _judge(q, d, ref)
    assert verdicts["steps"].passed and verdicts["scales"].passed
    assert not verdicts["qdq"].passed and verdicts["qdq"].value > RULE.limit


def test_wrong_dtypes_are_structure_failures(ref):
    v = metrics.qdq("outputs", (ref[0].to(torch.int32), ref[1]), ref, RULE)
    assert len(v) == 1 and v[0].metric == "structure" and "dtype torch.int32" in v[0].detail
    assert metrics.qdq("outputs", (ref[0],), ref, RULE)[0].metric == "structure"


# -- the gate ---------------------------------------------------------------------------------------------
# Two in-process "fused kernels" claiming bit-identity to the torch chain. They live here, not in the
# plugin of wrong implementations (tests/fixtures/wrong_impls), because the engine never calls this op:
# the model-level gate, which every implementation there must fail, has nothing to see.
def fused_exact(x, weight, eps):
    """The torch chain's float32 operations, in order, in one function: the same bytes."""
    from sparkops_torch.quantize_act import quantize_act
    from sparkops_torch.rmsnorm import rmsnorm

    return quantize_act(rmsnorm(x.float(), weight, eps))


def scale_truncated(x, weight, eps):
    """WRONG ON PURPOSE: the chain's q, but each block scale is cut down to float16 precision (its 13 low
    mantissa bits dropped, the bit-shift conversion) instead of rounded to nearest. About half the scales
    differ from the chain's in the last bit of their float16 value: less than one float16 step, inside the
    tolerance row, so only the bit-identity claim is false."""
    from sparkops_torch.quantize_act import BLOCK, quantize_act
    from sparkops_torch.rmsnorm import rmsnorm

    normed = rmsnorm(x.float(), weight, eps)  # [T, D]
    q, _ = quantize_act(normed)
    t, d = normed.shape
    amax = normed.reshape(t, d // BLOCK, BLOCK).abs().amax(dim=-1)  # [T, D/32]
    scale = amax / torch.full_like(amax, 127.0)  # the unrounded float32 scale
    return q, (scale.view(torch.int32) & ~0x1FFF).view(torch.float32)  # toward zero, float16's 10 bits


def _fusions_plugin():
    mod = types.ModuleType("fusions")

    @hookimpl
    def register_implementations(register):
        for name, fn in (("fused_exact", fused_exact), ("scale_truncated", scale_truncated)):
            register(op=OP, name=name, backend="torch", devices=("cpu", "cuda"), fn=fn, claim=bit_identical(to="torch"))

    mod.register_implementations = register_implementations
    return mod


@pytest.fixture(scope="module")
def fusions():
    return load_catalog(extra=[("fusions", _fusions_plugin())])


def test_the_torch_chain_passes_under_the_qdq_row(fusions, session):
    outcome = prove(fusions.get(OP, "torch"), "cpu", fusions, session=session)
    assert outcome.passed, outcome.report
    assert outcome.record["rule"] == str(RULE) and outcome.record["metric"] in ("steps", "scales", "qdq")
    assert outcome.cases == len(session.seeds) * 5


def test_a_fusion_that_is_the_chain_passes_its_bit_identity_claim(fusions, session):
    outcome = prove(fusions.get(OP, "fused_exact"), "cpu", fusions, session=session)
    assert outcome.passed, outcome.report
    assert outcome.record["bit_identical_to"] == "torch"
    assert any(v.metric == "bytes" for r in outcome.results for _, v in r.verdicts)


def test_scales_differing_in_the_last_bit_are_within_tolerance_but_refused(fusions, session):
    outcome = prove(fusions.get(OP, "scale_truncated"), "cpu", fusions, session=session)
    assert not outcome.passed and outcome.record["passed"] is False
    failing = [v for r in outcome.results for _, v in r.verdicts if not v.passed]
    assert failing and {v.metric for v in failing} == {"bytes"}  # the tolerance row alone would let it in
    assert all(v.what.startswith("output 1 ") for v in failing)  # the scales, not the values
    first = outcome.failures[0].name
    assert "differ in their bits from torch" in outcome.report
    assert f"replay: sparkops check {OP}=scale_truncated --case {first} --device cpu" in outcome.report


def test_swap_refuses_it_and_leaves_the_registry_alone(fusions, monkeypatch, tmp_path):
    import sparkops.cli.swap_cmd as swap_cmd

    monkeypatch.setattr(swap_cmd, "load_catalog", lambda: fusions)
    registry = tmp_path / "registry.toml"
    before = "# mine\n[ops.rmsnorm_quantize.cpu]\nimpl = \"numpy\"\nfallback = \"reference\"\n"
    registry.write_text(before)
    assert main(["swap", f"{OP}=scale_truncated", "--registry", str(registry)]) == 1
    assert registry.read_bytes() == before.encode()
    assert main(["swap", f"{OP}=fused_exact", "--registry", str(registry)]) == 0
    assert "[ops.rmsnorm_quantize.cpu.check]" in registry.read_text() and 'impl = "fused_exact"' in registry.read_text()
