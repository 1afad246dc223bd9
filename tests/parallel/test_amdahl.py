"""Amdahl's law from measured numbers: the fit, the crossover, and the trap of lecture 07."""

from __future__ import annotations

import math

import pytest

from sparkops.errors import BadInput
from sparkops.parallel.amdahl import AmdahlFit, WorldPoint, after_speedup, collective_report, fit


def _points(t1: float, s: float, kappa: float, model: str, worlds=(1, 2, 4, 8)) -> list[WorldPoint]:
    """What a machine following the model exactly would measure."""
    out = []
    for n in worlds:
        comm = 0.0 if n == 1 else kappa * ((n - 1) if model == "ring" else math.log2(n))
        out.append(WorldPoint(n, t1 * (s + (1 - s) / n + comm), t1 * comm))
    return out


@pytest.mark.parametrize("model", ["ring", "tree"])
def test_fit_recovers_the_model(model):
    f = fit(_points(0.02, 0.15, 0.01, model))
    assert f.t1_s == 0.02 and f.comm_model == model
    assert f.serial == pytest.approx(0.15, abs=1e-9) and f.kappa == pytest.approx(0.01, rel=1e-9)
    for p in f.points:
        assert f.speedup(p.world) == pytest.approx(0.02 / p.step_s, rel=1e-9)


def test_crossover_matches_the_closed_form():
    f = AmdahlFit(1.0, 0.1, "ring", 0.002)
    n = f.crossover()
    p_over_k = f.parallel / f.kappa  # 450: N (N + 1) >= 450 first at N = 21
    assert n == 21 and n * (n + 1) >= p_over_k > (n - 1) * n
    assert f.speedup(n + 1) <= f.speedup(n) and f.speedup(n) > f.speedup(n - 1)
    assert f.continuous_optimum() == pytest.approx(math.sqrt(p_over_k))
    assert f.best_power_of_two() in (16, 32)
    assert AmdahlFit(1.0, 0.1, "ring", 0.0).crossover() is None  # free collectives: ranks always pay


def test_a_faster_parallel_phase_can_scale_worse():
    """The seed's trap: a 3x faster MoE shrinks the part that divides over ranks, while the replicated work
    and the collective seconds stay - so 8 ranks buy a smaller speedup than before the win."""
    before = AmdahlFit(1.0, 0.12, "ring", 0.02)
    after = after_speedup(before, share=0.6, factor=3.0)
    assert after.t1_s == pytest.approx(0.6)  # the one-rank step got faster...
    assert after.speedup(8) < before.speedup(8)  # ...and 8 ranks now scale worse
    assert after.crossover() <= before.crossover()
    # in seconds nothing but the MoE moved: serial and collective time at N ranks are unchanged
    assert after.serial * after.t1_s == pytest.approx(before.serial * before.t1_s)
    assert after.comm(8) * after.t1_s == pytest.approx(before.comm(8) * before.t1_s)
    with pytest.raises(BadInput):
        after_speedup(before, share=0.95, factor=3.0)


def test_fit_needs_world_one_and_a_multi_rank_point():
    with pytest.raises(BadInput, match="world 1"):
        fit([WorldPoint(2, 1.0, 0.1), WorldPoint(4, 1.0, 0.2)])
    with pytest.raises(BadInput, match="more than one rank"):
        fit([WorldPoint(1, 1.0)])
    with pytest.raises(BadInput, match="not a measurement"):
        fit([WorldPoint(1, 1.0), WorldPoint(2, float("nan"), 0.1)])


def test_collective_report_for_diagnose():
    rep = collective_report(_points(0.01, 0.3, 0.05, "ring", worlds=(1, 2, 4)))
    assert rep["world"] == 4 and rep["collective_share"] == pytest.approx(0.15 / (0.3 + 0.7 / 4 + 0.15))
    assert set(rep["share_by_world"]) == {1, 2, 4} and rep["share_by_world"][1] == 0.0
    a = rep["amdahl"]
    assert a["serial_fraction"] == pytest.approx(0.3) and a["crossover_world"] == 4  # first N with N(N+1) >= p/kappa = 14
    assert "collectives take" in rep["why"]
    only = collective_report([WorldPoint(8, 0.02, 0.005)])  # one multi-rank point: the share, no fit
    assert only["collective_share"] == pytest.approx(0.25) and "amdahl" not in only


def test_collectives_verdict():
    from sparkops.parallel.amdahl import collectives_verdict

    v = collectives_verdict(collective_report([WorldPoint(1, 0.01), WorldPoint(2, 0.02, 0.015)]))
    assert v["binding"] and v["predicted_gain"] == pytest.approx(4.0)
    v = collectives_verdict(collective_report([WorldPoint(1, 0.01), WorldPoint(2, 0.008, 0.001)]))
    assert not v["binding"] and v["predicted_gain"] == pytest.approx(1 / (1 - 0.125))
    assert collectives_verdict({})["predicted_gain"] is None
