"""[engine] fuse_moe_norm (engine/graph.py): a MoE layer's call of at most MOE_NORM_MAX_T tokens runs its experts and the
next block's residual add and norm as one op (moe_experts_add_rmsnorm) where the unfused graph calls moe_experts then
add_rmsnorm; a longer call (a prefill chunk), a dense-FFN layer and a layer whose shared expert runs apart keep the two
apart. The logits stay within float32 rounding of the unfused ones, eagerly and through the replayed step (DecodeStep
must pass the option on), alone and with fuse_router_norm (the router's decisions reach the fused op).
"""

from __future__ import annotations

import pytest
import torch

from sparkops.bench.harness import selections
from sparkops.cli import main
from sparkops.config import load_preset
from sparkops.dispatch import Ops
from sparkops.engine import Engine
from sparkops.engine.decode_step import DecodeStep
from sparkops.engine.graph import MOE_NORM_MAX_T
from sparkops.ops import OP_NAMES
from sparkops.plugins import load_catalog
from sparkops.registry.file import Registry
from sparkops.registry.plan import make_plan
from sparkops.synth import synth_weights
from sparkops.weights import MoEWeights
from tests.engine.fusion_support import (OpCalls, capture_refuses_only_when_on, nmse, option_engine, q4k_nano,
                                         run_phases)


@pytest.fixture(scope="module")
def nano():
    return synth_weights(load_preset("k3-nano"), "q4_k_m", seed=5)


def _registry(device: str, fuse: bool, default: str = "torch", **engine) -> Registry:
    reg = Registry.empty("mem.toml")
    for op in OP_NAMES:
        reg.set(op, device, default, fallback="error")
    reg.set_engines({"fuse_moe_norm": fuse, **engine})
    return reg


def _engine(model, fuse: bool, device: str = "cpu", **kw) -> Engine:
    return option_engine(model, "fuse_moe_norm", fuse, device, **kw)


def _layers(model) -> tuple[int, int]:
    """(MoE layers, dense-FFN layers)."""
    moe = sum(isinstance(layer.ffn, MoEWeights) for layer in model.layers)
    return moe, len(model.layers) - moe


#: the ops whose calls the tests count (OpCalls, per phase)
COUNTED = ("add_rmsnorm", "moe_router", "moe_experts", "moe_experts_add_rmsnorm")


def test_decode_calls_the_fused_op_and_a_prefill_chunk_keeps_the_pair(nano):
    """Per forward: a MoE layer makes one moe_experts_add_rmsnorm call (at most MOE_NORM_MAX_T tokens) or one
    moe_experts and one closing add_rmsnorm call (longer); a dense layer keeps its closing add_rmsnorm; every layer's
    FFN norm (add_rmsnorm before the FFN) and router stay."""
    moe, dense = _layers(nano)
    n = len(nano.layers)
    assert moe > 0 and dense > 0 and MOE_NORM_MAX_T == 1
    eng = _engine(nano, True)
    calls = OpCalls(eng, COUNTED)
    eng.prefill([3, 4])  # two tokens: the unfused graph
    assert calls.take() == {"add_rmsnorm": 2 * n, "moe_router": moe, "moe_experts": moe, "moe_experts_add_rmsnorm": 0}
    eng.prefill([40])  # a one-token prompt chunk: fused
    assert calls.take() == {"add_rmsnorm": n + dense, "moe_router": moe, "moe_experts": 0,
                            "moe_experts_add_rmsnorm": moe}
    eng.decode(7)
    assert calls.take()["moe_experts_add_rmsnorm"] == moe
    step = DecodeStep(eng)
    step()
    assert calls.take()["moe_experts_add_rmsnorm"] == moe, "the replayed step lost the option"
    plain = _engine(nano, False)
    calls = OpCalls(plain, COUNTED)
    plain.decode(7)
    assert calls.take() == {"add_rmsnorm": 2 * n, "moe_router": moe, "moe_experts": moe, "moe_experts_add_rmsnorm": 0}


@pytest.mark.parametrize("default", ["torch", "numpy"])
def test_logits_stay_within_float32_rounding_of_the_unfused_graph(nano, default):
    """The fused op is the composition of the two (the numpy reference literally; torch's its two float32 ops): the
    logits agree to the bit, also with the router norm fused before it and the projections fused."""
    for extra in ({}, {"fuse_router_norm": True}, {"fuse_projections": True, "fuse_kda_norm": True}):
        want = run_phases(_engine(nano, False, default=default, **extra))
        got = run_phases(_engine(nano, True, default=default, **extra))
        assert torch.isfinite(got).all() and got.shape == want.shape
        assert torch.equal(got, want), extra


def test_a_layer_whose_shared_expert_runs_apart_keeps_the_pair(nano):
    """With shared_expert_side (and side_stream) a MoE layer's shared expert runs apart and its closing add_rmsnorm
    adds the routed output to the stream that holds the shared one: that layer keeps moe_experts and add_rmsnorm, the
    fused op is not called, and the logits are those of the same registry without fuse_moe_norm."""
    side = dict(side_stream=True, shared_expert_side=True, fuse_projections=True)
    eng = _engine(nano, True, **side)
    calls = OpCalls(eng, COUNTED)
    eng.decode(7)
    assert calls.take()["moe_experts_add_rmsnorm"] == 0
    assert torch.equal(run_phases(_engine(nano, True, **side)), run_phases(_engine(nano, False, **side)))


def test_the_cli_sets_it_the_plan_shows_it_and_the_bench_says_so(tmp_path, capsys, nano):
    p = tmp_path / "r.toml"
    _registry("cpu", False).save(p)
    assert main(["engine", "--registry", str(p), "fuse_moe_norm=on"]) == 0
    assert Registry.load(p).engine_options()["fuse_moe_norm"] is True
    capsys.readouterr()
    main(["plan", "--registry", str(p), "--device", "cpu"])
    assert "engine: fuse_moe_norm" in capsys.readouterr().out
    eng = Engine(nano, Ops(make_plan(Registry.load(p), load_catalog(), "cpu", verify_checks=False)), max_context=32)
    assert eng.fuse_moe_norm and selections(eng)["[engine]"] == "fuse_moe_norm"
    assert "[engine]" not in selections(_engine(nano, False))


def test_without_a_selection_the_reference_runs_it_and_is_counted(nano):
    """No silent fallback: a registry that turns the option on but selects no moe_experts_add_rmsnorm (fallback
    "reference") runs the reference, and the plan and the counters say so."""
    reg = _registry("cpu", True)
    del reg.doc["ops"]["moe_experts_add_rmsnorm"]
    plan = make_plan(reg, load_catalog(), "cpu", verify_checks=False)
    assert plan.entries["moe_experts_add_rmsnorm"].fallback_taken and "moe_experts_add_rmsnorm" in plan.fallbacks
    eng = Engine(nano, Ops(plan), max_context=32)
    eng.prefill([3, 4])
    eng.decode(5)
    assert eng.ops.summary().get("moe_experts_add_rmsnorm:fallback") == _layers(nano)[0]


@pytest.mark.gpu
def test_gpu_the_captured_step_with_the_fused_kernel_keeps_the_gate():
    """On CUDA: the replayed step with moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm against the unfused
    graph on moe_experts=cupy_rowwarp_pdl_q8_hidden (the same experts' bits) and the torch add_rmsnorm: the logits
    within float32 rounding, every MoE layer's decode call taken by the kernels themselves (q4k_nano: k3-nano's own
    experts are Q8_0, which the kernels hand on)."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    model = q4k_nano()
    impls = {"moe_experts": "cupy_rowwarp_pdl_q8_hidden", "moe_experts_add_rmsnorm": "cupy_rowwarp_pdl_q8_hidden_norm"}
    want = run_phases(_engine(model, False, "cuda", impls=impls))
    eng = _engine(model, True, "cuda", impls=impls)
    got = run_phases(eng)
    assert torch.isfinite(got).all()
    assert nmse(got, want) < 1e-8
    handed = {k: n for k, n in eng.ops.passed().items() if k.startswith("moe_experts_add_rmsnorm")}
    assert not handed, f"the kernels took none of these calls themselves: {handed}"


@pytest.mark.gpu
def test_gpu_capture_refuses_only_the_round_trips_the_step_takes(nano):
    """A registry with no CUDA moe_experts_add_rmsnorm (its reference, CPU-only, makes a host round trip a call)
    captures a step while fuse_moe_norm is off - the step never calls it - and refuses, naming it, once on."""
    capture_refuses_only_when_on(nano, "fuse_moe_norm", "moe_experts_add_rmsnorm")
