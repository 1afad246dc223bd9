"""The harness: ABAB order in one process, the gate before any timing (and refusal when it fails),
the roofline refusal, what a run records, and the CLI end to end on k3-nano."""

from __future__ import annotations

import itertools
import json
import statistics
import textwrap

import pytest
import tomlkit

from sparkops.bench import harness, ledger as L
from sparkops.bench import record as R
from sparkops.bench.gating import GateRefused
from sparkops.bench.harness import BenchRequest, run_bench
from sparkops.bench.roofline import AboveCeiling
from sparkops.cli import bench_cmd, main
from sparkops.engine import Engine
from sparkops.errors import BadInput
from tests.helpers import fake_distribution

WRONG_PLUGIN = textwrap.dedent('''
    """A plugin whose rmsnorm is 5% off: fluent, plausible, wrong."""
    from sparkops.plugins import hookimpl, tolerance


    def rmsnorm(x, weight, eps):
        from sparkops_numpy.rmsnorm import rmsnorm as reference
        return reference(x, weight, eps) * 1.05


    @hookimpl
    def register_implementations(register):
        register(op="rmsnorm", name="five_percent_off", backend="numpy", devices=("cpu",), fn=rmsnorm,
                 claim=tolerance())
''')


@pytest.fixture
def decode_log(monkeypatch):
    """Which registry each decode step inside the harness's rounds (warm-up or timed) ran under, in order.
    (The model gate decodes too, outside any round; those steps are not the harness's.)"""
    log = []
    inside = []
    real_decode, real_timer = Engine.decode, harness.RegionTimer

    class Round(real_timer):
        def __enter__(self):
            inside.append(True)
            return super().__enter__()

        def __exit__(self, *exc):
            inside.pop()
            return super().__exit__(*exc)

    def logged(self, token):
        if inside:
            log.append(self.ops.plan.registry)
        return real_decode(self, token)

    monkeypatch.setattr(Engine, "decode", logged)
    monkeypatch.setattr(harness, "RegionTimer", Round)
    return log


def test_abab_order_in_one_process(nano, passing_gate, registries, decode_log):
    a, b = registries
    req = BenchRequest("decode", (12,), 3, [("A", a), ("B", b)], repeats=4, warmup=2)
    run = run_bench(req, nano)
    p = run.points[0]
    assert p.warmup_order == ["A", "B"] * 2
    assert p.order == ["A", "B"] * 4
    # what really ran, step by step: blocks of 3 decode steps alternating A, B (warm-up first)
    blocks = [reg for reg, _ in itertools.groupby(decode_log)]
    assert blocks == [str(a), str(b)] * 6
    assert all(len(list(g)) == 3 for _, g in itertools.groupby(decode_log))
    # the gate ran on both registries before anything was timed
    assert passing_gate == [str(a), str(b)]
    ra, rb = p.arms["A"].rates, p.arms["B"].rates
    assert len(ra) == len(rb) == 4 and all(r > 0 for r in ra + rb)
    assert p.ratios == pytest.approx([y / x for x, y in zip(ra, rb)])
    assert p.arms["A"].median == pytest.approx(statistics.median(ra))
    assert p.tier in ("win", "none", "regression")


def test_both_engines_share_one_weights_object(nano, passing_gate, registries, monkeypatch):
    models = []
    real = Engine.__init__

    def spy(self, model, ops, **kw):
        real(self, model, ops, **kw)
        models.append(self.model)

    monkeypatch.setattr(Engine, "__init__", spy)
    run_bench(BenchRequest("decode", (4,), 1, [("A", registries[0]), ("B", registries[1])], repeats=1, warmup=0), nano)
    assert len(models) == 2 and models[0] is models[1] is nano


def test_each_phase_says_its_seconds_on_stderr(nano, passing_gate, registries, capsys):
    """Where a pair's minutes go, in order: the weights, each arm's gate, the ceilings, the engines, each depth."""
    run_bench(BenchRequest("decode", (4, 6), 1, [("A", registries[0]), ("B", registries[1])], repeats=1, warmup=0),
              nano)
    said = [line.split(":")[1].strip() for line in capsys.readouterr().err.splitlines() if line.startswith("bench: ")]
    assert said == ["the weights to the device", "gate A", "gate B", "the ceilings", "the engines",
                    "depth 4 (fill, proof, warm-up, rounds)", "depth 6 (fill, proof, warm-up, rounds)"]


def test_prefill_rounds_alternate_and_prove_the_prompt_length(nano, passing_gate, registries):
    req = BenchRequest("prefill", (0,), 20, [("A", registries[0]), ("B", registries[1])], repeats=2, warmup=1,
                       chunk=8)
    p = run_bench(req, nano).points[0]
    assert p.order == ["A", "B", "A", "B"] and p.warmup_order == ["A", "B"]
    assert p.arms["B"].proof["depth"] == 20 and p.arms["B"].proof["host_length"] == 20


def test_graph_is_refused_off_cuda_and_for_prefill(nano, passing_gate, registries):
    a, b = registries
    with pytest.raises(BadInput, match="--graph needs --device cuda"):
        run_bench(BenchRequest("decode", (4,), 2, [("A", a), ("B", b)], graph=("B",)), nano)
    with pytest.raises(BadInput, match="decode only"):
        run_bench(BenchRequest("prefill", (0,), 8, [("A", a), ("B", b)], graph=("B",)), nano)
    with pytest.raises(BadInput, match="no such arm"):
        run_bench(BenchRequest("decode", (4,), 2, [("A", a)], graph=("B",)), nano)


def test_a_graph_arm_replays_the_step_teacher_forced(nano, passing_gate, registries, decode_log, monkeypatch):
    """The graph arm's rounds go through the DecodeStep (its eager body here: capture needs CUDA), fed the
    eager arm's tokens; the depth proof after the rounds holds for both arms and the figure says 'graph'."""
    from sparkops.engine.decode_step import DecodeStep

    monkeypatch.setattr(harness, "GRAPH_DEVICES", ("cuda", "cpu"))
    fed = []
    real_call = DecodeStep.__call__

    def spy(self):
        fed.append(int(self.token[0]))
        return real_call(self)

    monkeypatch.setattr(DecodeStep, "__call__", spy)
    monkeypatch.setattr(harness, "capture_step", lambda eng: DecodeStep(eng))
    a, b = registries
    run = run_bench(BenchRequest("decode", (12,), 3, [("A", a), ("B", b)], repeats=2, warmup=1, graph=("B",)), nano)
    p = run.points[0]
    assert p.order == ["A", "B"] * 2
    assert set(decode_log) == {str(a)}  # B never called Engine.decode inside a round
    assert len(decode_log) == 3 * 3 and len(fed) == 3 * 3
    steps = harness.dep.random_tokens(3, nano.config.vocab_size, 1).tolist()
    assert fed == steps * 3  # the same tokens as the eager arm, every round
    assert p.arms["B"].mode == "graph" and p.arms["A"].mode == "eager"
    assert p.arms["B"].proof["depth"] == 12


def test_a_fill_registry_fills_once_and_every_arm_decodes_from_a_copy(nano, passing_gate, registries, tmp_path,
                                                                       monkeypatch):
    """One engine on the fill registry prefills each depth once; the arms never prefill, start from its
    state (proven at depth D on each arm), and the fill registry is gated like the arms."""
    import shutil

    from sparkops.bench import depth as dep

    a, b = registries
    fill = tmp_path / "fill.toml"
    shutil.copy(a, fill)
    filled = []
    real_fill = dep.fill

    def spy(engine, tokens, chunk):
        filled.append((engine.ops.plan.registry, len(tokens)))
        return real_fill(engine, tokens, chunk)

    monkeypatch.setattr(dep, "fill", spy)
    run = run_bench(BenchRequest("decode", (0, 20), 2, [("A", a), ("B", b)], repeats=2, warmup=0,
                                 fill_registry=fill), nano)
    assert [(reg, n) for reg, n in filled] == [(str(fill), 0), (str(fill), 20)]
    assert passing_gate == [str(a), str(b), str(fill)]
    for p in run.points:
        for arm in p.arms.values():
            assert arm.proof["depth"] == p.depth and len(arm.rates) == 2


def test_a_bf16_cache_under_float32_activations(nano, registries, tmp_path):
    """--cache-dtype bfloat16: the arms' MLA caches hold bf16 rows (half the bytes the roofline counts), the
    activations stay float32, and the real model gate judges the run by the bf16 rule."""
    import torch

    a, _ = registries
    run = run_bench(BenchRequest("decode", (8,), 2, [("A", a)], repeats=1, warmup=0, gate_depths=(1,),
                                 cache_dtype=torch.bfloat16), nano)
    assert run.gates["A"].passed and run.gates["A"].variant == "bf16"
    assert run.points[0].arms["A"].dtype == "float32"
    from sparkops.bench.costs import token_cost

    cost = run.points[0].cost
    assert cost.bytes == pytest.approx(token_cost(nano.config, "decode", depth=8, weights=nano, cache_elsize=2).bytes)
    assert cost.bytes < token_cost(nano.config, "decode", depth=8, weights=nano, cache_elsize=4).bytes


def test_the_cache_dtype_per_arm(nano, passing_gate, registries, tmp_path):
    """--cache-dtype A=float32,B=bfloat16: the same registry timed with each cache, ABAB; each arm proves its depth
    on its own cache, the fill registry keeps one engine per kind of state, the figures say which cache ran."""
    import shutil

    import torch

    a, b = registries
    fill = tmp_path / "fill.toml"
    shutil.copy(a, fill)
    req = BenchRequest("decode", (12,), 2, [("A", a), ("B", b)], repeats=2, warmup=0, fill_registry=fill,
                       cache_dtype=bench_cmd.parse_cache_dtype("A=float32,b=bfloat16"))
    assert req.cache_dtype == {"A": torch.float32, "B": torch.bfloat16}
    run = run_bench(req, nano)
    p = run.points[0]
    assert (p.arms["A"].cache_dtype, p.arms["B"].cache_dtype) == ("float32", "bfloat16")
    # the fill registry is gated as it runs: once per kind of state it fills
    assert sorted(run.gates) == ["A", "B", "fill (float32, bfloat16 cache)", "fill (float32, float32 cache)"]
    assert all(arm.proof["depth"] == 12 for arm in p.arms.values())
    with pytest.raises(BadInput, match="A=float32,B=bfloat16"):
        bench_cmd.parse_cache_dtype("C=float32")


def test_an_fp8_arm_fills_from_a_rounded_fill_and_is_its_own_workload(nano, passing_gate, registries, tmp_path,
                                                                       bench_dir, capsys):
    """B's attention reads an fp8 cache (torch_fp8cache): its cache is fp8 without being asked (auto), the fill
    registry (which reads none) fills in float32 and B takes that state rounded, saying so; the figure lands on its
    own frontier workload (.cache=float8_e4m3fn), never on the float32 cache's."""
    import shutil

    from sparkops.gate.check import prove
    from sparkops.plugins import load_catalog
    from sparkops.registry.file import Registry

    a, b = registries
    catalog = load_catalog()
    reg = Registry.load(b)
    reg.set("attention", "cpu", "torch_fp8cache",
            check=prove(catalog.get("attention", "torch_fp8cache"), "cpu", catalog).record)
    reg.save()
    fill = tmp_path / "fill.toml"
    shutil.copy(a, fill)
    run = run_bench(BenchRequest("decode", (12,), 2, [("A", a), ("B", b)], repeats=2, warmup=0,
                                 fill_registry=fill), nano)
    p = run.points[0]
    assert (p.arms["A"].cache_dtype, p.arms["B"].cache_dtype) == ("float32", "float8_e4m3fn")
    assert sorted(run.gates) == ["A", "B", "fill"]  # the fill runs (and is gated) on a float32 cache only
    assert "rounded to float8_e4m3fn" in capsys.readouterr().err
    assert all(arm.proof["depth"] == 12 for arm in p.arms.values())
    rows = R.record_run(run, bench_dir)
    assert rows[0]["key"].endswith("d=12.cache=float8_e4m3fn")  # the row is the candidate's (B's) workload
    assert [f["cache_dtype"] for f in rows[0]["figures"]] == ["float32", "float8_e4m3fn"]


def test_a_state_copy_refuses_a_different_context(nano):
    from sparkops.engine import Engine
    from sparkops.engine.loading import make_ops

    ops = make_ops("cpu", None)
    e1, e2 = Engine(nano, ops, max_context=16), Engine(nano, ops, max_context=32)
    with pytest.raises(BadInput, match="same max context and cache dtype"):
        e2.state.copy_from(e1.state)


def test_parse_graph_names_arms():
    assert bench_cmd.parse_graph("b") == ("B",) and bench_cmd.parse_graph("A,B") == ("A", "B")
    assert bench_cmd.parse_graph(None) == ()
    with pytest.raises(BadInput, match="name arms A and/or B"):
        bench_cmd.parse_graph("C")


def _wrong_registry(tmp_path, registries, monkeypatch):
    site = fake_distribution(tmp_path / "site", "sparkops-wrong", {"wrong": "wrong_rmsnorm"},
                             {"wrong_rmsnorm": WRONG_PLUGIN})
    monkeypatch.syspath_prepend(str(site))
    doc = tomlkit.parse(registries[1].read_text())
    doc["ops"]["rmsnorm"]["cpu"]["impl"] = "five_percent_off"
    registries[1].write_text(tomlkit.dumps(doc))
    return registries[1]


def test_a_registry_that_fails_the_model_gate_is_never_timed(nano, registries, tmp_path, monkeypatch, decode_log):
    wrong = _wrong_registry(tmp_path, registries, monkeypatch)
    req = BenchRequest("decode", (8,), 2, [("A", registries[0]), ("B", wrong)], repeats=2, warmup=1,
                       gate_depths=(1, 4))
    with pytest.raises(GateRefused, match=r"registry B .* failed the model gate.*\n.*KL .*FAIL"):
        run_bench(req, nano)
    assert decode_log == []  # not one timed (or untimed) bench step ran


def test_the_cli_prints_no_figure_for_an_ungated_registry_and_records_the_refusal(nano, registries, tmp_path,
                                                                                   monkeypatch, capsys, bench_dir):
    wrong = _wrong_registry(tmp_path, registries, monkeypatch)
    monkeypatch.setattr(bench_cmd, "load_weights", lambda spec: nano)
    code = main(["bench", "decode", "--model", "k3-nano", "--depth", "8", "--tokens", "2", "--repeats", "2",
                 "--registry", str(registries[0]), "--vs", str(wrong), "--gate-depths", "1,4"])
    out = capsys.readouterr()
    assert code == 1
    assert out.out == ""  # no figure printed
    assert "failed the model gate" in " ".join(out.err.split())
    # the refusal itself is on record: one row without any figure; the frontier is untouched
    rows = L.read(bench_dir / L.LEDGER)
    assert [r["kind"] for r in rows] == ["refusal"] and not (bench_dir / L.FRONTIER).exists()
    r = rows[0]
    assert r["refused"] == "B" and r["registry"] == str(wrong) and r["gate"]["passed"] is False
    assert "figures" not in r and "after" not in r and r["worst_kl"] > 0
    assert "--vs" in r["command"] and r["code_digest"]
    ladder = (bench_dir / L.LADDER).read_text()
    assert "Refused by the model gate" in ladder and r["id"] in ladder
    assert main(["bench", "decode", "--model", "k3-nano", "--depth", "8", "--tokens", "2", "--repeats", "2",
                 "--registry", str(registries[0]), "--vs", str(wrong), "--gate-depths", "1", "--no-record"]) == 1
    assert len(L.read(bench_dir / L.LEDGER)) == 1  # --no-record writes nothing, a refusal included


def test_a_figure_above_the_roofline_is_refused(nano, passing_gate, registries, monkeypatch, bench_dir):
    # a box whose "bandwidth" is 1 kB/s: any real decode figure is far above 100% of it
    from sparkops.bench.ceilings import Ceilings

    monkeypatch.setattr(harness, "_ceilings", lambda req, ws: Ceilings("cpu", 1e3, 2e3, 1e12, "float32", None, None,
                                                                       1 << 20))
    req = BenchRequest("decode", (4,), 2, [("A", registries[0])], repeats=1, warmup=0)
    with pytest.raises(AboveCeiling, match="of the roofline .* measurement error"):
        run_bench(req, nano)


def test_cli_end_to_end_records_the_run(nano, registries, monkeypatch, capsys, bench_dir):
    monkeypatch.setattr(bench_cmd, "load_weights", lambda spec: nano)
    argv = ["bench", "decode", "--model", "k3-nano", "--depth", "0,8", "--tokens", "2", "--repeats", "2",
            "--warmup", "1", "--registry", str(registries[0]), "--vs", str(registries[1]), "--gate-depths", "1,4",
            "--change", "A/A: the same registry twice", "--json"]
    assert main(argv) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [p["depth"] for p in shown["points"]] == [0, 8]
    assert shown["gates"]["A"]["passed"] and shown["gates"]["B"]["passed"]
    assert shown["env"]["versions"]["torch"] and shown["env"]["clocks"] and "commit" in shown["env"]
    rows = L.read(bench_dir / L.LEDGER)
    assert [r["kind"] for r in rows] == ["measurement", "measurement"]
    r = rows[1]
    assert r["key"] == "decode.k3-nano.f32.cpu.d=8" and r["change"] == "A/A: the same registry twice"
    assert r["before"] == pytest.approx(statistics.median(r["figures"][0]["rates"]))
    assert r["after"] == pytest.approx(statistics.median(r["figures"][1]["rates"]))
    assert r["order"] == ["A", "B", "A", "B"] and r["warmup_order"] == ["A", "B"]
    assert r["worst_kl"] is not None and r["worst_kl"] < 1e-6 and r["worst_top1"] == 1.0
    assert "--depth 0,8" in r["command"] and "--vs" in r["command"] and "--repeats 2" in r["command"]
    assert r["depth_proof"]["A"]["depth"] == 8 and r["versions"]["numpy"]
    assert r["figures"][0]["selections"]["attention"] and set(r["figures"][1]["selections"]) >= {"linear", "kda"}
    # the frontier holds the best figure whose rounds agree (record.steady); a CPU run's rounds may spread more
    steady = [f["value"] for f in r["figures"] if R.steady(f)]
    assert {label: out == "unsteady" for label, out in r["frontier"].items()} == \
        {f["label"]: not R.steady(f) for f in r["figures"]}
    frontier = tomlkit.parse((bench_dir / L.FRONTIER).read_text()).get("frontier", {})
    if steady:
        assert float(frontier["decode.k3-nano.f32.cpu.d=8"]["value"]) == pytest.approx(max(steady), rel=1e-5)
    else:
        assert "decode.k3-nano.f32.cpu.d=8" not in frontier
    ladder = (bench_dir / L.LADDER).read_text()
    assert "A/A: the same registry twice" in ladder and r["id"] in ladder


def test_reuse_gates_gives_back_a_passing_verdict_for_the_same_inputs_only(nano, passing_gate, registries, tmp_path,
                                                                         monkeypatch):
    """reuse_gates: a passing verdict is kept under everything it judged and given back (marked, with when it was
    made) only for the same model file, registry bytes, gate depths and code; anything else, a failed verdict,
    in-memory weights or no reuse_gates: the gate runs."""
    from sparkops.bench import gating, provenance

    monkeypatch.setenv("SPARKOPS_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "model.gguf"
    model.write_bytes(b"stands for the weights file")
    a, b = registries

    def bench(source=model, **kw):
        kw.setdefault("reuse_gates", True)
        return run_bench(BenchRequest("decode", (4,), 2, [("A", a), ("B", b)], repeats=2, warmup=1, **kw), nano,
                         source=source)

    first = bench()
    assert passing_gate == [str(a), str(b)] and not any(g.details.get("reused") for g in first.gates.values())
    again = bench()
    assert len(passing_gate) == 2  # nothing gated again
    assert all(g.details["reused"]["gated_at"] and g.as_dict()["reused"] for g in again.gates.values())
    b.write_text(b.read_text() + "\n# one byte more is another registry\n")
    bench()
    assert passing_gate[2:] == [str(b)]
    bench(gate_depths=(1, 2))
    assert passing_gate[3:] == [str(a), str(b)]
    monkeypatch.setattr(provenance, "code_digest", lambda *a, **k: "other code")
    bench()
    assert passing_gate[5:] == [str(a), str(b)]
    model.write_bytes(b"other weights")
    bench()
    assert passing_gate[7:] == [str(a), str(b)]
    bench(reuse_gates=False)
    bench(source=None)  # weights without a file: nothing pins them
    assert passing_gate[9:] == [str(a), str(b)] * 2
    # a failing verdict is never kept: the next run gates again
    kept = sorted((tmp_path / "cache" / gating.VERDICTS).glob("*.json"))
    monkeypatch.setattr(harness, "GATE", lambda w, reg, **kw: gating.GateVerdict(False, str(reg), "fails", "fails"))
    model.write_bytes(b"weights a third time")
    with pytest.raises(GateRefused):
        bench()
    assert sorted((tmp_path / "cache" / gating.VERDICTS).glob("*.json")) == kept


def test_bench_reuse_gate_is_recorded_in_the_row_and_its_command(nano, registries, monkeypatch, capsys, bench_dir,
                                                                  tmp_path, passing_gate):
    """bench --reuse-gate: the second run's rows record the reuse (when the verdict was made) and the command says
    --reuse-gate; weights that are not from a file are gated every time, and bench says why."""
    import dataclasses

    monkeypatch.setenv("SPARKOPS_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "nano.gguf"
    model.write_bytes(b"stands for the file")
    filed = dataclasses.replace(nano, metadata={**nano.metadata, "path": str(model)})
    monkeypatch.setattr(bench_cmd, "load_weights", lambda spec: filed)
    argv = ["bench", "decode", "--model", str(model), "--depth", "4", "--tokens", "2", "--repeats", "2",
            "--registry", str(registries[0]), "--vs", str(registries[1]), "--gate-depths", "1", "--reuse-gate"]
    assert main(argv) == 0 and main(argv) == 0
    assert len(passing_gate) == 2
    rows = [r for r in L.read(bench_dir / L.LEDGER) if r["kind"] == "measurement"]
    assert not any(g.get("reused") for g in rows[0]["gates"].values())
    assert all(g["reused"]["gated_at"] for g in rows[1]["gates"].values())
    assert rows[1]["command"].endswith("--reuse-gate")
    assert "(reused: gated at" in capsys.readouterr().out
    monkeypatch.setattr(bench_cmd, "load_weights", lambda spec: nano)
    assert main(["bench", "decode", "--model", "k3-nano"] + argv[4:]) == 0
    assert "do not come from a GGUF file" in " ".join(capsys.readouterr().err.split()) and len(passing_gate) == 4


def test_decode_needs_an_explicit_depth(capsys):
    assert main(["bench", "decode", "--model", "k3-nano", "--tokens", "4"]) == 2
    assert "needs --depth" in capsys.readouterr().err


def test_a_row_records_the_baselines_diagnosis_beside_the_outcome(nano, registries, monkeypatch, capsys, bench_dir,
                                                                   tmp_path):
    """diagnose --json-out on A, then bench --prediction: each depth's row keeps A's binding ceiling and predicted
    gain, and the measured ratio; LADDER.md shows them side by side. A prediction missing a depth is refused."""
    from sparkops.cli import diagnose_cmd

    monkeypatch.setattr(diagnose_cmd, "load_weights", lambda spec: nano)
    monkeypatch.setattr(bench_cmd, "load_weights", lambda spec: nano)
    diag = tmp_path / "diag.json"
    assert main(["diagnose", "--model", "k3-nano", "--depth", "0,8", "--steps", "2", "--out", str(tmp_path),
                 "--registry", str(registries[0]), "--json-out", str(diag)]) == 0
    docs = json.loads(diag.read_text())
    assert [d["depth"] for d in docs] == [0, 8] and docs[0]["registry"] == str(registries[0])
    argv = ["bench", "decode", "--model", "k3-nano", "--depth", "0,8", "--tokens", "2", "--repeats", "2",
            "--registry", str(registries[0]), "--vs", str(registries[1]), "--gate-depths", "1"]
    assert main(argv + ["--prediction", str(diag)]) == 0
    rows = [r for r in L.read(bench_dir / L.LEDGER) if r["kind"] == "measurement"]
    for r, d in zip(rows, docs):
        p = r["prediction"]
        assert p["binding"] == d["verdict"]["binding"] and p["predicted_gain"] == d["verdict"]["predicted_gain"]
        assert p["measured_ratio"] == r["ratio"] and p["of"] == "the baseline's eager step"
        assert "--prediction" in r["command"]
    ladder = (bench_dir / L.LADDER).read_text()
    assert f"{rows[0]['prediction']['binding']}: x" in ladder
    # the gate of the row pinned the routing (k3-nano has MoE layers) and the ladder says how many flipped
    routing = rows[0]["gates"]["B"]["routing"]
    assert routing["pinned"] and routing["decisions"] > 0
    assert f"(routing pinned: {routing['flips']} of {routing['decisions']} flipped)" in ladder
    capsys.readouterr()
    assert main(argv[:5] + ["0,8,16"] + argv[6:] + ["--prediction", str(diag)]) == 2
    assert "not [16]" in " ".join(capsys.readouterr().err.split())
    assert main(argv + ["--prediction", str(tmp_path / "none.json")]) == 2


def test_a_critical_path_forecast_goes_in_its_depth_s_row_beside_the_outcome(nano, registries, monkeypatch, capsys,
                                                                               bench_dir, tmp_path):
    """bench --forecast F.json (bench/probes/critical_path.py --json of a depth-0 timeline): the depth-0 row keeps the
    forecast's ratio, its what-ifs and its timeline beside the measured ratio, the depth-8 row none; LADDER.md shows
    it; a file with no forecast in it is refused before any weight is loaded."""
    loads = []
    monkeypatch.setattr(bench_cmd, "load_weights", lambda spec: loads.append(spec) or nano)
    doc = {"timeline": "t.json", "depth": 0, "registry": "/tmp/a.toml",
           "all": {"changes": ["--remove _short_conv_kernel"], "launches": {"_short_conv_kernel": 20},
                   "span_us": 1975.4, "ratio": 1.0022}}
    good, empty = tmp_path / "forecast.json", tmp_path / "empty.json"
    good.write_text(json.dumps(doc))
    empty.write_text(json.dumps({k: v for k, v in doc.items() if k != "all"}))
    argv = ["bench", "decode", "--model", "k3-nano", "--depth", "0,8", "--tokens", "2", "--repeats", "2",
            "--registry", str(registries[0]), "--vs", str(registries[1]), "--gate-depths", "1"]
    capsys.readouterr()
    for bad, says in ((empty, "no forecast in it"), (tmp_path / "missing.json", "cannot read it as JSON")):
        assert main(argv + ["--forecast", str(bad)]) == 2
        assert says in " ".join(capsys.readouterr().err.split())
    assert loads == []
    assert main(argv + ["--forecast", str(good)]) == 0
    rows = {r["depth"]: r for r in L.read(bench_dir / L.LEDGER) if r["kind"] == "measurement"}
    f = rows[0]["forecast"]
    assert f["ratio"] == 1.0022 and f["changes"] == ["--remove _short_conv_kernel"] and f["timeline"] == "t.json"
    assert f["measured_ratio"] == rows[0]["ratio"] and f["source"] == str(good)
    assert "forecast" not in rows[8] and f"--forecast {good}" in rows[0]["command"]
    assert "critical path x1.002 forecast" in (bench_dir / L.LADDER).read_text()


def test_expect_turns_the_diagnosis_into_a_prediction_of_this_change(nano, registries, monkeypatch, capsys,
                                                                     bench_dir, tmp_path):
    """--expect linear=2 (the change's per-op speed-up): each row records the step's gain that implies by Amdahl on
    the diagnosed per-op times, beside the measured ratio; depths diagnosed in two files; bad use refused before any
    weight is loaded."""
    from sparkops.cli import diagnose_cmd

    monkeypatch.setattr(diagnose_cmd, "load_weights", lambda spec: nano)
    diags = []
    for depth in (0, 8):
        diags.append(tmp_path / f"diag{depth}.json")
        assert main(["diagnose", "--model", "k3-nano", "--depth", str(depth), "--steps", "2", "--out", str(tmp_path),
                     "--registry", str(registries[0]), "--json-out", str(diags[-1])]) == 0
    loads = []
    monkeypatch.setattr(bench_cmd, "load_weights", lambda spec: loads.append(spec) or nano)
    argv = ["bench", "decode", "--model", "k3-nano", "--depth", "0,8", "--tokens", "2", "--repeats", "2",
            "--registry", str(registries[0]), "--vs", str(registries[1]), "--gate-depths", "1",
            "--prediction", str(diags[0]), "--prediction", str(diags[1])]
    capsys.readouterr()
    for bad, says in ((["--expect", "linear=0"], "FACTOR the op's speed-up"), (["--expect", "warp_drive=2"],
                      "timed no such op"), (["--expect", "linear@16=2"], "does not time"),
                      (["--prediction", str(diags[1])], "in both")):
        assert main(argv + bad) == 2, bad
        assert says in " ".join(capsys.readouterr().err.split()), bad
    assert main(argv[:-4] + ["--expect", "linear=2"]) == 2  # no --prediction
    assert "--expect needs --prediction" in " ".join(capsys.readouterr().err.split())
    # a graph baseline needs the diagnosis' graph step time, which a CPU diagnosis does not have
    assert main(argv + ["--expect", "linear=2", "--graph", "A"]) == 2
    assert "has no graph step time" in " ".join(capsys.readouterr().err.split())
    assert loads == []  # every refusal came before the weights

    assert main(argv + ["--expect", "linear=2,rmsnorm@8=4"]) == 0
    rows = [r for r in L.read(bench_dir / L.LEDGER) if r["kind"] == "measurement"]
    for r, path in zip(rows, diags):
        doc = json.loads(path.read_text())[0]
        by_op = {op: x["seconds"] for op, x in doc["profile"]["by_op"].items()}
        want = {"linear": 2.0, **({"rmsnorm": 4.0} if r["depth"] == 8 else {})}
        p = r["prediction"]
        assert p["expect"] == want and p["source"] == str(path)
        step = doc["profile"]["wall_s"]  # the baseline arm ran eager
        saved = sum(by_op[op] * (1 - 1 / f) for op, f in want.items())
        assert p["change_predicted_gain"] == pytest.approx(step / (step - saved)) and p["change_predicted_gain"] > 1
        assert r["command"].count("--prediction") == 2 and "--expect linear=2,rmsnorm@8=4" in r["command"]
    ladder = (bench_dir / L.LADDER).read_text()
    assert f"expected linear x2 per op: x{rows[0]['prediction']['change_predicted_gain']:.3g} predicted" in ladder


def test_a_per_type_change_is_predicted_from_its_types_share(nano, registries, monkeypatch, capsys, bench_dir,
                                                              tmp_path):
    """diagnose keeps a typed op's time per weight type (linear@F32 for k3-nano's float weights: every linear call),
    summing to the op's; --expect linear@F32=2 predicts from that share (here all of linear, so linear=2's gain);
    naming an op and one of its types together, or an unknown type, is refused."""
    from sparkops.cli import diagnose_cmd
    from sparkops.registry.file import TYPE_NAMES

    monkeypatch.setattr(diagnose_cmd, "load_weights", lambda spec: nano)
    monkeypatch.setattr(bench_cmd, "load_weights", lambda spec: nano)
    diag = tmp_path / "diag.json"
    assert main(["diagnose", "--model", "k3-nano", "--depth", "0", "--steps", "2", "--out", str(tmp_path),
                 "--registry", str(registries[0]), "--json-out", str(diag)]) == 0
    linear = json.loads(diag.read_text())[0]["profile"]["by_op"]["linear"]
    assert set(linear["by_type"]) <= set(TYPE_NAMES) and linear["by_type"]
    assert sum(x["calls"] for x in linear["by_type"].values()) == pytest.approx(linear["calls"])
    assert sum(x["seconds"] for x in linear["by_type"].values()) == pytest.approx(linear["seconds"])
    (qtype,) = linear["by_type"]  # k3-nano stores every linear in one type
    argv = ["bench", "decode", "--model", "k3-nano", "--depth", "0", "--tokens", "2", "--repeats", "2",
            "--registry", str(registries[0]), "--vs", str(registries[1]), "--gate-depths", "1",
            "--prediction", str(diag)]
    capsys.readouterr()
    for bad, says in ((f"linear=2,linear@{qtype}=3", "and its whole op too"), ("linear@Q9_Z=2", "OP@TYPE=FACTOR")):
        assert main(argv + ["--expect", bad]) == 2, bad
        assert says in " ".join(capsys.readouterr().err.split()), bad
    gains = []
    for expect in (f"linear@{qtype}=2", "linear=2"):
        assert main(argv + ["--expect", expect]) == 0
        row = [r for r in L.read(bench_dir / L.LEDGER) if r["kind"] == "measurement"][-1]
        gains.append(row["prediction"]["change_predicted_gain"])
    assert gains[0] == pytest.approx(gains[1]) and gains[0] > 1


def test_a_prefill_row_records_the_baselines_prefill_diagnosis(nano, registries, monkeypatch, capsys, bench_dir,
                                                                tmp_path):
    """diagnose --prefill-chunk 8 at chunk depths 0 and 8 on A, then bench prefill --chunk 8 --prediction --expect:
    the row predicts from both chunks (their per-op times and walls summed) and keeps the measured ratio. A decode
    diagnosis for a prefill bench, a prefill one for decode, another chunk size and OP@DEPTH are refused before any
    weight is loaded."""
    from sparkops.cli import diagnose_cmd

    monkeypatch.setattr(diagnose_cmd, "load_weights", lambda spec: nano)
    diag, dec = tmp_path / "prefill.json", tmp_path / "decode.json"
    assert main(["diagnose", "--model", "k3-nano", "--depth", "0,8", "--prefill-chunk", "8", "--out", str(tmp_path),
                 "--registry", str(registries[0]), "--json-out", str(diag)]) == 0
    assert main(["diagnose", "--model", "k3-nano", "--depth", "0", "--steps", "2", "--out", str(tmp_path),
                 "--registry", str(registries[0]), "--json-out", str(dec)]) == 0
    docs = json.loads(diag.read_text())
    assert [(d["phase"], d["depth"], d["chunk"]) for d in docs] == [("prefill", 0, 8), ("prefill", 8, 8)]
    loads = []
    monkeypatch.setattr(bench_cmd, "load_weights", lambda spec: loads.append(spec) or nano)
    argv = ["bench", "prefill", "--model", "k3-nano", "--tokens", "16", "--chunk", "8", "--repeats", "2",
            "--registry", str(registries[0]), "--vs", str(registries[1]), "--gate-depths", "1"]
    capsys.readouterr()
    for bad, says in ((["--prediction", str(dec)], "a decode diagnosis predicts a decode step"),
                      (["--prediction", str(diag), "--expect", "linear@8=2"], "write OP=FACTOR"),
                      (["--prediction", str(diag), "--expect", "warp_drive=2"], "timed no such op")):
        assert main(argv + bad) == 2, bad
        assert says in " ".join(capsys.readouterr().err.split()), bad
    assert main(argv[:6] + argv[8:] + ["--prediction", str(diag)]) == 2  # no --chunk: one forward
    assert "diagnosed chunks of 8 tokens" in " ".join(capsys.readouterr().err.split())
    decode_argv = ["bench", "decode", "--model", "k3-nano", "--depth", "0", "--tokens", "2",
                   "--registry", str(registries[0]), "--prediction", str(diag)]
    assert main(decode_argv) == 2
    assert "a prefill diagnosis" in " ".join(capsys.readouterr().err.split())
    assert loads == []

    assert main(argv + ["--prediction", str(diag), "--expect", "linear=2"]) == 0
    row = [r for r in L.read(bench_dir / L.LEDGER) if r["kind"] == "measurement"][-1]
    p = row["prediction"]
    walls = [d["profile"]["wall_s"] for d in docs]
    by_op = [{op: x["seconds"] for op, x in d["profile"]["by_op"].items()} for d in docs]
    linear = sum(b.get("linear", 0.0) for b in by_op)
    assert linear > 0
    assert p["change_predicted_gain"] == pytest.approx(sum(walls) / (sum(walls) - linear / 2))
    gains = [d["verdict"]["predicted_gain"] for d in docs]
    assert p["predicted_gain"] == pytest.approx(sum(walls) / sum(w / g for w, g in zip(walls, gains)))
    assert p["of"] == "the baseline's 8-token chunks at depths 0, 8" and p["measured_ratio"] == row["ratio"]
    assert p["expect"] == {"linear": 2.0} and "--prediction" in row["command"]


def test_calls_a_stated_policy_hands_on_are_shown_and_recorded_per_step(nano, registries, monkeypatch, capsys,
                                                                        bench_dir):
    """What an arm's implementations passed to other code by their stated policies is part of what was timed: the
    bench prints it per arm and records it in the arm's figures (GPU session 25's IQ1_S step hid a dequantizing
    path behind 6.5 tok/s). Here each decode step of arm B hands one call on, as a policy would count it."""
    real_decode = Engine.decode
    key = "passed:moe_experts=fake -> torch: IQ1_S weights"

    def decode(self, token):
        if self.ops.plan.registry == str(registries[1]):
            self.ops.counters[key] += 1
        return real_decode(self, token)

    monkeypatch.setattr(Engine, "decode", decode)
    monkeypatch.setattr(bench_cmd, "load_weights", lambda spec: nano)
    argv = ["bench", "decode", "--model", "k3-nano", "--depth", "4", "--tokens", "2", "--repeats", "2",
            "--warmup", "1", "--registry", str(registries[0]), "--vs", str(registries[1]), "--gate-depths", "1,4",
            "--change", "a policy shown"]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "stated policy: B: moe_experts=fake -> torch: IQ1_S weights: 1 call(s) a step" in out
    assert "stated policy: A" not in out
    figures = {f["label"]: f for f in L.read(bench_dir / L.LEDGER)[-1]["figures"]}
    assert figures["B"]["passed"] == {"moe_experts=fake -> torch: IQ1_S weights": 1} and "passed" not in figures["A"]
