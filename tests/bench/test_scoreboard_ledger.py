"""The ledger (append-only, retractions as new rows), the raise-only frontier and LADDER.md."""

from __future__ import annotations

import json

import pytest
import tomlkit

from sparkops.bench import ledger as L
from sparkops.bench import record as R
from sparkops.bench.frontier import Frontier, lowering_problems, workload_key
from sparkops.bench.provenance import now
from sparkops.cli import main
from sparkops.errors import BadInput

KEY = workload_key("decode", "k3-nano", "f32", "cpu", 128, 8)


def row(value: float, before: float | None = None, tier: str = "none", kl: float = 3e-13, key: str = KEY) -> dict:
    """A measurement row as record_run writes it (the fields the frontier and the ladder read)."""
    date = now()
    figures = ([{"label": "A", "registry": "registry.toml", "dtype": "float32", "value": before}] if before else []) + \
        [{"label": "B" if before else "A", "registry": "cand.toml", "dtype": "float32", "value": value}]
    return {"id": L.new_id(date), "kind": "measurement", "date": date, "change": f"candidate at {value}", "key": key,
            "metric": "decode tok/s @ d=128 (8 steps)", "unit": "tok/s", "before": before, "after": value,
            "ratio": value / before if before else None, "tier": tier, "noise": 0.02, "registry": "cand.toml",
            "dtype": "float32", "worst_kl": kl, "worst_top1": 1.0, "figures": figures,
            "command": f"sparkops bench decode --model k3-nano --depth 128 --tokens 8 # {value}", "commit": "abc",
            "dirty": False}


def add(bench, r: dict) -> dict:
    """What record_run does with a row: append it, then offer its figures to the frontier."""
    f = Frontier.load(bench / L.FRONTIER)
    r["frontier"] = R.offer_row(f, r)
    L.append(bench / L.LEDGER, r)
    f.save()
    return r


def test_the_frontier_only_rises(bench_dir):
    bench_dir.mkdir()
    texts = []
    outcomes = []
    for v in (100.0, 110.0, 90.0, 109.0, 120.0):
        outcomes.append(add(bench_dir, row(v))["frontier"]["A"])
        texts.append((bench_dir / L.FRONTIER).read_text())
    assert outcomes == ["new", "raised", "regression", "held", "raised"]
    f = Frontier.load(bench_dir / L.FRONTIER)
    e = f.entries()[KEY]
    assert e["value"] == 120.0 and e["previous"] == 110.0 and e["regressions"] == 1
    assert [Frontier.load(bench_dir / L.FRONTIER).value(KEY)] == [120.0]
    for old, new in zip(texts, texts[1:]):
        assert lowering_problems(old, new) == []
    assert R.consistency_problems(bench_dir) == []
    assert "RAISE-ONLY" in texts[-1]  # the header comment survives every rewrite


def test_a_hand_lowered_value_is_caught(bench_dir):
    bench_dir.mkdir()
    add(bench_dir, row(100.0))
    before = (bench_dir / L.FRONTIER).read_text()
    doc = tomlkit.parse(before)
    doc["frontier"][KEY]["value"] = 95.0
    after = tomlkit.dumps(doc)
    problems = lowering_problems(before, after)
    assert len(problems) == 1 and KEY in problems[0] and "100 lowered to 95" in problems[0]
    del doc["frontier"][KEY]
    assert "removed" in lowering_problems(before, tomlkit.dumps(doc))[0]
    (bench_dir / L.FRONTIER).write_text(after)  # without git history the ledger still gives it away
    assert any("is not a figure of row" in p for p in R.consistency_problems(bench_dir))


def test_a_hand_raised_value_is_caught_by_the_ledger(bench_dir):
    bench_dir.mkdir()
    add(bench_dir, row(100.0))
    doc = tomlkit.parse((bench_dir / L.FRONTIER).read_text())
    doc["frontier"][KEY]["value"] = 250.0
    (bench_dir / L.FRONTIER).write_text(tomlkit.dumps(doc))
    assert any("250" in p and "is not a figure of row" in p for p in R.consistency_problems(bench_dir))


def test_retraction_keeps_the_row_and_lowers_the_frontier_with_a_record(bench_dir):
    bench_dir.mkdir()
    add(bench_dir, row(100.0))
    bad = add(bench_dir, row(169.7, before=98.8, tier="win"))  # lecture 10: a "speedup" that read the wrong rows
    frontier_before = (bench_dir / L.FRONTIER).read_text()
    ledger_before = (bench_dir / L.LEDGER).read_bytes()
    r, lowered = R.retract(bench_dir, bad["id"][:-1], "two live defects made it read the wrong rows", "sparkops ...")
    assert r["retracts"] == bad["id"] and r["kind"] == "retraction"
    assert lowered == {"key": KEY, "from": 169.7, "to": 100.0, "retracted_row": bad["id"], "retraction_row": r["id"],
                       "why": "two live defects made it read the wrong rows", "date": r["date"]}
    assert (bench_dir / L.LEDGER).read_bytes().startswith(ledger_before)  # nothing rewritten, one row added
    rows = L.read(bench_dir / L.LEDGER)
    assert [x["id"] for x in rows[:2]][1] == bad["id"] and rows[1] == json.loads(json.dumps(bad))
    assert Frontier.load(bench_dir / L.FRONTIER).value(KEY) == 100.0
    assert lowering_problems(frontier_before, (bench_dir / L.FRONTIER).read_text()) == []
    assert R.consistency_problems(bench_dir) == []
    with pytest.raises(BadInput, match="already retracted"):
        R.retract(bench_dir, bad["id"], "again", "x")
    ladder = (bench_dir / L.LADDER).read_text()
    assert bad["id"] in ladder and "retracted (was win;" in ladder and "read the wrong rows" in ladder
    assert "169.7 → 100" in ladder  # the [[lowered]] note


def test_the_ledger_is_append_only_and_refuses_damage(bench_dir):
    bench_dir.mkdir()
    path = bench_dir / L.LEDGER
    first = L.append(path, row(100.0))
    snapshot = path.read_bytes()
    L.append(path, row(101.0))
    assert path.read_bytes().startswith(snapshot)
    with pytest.raises(BadInput, match="already exists"):
        L.append(path, dict(first))
    with open(path, "ab") as fh:
        fh.write(b'{"id": "torn", "kind": "meas')  # a write cut short
    with pytest.raises(BadInput, match="not terminated"):
        L.append(path, row(102.0))
    with pytest.raises(BadInput, match=r"ledger.jsonl:3: not a JSON object"):
        L.read(path)


def test_ladder_lists_every_change_with_tier_kl_and_command(bench_dir):
    bench_dir.mkdir()
    rows = [add(bench_dir, row(100.0)), add(bench_dir, row(100.5, before=100.0, tier="none", kl=2e-7)),
            add(bench_dir, row(90.0, before=100.0, tier="regression", kl=1e-8))]
    R.render_all(bench_dir)
    text = (bench_dir / L.LADDER).read_text()
    assert "## Frontier (raise-only)" in text and f"`{KEY}`" in text
    table = [line for line in text.splitlines() if line.startswith("| ") and any(r["id"] in line for r in rows)]
    measured = [line for line in table if "decode tok/s @ d=128" in line]
    assert len(measured) == 3
    assert "— → 100 |" in measured[0] and "| none |" in measured[0]
    assert "100 → 100.5" in measured[1] and "2e-07 / 1" in measured[1]
    assert "100 → 90 |" in measured[2] and "| regression |" in measured[2] and "# 90" in measured[2]
    assert (bench_dir / "ladder.png").stat().st_size > 1000


def test_import_merges_another_boxs_rows_and_applies_them(bench_dir, tmp_path):
    bench_dir.mkdir()
    add(bench_dir, row(100.0))
    other = tmp_path / "gpu-box"
    other.mkdir()
    mine = L.read(bench_dir / L.LEDGER)
    L.append(other / L.LEDGER, mine[0])  # the box started from the same ledger
    L.append(other / L.LEDGER, row(130.0, before=100.0, tier="win"))
    added = R.import_rows(bench_dir, other / L.LEDGER)
    assert len(added) == 1 and Frontier.load(bench_dir / L.FRONTIER).value(KEY) == 130.0
    assert R.import_rows(bench_dir, other / L.LEDGER) == []  # idempotent
    assert R.consistency_problems(bench_dir) == []


def test_sync_repairs_a_frontier_that_missed_a_standing_row(bench_dir):
    bench_dir.mkdir()
    add(bench_dir, row(100.0))
    L.append(bench_dir / L.LEDGER, row(120.0))  # appended, but the frontier write never happened
    assert any("run `sparkops ledger sync`" in p for p in R.consistency_problems(bench_dir))
    assert R.sync(bench_dir) == ([KEY], [])
    assert R.consistency_problems(bench_dir) == []


def _spread(r: dict, lo: float, hi: float) -> dict:
    """Give every figure of row r the rounds' IQR [lo, hi] (as fractions of its value)."""
    for f in r["figures"]:
        f["iqr"] = [f["value"] * lo, f["value"] * hi]
    return r


def test_a_figure_whose_rounds_spread_beyond_the_noise_band_moves_nothing(bench_dir):
    """Session 14: an arm at 394.0 whose rounds spread 387-405, where the same registry measured ~388 three times. Such
    a median is as likely luck as a measurement: it is kept in the ledger, answered "unsteady", and neither raises the
    frontier nor counts as the best standing figure."""
    bench_dir.mkdir()
    add(bench_dir, _spread(row(388.6), 0.9995, 1.0))
    lucky = add(bench_dir, _spread(row(394.0), 387.3 / 394.0, 405.2 / 394.0))
    assert lucky["frontier"] == {"A": "unsteady"}
    assert Frontier.load(bench_dir / L.FRONTIER).value(KEY) == 388.6
    assert R.best_standing(L.read(bench_dir / L.LEDGER), KEY)[0] == 388.6
    assert R.consistency_problems(bench_dir) == []
    steady = add(bench_dir, _spread(row(390.0), 0.99, 1.009))  # 1.9%: inside the band, raises
    assert steady["frontier"] == {"A": "raised"} and Frontier.load(bench_dir / L.FRONTIER).value(KEY) == 390.0
    assert R.figure_spread({"value": 10.0}) is None and R.steady({"value": 10.0})  # an old figure without a spread


def test_sync_lowers_an_entry_an_unsteady_figure_set_with_a_record(bench_dir):
    """An entry set before the rule by an unsteady figure: `check` names it, `sync` lowers it to the best steady
    figure standing with a [[lowered]] record (so the raise-only check passes), and the ladder says why."""
    bench_dir.mkdir()
    add(bench_dir, _spread(row(388.6), 0.9995, 1.0))
    lucky = _spread(row(394.0), 387.3 / 394.0, 405.2 / 394.0)
    f = Frontier.load(bench_dir / L.FRONTIER)  # as the frontier took it before the rule: raised
    f.offer(KEY, 394.0, {**lucky, "registry": "cand.toml", "dtype": "float32"}, noise=0.02)
    L.append(bench_dir / L.LEDGER, lucky)
    f.save()
    before = (bench_dir / L.FRONTIER).read_text()
    problems = R.consistency_problems(bench_dir)
    assert len(problems) == 1 and "spread 4.5%" in problems[0] and "ledger sync" in problems[0]
    raised, lowered = R.sync(bench_dir)
    assert raised == [] and len(lowered) == 1
    assert lowered[0]["from"] == 394.0 and lowered[0]["to"] == 388.6 and lowered[0]["unsteady_row"] == lucky["id"]
    assert "4.5%" in lowered[0]["why"]
    assert Frontier.load(bench_dir / L.FRONTIER).value(KEY) == 388.6
    assert lowering_problems(before, (bench_dir / L.FRONTIER).read_text()) == []
    assert R.consistency_problems(bench_dir) == []
    assert R.sync(bench_dir) == ([], [])  # idempotent
    ladder = (bench_dir / L.LADDER).read_text()
    assert "394 → 388.6" in ladder and f"unsteady: row {lucky['id']}'s figure 394" in ladder


def test_sync_drops_an_entry_no_steady_figure_can_hold(bench_dir):
    bench_dir.mkdir()
    lucky = _spread(row(50.0), 0.5, 1.3)
    f = Frontier.load(bench_dir / L.FRONTIER)
    f.offer(KEY, 50.0, {**lucky, "registry": "cand.toml", "dtype": "float32"}, noise=0.02)
    L.append(bench_dir / L.LEDGER, lucky)
    f.save()
    before = (bench_dir / L.FRONTIER).read_text()
    _, lowered = R.sync(bench_dir)
    assert lowered[0]["to"] == 0.0 and Frontier.load(bench_dir / L.FRONTIER).value(KEY) is None
    assert lowering_problems(before, (bench_dir / L.FRONTIER).read_text()) == []


def test_ledger_cli_show_retract_check(bench_dir, capsys):
    bench_dir.mkdir()
    add(bench_dir, row(100.0))
    r = add(bench_dir, row(140.0, before=100.0, tier="win"))
    assert main(["ledger", "check"]) == 0
    assert main(["ledger", "retract", r["id"]]) == 2  # a retraction without a reason is refused
    assert main(["ledger", "retract", r["id"], "--why", "measured at depth 64, not 128"]) == 0
    capsys.readouterr()
    assert main(["ledger", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [x["kind"] for x in shown] == ["measurement", "measurement", "retraction"]
    assert shown[2]["why"] == "measured at depth 64, not 128"
    assert main(["ledger", "check"]) == 0


def test_the_code_digest_follows_the_files_not_git(tmp_path):
    """A row names the code that ran by a digest of the sources themselves (a copied tree may carry a stale .git)."""
    from sparkops.bench.provenance import code_digest

    (tmp_path / "src/sparkops").mkdir(parents=True)
    (tmp_path / "plugins/p/kernels").mkdir(parents=True)
    (tmp_path / "src/sparkops/a.py").write_text("x = 1\n")
    (tmp_path / "plugins/p/kernels/k.cu").write_text("// kernel\n")
    first = code_digest(tmp_path)
    (tmp_path / "README.md").write_text("not code")
    assert code_digest(tmp_path) == first
    (tmp_path / "plugins/p/kernels/k.cu").write_text("// kernel, changed\n")
    assert code_digest(tmp_path) != first
    assert len(code_digest()) == 64  # the checkout's own


def test_the_fewest_pairs_for_a_tier_is_what_the_sign_test_allows():
    from sparkops.bench.timing import SIGN_TEST_P, sign_test, tier_of_pairs
    from sparkops.cli.bench_cmd import MIN_PAIRS_FOR_A_TIER as n

    assert sign_test(n, n) < SIGN_TEST_P <= sign_test(n - 1, n - 1)
    assert tier_of_pairs([2.0] * (n - 1)) == "none" and tier_of_pairs([2.0] * n) == "win"


def test_the_goal_table_reads_the_frontier(bench_dir):
    """bench/goals.toml against the frontier: best gated figure, share of the roofline, x llama.cpp, met or not."""
    from sparkops.bench import goals as G

    bench_dir.mkdir()
    (bench_dir / G.GOALS).write_text(
        f'[[goal]]\nname = "nano decode"\nkey = "{KEY}"\nroofline = 400\nllama_cpp = 50\ntarget = 240\n'
        f'target_is = ">= 60% of the roofline"\n\n'
        '[[goal]]\nname = "not measured yet"\nkey = "decode.x.f32.cpu.d=1"\nroofline = 10\nllama_cpp = 1\n'
        'target = 6\n')
    add(bench_dir, row(200.0))
    R.render_all(bench_dir)
    lines = (bench_dir / L.LADDER).read_text().splitlines()
    nano = next(x for x in lines if x.startswith("| nano decode"))
    assert "| 200 | 50% | 4 |" in nano and "| not yet |" in nano
    assert next(x for x in lines if x.startswith("| not measured yet")).count("—") >= 3
    add(bench_dir, row(250.0))  # a gated figure above the target raises the frontier: the goal is met
    R.render_all(bench_dir)
    assert "| **yes** |" in next(x for x in (bench_dir / L.LADDER).read_text().splitlines()
                                 if x.startswith("| nano decode"))
    # the kernel budget is read from measured diagnosis rows of the model (a paper one does not count)
    with open(bench_dir / G.GOALS, "a") as fh:
        fh.write('\n[[kernel_goal]]\nname = "nano kernels"\nmodel = "k3-nano"\nmix = "f32"\ntarget = 100\n')
    R.render_all(bench_dir)
    line = next(x for x in (bench_dir / L.LADDER).read_text().splitlines() if x.startswith("| nano kernels"))
    assert "no measured diagnosis yet" in line and "| not yet |" in line
    for n, paper in ((140, False), (90, True), (120, False)):
        L.append(bench_dir / L.LEDGER, {"id": L.new_id(now()), "kind": "diagnosis", "date": now(), "paper": paper,
                                        "model": {"name": "k3-nano", "mix": "f32"}, "depth": 0,
                                        "kernels_per_token": n, "registry": "r.toml"})
    R.render_all(bench_dir)
    line = next(x for x in (bench_dir / L.LADDER).read_text().splitlines() if x.startswith("| nano kernels"))
    assert "fewest diagnosed: 120" in line and "| not yet |" in line
    # a retracted diagnosis no longer counts, its row says why, and a prediction read from it says so
    rows = L.read(bench_dir / L.LEDGER)
    fewest = next(r for r in rows if r.get("kernels_per_token") == 120)
    L.append(bench_dir / L.LEDGER, {**row(260.0), "prediction": {"registry": "r.toml", "diagnosed": fewest["date"],
                                                                  "binding": "occupancy", "predicted_gain": 3.0}})
    R.retract(bench_dir, fewest["id"], "the profile counted range spans as kernels", "test")
    text = (bench_dir / L.LADDER).read_text()
    line = next(x for x in text.splitlines() if x.startswith("| nano kernels"))
    assert "fewest diagnosed: 140" in line
    assert f"{fewest['id']} (retracted: the profile counted range spans as kernels)" in text
    assert "occupancy: x3 predicted (from a diagnosis since retracted)" in text
    (bench_dir / G.GOALS).write_text('[[goal]]\nname = "x"\n')
    with pytest.raises(BadInput, match="goal 1 needs name, key, roofline"):
        G.load(bench_dir / G.GOALS)
    (bench_dir / G.GOALS).write_text('[[kernel_goal]]\nname = "x"\ntarget = "few"\n')
    with pytest.raises(BadInput, match="kernel_goal 1 needs name, model, mix and target"):
        G.load_kernel_goals(bench_dir / G.GOALS)


def test_the_checkouts_goals_are_issue_10s():
    """The goals file of the checkout: each 60% target is 60% of its roofline, and every key is a 48B workload; the
    fp8-cache rows are their own workloads (the frontier's suffix), with a roofline that counts a byte a cache value."""
    from sparkops.bench import goals as G
    from sparkops.bench.frontier import LOSSY_CACHE
    from tests.helpers import REPO

    goals = G.load(REPO / "bench" / G.GOALS)
    assert len(goals) == 8
    for g in goals:
        assert g.key.split(".")[1] == "kimi-linear-48b-a3b" and g.llama_cpp < g.target <= g.roofline
        if "60%" in g.target_is:
            assert g.target == pytest.approx(0.6 * g.roofline)
    by_key = {g.key: g for g in goals}
    lossy = [g for g in goals if g.key.endswith(LOSSY_CACHE)]
    assert len(lossy) == 2
    state = 20 * 32 * 128 * 128 * 4 * 2  # the KDA state read and written (anchors section 3)
    for g in lossy:
        bf16 = by_key[g.key[:-len(LOSSY_CACHE)]]  # the same workload on a bf16 cache
        weights = 4.04e12 / bf16.roofline - 7 * 131072 * 576 * 2 - state
        assert 4.04e12 / (weights + 7 * 131072 * 576 + state) == pytest.approx(g.roofline, rel=2e-3)
    (k,) = G.load_kernel_goals(REPO / "bench" / G.GOALS)
    assert (k.model, k.mix, k.target) == ("kimi-linear-48b-a3b", "q4_k_m", 150)


def test_recordings_into_one_bench_directory_take_turns(bench_dir, tmp_path):
    """Two benches finishing together (the two GPU lanes share a bench directory) each load the frontier, offer and
    save it: interleaved, one could save over the other's raise. Every writer takes the directory's lock first: while
    another holds it, an import (like a record, a retraction, a sync or a refusal) waits, then lands whole."""
    import threading
    import time

    bench_dir.mkdir()
    add(bench_dir, row(100.0))
    other = tmp_path / "gpu-box"
    L.append(other / L.LEDGER, row(130.0, before=100.0, tier="win"))
    done = []
    with L.writer_lock(bench_dir):
        t = threading.Thread(target=lambda: done.append(R.import_rows(bench_dir, other / L.LEDGER)))
        t.start()
        time.sleep(0.5)
        assert t.is_alive() and not done and len(L.read(bench_dir / L.LEDGER)) == 1  # waiting for the lock
    t.join(10)
    assert len(done[0]) == 1 and Frontier.load(bench_dir / L.FRONTIER).value(KEY) == 130.0
    assert R.consistency_problems(bench_dir) == []


def test_each_figure_goes_to_its_own_cache_s_workload(bench_dir):
    """A row timing a float32 cache (A) against an fp8 one (B): B's figure is offered to the fp8 workload, A's to the
    float32 cache's, whatever the row's own key; neither raises the other's entry."""
    from sparkops.bench.frontier import LOSSY_CACHE, with_cache

    bench_dir.mkdir()
    fp8_key = workload_key("decode", "k3-nano", "f32", "cpu", 128, 8, "float8_e4m3fn")
    assert fp8_key == KEY + LOSSY_CACHE and with_cache(fp8_key, "bfloat16") == KEY == with_cache(KEY, None)
    r = row(130.0, before=100.0, key=fp8_key)
    r["figures"][0]["cache_dtype"], r["figures"][1]["cache_dtype"] = "float32", "float8_e4m3fn"
    assert add(bench_dir, r)["frontier"] == {"A": "new", "B": "new"}
    entries = Frontier.load(bench_dir / L.FRONTIER).entries()
    assert entries[KEY]["value"] == 100.0 and entries[fp8_key]["value"] == 130.0
    later = row(120.0)  # a float32-cache figure: held against 100, never against the fp8 workload's 130
    assert add(bench_dir, later)["frontier"] == {"A": "raised"}
    assert Frontier.load(bench_dir / L.FRONTIER).value(fp8_key) == 130.0
    assert R.best_standing(L.read(bench_dir / L.LEDGER), KEY)[0] == 120.0
    assert R.best_standing(L.read(bench_dir / L.LEDGER), fp8_key)[0] == 130.0
