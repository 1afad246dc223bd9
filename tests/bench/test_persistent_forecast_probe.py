"""bench/probes/persistent_forecast.py: the persistent step's stages hold every byte the roofline counts, and the
stream model gives the closed forms it must in its limits (bytes alone, latency alone, no window), on hand-made
stages and on the 48B's."""

from __future__ import annotations

import json

import pytest

from sparkops.config import load_preset, preset_names
from sparkops.gguf.mix import bytes_per_token
from tests.helpers import load_probe

probe = load_probe("persistent_forecast")
Seg, Stage = probe.Segment, probe.Stage
MB = 1e6


@pytest.fixture(scope="module")
def k48():
    return probe.step_stages(load_preset("kimi-linear-48b-a3b"), "q4_k_m", 0)


@pytest.mark.parametrize("model", preset_names())
@pytest.mark.parametrize("mix, depth", [("q4_k_m", 0), ("q4_k_m", 4096), ("iq1_s", 131072)])
def test_the_stages_hold_every_byte_the_roofline_counts(model, mix, depth):
    config = load_preset(model)
    stages = probe.step_stages(config, mix, depth)
    assert sum(s.nbytes for s in stages) == pytest.approx(bytes_per_token(config, mix, depth)["total"], rel=1e-12)
    assert len({s.name for s in stages}) == len(stages)


def test_a_layer_s_stages_are_the_forward_s_chain_and_only_the_routed_experts_wait_for_the_router(k48):
    config = load_preset("kimi-linear-48b-a3b")
    names = [s.name for s in k48]
    assert names[:8] == ["embed", "blk.0.in", "blk.0.gates", "blk.0.recurrence", "blk.0.out", "blk.0.gateup",
                         "blk.0.down", "blk.1.in"]  # layer 0 is KDA with the dense FFN
    mla = config.layer_kinds.index("mla")
    i = names.index(f"blk.{mla}.in")
    assert names[i:i + 8] == [f"blk.{mla}.{p}" for p in ("in", "absorb", "attention", "values", "out", "router",
                                                          "experts", "down")]
    gated = [(names[k], s.gate) for k, s_ in enumerate(k48) for s in s_.segments if s.gate is not None]
    assert {n.rsplit(".", 1)[1] for n, _ in gated} == {"experts", "down"}
    assert all(names[g].endswith(".router") and names[g].split(".")[1] == n.split(".")[1] for n, g in gated)
    experts = k48[names.index("blk.1.experts")]  # the routed gate/up: top-8 of 256 experts' two matrices
    assert experts.nbytes == pytest.approx(2 * 339738624 * 8 / 256)
    assert k48[-1].name == "head" and k48[-1].nbytes == pytest.approx(309657600 + 9216)


def test_an_unplaced_tensor_is_refused_by_name(monkeypatch):
    monkeypatch.delitem(probe.STAGE_OF, "ssm_beta.weight")
    with pytest.raises(probe.ForecastError, match="ssm_beta.weight.*STAGE_OF"):
        probe.step_stages(load_preset("k3-nano"), "q4_k_m", 0)


def test_head_local_merges_run_a_layer_s_neighbouring_stages_as_one_and_keep_every_byte(k48):
    """--merge local (session 47's what-if): a KDA layer's gates and recurrence as one stage, an MLA layer's
    absorption, attention and values as one; the same bytes, the routed experts still gated by their router, one
    stage fewer a KDA layer and two fewer an MLA layer; as fast where the stream binds, faster where latency does."""
    config = load_preset("kimi-linear-48b-a3b")
    merged = probe.step_stages(config, "q4_k_m", 0, probe.parse_merges(list(probe.LOCAL_MERGES)))
    kinds = config.layer_kinds
    assert len(merged) == len(k48) - kinds.count("kda") - 2 * kinds.count("mla")
    assert sum(s.nbytes for s in merged) == pytest.approx(sum(s.nbytes for s in k48), rel=1e-12)
    names = [s.name for s in merged]
    assert names[:5] == ["embed", "blk.0.in", "blk.0.gates+recurrence", "blk.0.out", "blk.0.gateup"]
    mla = kinds.index("mla")
    i = names.index(f"blk.{mla}.in")
    assert names[i:i + 3] == [f"blk.{mla}.in", f"blk.{mla}.absorb+attention+values", f"blk.{mla}.out"]
    assert all(names[seg.gate].endswith(".router") for st in merged for seg in st.segments if seg.gate is not None)
    fast, slow = (probe.simulate(st, 1.0, 3.3, 24 * MB).us_a_token for st in (merged, k48))
    assert fast == pytest.approx(slow, rel=1e-9)  # at 1 us a stage the stream binds both: the bytes are the same
    fast, slow = (probe.simulate(st, 3.5, 3.3, 24 * MB).us_a_token for st in (merged, k48))
    assert fast < slow - 20 * 3.5  # latency-bound: at least a fifth of the 34 stages saved shows


def test_a_stage_s_extra_work_adds_to_its_latency_and_only_its_own(k48):
    """--extra-us recurrence=E: with a boundless stream (latency alone sets the time) each KDA layer's recurrence ends
    E later, so a token takes E x the KDA layers more, and nothing else moves; a name no stage has is refused."""
    config = load_preset("kimi-linear-48b-a3b")
    base = probe.simulate(k48, 2.0, 1e6, 24 * MB).us_a_token
    slow = probe.simulate(k48, 2.0, 1e6, 24 * MB, extra_us=probe.parse_extra(["recurrence=1.5"])).us_a_token
    assert slow - base == pytest.approx(1.5 * config.layer_kinds.count("kda"), rel=1e-6)
    assert probe.stage_extra("blk.3.recurrence", {"recurrence": 1.5}) == 1.5
    assert probe.stage_extra("blk.3.in", {"recurrence": 1.5}) == 0.0 and probe.stage_extra("head", {"head": 2}) == 2
    for bad in ("recurrence", "recurrence=-1", "=1", "recurrence=fast"):
        with pytest.raises(probe.ForecastError, match="STAGE=US"):
            probe.parse_extra([bad])


@pytest.mark.parametrize("spec, why", [("kda:recurrence+gates", "next to each other"),
                                       ("kda:in+recurrence", "next to each other"), ("ffn:router+experts", "KIND"),
                                       ("kda:gates", "KIND:PART"), ("mla:absorb+bogus", "stages are"),
                                       ("kda:gates+recurrence,kda:recurrence+out", "already merged")])
def test_a_merge_that_is_not_neighbouring_stages_of_one_kind_is_refused(spec, why):
    with pytest.raises(probe.ForecastError, match=why):
        probe.parse_merges(spec.split(","))


CHAIN = [Stage("a", [Seg(3 * MB)]), Stage("b", [Seg(5 * MB)]), Stage("c", [Seg(2 * MB)]), Stage("d", [Seg(7 * MB)])]


@pytest.mark.parametrize("tokens", [1, 3])
def test_without_latency_the_stream_alone_sets_the_time(tokens):
    r = probe.simulate(CHAIN, 0.0, 1.0, 100 * MB, tokens=tokens)  # 1 TB/s: a byte a picosecond, 17 MB in 17 us
    assert r.us_a_token == pytest.approx(17.0)
    assert r.idle_gated_us == 0 and r.idle_window_us == 0


@pytest.mark.parametrize("tokens", [1, 3])
def test_with_a_boundless_stream_the_latency_alone_sets_the_time(tokens):
    assert probe.simulate(CHAIN, 2.5, 1e9, 100 * MB, tokens=tokens).us_a_token == pytest.approx(4 * 2.5, rel=1e-6)


@pytest.mark.parametrize("tokens", [1, 3])
def test_without_a_window_each_stage_streams_after_the_one_before_ends(tokens):
    r = probe.simulate(CHAIN, 1.0, 1.0, 0.0, tokens=tokens)
    assert r.us_a_token == pytest.approx(17.0 + 4 * 1.0)
    assert r.idle_window_us > 0


def test_a_window_hides_the_latency_under_the_stream_as_far_as_it_reaches():
    one = probe.simulate(CHAIN, 1.0, 1.0, 100 * MB, tokens=1).us_a_token
    assert one == pytest.approx(17.0 + 1.0)  # every stage's bytes ahead of its inputs: the last stage's latency
    # token after token, the next token's bytes stream under this one's last latency: the stream alone
    assert probe.simulate(CHAIN, 1.0, 1.0, 100 * MB).us_a_token == pytest.approx(17.0)
    # a 1 MB window at 2 us: 1 us of the next stage's bytes ahead of each wait, 1 us idle (the stream's turn to wait)
    r = probe.simulate(CHAIN, 2.0, 1.0, 1 * MB, tokens=1, chunk=MB / 4)
    assert r.us_a_token == pytest.approx(22.0) and r.idle_window_us == pytest.approx(3.0)


def test_gated_bytes_wait_for_their_gate_and_the_stream_fills_the_wait_with_later_bytes():
    steps = [Stage("router", [Seg(1 * MB)]), Stage("experts", [Seg(4 * MB, gate=0)]), Stage("next", [Seg(6 * MB)])]
    r = probe.simulate(steps, 3.0, 1.0, 100 * MB, tokens=1, chunk=MB / 4)  # chunks that divide the segments
    # router 1 us of bytes + 3 us; the experts can start only then: 4 us of bytes + 3; "next" streamed meanwhile
    assert r.us_a_token == pytest.approx(1 + 3 + 4 + 3 + 3)
    inorder = probe.simulate(steps, 3.0, 1.0, 100 * MB, in_order=True, tokens=1, chunk=MB / 4)
    assert inorder.us_a_token > r.us_a_token and inorder.idle_gated_us > 0


def test_the_48b_forecast_is_monotone_and_bounded_by_its_bytes_and_its_chain(k48):
    roof_us = sum(s.nbytes for s in k48) / 4.04e6
    last = 0.0
    for lat in (0.5, 1.5, 3.0, 6.0):
        r = probe.simulate(k48, lat, 4.04, 24 * MB)
        assert r.us_a_token >= max(roof_us, len(k48) * lat) - 1e-6
        assert r.us_a_token >= last
        last = r.us_a_token
        assert r.us_a_token <= probe.simulate(k48, lat, 4.04, 24 * MB, in_order=True).us_a_token + 1e-6
        assert r.us_a_token <= probe.simulate(k48, lat, 4.04, 8 * MB).us_a_token + 1e-6
    assert probe.simulate(k48, 0.5, 4.04, 24 * MB).us_a_token == pytest.approx(roof_us, rel=1e-3)


def _probe_json(tmp_path, name, rows, us, same=True, timed_out=False):
    data = {"rows": rows, "weight_bytes": 24 * rows * 2304 * 2, "barrier_timed_out": timed_out,
            "variants": {"launches": {"us_a_round": 24 * 6.9, "us_a_gemv": 6.9},
                         "persistent_warp_ring6": {"us_a_round": 24 * us, "us_a_gemv": us},
                         "persistent_warp_ring2": {"us_a_round": 24 * (us + 1), "us_a_gemv": us + 1}},
            "last_output_bitwise_the_launches": {"persistent_warp_ring6": same, "persistent_warp_ring2": True}}
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return str(p)


def test_the_probe_s_fastest_proven_variant_gives_the_latency(tmp_path):
    half = _probe_json(tmp_path, "half.json", 1152, 1.6)
    assert probe.latency_from_probe(half) == (pytest.approx(1.6), "persistent_warp_ring6 at 1152 rows")
    half = _probe_json(tmp_path, "half.json", 1152, 1.6, same=False)  # ring6's bits differ: ring2 is used
    assert probe.latency_from_probe(half) == (pytest.approx(2.6), "persistent_warp_ring2 at 1152 rows")


def test_a_probe_that_timed_out_or_proved_nothing_is_refused(tmp_path):
    with pytest.raises(probe.ForecastError, match="timed out"):
        probe.latency_from_probe(_probe_json(tmp_path, "t.json", 2304, 3.0, timed_out=True))
    data = json.loads(open(_probe_json(tmp_path, "n.json", 2304, 3.0)).read())
    data["last_output_bitwise_the_launches"] = {}
    (tmp_path / "n.json").write_text(json.dumps(data))
    with pytest.raises(probe.ForecastError, match="launches' bits"):
        probe.latency_from_probe(str(tmp_path / "n.json"))


def test_the_cli_writes_its_forecasts_and_plot_and_refuses_bad_input_with_exit_2(tmp_path, capsys):
    half = _probe_json(tmp_path, "half.json", 1152, 1.6)
    out, png = tmp_path / "f.json", tmp_path / "f.png"
    assert probe.main(["--model", "k3-nano", "--probe-latency", half, "--bandwidth-tbs", "3.6,4.04",
                       "--json", str(out), "--plot", str(png)]) == 0
    data = json.loads(out.read_text())
    assert [(f["latency_us"], f["bandwidth_tbs"]) for f in data["forecasts"]] == [(pytest.approx(1.6), 3.6),
                                                                                 (pytest.approx(1.6), 4.04)]
    assert data["sources"]["latency"] == "persistent_warp_ring6 at 1152 rows"
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert probe.main(["--latency-us", "1,x"]) == 2
    assert "--latency-us '1,x'" in capsys.readouterr().err
    assert probe.main(["--probe-latency", str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err
    assert probe.main(["--model", "no-such-model"]) == 2
    assert probe.main(["--model", "k3-nano", "--latency-us", "2", "--extra-us", "gates+recurrence=1"]) == 2  # unmerged
    assert "no stage of this step" in capsys.readouterr().err
    assert probe.main(["--model", "k3-nano", "--latency-us", "2", "--merge", "local", "--extra-us",
                       "gates+recurrence=1"]) == 0


def _q4k_json(tmp_path, name, round_us, same=True, timed_out=0):
    """A q4k_chain.py result: two layers of three stages, one paced form taking round_us, a plain read at 3 TB/s."""
    pattern = [{"name": "a", "nbytes": 6e6}, {"name": "b", "nbytes": 12e6}, {"name": "c", "nbytes": 3e6}]
    data = {"layers": 2, "pattern": pattern, "sms": 132,
            "forms": {"launches": {"us_a_round": 90.0}, "paced_w16_s16k": {"us_a_round": round_us},
                      "read": {"us_a_round": 14.0, "tbs": 3.0}},
            "outputs_bitwise_the_launches": {"paced_w16_s16k": same},
            "timed_out": {"paced_w16_s16k": timed_out}, "ring_bytes": {"paced_w16_s16k": 20e6}, "finite": True,
            "reference": {"limit": 5e-3, "stages": {"a": {"nmse": 1e-5, "within_act_q8": True}}}}
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_the_q4k_latency_is_the_one_that_reproduces_the_probes_chain(tmp_path):
    """Simulated at a known lambda, the probe's round gives that lambda back: the fit inverts the model's own chain
    (six stages, one token, the form's ring as the window, the probe's read rate)."""
    stages = [probe.Stage(f"{i}.{n}", [probe.Segment(b)]) for i in range(2) for n, b in (("a", 6e6), ("b", 12e6),
                                                                                            ("c", 3e6))]
    for lam in (0.7, 2.5):
        round_us = probe.simulate(stages, lam, 3.0, 20e6, tokens=1).us_a_token
        lat, said = probe.latency_from_q4k(_q4k_json(tmp_path, f"q{lam}.json", round_us))
        assert lat == pytest.approx(lam, abs=1e-3)
        assert "paced_w16_s16k" in said and "6 Q4_K stages" in said
    # faster than the stream alone: lambda 0, and said so
    fast, said = probe.latency_from_q4k(_q4k_json(tmp_path, "fast.json", 1.0))
    assert fast == 0.0 and "no slower than the stream alone" in said


def test_a_q4k_probe_without_a_proven_form_is_refused(tmp_path):
    for kw in ({"same": False}, {"timed_out": 3}):
        with pytest.raises(probe.ForecastError, match="no paced form whose outputs were the launches' bits"):
            probe.latency_from_q4k(_q4k_json(tmp_path, "bad.json", 20.0, **kw))
    data = json.loads(open(_q4k_json(tmp_path, "ref.json", 20.0)).read())
    data["reference"]["stages"]["a"]["within_act_q8"] = False  # the launches themselves wrong
    (tmp_path / "ref.json").write_text(json.dumps(data))
    with pytest.raises(probe.ForecastError, match="missed the reference on a"):
        probe.latency_from_q4k(str(tmp_path / "ref.json"))
    (tmp_path / "old.json").write_text(json.dumps({"forms": {}}))
    with pytest.raises(probe.ForecastError, match="give q4k_chain.py's --out JSON"):
        probe.latency_from_q4k(str(tmp_path / "old.json"))


def test_the_cli_takes_its_latency_from_a_q4k_probe(tmp_path, capsys):
    path = _q4k_json(tmp_path, "q.json", 30.0)
    assert probe.main(["--model", "k3-nano", "--q4k-latency", path, "--bandwidth-tbs", "4.04"]) == 0
    assert "latency from the probe: paced_w16_s16k" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # one probe file or the other, not both
        probe.main(["--model", "k3-nano", "--q4k-latency", path, "--probe-latency", path])
    assert "not allowed with argument" in capsys.readouterr().err
