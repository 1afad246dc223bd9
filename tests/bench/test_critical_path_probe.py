"""bench/probes/critical_path.py: the step's span replayed from its dependencies, and what-ifs on it - on hand-made
replays and on GPU session 33's two H100 timelines (committed JSON: no GPU), where per-op Amdahl had forecast a gain
and the step lost."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from tests.helpers import REPO, load_probe

probe = load_probe("critical_path")
S33 = REPO / "bench/gpu-runs/2026-12-05-session33"
S39 = S33 / "call5/probe-timeline-now.json"  # the Q8-tall step (cuda-s39), H100
S40 = S33 / "call8/timeline-s40.json"  # the same step with the fused conv-and-recurrence (cuda-s40), same machine

#: a KDA layer, rounded: the norm, the tall GEMV under PDL, the side stream's two gate GEMVs beside it and the conv,
#: then the recurrence (after the side stream's join) and the o_proj; then the next layer's norm and its side GEMV
LAYER = [["_add_rmsnorm_kernel", 7, 0.0, 2.0, 2.0], ["tall", 7, 1.0, 10.0, 8.0], ["_gemv_kernel", 9, 3.0, 11.0, 1.0],
         ["conv", 7, 10.2, 12.0, 1.8], ["_gemv_kernel", 9, 11.2, 13.0, 1.0], ["rec", 7, 13.1, 18.0, 4.9],
         ["o_proj", 7, 14.0, 20.0, 2.0], ["_add_rmsnorm_kernel", 7, 20.5, 22.0, 1.5],
         ["_gemv_kernel", 9, 22.5, 25.0, 2.5], ["tall", 7, 21.0, 30.0, 8.0]]


def _nodes(ks=LAYER):
    return probe.build(ks, ("_gemv_kernel",))


def test_the_dependencies_are_the_forward_s_and_the_model_gives_the_measured_span():
    nodes = _nodes()
    name = {n.i: n.name for n in nodes}
    deps = {(n.name, round(n.start, 1)): [name[d] for d in n.deps] for n in nodes}
    assert deps[("_gemv_kernel", 3.0)] == ["_add_rmsnorm_kernel"]  # forks after the norm
    assert deps[("_gemv_kernel", 11.2)] == ["_gemv_kernel"]  # follows the first side GEMV: one run
    assert deps[("rec", 13.1)] == ["conv", "_gemv_kernel"]  # the join: the main line and the side stream
    assert deps[("_gemv_kernel", 22.5)] == ["_add_rmsnorm_kernel"]  # the next layer's norm opened a new run
    assert probe.replay(nodes) == pytest.approx(30.0)


def test_a_kernel_beside_a_later_side_stream_saves_nothing_and_the_side_kernel_saves_up_to_the_main_line():
    """Session 33's lesson in small: the conv ends at 12.0, the side stream at 13.0; the recurrence waits for both."""
    nodes = _nodes()
    assert probe.forecast(nodes, [probe.Change("remove", "conv")])["span_us"] == pytest.approx(30.0)
    no_side2 = probe.forecast(nodes, [probe.Change("remove", "_gemv_kernel<_gemv_kernel")])
    assert no_side2["launches"] == {"_gemv_kernel<_gemv_kernel": 1}
    assert no_side2["span_us"] == pytest.approx(29.0)  # the recurrence now waits for the conv: 1 us, not the 1.8
    both = probe.forecast(nodes, [probe.Change("remove", "conv"), probe.Change("remove", "_gemv_kernel<_gemv_kernel")])
    assert both["span_us"] == pytest.approx(28.0)  # ready at 11.0, the first side GEMV's end
    slower = probe.forecast(nodes, [probe.Change("tail", "rec", 7.0)])
    assert slower["span_us"] == pytest.approx(32.0) and slower["ratio"] == pytest.approx(30.0 / 32.0)  # tail 5 -> 7


def test_a_selector_names_kernels_by_the_one_before_and_the_one_after():
    nodes = _nodes()
    assert [n.start for n in probe.select(nodes, "tall")] == [1.0, 21.0]
    assert [n.start for n in probe.select(nodes, "tall>conv")] == [1.0]  # the layer whose conv follows
    assert [n.start for n in probe.select(nodes, "_gemv_kernel<_gemv_kernel")] == [11.2]
    assert [n.start for n in probe.select(nodes, "_add_rmsnorm_kernel<o_proj>tall")] == [20.5]
    assert probe.select(nodes, "tall>rec") == []


def test_scale_and_shift_act_on_the_tail_not_the_duration():
    nodes = _nodes()
    # o_proj runs 14-20 under PDL, its tail 2 after the recurrence: x2 saves 1 us, not the 3 its duration would say
    assert probe.forecast(nodes, [probe.Change("scale", "o_proj", 2.0)])["span_us"] == pytest.approx(29.0)
    assert probe.forecast(nodes, [probe.Change("shift", "o_proj", 5.0)])["span_us"] == pytest.approx(28.0)  # to 0
    assert probe.forecast(nodes, [probe.Change("shift", "o_proj", -1.0)])["span_us"] == pytest.approx(31.0)


@pytest.mark.skipif(not S39.exists() or not S40.exists(), reason="session 33's timelines are not in this checkout")
def test_session_33_the_model_forecasts_the_fused_conv_s_loss_where_amdahl_forecast_a_gain():
    """On the s39 replay the conv's own time is ~80 us of ~1980 (Amdahl on removing it: ~x1.04); the model says it is
    off the critical path (x1.00). With the fused kernel's tail as its own step's replay measured it, the model
    forecasts the loss the bench measured (0.943 / 0.946; the two replays' spans: 0.9485) within 0.015."""
    name, ks = probe.read_timeline(S39, None, "test")
    nodes = probe.build(ks, ("_gemv_kernel",))
    measured = max(n.end for n in nodes) - min(n.start for n in nodes)
    assert probe.replay(nodes) == pytest.approx(measured)
    assert sum(1 for n in nodes if not n.side and any(nodes[d].side for d in n.deps)) == 20  # a join a KDA layer
    own_conv = sum(k[4] for k in ks if k[0] == "_short_conv_kernel")
    assert measured / (measured - own_conv) > 1.035  # what per-op Amdahl would have said
    assert probe.forecast(nodes, [probe.Change("remove", "_short_conv_kernel")])["ratio"] < 1.005

    _, ks40 = probe.read_timeline(S40, None, "test")
    n40 = probe.build(ks40, ("_gemv_kernel",))
    fused_tail = statistics.median(n.tail for n in n40 if n.name == "_conv_kda_kernel")
    span40 = max(n.end for n in n40) - min(n.start for n in n40)
    f = probe.forecast(nodes, [probe.Change("remove", "_short_conv_kernel"),
                               probe.Change("tail", "_kda_recurrent_kernel", fused_tail)])
    assert f["ratio"] < 0.97 and f["ratio"] == pytest.approx(measured / span40, abs=0.015)


def _timeline(tmp_path, ks=LAYER) -> Path:
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"registries": {"/tmp/a.toml": {"kernels": ks}}}))
    return f


def test_the_command_prints_the_forecast_and_refuses_what_it_cannot_apply(tmp_path, capsys):
    f = str(_timeline(tmp_path))
    assert probe.main([f, "--remove", "conv", "--scale", "o_proj=2", "--each"]) == 0
    out = capsys.readouterr().out
    assert "span measured 30.0 us, the model's 30.0" in out and "--remove conv: span 30.0 us, forecast x1.0000" in out
    assert probe.main([f, "--remove", "lm_head"]) == 2
    assert "no kernel of /tmp/a.toml matches 'lm_head'" in capsys.readouterr().err
    for bad, said in ((["--tail", "rec"], "takes SEL=NUMBER"), (["--scale", "rec=0"], "must be positive")):
        with pytest.raises(SystemExit, match=said):
            probe.main([f, *bad])
    assert probe.main([str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert probe.main([f, "--json", "--remove", "conv"]) == 0
    assert json.loads(capsys.readouterr().out)["all"]["ratio"] == pytest.approx(1.0)
