"""bench/probes/iq1s_ops.py: the kernels it times are the 48B step's IQ1_S weight kernels at their shapes and calls,
every implementation it names is registered for its op on CUDA, its forecast takes only proven figures, and it refuses
what it cannot time by name."""

import pytest

from sparkops.config import load_preset
from sparkops.plugins import load_catalog
from tests.helpers import load_probe


@pytest.fixture(scope="module")
def probe():
    return load_probe("iq1s_ops")


def test_the_kernels_are_the_steps_iq1s_weights_at_their_shapes_and_calls(probe):
    got = {k.name: (k.op, k.out_f, k.in_f, k.calls) for k in probe.kernels(load_preset("kimi-linear-48b-a3b"))}
    # spec/kimi-linear-architecture.md: 20 KDA layers and 7 MLA layers, P = 32 x 128, MLA q 32 x (128 + 64) with kv_a
    # 512 + 64 merged, the dense FFN of 9216 in layer 1, 26 MoE layers
    assert got == {"kda_qkv": ("linear", 12288, 2304, 20), "o_proj": ("linear", 2304, 4096, 27),
                   "mla_q_kva": ("linear", 6720, 2304, 7), "dense_gu": ("linear", 18432, 2304, 1),
                   "dense_down": ("linear", 2304, 9216, 1), "experts": ("moe_experts", 0, 0, 26)}


def test_every_named_implementation_is_registered_for_its_op_on_cuda(probe):
    catalog = load_catalog()
    for op, names in probe.IMPLS.items():
        assert probe.NOW[op] == names[0], f"{op}: the step's implementation is timed first"
        for name in names:
            impl = catalog.get(op, name)  # raises for a name no plugin registers
            assert "cuda" in impl.devices, f"{op}={name} does not run on CUDA"


def test_now_is_what_the_carried_iq1s_step_registry_runs_for_iq1s(probe):
    """The forecast's "now" is the IQ1_S step's own selection (sessions 50-51 had it wrong: cupy_float, the Q4_K
    entry's policy target, where the registry's default linear took IQ1_S): read from the registry the suite carries."""
    import tarfile
    import tomllib
    from pathlib import Path

    with tarfile.open(Path(__file__).parents[2] / "bench" / "carry" / "registries.tgz") as tar:
        reg = tomllib.load(tar.extractfile("cuda-s55-stack-iq1s.toml"))
    assert probe.now_from_registry(reg) == probe.NOW
    won = {"ops": {"linear": {"cuda": {"impl": "triton_lastblock",
                                       "by_type": {"IQ1_S": {"impl": "cupy_rowwarp_pdl_q8_iq1s_sg_short"}}}},
                   "moe_experts": {"cuda": {"impl": "triton_prefetch"}}}}
    assert probe.now_from_registry(won) == {"linear": "cupy_rowwarp_pdl_q8_iq1s_sg_short",
                                            "moe_experts": "triton_prefetch"}
    with pytest.raises(ValueError, match="selects no moe_experts on cuda"):
        probe.now_from_registry({"ops": {"linear": {"cuda": {"impl": "triton"}}}})


def test_a_registry_it_cannot_read_is_refused_by_name(probe, tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[ops.linear.cuda]\nimpl = 'triton'\n")
    assert probe.main(["--registry", str(bad)]) == 2
    assert "--registry" in (err := capsys.readouterr().err) and "selects no moe_experts on cuda" in err
    assert probe.main(["--registry", str(tmp_path / "none.toml")]) == 2


def _row(us, ok=True):
    return {"us": us, "ok": ok}


def test_the_forecast_takes_the_fastest_proven_implementation_through_amdahl(probe):
    kinds = [probe.Kernel("a", "linear", 8, 8, 10, ""), probe.Kernel("e", "moe_experts", 0, 0, 2, "")]
    rows = {"a": {probe.NOW["linear"]: _row(5.0), "fast_but_wrong": _row(1.0, ok=False), "good": _row(3.0)},
            "e": {probe.NOW["moe_experts"]: _row(20.0), "slower": _row(25.0)}}
    f = probe.forecast(rows, kinds, probe.NOW, 250.0)
    assert f["per_kernel"]["a"]["best"] == "good"
    assert f["per_kernel"]["a"]["us_a_token_saved"] == pytest.approx(10 * 2.0)
    assert f["per_kernel"]["e"]["best"] == probe.NOW["moe_experts"]  # the step's own is the fastest: nothing saved
    assert f["per_kernel"]["e"]["us_a_token_saved"] == 0.0
    assert f["us_a_token_saved"] == pytest.approx(20.0)
    assert f["forecast_tok_s"] == pytest.approx(1e6 / (4000.0 - 20.0))


def test_the_forecast_leaves_out_a_kernel_whose_step_implementation_missed_its_claim(probe):
    kinds = [probe.Kernel("a", "linear", 8, 8, 10, "")]
    f = probe.forecast({"a": {probe.NOW["linear"]: _row(5.0, ok=False), "good": _row(3.0)}}, kinds, probe.NOW, 250.0)
    assert "missed its claim" in f["per_kernel"]["a"]["left_out"]
    assert f["us_a_token_saved"] == 0.0
    f = probe.forecast({"a": {"bad": _row(3.0, ok=False)}}, kinds, probe.NOW, 250.0)
    assert f["per_kernel"]["a"]["left_out"] == "no implementation met its claim"


def test_the_forecast_refuses_savings_larger_than_the_step(probe):
    kinds = [probe.Kernel("a", "linear", 8, 8, 1000, "")]
    rows = {"a": {probe.NOW["linear"]: _row(10.0), "good": _row(1.0)}}  # 9 ms a token saved from a 4 ms step
    with pytest.raises(ValueError, match="exceed the step itself"):
        probe.forecast(rows, kinds, probe.NOW, 250.0)


@pytest.mark.parametrize("args, says", [(["--only", "lm_head"], "no kernel named 'lm_head'"),
                                        (["--impl", "router=triton"], "--impl takes OP=NAME"),
                                        (["--impl", "linear="], "--impl takes OP=NAME"),
                                        (["--replays", "2"], "--replays must be at least 3"),
                                        (["--base-tok-s", "0"], "--base-tok-s must be positive")])
def test_the_probe_refuses_what_it_cannot_time(probe, args, says, capsys):
    with pytest.raises(SystemExit) as e:
        probe.main(args)
    assert e.value.code == 2
    assert says in capsys.readouterr().err


def _results(probe, rows, kernels=("a", "b")):
    calls = {"a": 10, "b": 2}
    return {"now": probe.NOW, "kernels": {k: {"name": k, "op": "linear", "calls": calls[k]} for k in kernels},
            "timed": rows}


def test_the_factor_weights_each_kernel_by_its_calls(probe, tmp_path, capsys):
    now = probe.NOW["linear"]
    rows = {"a": {now: _row(6.0), "new": _row(3.0)}, "b": {now: _row(10.0), "new": _row(10.0)}}
    res = _results(probe, rows)
    assert probe.factor(res, "linear", "new") == pytest.approx((10 * 6 + 2 * 10) / (10 * 3 + 2 * 10))
    path = tmp_path / "probe.json"
    path.write_text(__import__("json").dumps(res))
    assert probe.main(["--factor", str(path), "linear", "new"]) == 0
    assert capsys.readouterr().out.strip() == "linear@IQ1_S=1.6000"


def test_no_factor_where_either_side_missed_its_claim_or_was_not_timed(probe, tmp_path, capsys):
    now = probe.NOW["linear"]
    with pytest.raises(ValueError, match="b: new missed its claim"):
        probe.factor(_results(probe, {"a": {now: _row(6.0), "new": _row(3.0)},
                                      "b": {now: _row(10.0), "new": _row(1.0, ok=False)}}), "linear", "new")
    with pytest.raises(ValueError, match="a: new was not timed"):
        probe.factor(_results(probe, {"a": {now: _row(6.0)}}, kernels=("a",)), "linear", "new")
    with pytest.raises(ValueError, match="timed no moe_experts kernel"):
        probe.factor(_results(probe, {}), "moe_experts", "new")
    path = tmp_path / "probe.json"
    path.write_text(__import__("json").dumps(_results(probe, {"a": {now: _row(6.0)}}, kernels=("a",))))
    assert probe.main(["--factor", str(path), "linear", "new"]) == 1
    assert "no factor for linear=new" in capsys.readouterr().err


def test_the_factor_above_a_floor_refuses_a_rung_the_per_op_figures_say_loses(probe, tmp_path, capsys):
    now = probe.NOW["linear"]
    path = tmp_path / "probe.json"
    path.write_text(__import__("json").dumps(_results(probe, {"a": {now: _row(6.0), "new": _row(8.0)}},
                                                      kernels=("a",))))
    assert probe.main(["--factor", str(path), "linear", "new", "--above", "1"]) == 1
    assert "x0.750 per op, not above x1" in capsys.readouterr().err
    path.write_text(__import__("json").dumps(_results(probe, {"a": {now: _row(6.0), "new": _row(3.0)}},
                                                      kernels=("a",))))
    assert probe.main(["--factor", str(path), "linear", "new", "--above", "1"]) == 0
    assert capsys.readouterr().out.strip() == "linear@IQ1_S=2.0000"
    assert probe.main(["--factor", str(path), "linear", "new", "--floor", "1"]) == 2
    assert probe.main(["--factor", str(path), "linear", "new", "--above", "one"]) == 2
    assert "--above takes a number (got 'one')" in capsys.readouterr().err
    assert probe.main(["--factor", str(tmp_path / "none.json"), "linear", "new"]) == 2
    assert "cannot read the probe's JSON" in capsys.readouterr().err


def test_best_names_the_candidate_with_the_largest_factor_and_passes_over_unproven_ones(probe, tmp_path, capsys):
    now = probe.NOW["linear"]
    rows = {"a": {now: _row(6.0), "slow": _row(4.0), "fast": _row(2.0), "wrong": _row(0.5, ok=False)},
            "b": {now: _row(10.0), "slow": _row(5.0), "fast": _row(5.0), "wrong": _row(5.0)}}
    res = _results(probe, rows)
    assert probe.best(res, "linear", ["slow", "wrong", "fast"]) == ("fast", pytest.approx(80 / 30))
    assert probe.best(res, "linear", ["slow", "never_timed"])[0] == "slow"
    with pytest.raises(ValueError, match="wrong: a: wrong missed its claim"):
        probe.best(res, "linear", ["wrong"])
    path = tmp_path / "probe.json"
    path.write_text(__import__("json").dumps(res))
    assert probe.main(["--best", str(path), "linear", "slow", "fast", "--above", "1"]) == 0
    assert capsys.readouterr().out.strip() == "fast linear@IQ1_S=2.6667"
    assert probe.main(["--best", str(path), "linear", "slow", "fast", "--above", "3"]) == 1
    assert "the fastest, linear=fast, is x2.667 per op, not above x3" in capsys.readouterr().err
    assert probe.main(["--best", str(path), "linear", "wrong"]) == 1
    assert "no factor for any of linear=wrong" in capsys.readouterr().err
    assert probe.main(["--best", str(path), "linear"]) == 2
    assert "--best takes PROBE.json OP IMPL" in capsys.readouterr().err
    assert probe.main(["--factor", str(path), "linear", "slow", "fast"]) == 2  # --factor takes one


def test_over_takes_the_factor_against_the_form_an_earlier_rung_put_in_the_step(probe, tmp_path, capsys):
    now = probe.NOW["linear"]
    rows = {"a": {now: _row(6.0), "won": _row(4.0), "fast": _row(2.0), "wrong": _row(1.0, ok=False)},
            "b": {now: _row(10.0), "won": _row(5.0), "fast": _row(4.0)}}
    res = _results(probe, rows)
    assert probe.factor(res, "linear", "fast", over="won") == pytest.approx((10 * 4 + 2 * 5) / (10 * 2 + 2 * 4))
    # the replaced form is no candidate against itself; an unproven one is passed over
    assert probe.best(res, "linear", ["won", "wrong", "fast"], over="won")[0] == "fast"
    with pytest.raises(ValueError, match="a: wrong missed its claim"):
        probe.factor(res, "linear", "fast", over="wrong")
    path = tmp_path / "probe.json"
    path.write_text(__import__("json").dumps(res))
    assert probe.main(["--best", str(path), "linear", "won", "fast", "--over", "won", "--above", "1"]) == 0
    assert capsys.readouterr().out.strip() == "fast linear@IQ1_S=1.7857"
    assert probe.main(["--factor", str(path), "linear", "fast", "--over", "won"]) == 0
    assert capsys.readouterr().out.strip() == "linear@IQ1_S=1.7857"
    assert probe.main(["--factor", str(path), "linear", "fast", "--over"]) == 2
    assert "--over takes the implementation the step runs now" in capsys.readouterr().err
    assert probe.main(["--best", str(path), "linear", "won", "--over", "won"]) == 1  # nothing but itself


def test_without_leaves_an_implementation_out_but_never_the_steps_own(probe, capsys):
    with pytest.raises(SystemExit) as stop:
        probe.main(["--without", "linear"])
    assert stop.value.code == 2 and "--without takes OP=NAME" in capsys.readouterr().err
    assert probe.main(["--without", f"linear={probe.NOW['linear']}"]) == 2
    assert "that is the step's own implementation" in capsys.readouterr().err
    pytest.importorskip("torch")
    probe.main(["--without", "linear=cupy_rowwarp_pdl_q8_iq1s_t2", "--only", "kda_qkv"])  # stops at CUDA on CPU
    assert "linear=cupy_rowwarp_pdl_q8_iq1s_t2 left out (--without)" in capsys.readouterr().out


def test_an_unknown_implementation_is_refused_by_name_before_anything_is_built(probe, capsys):
    assert probe.main(["--impl", "linear=cupy_nonesuch"]) == 2
    err = capsys.readouterr().err
    assert "--impl linear=cupy_nonesuch: no implementation of linear is named 'cupy_nonesuch'" in err
    assert "cupy_rowwarp_pdl_q8_iq1s" in err  # the names it could have meant
