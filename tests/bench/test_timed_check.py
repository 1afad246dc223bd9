"""bench/timed_check.py: SUITE_TIMED may name only rungs whose newest pair won (the suite runs it first)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "bench"))
import timed_check  # noqa: E402


def _pair(rid: str, date: str, tier: str, a: str, b: str, ratio: float = 1.0) -> dict:
    return {"id": rid, "date": date, "tier": tier, "ratio": ratio, "registry": f"/tmp/{b} (graph)",
            "figures": [{"label": "A", "registry": f"/tmp/{a} (graph)"}, {"label": "B", "registry": f"/tmp/{b}"}]}


def _one_arm(rid: str, date: str, tier: str, reg: str) -> dict:
    return {"id": rid, "date": date, "tier": tier, "ratio": 0.02, "registry": f"/tmp/{reg} (graph)",
            "figures": [{"label": "A", "registry": f"/tmp/{reg} (graph)"}]}


PAIRS = {"decode-x": "/tmp/cuda-x.toml", "decode-y": "/tmp/cuda-y.toml", "decode-z": "/tmp/cuda-z.toml"}


def test_a_rung_whose_newest_pair_won_passes_and_one_arm_rows_do_not_count():
    rows = [_pair("1", "2026-12-01T01:00", "win", "base.toml", "cuda-x.toml", 1.1),
            _one_arm("2", "2026-12-02T01:00", "regression", "cuda-x.toml")]  # the step against a frontier: not the rung
    refusals, notes = timed_check.problems(["decode-x"], PAIRS, rows)
    assert refusals == [] and notes == []


def test_a_rung_whose_newest_pair_lost_is_refused_with_its_rows():
    rows = [_pair("1", "2026-12-01T01:00", "win", "base.toml", "cuda-y.toml", 1.1),
            _pair("2a", "2026-12-02T01:00", "regression", "base.toml", "cuda-y.toml", 0.937),
            _pair("2b", "2026-12-02T01:00", "regression", "base.toml", "cuda-y.toml", 0.939)]
    refusals, _ = timed_check.problems(["decode-y"], PAIRS, rows)
    assert len(refusals) == 1
    assert "decode-y" in refusals[0] and "2a 0.937 regression" in refusals[0] and "2b 0.939 regression" in refusals[0]
    # a name that SUITE_TIMED does not hold, or that is no rung of the pairs, is not looked at
    assert timed_check.problems(["decode-x", "prefill-dqmm"], PAIRS, rows) == ([], [
        "decode-x: no pair timed cuda-x.toml as its B arm in the ledgers read (timed in a call not imported yet?)"])


def test_a_retracted_win_does_not_count_and_the_pairs_before_it_decide():
    """Session 32: the stack's pair on a fresh H100 was timed over session 23's step, not the x16 one (its registry
    missing there): a win that answered no question about the rung, retracted. The newest pair left is session 30's
    none, so SUITE_TIMED naming the rung is refused again."""
    rows = [_pair("1", "2026-12-02T01:00", "win", "cuda-x16.toml", "cuda-y.toml", 1.021),
            _pair("2", "2026-12-02T02:00", "none", "cuda-x16.toml", "cuda-y.toml", 1.019),
            _pair("3", "2026-12-05T01:00", "win", "cuda-s23.toml", "cuda-y.toml", 1.168)]
    assert timed_check.problems(["decode-y"], PAIRS, rows)[0] == []
    rows.append({"id": "4", "date": "2026-12-05T02:00", "kind": "retraction", "retracts": "3", "tier": "retracted",
                 "why": "timed over the wrong base"})
    refusals, _ = timed_check.problems(["decode-y"], PAIRS, rows)
    assert len(refusals) == 1 and "2 1.019 none" in refusals[0] and "1.168" not in refusals[0]


def test_only_pairs_over_the_rungs_base_answer_for_it():
    """Session 39: rungs52 won over its base (cuda-s49, the next rung SUITE_TIMED names in NOW_RUNGS' order), then its
    registry was timed against rungs50's (one of its two swaps alone: a none). That later pair answers another
    question and does not unseat the win; a newer pair over the base does."""
    pairs = {"decode-s52": "/tmp/cuda-s52.toml", "decode-s50": "/tmp/cuda-s50.toml", "decode-s49": "/tmp/cuda-s49.toml"}
    rows = [_pair("1", "2026-12-06T11:04", "win", "cuda-s49.toml", "cuda-s52.toml", 1.029),
            _pair("2", "2026-12-06T11:06", "none", "cuda-s50.toml", "cuda-s52.toml", 1.015)]
    assert timed_check.problems(["decode-s49", "decode-s52"], pairs, rows)[0] == []
    # without the base among the timed rungs there is no base to hold it to: the newest pair decides, as before
    refusals, _ = timed_check.problems(["decode-s52"], pairs, rows)
    assert len(refusals) == 1 and "2 1.015 none" in refusals[0]
    rows.append(_pair("3", "2026-12-07T09:00", "none", "cuda-s49.toml", "cuda-s52.toml", 1.012))
    refusals, _ = timed_check.problems(["decode-s49", "decode-s52"], pairs, rows)
    assert len(refusals) == 1 and "3 1.012 none" in refusals[0] and "1.015" not in refusals[0]
    # a rung never timed over its base is said, naming the base
    assert timed_check.problems(["decode-s49", "decode-s50"], pairs, rows)[1][1:] == [
        "decode-s50: no pair timed cuda-s50.toml as its B arm over cuda-s49.toml in the ledgers read (timed in a call "
        "not imported yet?)"]


def test_the_command_reads_every_ledger_and_exits_1_on_a_refusal(tmp_path):
    checkout, machine = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    checkout.write_text(json.dumps(_pair("1", "2026-12-01T01:00", "win", "base.toml", "cuda-z.toml")) + "\n")
    machine.write_text(json.dumps(_pair("2", "2026-12-02T01:00", "none", "base.toml", "cuda-z.toml")) + "\n")
    cmd = [sys.executable, "bench/timed_check.py", "--timed", "decode-z", "--ledger", str(checkout)]
    pairs = [f"{k}={v}" for k, v in PAIRS.items()]
    assert subprocess.run(cmd + pairs, cwd=REPO, capture_output=True).returncode == 0
    done = subprocess.run(cmd + ["--ledger", str(machine), "--ledger", str(tmp_path / "missing.jsonl")] + pairs,
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 1 and "SUITE_TIMED names decode-z" in done.stderr


def test_the_checkouts_ledger_holds_the_export_the_suite_header_gives():
    """The export of the suite header's next-session plan passes against the committed ledger (session 39's: the
    s52 step, whose registry was also timed against rungs50's, a none about another question)."""
    timed = ("decode-lastblock decode-convmerge decode-moe-prefetch decode-router-prefetch decode-attn-cupy-now "
             "decode-lmhead-cupy-float decode-linear-rowwarp decode-s22-all decode-s23-nones decode-s28-exp-q8h "
             "decode-s32-lmhead-x16 decode-s39-q8-tall decode-s49-nones decode-s52-xr-ld")
    regs = {"decode-lastblock": "cuda-best-fused-lastblock.toml",
            "decode-convmerge": "cuda-best-fused-lastblock-conv.toml",
            "decode-moe-prefetch": "cuda-best-fused-lastblock-conv-moepf.toml",
            "decode-router-prefetch": "cuda-best-fused-lastblock-conv-moepf-routpf.toml",
            "decode-attn-cupy-now": "cuda-best-fused-lastblock-conv-moepf-routpf-cupy-attn.toml",
            "decode-lmhead-cupy-float": "cuda-step8-q6k-cupy-float.toml",
            "decode-linear-rowwarp": "cuda-s13-rowwarp.toml",
            "decode-s22-all": "cuda-s22-all.toml", "decode-s23-nones": "cuda-s23-nones.toml",
            "decode-s28-exp-q8h": "cuda-s28-exp-q8h.toml", "decode-s27-exp-split": "cuda-s27-exp-split.toml",
            "decode-s32-lmhead-x16": "cuda-s32-lmhead-x16.toml", "decode-s39-q8-tall": "cuda-s39-q8-tall.toml",
            "decode-s49-nones": "cuda-s49-nones.toml", "decode-s52-xr-ld": "cuda-s52-xr-ld.toml"}
    regs = dict(reversed(regs.items()))  # NOW_RUNGS' order: newest first (each rung's base the next timed one)
    rows = timed_check._rows([str(REPO / "bench" / "ledger.jsonl")])
    refusals, _ = timed_check.problems(timed.split(), regs, rows)
    assert refusals == []
    refusals, _ = timed_check.problems(["decode-s27-exp-split"], regs, rows)  # session 27's slip, caught
    assert len(refusals) == 1 and "0.937 regression" in refusals[0]


def test_a_ledger_that_is_not_json_lines_is_named(tmp_path):
    bad = tmp_path / "ledger.jsonl"
    bad.write_text('{"id": "1"}\n{not json\n')
    done = subprocess.run([sys.executable, "bench/timed_check.py", "--timed", "decode-x", "--ledger", str(bad),
                           "decode-x=/tmp/cuda-x.toml"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode != 0 and f"{bad}:2 is not a ledger row" in done.stderr
