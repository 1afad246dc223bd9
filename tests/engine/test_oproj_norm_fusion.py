"""[engine] fuse_oproj_norm (engine/graph.py): a call of at most OPROJ_NORM_MAX_T tokens runs every layer's attention
output projection and the FFN's residual add and norm as one op (linear_add_rmsnorm) where the unfused graph calls
linear (o_proj) then add_rmsnorm; a longer call (a prefill chunk) keeps the two apart; with fuse_router_norm it is
refused (both take the FFN norm into their op). The logits are the unfused ones, eagerly and through the replayed step
(DecodeStep must pass the option on), alone and with fuse_moe_norm (the other fold: together no add_rmsnorm is left in
a one-token forward but the dense layer's closing one).
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
from sparkops.engine.graph import OPROJ_NORM_MAX_T
from sparkops.errors import BadInput
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
    reg.set_engines({"fuse_oproj_norm": fuse, **engine})
    return reg


def _engine(model, fuse: bool, device: str = "cpu", **kw) -> Engine:
    return option_engine(model, "fuse_oproj_norm", fuse, device, **kw)


#: the ops whose calls the tests count (OpCalls, per phase)
COUNTED = ("linear", "add_rmsnorm", "linear_add_rmsnorm", "moe_experts_add_rmsnorm")


def test_decode_calls_the_fused_op_and_a_prefill_chunk_keeps_the_pair(nano):
    """Per forward: every layer makes one linear_add_rmsnorm call (at most OPROJ_NORM_MAX_T tokens: its o_proj and FFN
    norm) or, longer, its o_proj among its linears and its FFN norm among the add_rmsnorm calls; the closing
    add_rmsnorm of every layer (into the next attention norm) stays."""
    n = len(nano.layers)
    assert OPROJ_NORM_MAX_T == 1
    eng = _engine(nano, True)
    calls = OpCalls(eng, COUNTED)
    eng.prefill([3, 4])
    two = calls.take()
    assert two["linear_add_rmsnorm"] == 0 and two["add_rmsnorm"] == 2 * n
    eng.decode(7)
    one = calls.take()
    assert one["linear_add_rmsnorm"] == n and one["add_rmsnorm"] == n and one["linear"] == two["linear"] - n
    step = DecodeStep(eng)
    step()
    assert calls.take()["linear_add_rmsnorm"] == n, "the replayed step lost the option"
    plain = _engine(nano, False)
    calls = OpCalls(plain, COUNTED)
    plain.decode(7)
    assert calls.take() == {**two, "linear_add_rmsnorm": 0}


def test_with_the_moe_fold_only_the_dense_layers_closing_norm_is_left(nano):
    """Both folds on: a one-token forward's norms are the first (rmsnorm), the fused ops', and the closing add_rmsnorm
    of each dense-FFN layer alone."""
    dense = sum(not isinstance(layer.ffn, MoEWeights) for layer in nano.layers)
    eng = _engine(nano, True, fuse_moe_norm=True)
    calls = OpCalls(eng, COUNTED)
    eng.decode(7)
    got = calls.take()
    assert got["add_rmsnorm"] == dense and got["linear_add_rmsnorm"] == len(nano.layers)
    assert got["moe_experts_add_rmsnorm"] == len(nano.layers) - dense


@pytest.mark.parametrize("default", ["torch", "numpy"])
def test_logits_are_the_unfused_graph_s(nano, default):
    """The fused op is the composition of the two (the numpy reference literally; torch's its two float32 ops): the
    logits agree to the bit, alone, with the MoE fold, and with the projections and KDA fusions on."""
    for extra in ({}, {"fuse_moe_norm": True}, {"fuse_projections": True, "fuse_kda_norm": True}):
        want = run_phases(_engine(nano, False, default=default, **extra))
        got = run_phases(_engine(nano, True, default=default, **extra))
        assert torch.isfinite(got).all() and got.shape == want.shape
        assert torch.equal(got, want), extra


def test_it_is_refused_with_fuse_router_norm(nano, tmp_path):
    """Both options fold the FFN norm into an op; on together the engine refuses, naming both ways out, and so does the
    registry's engine command."""
    with pytest.raises(BadInput, match="fuse_oproj_norm = true and fuse_router_norm = true cannot both be on"):
        _engine(nano, True, fuse_router_norm=True)
    p = tmp_path / "r.toml"
    _registry("cpu", True).save(p)
    assert main(["engine", "--registry", str(p), "fuse_router_norm=on"]) != 0
    assert Registry.load(p).engine_options().get("fuse_router_norm") in (None, False)


def test_the_cli_sets_it_the_plan_shows_it_and_the_bench_says_so(tmp_path, capsys, nano):
    p = tmp_path / "r.toml"
    _registry("cpu", False).save(p)
    assert main(["engine", "--registry", str(p), "fuse_oproj_norm=on"]) == 0
    assert Registry.load(p).engine_options()["fuse_oproj_norm"] is True
    capsys.readouterr()
    main(["plan", "--registry", str(p), "--device", "cpu"])
    assert "engine: fuse_oproj_norm" in capsys.readouterr().out
    eng = Engine(nano, Ops(make_plan(Registry.load(p), load_catalog(), "cpu", verify_checks=False)), max_context=32)
    assert eng.fuse_oproj_norm and selections(eng)["[engine]"] == "fuse_oproj_norm"


def test_without_a_selection_the_reference_runs_it_and_is_counted(nano):
    """No silent fallback: a registry that turns the option on but selects no linear_add_rmsnorm (fallback
    "reference") runs the reference, and the plan and the counters say so."""
    reg = _registry("cpu", True)
    del reg.doc["ops"]["linear_add_rmsnorm"]
    plan = make_plan(reg, load_catalog(), "cpu", verify_checks=False)
    assert plan.entries["linear_add_rmsnorm"].fallback_taken and "linear_add_rmsnorm" in plan.fallbacks
    eng = Engine(nano, Ops(plan), max_context=32)
    eng.prefill([3, 4])
    eng.decode(5)
    assert eng.ops.summary().get("linear_add_rmsnorm:fallback") == len(nano.layers)


@pytest.mark.gpu
def test_gpu_the_captured_step_with_the_fused_kernel_keeps_the_gate():
    """On CUDA: the replayed step with linear_add_rmsnorm=cupy_rowwarp_pdl_norm against the unfused graph on
    linear=cupy_rowwarp_pdl (the same projection's bits) and the torch add_rmsnorm: the logits within float32 rounding,
    every layer's decode call taken by the kernel itself (q4k_nano: k3-nano's own o_proj is Q8_0, which it hands on)."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    model = q4k_nano()
    impls = {"linear": "cupy_rowwarp_pdl", "linear_add_rmsnorm": "cupy_rowwarp_pdl_norm"}
    want = run_phases(_engine(model, False, "cuda", impls=impls))
    eng = _engine(model, True, "cuda", impls=impls)
    got = run_phases(eng)
    assert torch.isfinite(got).all()
    assert nmse(got, want) < 1e-8
    handed = {k: n for k, n in eng.ops.passed().items() if k.startswith("linear_add_rmsnorm")}
    assert not handed, f"the kernel took none of these calls itself: {handed}"


@pytest.mark.gpu
def test_gpu_capture_refuses_only_the_round_trips_the_step_takes(nano):
    """A registry with no CUDA linear_add_rmsnorm (its reference, CPU-only, makes a host round trip a call) captures a
    step while fuse_oproj_norm is off and refuses, naming it, once on."""
    capture_refuses_only_when_on(nano, "fuse_oproj_norm", "linear_add_rmsnorm")
