"""Stated policies are shown, not only written down: an implementation that hands some calls to other code (a
one-token kernel passing a prefill chunk to a GEMM) registers a `policy`, and the dispatcher counts those calls
(`Ops.passed`) so that bench, diagnose and generate can show them. GPU session 25 found why: the step's one-token Q4_K
expert kernels passed every layer of an IQ1_S model to the float32 path that dequantizes its experts each call, and
the bench printed 6.5 tok/s with nothing said."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.dispatch import Ops, passed_per_step
from sparkops.gguf.quants import random_blocks
from sparkops.ops import get_contract
from sparkops.ops._contract import signature_mismatch
from sparkops.plugins import hookimpl, load_catalog, tolerance
from sparkops.qweight import QWeight
from sparkops.registry.file import Registry
from sparkops.registry.plan import make_plan
from tests.helpers import REPO


def swiglu_short(gate, up):
    return (torch.nn.functional.silu(gate.float()) * up.float()).to(gate.dtype)


def short_only(gate, up):
    """Up to two tokens run here; longer calls go to torch."""
    return None if gate.shape[0] <= 2 else f"torch: {gate.shape[0]} tokens"


def _plugin(**extra):
    @hookimpl
    def register_implementations(register):
        register(op="swiglu", name="short", backend="torch", devices=("cpu",), fn=swiglu_short, claim=tolerance(),
                 **extra)

    return types.SimpleNamespace(register_implementations=register_implementations)


def _ops(tmp_path, catalog) -> Ops:
    path = tmp_path / "registry.toml"
    path.write_text((REPO / "registry.toml").read_text())
    reg = Registry.load(path)
    reg.set("swiglu", "cpu", "short")
    return Ops(make_plan(reg, catalog, "cpu", verify_checks=False))


def test_calls_a_policy_hands_on_are_counted_by_what_took_them(tmp_path):
    ops = _ops(tmp_path, load_catalog(extra=[("shortplug", _plugin(policy=short_only))]))
    for t in (1, 2, 3, 3, 5):
        g = torch.randn(t, 8)
        torch.testing.assert_close(ops.swiglu(g, g), swiglu_short(g, g))  # the call itself still runs
    assert ops.passed() == {"swiglu=short -> torch: 3 tokens": 2, "swiglu=short -> torch: 5 tokens": 1}
    assert ops.taken() == {}  # a stated policy is neither a fallback nor a round trip


def test_an_implementation_without_a_policy_counts_nothing(tmp_path):
    ops = _ops(tmp_path, load_catalog(extra=[("shortplug", _plugin())]))
    ops.swiglu(torch.randn(4, 8), torch.randn(4, 8))
    assert ops.passed() == {}


@pytest.mark.parametrize("policy, why", [
    (lambda x: None, "its policy takes other arguments than the op"),
    ("no_such_module_here:fn", "cannot import its policy"),
])
def test_a_policy_that_cannot_be_called_like_the_op_is_refused_by_name(policy, why):
    catalog = load_catalog(extra=[("shortplug", _plugin(policy=policy))])
    assert "short" not in catalog.by_op.get("swiglu", {})
    info = next(p for p in catalog.plugins if p.name == "shortplug")
    assert any(why in r and "plugin 'shortplug'" in r and "implementation 'short'" in r for r in info.rejected), \
        info.rejected


def test_per_step_counts_are_differences_over_the_steps():
    assert passed_per_step({"a": 2}, {"a": 10, "b": 3}, 4) == {"a": 2, "b": 0.8}
    assert passed_per_step({"a": 2}, {"a": 2}, 1) == {}


# the CuPy plugin's policies: the plugin's modules import without CuPy, so their arithmetic is tested here; on a GPU
# load_catalog itself checks each policy's signature against its op (the plugin is available there)


def _experts(qtype, e=4, rows=512, cols=256, seed=0) -> QWeight:
    raw = random_blocks(np.random.default_rng(seed), (e, rows, cols), qtype, 0.02)
    return QWeight(torch.from_numpy(raw), qtype, (e, rows, cols))


def _moe_args(qtype, t=1):
    gate, up, down = _experts(qtype), _experts(qtype, seed=1), _experts(qtype, rows=256, cols=512, seed=2)
    return dict(x=torch.randn(t, 256), weights=torch.ones(t, 2), ids=torch.zeros(t, 2, dtype=torch.int64),
                w_gate=gate, w_up=up, w_down=down, s_gate=None, s_up=None, s_down=None)


def test_the_cupy_plugins_policies_take_their_ops_arguments():
    from sparkops_cupy import POLICIES

    assert ("moe_experts", "cupy_rowwarp_pdl") in POLICIES and ("linear", "cupy_rowwarp_pdl") in POLICIES
    for (op, name), where in POLICIES.items():
        module, _, attr = where.partition(":")
        fn = getattr(__import__(module, fromlist=[attr]), attr)
        assert signature_mismatch(get_contract(op), fn) is None, (op, name, where)


def test_every_cupy_implementation_that_hands_calls_to_torch_states_its_policy():
    """An implementation whose sources include the torch plugin's (it hands some calls on) must have a policy in
    POLICIES, so the dispatcher counts and shows what it passes: session 32's two new forms were first registered
    without one."""
    from sparkops_cupy import IMPLEMENTATIONS, POLICIES

    handing_on = {(entry[0], entry[1]) for entry in IMPLEMENTATIONS
                  if len(entry) > 5 and any("sparkops_torch/" in f for f in entry[5])}
    assert ("linear", "cupy_rowwarp_pdl_q8_shortplain") in handing_on and ("moe_router", "cupy_rowwarp_pdl_sorted") \
        in handing_on
    assert sorted(handing_on - set(POLICIES)) == []


def test_the_one_token_q4k_experts_say_which_calls_they_pass_and_why():
    from sparkops_cupy._policies import experts_passes as rowwarp_passes

    assert rowwarp_passes(**_moe_args(Q.Q4_K)) is None
    said = rowwarp_passes(**_moe_args(Q.IQ1_S))
    assert said.startswith("torch") and "IQ1_S" in said and "dequantized" in said
    assert "4 tokens" in rowwarp_passes(**_moe_args(Q.Q4_K, t=4))


def test_the_copy_down_experts_say_when_their_down_is_the_warp_one(monkeypatch):
    """cupy_rowwarp_pdl_q8_hidden_cp / _q8_pairs_cp: the experts' policy first (torch for other types or tokens),
    then the copy down's shared memory - a call whose block would not fit runs the warp down, named with its bytes."""
    from sparkops_cupy import moe_experts as cme
    from sparkops_cupy._policies import experts_cp_passes

    args = _moe_args(Q.Q4_K)  # K = 2 slots of F = 512: 4 super-blocks a warp
    assert experts_cp_passes(**args) is None
    assert experts_cp_passes(**_moe_args(Q.IQ1_S)).startswith("torch")
    assert cme.down_cp_smem(2, 512, 0) == 4 * (4 * 144 + 16)
    monkeypatch.setattr(cme, "DOWN_CP_SMEM_LIMIT", cme.down_cp_smem(2, 512, 0) - 1)
    said = experts_cp_passes(**args)
    assert said.startswith("the warp down") and f"{cme.down_cp_smem(2, 512, 0)} bytes" in said


def test_the_down_loads_experts_say_when_their_down_is_the_warp_one(monkeypatch):
    """cupy_rowwarp_pdl_q8_hidden_ld / _q8_pairs_ld: the experts' policy first, then the slots their down reads a
    lane each - more than DOWN_LD_MAX_K runs the warp down, named with the count."""
    from sparkops_cupy import moe_experts as cme
    from sparkops_cupy._policies import experts_ld_passes

    assert experts_ld_passes(**_moe_args(Q.Q4_K)) is None  # K = 2
    assert experts_ld_passes(**_moe_args(Q.IQ1_S)).startswith("torch")
    monkeypatch.setattr(cme, "DOWN_LD_MAX_K", 1)
    said = experts_ld_passes(**_moe_args(Q.Q4_K))
    assert said.startswith("the warp down") and "2 chosen experts, more than the 1" in said


def test_the_staged_down_experts_say_when_their_down_is_the_warp_one(monkeypatch):
    """cupy_rowwarp_pdl_q8_pairs_hs: the experts' policy first, then the slots its down reads a lane each and the
    shared memory its block takes (the whole Q8 hidden vector: 2 bytes a hidden row) - past either, the warp down,
    named with the count."""
    from sparkops_cupy import moe_experts as cme
    from sparkops_cupy._policies import experts_hs_passes

    args = _moe_args(Q.Q4_K)  # K = 2 of F = 512, no shared expert
    assert experts_hs_passes(**args) is None
    assert experts_hs_passes(**_moe_args(Q.IQ1_S)).startswith("torch")
    assert cme.down_hs_smem(2, 512, 0) == 2 * 2 * 512 and cme.down_hs_smem(8, 1024, 1024) == 18432  # the 48B's
    monkeypatch.setattr(cme, "DOWN_HS_SMEM_LIMIT", cme.down_hs_smem(2, 512, 0) - 1)
    said = experts_hs_passes(**args)
    assert said.startswith("the warp down") and "2048 bytes of shared memory, over DOWN_HS_SMEM_LIMIT (2047)" in said
    monkeypatch.setattr(cme, "DOWN_HS_SMEM_LIMIT", 48 * 1024)
    monkeypatch.setattr(cme, "DOWN_LD_MAX_K", 1)
    said = experts_hs_passes(**args)
    assert said.startswith("the warp down") and "2 chosen experts, more than the 1" in said


def test_the_one_token_q4k_gemvs_say_which_calls_they_pass_and_why():
    from sparkops_cupy._policies import floatrow_passes, one_token_q4k_passes

    w = _experts(Q.Q4_K, e=1)
    q4k = QWeight(w.raw[0], Q.Q4_K, (512, 256))
    assert one_token_q4k_passes(torch.randn(1, 256), q4k) is None
    assert one_token_q4k_passes(torch.randn(4, 256), q4k) == "cupy_float: 4 tokens"
    assert one_token_q4k_passes(torch.randn(64, 256), q4k).startswith("torch")
    q6k = QWeight(torch.from_numpy(random_blocks(np.random.default_rng(0), (512, 256), Q.Q6_K, 0.02)), Q.Q6_K,
                  (512, 256))
    assert "Q6_K" in one_token_q4k_passes(torch.randn(1, 256), q6k)
    assert "Q4_K" in floatrow_passes(torch.randn(1, 256), q4k)


def test_the_cupy_router_says_when_it_passes_a_call():
    from sparkops_cupy._policies import ROUTER_MAX_T, router_passes as rowwarp_passes

    args = dict(weight=torch.randn(32, 64), bias=torch.zeros(32), top_k=4, n_group=1, topk_group=1, scale=1.0,
                renorm_eps=1e-20)
    assert rowwarp_passes(torch.randn(1, 64), **args) is None
    assert f"{ROUTER_MAX_T + 1} tokens" in rowwarp_passes(torch.randn(ROUTER_MAX_T + 1, 64), **args)
    assert rowwarp_passes(torch.randn(1, 64), **dict(args, weight=torch.randn(32, 64).half())).startswith("torch")


def test_the_cupy_norm_router_says_when_it_passes_a_call():
    """add_rmsnorm_router=cupy_rowwarp_pdl: the one-launch kernel takes up to 8 tokens of float activations with a
    float32 [E, D] router weight, D a multiple of 4, E <= 512, top_k and n_group <= 32; else the torch plugin's pair."""
    from sparkops_cupy import add_rmsnorm_router as car
    from sparkops_cupy._policies import norm_router_passes

    def args(t=1, d=64, e=32, k=4, dtype=torch.bfloat16, **change):
        return dict(dict(x=torch.randn(t, d).to(dtype), residual=torch.randn(t, d).to(dtype), weight=torch.ones(d),
                         eps=1e-5, router_weight=torch.randn(e, d), bias=torch.zeros(e), top_k=k, n_group=1,
                         topk_group=1, scale=1.0, renorm_eps=1e-20), **change)

    assert norm_router_passes(**args()) is None and norm_router_passes(**args(t=car.ROUTER_MAX_T)) is None
    assert f"{car.ROUTER_MAX_T + 1} tokens" in norm_router_passes(**args(t=car.ROUTER_MAX_T + 1))
    for bad in (args(d=66), args(e=520), args(k=33), args(dtype=torch.float64),
                args(router_weight=torch.randn(32, 64).half()),
                args(residual=torch.randn(1, 64))):  # a float32 residual beside bfloat16 activations
        said = norm_router_passes(**bad)
        assert said is not None and said.startswith("torch (add_rmsnorm, then moe_router)"), said


def test_plan_names_the_stated_policies_of_what_it_runs(tmp_path, monkeypatch, capsys):
    """`sparkops plan` lists, beside what runs, the implementations with a stated policy (text and --json), so that a
    registry's reader knows which calls it may hand on before any bench counts them."""
    import json

    from sparkops.cli import main, plan_cmd

    catalog = load_catalog(extra=[("shortplug", _plugin(policy=short_only))])
    monkeypatch.setattr(plan_cmd, "load_catalog", lambda: catalog)
    monkeypatch.setattr(plan_cmd, "make_plan", lambda reg, cat, dev: make_plan(reg, cat, dev, verify_checks=False))
    path = tmp_path / "registry.toml"
    path.write_text((REPO / "registry.toml").read_text())
    reg = Registry.load(path)
    reg.set("swiglu", "cpu", "short")
    reg.save()
    assert main(["plan", "--device", "cpu", "--registry", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ops"]["swiglu"]["policies"] == {"swiglu=short": f"{__name__}:short_only"}
    assert doc["ops"]["rmsnorm"]["policies"] == {}
    assert main(["plan", "--device", "cpu", "--registry", str(path)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "stated policies" in text and f"swiglu=short ({__name__}:short_only)" in text


def test_the_deep_attention_says_when_a_shape_runs_its_plain_kernels():
    from sparkops_cupy._policies import attention_deep_passes

    def args(dn, lkv):
        return dict(q=torch.zeros(1, 4, dn + 64), latent=torch.zeros(1, lkv + 64), cache=torch.zeros(8, lkv + 64),
                    pos=torch.zeros(1, dtype=torch.int64), w_uk=torch.zeros(4, dn, lkv), w_uv=torch.zeros(4, dn, lkv),
                    scale=0.1)

    assert attention_deep_passes(**args(128, 512)) is None  # the 48B's MLA: the deep kernels throughout
    said = attention_deep_passes(**args(64, 512))
    assert "mla_absorb" in said and "mla_up" not in said and "Dn 64" in said
    assert "mla_absorb and mla_up" in attention_deep_passes(**args(64, 256))


def test_the_deep_pdl_attention_says_which_kernels_launch_plainly():
    """cupy_splitk_bf16_deep_pdl: None only where all four kernels have their PDL form (the 48B's one-token bf16 MLA);
    otherwise it names what launches plainly: the plain absorb / up (the deep form's policy) and the CUDA-core split."""
    from sparkops_cupy._policies import attention_deep_pdl_passes

    def args(dn=128, lkv=512, t=1, n=32, dtype=torch.bfloat16):
        return dict(q=torch.zeros(t, n, dn + 64, dtype=dtype), latent=torch.zeros(t, lkv + 64, dtype=dtype),
                    cache=torch.zeros(8, lkv + 64, dtype=dtype), pos=torch.zeros(1, dtype=torch.int64),
                    w_uk=torch.zeros(n, dn, lkv), w_uv=torch.zeros(n, 128, lkv), scale=0.1)

    assert attention_deep_pdl_passes(**args()) is None
    for said in (attention_deep_pdl_passes(**args(t=3)), attention_deep_pdl_passes(**args(dtype=torch.float32))):
        assert said.startswith("launched plainly") and "mla_split_generic" in said and "mla_absorb" not in said
    said = attention_deep_pdl_passes(**args(dn=96))
    assert "mla_absorb" in said and "Dn 96" in said and "mla_split_generic" not in said
