"""[engine] fuse_conv_kda (engine/graph.py): a decode step's KDA layers whose q, k, v share the merged conv
(fuse_short_conv) call short_conv_kda_norm - the short conv, the recurrence and the output norm as one op, on the raw
q|k|v projection - where the graph without it calls short_conv then kda_norm (or kda then gated_rmsnorm); a prefill
chunk keeps them apart. The torch op is the torch chain, so on the CPU the logits, the conv windows and the recurrent
states keep every bit of the run without it, eagerly and through the replayed step (DecodeStep, which must pass the
option on). The registry refuses it without fuse_short_conv and together with fuse_kda_gates.
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
from sparkops.errors import BadInput, RegistryError
from sparkops.lanes import MAIN, SIDE, lane
from sparkops.ops import OP_NAMES
from sparkops.plugins import load_catalog
from sparkops.registry.file import Registry
from sparkops.registry.plan import make_plan
from sparkops.synth import synth_weights
from tests.engine.fusion_support import OpCalls, capture_refuses_only_when_on, nmse, run_phases

#: the options fuse_conv_kda needs: the merged q|k|v conv exists only with both
MERGED = {"fuse_projections": True, "fuse_short_conv": True}

#: the [engine] combinations the fused op runs under: the merged conv alone, with the block-diagonal up-projection,
#: with fuse_kda_norm on as well (the calls it takes are the same), with the side stream (inline on the CPU; the gate
#: projections on its lane)
COMBOS = {
    "fuse_short_conv": MERGED,
    "fuse_low_rank": {**MERGED, "fuse_low_rank": True},
    "fuse_kda_norm": {**MERGED, "fuse_kda_norm": True},
    "side_stream+fuse_low_rank": {**MERGED, "fuse_low_rank": True, "side_stream": True},
}

#: linears by weight name: a gate input (f_a, g_a, beta: alone or their fused group), an up-projection (f_b, g_b, or
#: fuse_low_rank's block-diagonal weight made of the two), the fused q|k|v group
GATE_INPUT = re.compile(r"ssm_(f_a|g_a|beta)")
UP_PROJECTION = re.compile(r"ssm_[fg]_b")
QKV_GROUP = re.compile(r"attn_q\.weight\+blk\.\d+\.attn_k\.weight\+blk\.\d+\.attn_v\.weight$")


@pytest.fixture(scope="module")
def nano():
    """k3-nano in the 48B's mix: q/k/v Q4_K (one group with the merged conv when fused), the gate inputs and
    up-projections F16."""
    return synth_weights(load_preset("k3-nano"), "q4_k_m", seed=5)


@pytest.fixture(scope="module")
def floats():
    """k3-nano in float32: fused, a KDA layer's six projections are one group (q|k|v its first columns, the merged
    conv over them; nothing can fork onto the side stream)."""
    return synth_weights(load_preset("k3-nano"), "f32", seed=3)


def _registry(device: str, fuse_conv: bool, impls: dict[str, str] | None = None, **engine) -> Registry:
    reg = Registry.empty("mem.toml")
    for op in OP_NAMES:
        reg.set(op, device, (impls or {}).get(op, "torch"), fallback="error")
    reg.set_engines({**MERGED, "fuse_conv_kda": fuse_conv, **engine})
    return reg


def _engine(model, fuse_conv: bool, device: str = "cpu", **kw) -> Engine:
    plan = make_plan(_registry(device, fuse_conv, **kw), load_catalog(), device, verify_checks=False)
    return Engine(model, Ops(plan), max_context=96)


def _kda_layers(model) -> int:
    return sum(layer.kind == "kda" for layer in model.layers)


#: the ops whose calls the tests count (OpCalls, per phase): the KDA conv and core ops
COUNTED = ("short_conv", "kda", "gated_rmsnorm", "kda_norm", "short_conv_kda_norm")


def _run(eng: Engine) -> torch.Tensor:
    """A prefill, eager decodes, then the replayed step's body (a CUDA graph on CUDA): the logits of each."""
    return run_phases(eng, steps=(2, 30, 11))


def _states(eng: Engine) -> dict[str, torch.Tensor]:
    """Every KDA layer's merged conv window [W-1, 3P] and recurrent state [H, Dk, Dv], by name."""
    out = {}
    for i, layer in enumerate(eng.model.layers):
        if layer.kind == "kda":
            out[f"window {i}"] = eng.state.conv_windows[i].clone()
            out[f"recurrent {i}"] = eng.state.layers[i].recurrent.clone()
    return out


@pytest.mark.parametrize("combo", list(COMBOS))
def test_decode_calls_short_conv_kda_norm_and_prefill_keeps_the_chain(nano, combo):
    """A decode call: short_conv_kda_norm once a KDA layer, and no short_conv, kda, kda_norm or gated_rmsnorm (the
    fused op holds the norm, fuse_kda_norm or not). A prefill call: the graph without the option (one merged conv,
    the chunked kda, the norm)."""
    n = _kda_layers(nano)
    eng = _engine(nano, True, **COMBOS[combo])
    calls = OpCalls(eng, COUNTED)
    assert n > 0 and FUSED_NORM_MAX_T == 1 and set(eng.state.conv_windows) == {
        i for i, layer in enumerate(nano.layers) if layer.kind == "kda"}
    eng.prefill(list(range(3, 3 + FUSED_NORM_MAX_T + 16)))
    assert calls.take() == {"short_conv": n, "kda": n, "gated_rmsnorm": n, "kda_norm": 0, "short_conv_kda_norm": 0}
    fused = {"short_conv": 0, "kda": 0, "gated_rmsnorm": 0, "kda_norm": 0, "short_conv_kda_norm": n}
    eng.decode(7)
    assert calls.take() == fused
    DecodeStep(eng)()  # the replayed step's body, eagerly on the CPU
    assert calls.take() == fused, "the replayed step lost the option"


def test_without_the_option_decode_runs_the_conv_then_the_recurrence(nano):
    plain = _engine(nano, False)
    calls = OpCalls(plain, COUNTED)
    plain.prefill([3, 4])
    plain.decode(7)
    DecodeStep(plain)()
    n = _kda_layers(nano)
    assert calls.take() == {"short_conv": 3 * n, "kda": 3 * n, "gated_rmsnorm": 3 * n, "kda_norm": 0,
                            "short_conv_kda_norm": 0}


@pytest.mark.parametrize("combo", list(COMBOS))
def test_logits_windows_and_states_keep_the_bits_of_the_run_without_it(nano, combo):
    """The torch op is the torch chain (short_conv, then kda_norm, itself kda then gated_rmsnorm): over a prefill, two
    eager decodes and three steps, the logits, every KDA layer's conv window and recurrent state are the same bits as
    the run without the option (whose decode calls short_conv then kda_norm or kda and gated_rmsnorm)."""
    extra = COMBOS[combo]
    plain, fused = _engine(nano, False, **extra), _engine(nano, True, **extra)
    want, got = _run(plain), _run(fused)
    assert torch.isfinite(got).all() and got.shape == want.shape
    assert torch.equal(got, want), f"NMSE {nmse(got, want):.3g}"
    before, after = _states(plain), _states(fused)
    assert list(after) == list(before) and len(after) == 2 * _kda_layers(nano)
    differ = [k for k in before if not torch.equal(after[k], before[k])]
    assert not differ, f"the fused run's states differ: {differ}"


@pytest.mark.parametrize("low_rank", [False, True], ids=["fuse_short_conv", "fuse_low_rank"])
def test_a_float_model_s_one_group_of_six_runs_it_too(floats, low_rank):
    """Float32 weights fuse a KDA layer's six projections into one linear, q|k|v its first 3P columns and the gate
    inputs the rest (so the side stream cannot fork them): the fused op takes the q|k|v columns, the gates come from
    the same projection, and the logits and states keep the bits of the run without it."""
    extra = {"fuse_low_rank": low_rank, "side_stream": True}
    plain, fused = _engine(floats, False, **extra), _engine(floats, True, **extra)
    assert fused.side_layers == []  # one group mixes the gate inputs with q/k/v: nothing forks
    calls = OpCalls(fused, COUNTED)
    want, got = _run(plain), _run(fused)
    assert calls.take()["short_conv_kda_norm"] == 5 * _kda_layers(floats)  # two decodes, three steps
    assert torch.equal(got, want), f"NMSE {nmse(got, want):.3g}"
    before, after = _states(plain), _states(fused)
    assert all(torch.equal(after[k], before[k]) for k in before)


@pytest.mark.parametrize("low_rank", [False, True], ids=["fuse_short_conv", "fuse_low_rank"])
def test_with_the_side_stream_the_gates_fork_and_join_before_the_fused_op(nano, low_rank):
    """With the side stream a decode call forks the gate projections (the GATE_INPUTS group, then f_b and g_b or the
    block-diagonal linear); the main line runs the q|k|v projection alone - no conv - then joins, then the fused op,
    the first to read g, gate and beta."""
    eng = _engine(nano, True, side_stream=True, fuse_low_rank=low_rank)
    n = _kda_layers(nano)
    assert len(eng.side_layers) == n
    calls: list[tuple[int, str, str]] = []  # (lane, op, weight name for a linear)
    for op in ("linear", "short_conv", "short_conv_kda_norm"):
        inner = getattr(eng.ops, op)

        def call(*args, _op=op, _inner=inner, **kwargs):
            calls.append((lane(), _op, getattr(args[1], "name", "") if _op == "linear" else ""))
            return _inner(*args, **kwargs)

        setattr(eng.ops, op, call)
    join = eng.side.join

    def joined(*outputs):
        calls.append((lane(), "join", ""))
        return join(*outputs)

    eng.side.join = joined
    eng.prefill([3, 4])
    calls.clear()
    eng.decode(7)
    side = [name for ln, op, name in calls if ln == SIDE]
    ups = 1 if low_rank else 2
    assert len(side) == n * (1 + ups), side
    assert all(GATE_INPUT.search(w) or UP_PROJECTION.search(w) for w in side), side
    main = [(op, name) for ln, op, name in calls if ln == MAIN]
    assert not any(op == "short_conv" for op, _ in main), main
    kda = [j for j, (op, _) in enumerate(main) if op == "short_conv_kda_norm"]
    assert len(kda) == n
    for j in kda:  # each layer: the q|k|v projection, the join, the fused op (then o_proj)
        assert main[j - 1] == ("join", "") and main[j - 2][0] == "linear" and QKV_GROUP.search(main[j - 2][1]), \
            main[j - 2:j + 1]


def test_a_layer_without_the_merged_conv_is_as_without_it(nano):
    """Options that reach the engine without a registry's checks (fuse_conv_kda on, fuse_short_conv off): no layer has
    the merged conv and window the fused op reads, so every call is the graph without the option - three convs a
    layer, then kda and gated_rmsnorm - and the logits keep its bits."""
    reg = Registry.empty("mem.toml")
    for op in OP_NAMES:
        reg.set(op, "cpu", "torch", fallback="error")
    reg.set_engines({"fuse_projections": True})
    plan = make_plan(reg, load_catalog(), "cpu", verify_checks=False)
    want = _run(Engine(nano, Ops(plan), max_context=96))
    plan.engine["fuse_conv_kda"] = True
    eng = Engine(nano, Ops(plan), max_context=96)
    assert eng.fuse_conv_kda and not eng.state.conv_windows
    calls = OpCalls(eng, COUNTED)
    got = _run(eng)
    n = _kda_layers(nano)
    assert calls.take() == {"short_conv": 3 * 6 * n, "kda": 6 * n, "gated_rmsnorm": 6 * n, "kda_norm": 0,
                            "short_conv_kda_norm": 0}
    assert torch.equal(got, want)


def test_the_registry_refuses_it_without_fuse_short_conv(tmp_path, capsys):
    """The fused op runs the merged conv, which only fuse_short_conv makes (itself needing fuse_projections): refused
    in a file, by the CLI (nothing written), naming the options still off in the command that fixes it."""
    p = tmp_path / "r.toml"
    p.write_text("[engine]\nfuse_projections = true\nfuse_conv_kda = true\n")
    with pytest.raises(RegistryError, match=r"fuse_conv_kda = true needs fuse_short_conv = true \(the fused op runs "
                                            r"the merged q\|k\|v conv.*set both \(sparkops engine fuse_short_conv=on "
                                            r"fuse_conv_kda=on\) or turn fuse_conv_kda off"):
        Registry.load(p)
    p.write_text("")
    assert main(["engine", "--registry", str(p), "fuse_conv_kda=on"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "fuse_conv_kda = true needs fuse_short_conv = true" in err and p.read_text() == ""
    assert "set them all (sparkops engine fuse_projections=on fuse_short_conv=on fuse_conv_kda=on)" in err
    assert main(["engine", "--registry", str(p), "fuse_conv_kda=on", "fuse_short_conv=on", "fuse_projections=on"]) == 0
    assert Registry.load(p).engine_options()["fuse_conv_kda"] is True
    assert main(["engine", "--registry", str(p), "fuse_short_conv=off"]) == 2  # it would be left without the conv
    assert main(["engine", "--registry", str(p), "fuse_short_conv=off", "fuse_conv_kda=off"]) == 0


def test_the_registry_and_the_engine_refuse_it_with_fuse_kda_gates(tmp_path, capsys, nano):
    """fuse_kda_gates takes the same calls into kda_lowrank_norm, and no op does the conv and the low-rank gates
    together: the pair is refused - in a file, by set_engines, by the CLI, and by the engine for options that came
    another way - rather than one silently winning; turning one off as the other goes on is fine."""
    msg = (r"\[engine\] fuse_conv_kda = true and fuse_kda_gates = true cannot both be on \(.*\); turn one off "
           r"\(sparkops engine fuse_kda_gates=off, or fuse_conv_kda=off\)")
    p = tmp_path / "r.toml"
    p.write_text("[engine]\nfuse_projections = true\nfuse_short_conv = true\nfuse_conv_kda = true\n"
                 "fuse_kda_gates = true\n")
    with pytest.raises(RegistryError, match=msg):
        Registry.load(p)
    with pytest.raises(RegistryError, match=msg):
        _registry("cpu", True, fuse_kda_gates=True)
    p.write_text("[engine]\nfuse_projections = true\nfuse_short_conv = true\nfuse_kda_gates = true\n")
    assert main(["engine", "--registry", str(p), "fuse_conv_kda=on"]) == 2
    assert "cannot both be on" in capsys.readouterr().err and "fuse_conv_kda" not in p.read_text()
    assert main(["engine", "--registry", str(p), "fuse_conv_kda=on", "fuse_kda_gates=off"]) == 0
    opts = Registry.load(p).engine_options()
    assert opts["fuse_conv_kda"] is True and opts["fuse_kda_gates"] is False
    plan = make_plan(_registry("cpu", True), load_catalog(), "cpu", verify_checks=False)
    plan.engine["fuse_kda_gates"] = True
    with pytest.raises(BadInput, match=msg):
        Engine(nano, Ops(plan), max_context=32)


def test_the_cli_sets_and_shows_it_the_plan_shows_it_and_the_bench_says_so(tmp_path, capsys, nano):
    p = tmp_path / "r.toml"
    _registry("cpu", False).save(p)
    assert main(["engine", "fuse_conv_kda=on", "--registry", str(p)]) == 0
    assert Registry.load(p).engine_options()["fuse_conv_kda"] is True
    capsys.readouterr()
    assert main(["engine", "--registry", str(p)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert re.search(r"fuse_conv_kda\W+on\W", out) and "short_conv_kda_norm" in out
    assert main(["engine", "--registry", str(p), "--json"]) == 0
    assert '"fuse_conv_kda": true' in capsys.readouterr().out
    assert main(["plan", "--device", "cpu", "--registry", str(p)]) in (0, 1)  # the checks are not this test's
    out = " ".join(capsys.readouterr().out.split())
    assert "engine: fuse_projections, fuse_short_conv, fuse_conv_kda" in out
    assert "fuse_conv_kda: with fuse_short_conv: a decode step's KDA layers run their merged" in out
    eng = Engine(nano, Ops(make_plan(Registry.load(p), load_catalog(), "cpu", verify_checks=False)), max_context=32)
    assert eng.fuse_conv_kda and not eng.fuse_kda_norm and not eng.fuse_kda_gates
    assert selections(eng)["[engine]"] == "fuse_projections, fuse_short_conv, fuse_conv_kda"
    assert main(["engine", "--registry", str(p), "fuse_conv_kda=off"]) == 0
    assert Registry.load(p).engine_options()["fuse_conv_kda"] is False


def test_without_a_selection_the_reference_runs_it_and_is_counted(nano):
    """No silent fallback: a registry that turns the option on but selects no short_conv_kda_norm (fallback
    "reference") runs the reference at decode, and the plan and the counters say so; a prefill does not call it."""
    reg = _registry("cpu", True)
    del reg.doc["ops"]["short_conv_kda_norm"]
    plan = make_plan(reg, load_catalog(), "cpu", verify_checks=False)
    assert plan.entries["short_conv_kda_norm"].fallback_taken and "short_conv_kda_norm" in plan.fallbacks
    eng = Engine(nano, Ops(plan), max_context=32)
    eng.prefill([3, 4])
    assert "short_conv_kda_norm:fallback" not in eng.ops.summary()
    eng.decode(5)
    assert eng.ops.summary().get("short_conv_kda_norm:fallback") == _kda_layers(nano)


def test_an_unselected_short_conv_kda_norm_is_not_called_without_the_option(nano):
    """fuse_short_conv and fuse_kda_norm on, fuse_conv_kda off, no short_conv_kda_norm selection: the step never calls
    it, so no fallback is taken (a captured step would not refuse for it)."""
    reg = _registry("cpu", False, fuse_kda_norm=True)
    del reg.doc["ops"]["short_conv_kda_norm"]
    eng = Engine(nano, Ops(make_plan(reg, load_catalog(), "cpu", verify_checks=False)), max_context=32)
    eng.prefill([3, 4])
    eng.decode(5)
    DecodeStep(eng)()
    assert "short_conv_kda_norm:fallback" not in eng.ops.summary()


def _triton_impl(impl: str) -> None:
    """Skip unless the catalog holds short_conv_kda_norm=IMPL (sparkops_triton/short_conv_kda_norm.py)."""
    have = load_catalog().implementations("short_conv_kda_norm")
    if impl not in have:
        pytest.skip(f"short_conv_kda_norm={impl} is not in the catalog (its implementations: {', '.join(sorted(have))}"
                    f"); it comes with plugins/sparkops_triton/short_conv_kda_norm.py")


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["triton_split", "triton_split_pdl"])
@pytest.mark.parametrize("combo", ["fuse_short_conv", "side_stream+fuse_low_rank"])
def test_gpu_the_captured_step_with_the_fused_kernel_keeps_the_gate(nano, impl, combo):
    """On CUDA: the replayed step with short_conv_kda_norm=IMPL (Triton) within float32 rounding of the graph without
    the option on the same Triton short_conv and kda_norm=triton_split (float32 activations; fuse_kda_norm on there,
    so the one difference is the conv inside the fused op), also with the side stream as a branch of the captured
    graph; the conv windows and recurrent states after the run agree too, and the kernel takes every call itself."""
    _triton_impl(impl)
    impls = {"short_conv": "triton", "kda": "triton", "gated_rmsnorm": "triton", "kda_norm": "triton_split",
             "short_conv_kda_norm": impl}
    plain = _engine(nano, False, "cuda", impls=impls, fuse_kda_norm=True, **COMBOS[combo])
    want = _run(plain)
    eng = _engine(nano, True, "cuda", impls=impls, **COMBOS[combo])
    got = _run(eng)
    assert torch.isfinite(got).all()
    assert nmse(got, want) < 1e-8
    before, after = _states(plain), _states(eng)
    worst = {k: nmse(after[k], before[k]) for k in before}
    assert max(worst.values()) < 1e-8, worst
    handed = {k: n for k, n in eng.ops.passed().items() if k.startswith("short_conv_kda_norm")}
    assert not handed, f"the kernel took none of these calls itself: {handed}"


@pytest.mark.gpu
def test_gpu_capture_refuses_an_unselected_short_conv_kda_norm_by_name(nano):
    """A registry with no CUDA short_conv_kda_norm (its reference, CPU-only, would make a host round trip a call)
    captures a step while fuse_conv_kda is off - the step never calls it - and refuses, naming short_conv_kda_norm,
    once it is on, leaving the state as it was."""
    capture_refuses_only_when_on(nano, "fuse_conv_kda", "short_conv_kda_norm",
                                 registry=lambda on: _registry("cuda", on))
