"""[engine] fuse_kda_norm (engine/graph.py): a decode step's KDA layers call kda_norm - the recurrence and the output
norm as one op - where the unfused graph calls kda then gated_rmsnorm; a prefill chunk keeps the two apart. The
logits stay within the fp32 gate of the unfused ones, eagerly and through the replayed step (DecodeStep, which must
pass the option on: session 19's side stream once went missing there).
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
from sparkops.engine.graph import FUSED_NORM_MAX_T
from sparkops.ops import OP_NAMES
from sparkops.plugins import load_catalog
from sparkops.registry.file import Registry
from sparkops.registry.plan import make_plan
from sparkops.synth import synth_weights
from tests.engine.fusion_support import OpCalls, capture_refuses_only_when_on, nmse, run_phases


@pytest.fixture(scope="module")
def nano():
    return synth_weights(load_preset("k3-nano"), "q4_k_m", seed=5)


def _registry(device: str, fuse_norm: bool, impls: dict[str, str] | None = None, **engine) -> Registry:
    reg = Registry.empty("mem.toml")
    for op in OP_NAMES:
        reg.set(op, device, (impls or {}).get(op, "torch"), fallback="error")
    reg.set_engines({"fuse_kda_norm": fuse_norm, **engine})
    return reg


def _engine(model, fuse_norm: bool, device: str = "cpu", **kw) -> Engine:
    plan = make_plan(_registry(device, fuse_norm, **kw), load_catalog(), device, verify_checks=False)
    return Engine(model, Ops(plan), max_context=96)


#: the ops whose calls the tests count (OpCalls, per phase): the KDA core ops
COUNTED = ("kda", "gated_rmsnorm", "kda_norm")


def _run(eng: Engine) -> torch.Tensor:
    """A prefill, eager decodes, then the replayed step's body (a CUDA graph on CUDA): the logits of each."""
    return run_phases(eng)


def test_decode_calls_kda_norm_and_prefill_keeps_the_pair(nano):
    eng = _engine(nano, True)
    calls = OpCalls(eng, COUNTED)
    kda_layers = sum(layer.kind == "kda" for layer in nano.layers)
    assert kda_layers > 0 and FUSED_NORM_MAX_T == 1
    eng.prefill(list(range(3, 20)))
    assert calls.take() == {"kda": kda_layers, "gated_rmsnorm": kda_layers, "kda_norm": 0}
    eng.decode(7)
    assert calls.take() == {"kda": 0, "gated_rmsnorm": 0, "kda_norm": kda_layers}
    step = DecodeStep(eng)
    step()
    assert calls.take() == {"kda": 0, "gated_rmsnorm": 0, "kda_norm": kda_layers}, "the replayed step lost the option"
    plain = _engine(nano, False)
    calls = OpCalls(plain, COUNTED)
    plain.prefill([3, 4])
    plain.decode(7)
    assert calls.take() == {"kda": 2 * kda_layers, "gated_rmsnorm": 2 * kda_layers, "kda_norm": 0}


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fuse_projections"])
def test_logits_stay_within_the_fp32_gate_of_the_unfused_graph(nano, fused):
    """The fused op keeps the core output in float32 where the chain hands it on in float32 too: the logits agree to
    float32 rounding, also with fused projections (whose one-stream order runs g_b after the recurrence; kda_norm
    needs it before)."""
    extra = {"fuse_projections": fused, "fuse_short_conv": fused, "fuse_low_rank": fused}
    want = _run(_engine(nano, False, **extra))
    got = _run(_engine(nano, True, **extra))
    assert torch.isfinite(got).all() and got.shape == want.shape
    assert nmse(got, want) < 1e-10


def test_the_cli_sets_it_and_the_bench_says_so(tmp_path, capsys, nano):
    p = tmp_path / "r.toml"
    _registry("cpu", False).save(p)
    assert main(["engine", "--registry", str(p), "fuse_kda_norm=on"]) == 0
    assert Registry.load(p).engine_options()["fuse_kda_norm"] is True
    eng = Engine(nano, Ops(make_plan(Registry.load(p), load_catalog(), "cpu", verify_checks=False)), max_context=32)
    assert eng.fuse_kda_norm and selections(eng)["[engine]"] == "fuse_kda_norm"
    assert "[engine]" not in selections(_engine(nano, False))


def test_without_a_kda_norm_selection_the_reference_runs_it_and_is_counted(nano):
    """No silent fallback: a registry that turns the option on but selects no kda_norm (fallback "reference") runs
    the reference, and the plan and the counters say so."""
    reg = _registry("cpu", True)
    del reg.doc["ops"]["kda_norm"]
    plan = make_plan(reg, load_catalog(), "cpu", verify_checks=False)
    assert plan.entries["kda_norm"].fallback_taken and "kda_norm" in plan.fallbacks
    eng = Engine(nano, Ops(plan), max_context=32)
    eng.prefill([3, 4])
    eng.decode(5)
    kda_layers = sum(layer.kind == "kda" for layer in nano.layers)
    assert eng.ops.summary().get("kda_norm:fallback") == kda_layers


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["triton", "triton_pdl", "triton_split", "triton_split_pdl"])
def test_gpu_the_captured_step_with_the_fused_kernel_keeps_the_gate(nano, impl):
    """On CUDA: the replayed step with kda_norm=IMPL (Triton) within bf16-free float32 rounding of the unfused graph
    on the same Triton kda and gated_rmsnorm (float32 activations), one op a KDA layer fewer in the captured step."""
    impls = {"kda": "triton", "gated_rmsnorm": "triton", "kda_norm": impl}
    want = _run(_engine(nano, False, "cuda", impls=impls))
    eng = _engine(nano, True, "cuda", impls=impls)
    got = _run(eng)
    assert torch.isfinite(got).all()
    assert nmse(got, want) < 1e-8


@pytest.mark.gpu
def test_gpu_capture_refuses_only_the_round_trips_the_step_takes(nano):
    """A registry with no CUDA kda_norm (its reference, CPU-only, would make a host round trip a call) captures a step
    while fuse_kda_norm is off - the step never calls kda_norm - and refuses, naming kda_norm, once it is on. Session
    21's captured gate refused every registry made before kda_norm existed, for an op its step did not call."""
    capture_refuses_only_when_on(nano, "fuse_kda_norm", "kda_norm",
                                 registry=lambda on: _registry("cuda", on))
