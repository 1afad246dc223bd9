"""[engine] fuse_kda_gates (engine/graph.py): a decode step's KDA layers call kda_lowrank_norm - the two low-rank gate
up-projections (f_b, g_b), the recurrence and the output norm as one op, on f_a's and g_a's outputs - where the
unfused graph calls the f_b and g_b linears (or fuse_low_rank's one block-diagonal linear), then kda and
gated_rmsnorm (or kda_norm with fuse_kda_norm); a prefill chunk keeps all of those apart. The logits stay within the
fp32 gate of the unfused ones, eagerly and through the replayed step (DecodeStep, which must pass the option on:
session 19's side stream once went missing there).
"""

from __future__ import annotations

import re

import pytest
import torch

from sparkops.bench.harness import selections
from sparkops.cli import main
from sparkops.config import load_preset
from sparkops.dispatch import Ops
from sparkops.engine import Engine
from sparkops.engine.decode_step import DecodeStep
from sparkops.engine.graph import FUSED_NORM_MAX_T
from sparkops.lanes import MAIN, SIDE, lane
from sparkops.ops import OP_NAMES
from sparkops.plugins import load_catalog
from sparkops.registry.file import Registry
from sparkops.registry.plan import make_plan
from sparkops.synth import synth_weights
from tests.engine.fusion_support import OpCalls, capture_refuses_only_when_on, nmse, run_phases

#: a linear whose weight is an up-projection: f_b, g_b, or fuse_low_rank's block-diagonal weight made of the two
UP_PROJECTION = re.compile(r"ssm_[fg]_b")

#: the [engine] combinations the fused gates run under: the projections fused or not, the block-diagonal
#: up-projection, fuse_kda_norm on as well, the side stream (inline on the CPU; the gate projections on its lane)
COMBOS = {
    "plain": {},
    "fuse_projections": {"fuse_projections": True, "fuse_short_conv": True},
    "fuse_low_rank": {"fuse_projections": True, "fuse_short_conv": True, "fuse_low_rank": True},
    "fuse_kda_norm": {"fuse_kda_norm": True},
    "fuse_low_rank+fuse_kda_norm": {"fuse_projections": True, "fuse_low_rank": True, "fuse_kda_norm": True},
    "side_stream+fuse_low_rank": {"fuse_projections": True, "fuse_low_rank": True, "side_stream": True},
}


@pytest.fixture(scope="module")
def nano():
    """k3-nano in the 48B's mix: q/k/v Q4_K, the gate inputs and up-projections F16 (two groups when fused)."""
    return synth_weights(load_preset("k3-nano"), "q4_k_m", seed=5)


def _registry(device: str, fuse_gates: bool, impls: dict[str, str] | None = None, **engine) -> Registry:
    reg = Registry.empty("mem.toml")
    for op in OP_NAMES:
        reg.set(op, device, (impls or {}).get(op, "torch"), fallback="error")
    reg.set_engines({"fuse_kda_gates": fuse_gates, **engine})
    return reg


def _engine(model, fuse_gates: bool, device: str = "cpu", **kw) -> Engine:
    plan = make_plan(_registry(device, fuse_gates, **kw), load_catalog(), device, verify_checks=False)
    return Engine(model, Ops(plan), max_context=96)


class _Calls(OpCalls):
    """Counts the engine's calls of the KDA core ops and of the up-projection linears, per phase."""

    def __init__(self, engine: Engine):
        super().__init__(engine, ("kda", "gated_rmsnorm", "kda_norm", "kda_lowrank_norm"))
        engine.ops.linear = self._linear(engine.ops.linear)

    def _linear(self, inner):
        def call(x, weight, *args, **kwargs):
            if UP_PROJECTION.search(getattr(weight, "name", "")):
                self.count["up_projection"] += 1
            return inner(x, weight, *args, **kwargs)

        return call

    def take(self) -> dict[str, int]:
        up = self.count["up_projection"]
        return {**super().take(), "up_projection": up}


def _kda_layers(model) -> int:
    return sum(layer.kind == "kda" for layer in model.layers)


def _run(eng: Engine) -> torch.Tensor:
    """A prefill, eager decodes, then the replayed step's body (a CUDA graph on CUDA): the logits of each."""
    return run_phases(eng, steps=(2, 30, 11))


@pytest.mark.parametrize("combo", list(COMBOS))
def test_decode_calls_kda_lowrank_norm_and_prefill_keeps_the_linears(nano, combo):
    """A decode call: kda_lowrank_norm once a KDA layer, and no f_b/g_b linear, kda, kda_norm or gated_rmsnorm (the
    gates' op holds the norm, fuse_kda_norm or not). A prefill call: the graph without the option."""
    extra = COMBOS[combo]
    n = _kda_layers(nano)
    ups = 1 if extra.get("fuse_low_rank") else 2  # the block-diagonal linear, or f_b and g_b
    eng = _engine(nano, True, **extra)
    calls = _Calls(eng)
    assert n > 0 and FUSED_NORM_MAX_T == 1
    eng.prefill(list(range(3, 20)))
    assert calls.take() == {"kda": n, "gated_rmsnorm": n, "kda_norm": 0, "kda_lowrank_norm": 0,
                            "up_projection": ups * n}
    fused = {"kda": 0, "gated_rmsnorm": 0, "kda_norm": 0, "kda_lowrank_norm": n, "up_projection": 0}
    eng.decode(7)
    assert calls.take() == fused
    DecodeStep(eng)()  # the replayed step's body, eagerly on the CPU
    assert calls.take() == fused, "the replayed step lost the option"


def test_without_the_option_decode_runs_the_linears(nano):
    plain = _engine(nano, False)
    calls = _Calls(plain)
    plain.prefill([3, 4])
    plain.decode(7)
    DecodeStep(plain)()
    n = _kda_layers(nano)
    assert calls.take() == {"kda": 3 * n, "gated_rmsnorm": 3 * n, "kda_norm": 0, "kda_lowrank_norm": 0,
                            "up_projection": 2 * 3 * n}


@pytest.mark.parametrize("combo", list(COMBOS))
def test_logits_stay_within_the_fp32_gate_of_the_unfused_graph(nano, combo):
    """The fused op keeps the decay logits and the output gate in float32, as the chain of float32 activations hands
    them on: the logits agree to float32 rounding (the block-diagonal linear of fuse_low_rank sums in other groupings
    than kda_lowrank_norm's two up-projections do), eagerly and through the step."""
    extra = COMBOS[combo]
    want = _run(_engine(nano, False, **extra))
    got = _run(_engine(nano, True, **extra))
    assert torch.isfinite(got).all() and got.shape == want.shape
    assert nmse(got, want) < 1e-10
    assert torch.equal(got[:27], want[:27]), "a prefill call is the unfused graph: the same bits"


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fuse_projections+fuse_low_rank"])
def test_with_the_side_stream_only_the_gate_projections_fork(nano, fused):
    """With the side stream a decode call forks the GATE_INPUTS projections alone (f_a, g_a, beta: one fused linear
    or three); the main line runs q/k/v and the fused op, and no up-projection runs on either lane."""
    eng = _engine(nano, True, side_stream=True, fuse_projections=fused, fuse_low_rank=fused)
    calls: list[tuple[int, str, str]] = []  # (lane, op, weight name for a linear)
    for op in ("linear", "kda_lowrank_norm"):
        inner = getattr(eng.ops, op)

        def call(*args, _op=op, _inner=inner, **kwargs):
            calls.append((lane(), _op, getattr(args[1], "name", "") if _op == "linear" else ""))
            return _inner(*args, **kwargs)

        setattr(eng.ops, op, call)
    eng.prefill([3, 4])
    calls.clear()
    eng.decode(7)
    n = _kda_layers(nano)
    gate_inputs = re.compile(r"ssm_(f_a|g_a|beta)")
    side = [name for ln, op, name in calls if ln == SIDE]
    assert len(side) == n * (1 if fused else 3) and all(gate_inputs.search(w) for w in side), side
    main = [(op, name) for ln, op, name in calls if ln == MAIN]
    assert sum(op == "kda_lowrank_norm" for op, _ in main) == n
    assert not any(gate_inputs.search(w) or UP_PROJECTION.search(w) for _, w in main), main


def test_the_cli_sets_it_and_plan_and_the_bench_say_so(tmp_path, capsys, nano):
    p = tmp_path / "r.toml"
    _registry("cpu", False).save(p)
    assert main(["engine", "--registry", str(p), "fuse_kda_gates=on"]) == 0
    assert Registry.load(p).engine_options()["fuse_kda_gates"] is True
    eng = Engine(nano, Ops(make_plan(Registry.load(p), load_catalog(), "cpu", verify_checks=False)), max_context=32)
    assert eng.fuse_kda_gates and not eng.fuse_kda_norm
    assert selections(eng)["[engine]"] == "fuse_kda_gates"
    assert "[engine]" not in selections(_engine(nano, False))
    capsys.readouterr()
    assert main(["plan", "--device", "cpu", "--registry", str(p)]) in (0, 1)  # the checks are not this test's
    out = " ".join(capsys.readouterr().out.split())
    assert "engine: fuse_kda_gates" in out and "fuse_kda_gates: a decode step's KDA layers run their two" in out
    assert main(["engine", "--registry", str(p), "fuse_kda_gates=off"]) == 0
    assert Registry.load(p).engine_options()["fuse_kda_gates"] is False


def test_without_a_kda_lowrank_norm_selection_the_reference_runs_it_and_is_counted(nano):
    """No silent fallback: a registry that turns the option on but selects no kda_lowrank_norm (fallback "reference")
    runs the reference at decode, and the plan and the counters say so; a prefill does not call it."""
    reg = _registry("cpu", True)
    del reg.doc["ops"]["kda_lowrank_norm"]
    plan = make_plan(reg, load_catalog(), "cpu", verify_checks=False)
    assert plan.entries["kda_lowrank_norm"].fallback_taken and "kda_lowrank_norm" in plan.fallbacks
    eng = Engine(nano, Ops(plan), max_context=32)
    eng.prefill([3, 4])
    assert "kda_lowrank_norm:fallback" not in eng.ops.summary()
    eng.decode(5)
    assert eng.ops.summary().get("kda_lowrank_norm:fallback") == _kda_layers(nano)


def test_an_unselected_kda_norm_is_not_called_by_the_fused_gates(nano):
    """fuse_kda_gates with fuse_kda_norm on and no kda_norm selection: the decode step calls kda_lowrank_norm, never
    kda_norm, so no kda_norm fallback is taken (a captured step would not refuse for it)."""
    reg = _registry("cpu", True, fuse_kda_norm=True)
    del reg.doc["ops"]["kda_norm"]
    eng = Engine(nano, Ops(make_plan(reg, load_catalog(), "cpu", verify_checks=False)), max_context=32)
    eng.prefill([3, 4])
    eng.decode(5)
    DecodeStep(eng)()
    assert "kda_norm:fallback" not in eng.ops.summary()


@pytest.mark.gpu
@pytest.mark.parametrize("combo", ["plain", "fuse_low_rank", "side_stream+fuse_low_rank"])
def test_gpu_the_captured_step_with_the_fused_gates_keeps_the_gate(nano, combo):
    """On CUDA (torch implementations, float32 activations): the replayed step with fuse_kda_gates within float32
    rounding of the unfused graph's, also with the side stream as a branch of the captured graph."""
    extra = COMBOS[combo]
    want = _run(_engine(nano, False, "cuda", **extra))
    got = _run(_engine(nano, True, "cuda", **extra))
    assert torch.isfinite(got).all()
    assert nmse(got, want) < 1e-8


@pytest.mark.gpu
def test_gpu_capture_refuses_an_unselected_kda_lowrank_norm_by_name(nano):
    """A registry with no CUDA kda_lowrank_norm (its reference, CPU-only, would make a host round trip a call)
    captures a step while fuse_kda_gates is off - the step never calls it - and refuses, naming kda_lowrank_norm,
    once it is on, leaving the state as it was."""
    capture_refuses_only_when_on(nano, "fuse_kda_gates", "kda_lowrank_norm",
                                 registry=lambda on: _registry("cuda", on))
