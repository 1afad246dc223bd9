"""The fp8_cache claim: how the gate places an attention case's cache, that it proves an honest implementation and
refuses a wrong one, and the model gate's verdict on a registry whose attention reads an fp8 cache."""

from __future__ import annotations

import dataclasses

import torch

from sparkops.gate.cases import cases_for, place
from sparkops.gate.check import prove
from sparkops.gate.tolerances import FP8_CACHE, activation_dtype, loosest, model_rule_for, router_tie
from sparkops.kvcache import FP8, to_cache
from sparkops.ops import OP_NAMES, get_contract


def test_the_variant_rounds_the_cache_params_and_casts_the_activations():
    contract = get_contract("attention")
    case = cases_for("attention", (0,))[1]
    impl = place(case, contract, FP8_CACHE, "cpu", reference=False)
    ref = place(case, contract, FP8_CACHE, "cpu", reference=True)
    call, rcall = impl.kwargs[0], ref.kwargs[0]
    assert impl.state["cache"].dtype == call["latent"].dtype == FP8
    assert call["q"].dtype == torch.bfloat16 and call["w_uk"].dtype == torch.float32
    assert ref.state["cache"].dtype == rcall["latent"].dtype == rcall["q"].dtype == torch.float32
    # the reference attends the very values the implementation holds, rounded as the engine rounds a row
    assert torch.equal(ref.state["cache"], impl.state["cache"].float())
    assert torch.equal(impl.state["cache"].view(torch.uint8),
                       to_cache(case.state["cache"], FP8).view(torch.uint8))
    assert torch.equal(rcall["q"], call["q"].float())


def test_the_variant_reads_as_bf16_activations_and_the_loosest_claim():
    assert activation_dtype(FP8_CACHE) == torch.bfloat16 and activation_dtype(None) == torch.float32
    assert loosest(["fp32", "bf16", FP8_CACHE, "act_q8"]) == FP8_CACHE
    assert router_tie(FP8_CACHE) == router_tie("bf16")
    assert model_rule_for(FP8_CACHE).kl_max <= model_rule_for("bf16").kl_max


def test_an_honest_fp8_cache_attention_passes_and_a_misread_one_fails(catalog, session):
    impl = catalog.get("attention", "torch_fp8cache")
    good = prove(impl, "cpu", catalog, session=session)
    assert good.passed and good.record["claim"].endswith("(fp8_cache)")

    def doubled(q, latent, cache, pos, w_uk, w_uv, scale):
        """Decodes every cached value at twice its size (an exponent bias off by one): plausible, wrong."""
        from sparkops_torch.attention import attention_fp8cache

        attention_fp8cache(q, latent, cache, pos, w_uk, w_uv, scale)  # the rows written as they should be
        return attention_fp8cache(q, latent, to_cache(cache.float() * 2, FP8), pos, w_uk, w_uv, scale)

    bad = prove(dataclasses.replace(impl, name="doubled", fn=doubled, sources=(), _resolved=None), "cpu", catalog,
                session=session)
    assert not bad.passed


def _registry(tmp_path, catalog, session, attention: str):
    from sparkops.registry.file import Registry

    path = tmp_path / f"{attention}.toml"
    reg = Registry.empty(path)
    for op in OP_NAMES:
        reg.set(op, "cpu", get_contract(op).reference, fallback="reference")
    record = prove(catalog.get("attention", attention), "cpu", catalog, session=session).record
    reg.set("attention", "cpu", attention, check=record)
    reg.save()
    return Registry.load(path)


def test_the_model_gate_judges_an_fp8_cache_registry_by_its_rule(tmp_path, catalog, session):
    from sparkops.gate.model_gate import model_check

    reg = _registry(tmp_path, catalog, session, "torch_fp8cache")
    out = model_check("k3-nano", reg, catalog=catalog, depths=(1, 33))
    assert out.error is None and out.variant == FP8_CACHE and out.passed, out.error
    worst = max(d.kl_max for d in out.depths)
    assert 0 < worst < 1e-2  # the rounding shows, and stays small


def test_the_model_gate_refuses_an_fp8_cache_its_attention_is_not_proven_on(tmp_path, catalog, session):
    from sparkops.gate.model_gate import model_check

    reg = _registry(tmp_path, catalog, session, "torch")
    out = model_check("k3-nano", reg, catalog=catalog, depths=(1,), cache_dtype=FP8)
    assert out.error and "not proven on an fp8 cache" in out.error and not out.passed
