"""The op-level gate refuses every deliberately wrong implementation, for the right reason, and accepts
the correct controls; `sparkops swap` refuses them and leaves registry.toml byte-for-byte unchanged."""

from __future__ import annotations

import time

import pytest

from sparkops.cli import main
from sparkops.gate.check import prove
from sparkops.qweight import QWeight

WRONG = ["attention=kv_off_by_one", "linear=half_rows_fast", "linear=tp_reduce_twice", "embedding=transposed_stride",
         "moe_router=missing_scale", "moe_router=no_selection_bias", "swiglu=last_row_unwritten", "swiglu=memorized", "add_rmsnorm=fused_lastbit",
         "short_conv=stale_window", "rmsnorm=in_place"]
#: wrong implementations no case shows wrong: their own code is never taken (the gate refuses the proof of nothing)
OWN_CODE_UNTAKEN = ["linear=wide_only"]

#: what the report must point at for each wrong implementation
EXPECTED = {
    "attention=kv_off_by_one": "state 'cache'",
    "linear=half_rows_fast": "output: nmse",
    "linear=tp_reduce_twice": "output: nmse 1 ",  # exactly twice the output: NMSE = 1
    "embedding=transposed_stride": "output: nmse",
    "moe_router=missing_scale": "weights: nmse",
    "moe_router=no_selection_bias": "ids",
    "swiglu=last_row_unwritten": "NaN",
    "swiglu=memorized": "output: nmse",
    "add_rmsnorm=fused_lastbit": "differ in their bits from chain",
    "short_conv=stale_window": "state 'state'",
    "rmsnorm=in_place": "wrote to an input it may only read",
}


def _impl(catalog, key):
    op, name = key.split("=")
    return catalog.get(op, name)


def test_the_list_of_wrong_implementations_is_the_plugins(wrong_module):
    assert sorted(WRONG + OWN_CODE_UNTAKEN) == sorted(wrong_module.WRONG)


@pytest.mark.parametrize("key", WRONG)
def test_check_refuses_each_wrong_implementation(catalog, session, key):
    outcome = prove(_impl(catalog, key), "cpu", catalog, session=session)
    assert not outcome.passed
    assert outcome.record["passed"] is False
    assert EXPECTED[key] in outcome.report, outcome.report
    first = outcome.failures[0]
    # the report names the case, the worst element with expected vs got (or the bytes), and how to replay it
    assert f"case {first.name}" in outcome.report
    assert f"replay: sparkops check {key} --case {first.name} --device cpu" in outcome.report
    assert "expected" in outcome.report or "gives" in outcome.report


@pytest.mark.parametrize("key", ["linear=fixture_ok", "moe_router=fixture_ok", "swiglu=fixture_ok",
                                 "add_rmsnorm=chain", "add_rmsnorm=fused_exact", "short_conv=fixture_ok"])
def test_check_accepts_the_correct_controls(catalog, session, key):
    outcome = prove(_impl(catalog, key), "cpu", catalog, session=session)
    assert outcome.passed, outcome.report
    rec = outcome.record
    assert rec["passed"] is True and rec["cases"] == len(outcome.results) > 0
    assert rec["seeds"] == list(session.seeds) and len(rec["seeds"]) >= 3
    assert rec["device_class"] == "cpu" and rec["source_hash"] and rec["versions"]["torch"]
    assert set(rec["worst"]) == {r.name.rpartition("@")[0] for r in outcome.results}


def test_bit_identity_is_proven_by_bytes_and_records_its_target(catalog, session):
    outcome = prove(_impl(catalog, "add_rmsnorm=fused_exact"), "cpu", catalog, session=session)
    assert outcome.passed
    assert outcome.record["bit_identical_to"] == "chain"
    assert any(v.metric == "bytes" for r in outcome.results for _, v in r.verdicts)


def test_memorizer_passes_the_pinned_seeds_and_fails_on_fresh_draws(catalog):
    impl = _impl(catalog, "swiglu=memorized")
    assert prove(impl, "cpu", catalog, seeds=(0, 1)).passed  # exactly why pinned seeds alone are not enough
    outcome = prove(impl, "cpu", catalog)  # the default: pinned + a fresh seed drawn now
    fresh = outcome.seeds[-1]
    assert fresh not in (0, 1) and not outcome.passed
    assert {r.name.rpartition("@")[2] for r in outcome.failures} == {str(fresh)}


def test_a_failing_case_replays_by_name(catalog, session):
    impl = _impl(catalog, "linear=tp_reduce_twice")
    first = prove(impl, "cpu", catalog, session=session).failures[0].name
    replay = prove(impl, "cpu", catalog, case=first)
    assert [r.name for r in replay.results] == [first] and not replay.passed
    assert replay.record["passed"] is False and replay.record["replay_of"] == first


def test_a_replay_of_a_passing_case_is_never_a_record(catalog):
    replay = prove(_impl(catalog, "swiglu=fixture_ok"), "cpu", catalog, case="T9_F200@5")
    assert replay.cases == 1 and replay.results[0].passed
    assert replay.record["passed"] is False  # one case proves nothing about the others


def test_a_proof_that_never_takes_the_implementations_own_code_is_refused(catalog, session):
    """linear=wide_only is wrong (x2) in the only calls its own code takes, one token at K = 2304, and no case has
    that width: every case passes, on the correct path its stated policy hands them to. The gate refuses it all the
    same, saying why and where the missing case belongs; the record keeps the count of its own calls (none)."""
    outcome = prove(_impl(catalog, "linear=wide_only"), "cpu", catalog, session=session)
    assert all(r.passed for r in outcome.results) and outcome.results  # no case shows it wrong
    assert not outcome.passed and outcome.record["passed"] is False and outcome.record["own_calls"] == 0
    assert "none of its" in outcome.summary and "FAIL" in outcome.summary
    assert "handed every call on" in outcome.report and "src/sparkops/ops/linear.py" in outcome.report
    assert "is not one token at 2304" in outcome.report  # what its policy said


def test_an_implementation_whose_own_code_takes_a_case_passes_and_counts_its_calls(catalog, session):
    """linear=one_token_ok takes one token itself and hands the rest on: it passes, and its record and summary say
    how many calls were its own (the one-token cases of each seed), so a reader sees what the proof covered."""
    outcome = prove(_impl(catalog, "linear=one_token_ok"), "cpu", catalog, session=session)
    assert outcome.passed, outcome.report
    own = sum(w is None for r in outcome.results for w in r.handed_on)
    assert 0 < own < outcome.record["calls"] and outcome.record["own_calls"] == own
    assert f"{own} of {outcome.record['calls']} calls by its own code" in outcome.summary
    # an implementation without a stated policy is not asked: nothing of the kind in its record or summary
    plain = prove(_impl(catalog, "linear=fixture_ok"), "cpu", catalog, session=session)
    assert "own_calls" not in plain.record and "own code" not in plain.summary


def test_zero_cases_is_a_failure(catalog, monkeypatch):
    import sparkops.gate.check as check

    monkeypatch.setattr(check, "cases_for", lambda op, seeds: [])
    outcome = prove(_impl(catalog, "swiglu=fixture_ok"), "cpu", catalog)
    assert not outcome.passed and outcome.cases == 0
    assert "0 cases" in outcome.summary and outcome.record["passed"] is False


def test_the_stride_bug_that_reads_wrong_rows_is_faster_and_still_refused(catalog):
    """The lecture's 169.72 tok/s story: reading the wrong rows was faster. Speed earns nothing here."""
    import torch
    from gguf import GGMLQuantizationType as Q

    ok, fast = (_impl(catalog, k).resolve() for k in ("linear=fixture_ok", "linear=half_rows_fast"))
    g = torch.Generator().manual_seed(7)
    w = QWeight.from_float(torch.randn(4096, 4096, generator=g) * 0.03, Q.F32, name="w")  # 64 MiB: a GEMV
    x = torch.randn(1, 4096, generator=g)
    best = {ok: float("inf"), fast: float("inf")}
    for _ in range(9):  # interleaved A/B, best of each: the scoreboard's way
        for fn in (ok, fast):
            t = time.perf_counter()
            fn(x, w)
            best[fn] = min(best[fn], time.perf_counter() - t)
    assert best[fast] < best[ok]
    assert not prove(_impl(catalog, "linear=half_rows_fast"), "cpu", catalog).passed


@pytest.mark.parametrize("key", WRONG + OWN_CODE_UNTAKEN)
def test_swap_refuses_each_wrong_implementation_and_leaves_the_registry_alone(catalog, monkeypatch, tmp_path, key):
    import sparkops.cli.swap_cmd as swap_cmd

    monkeypatch.setattr(swap_cmd, "load_catalog", lambda: catalog)
    (tmp_path / "reg").mkdir()
    registry = tmp_path / "reg" / "registry.toml"
    before = "# my registry\n[ops.rmsnorm.cpu]\nimpl = \"numpy\"   # a comment swap must keep\nfallback = \"reference\"\n"
    registry.write_text(before)
    assert main(["swap", key, "--registry", str(registry)]) == 1
    assert registry.read_bytes() == before.encode()
    assert [p.name for p in registry.parent.iterdir()] == ["registry.toml"]  # no temp file left behind


def test_swap_writes_the_record_of_a_correct_implementation(catalog, monkeypatch, tmp_path):
    import sparkops.cli.swap_cmd as swap_cmd
    from sparkops.registry.file import Registry
    from sparkops.registry.plan import make_plan

    monkeypatch.setattr(swap_cmd, "load_catalog", lambda: catalog)
    registry = tmp_path / "registry.toml"
    registry.write_text("# keep me\n")
    assert main(["swap", "swiglu=fixture_ok", "add_rmsnorm=fused_exact", "--registry", str(registry)]) == 0
    text = registry.read_text()
    assert text.startswith("# keep me") and "[ops.swiglu.cpu.check]" in text
    reg = Registry.load(registry)
    assert reg.selection("swiglu", "cpu").check["passed"] is True
    plan = make_plan(reg, catalog, "cpu")
    assert plan.entries["swiglu"].check == "ok" and plan.entries["add_rmsnorm"].check == "ok"
