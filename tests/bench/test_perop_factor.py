"""bench/perop_factor.py: a rung's --expect from its proof's per-op record, and a clear refusal without one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO

SCRIPT = REPO / "bench" / "perop_factor.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_the_factor_is_before_over_after(tmp_path):
    rec = tmp_path / "perop-x.json"
    rec.write_text(json.dumps({"per_token_seconds": {"triton_lastblock": 954e-6, "cupy_rowwarp": 719e-6}}))
    out = run(str(rec), "triton_lastblock", "cupy_rowwarp")
    assert out.returncode == 0 and out.stdout.strip() == "1.327"


def test_a_missing_implementation_or_record_is_refused_with_the_reason(tmp_path):
    rec = tmp_path / "perop-x.json"
    rec.write_text(json.dumps({"per_token_seconds": {"triton_lastblock": 1e-6}}))
    out = run(str(rec), "triton_lastblock", "cupy_rowwarp")
    assert out.returncode == 2 and "no implementation 'cupy_rowwarp'" in out.stderr and not out.stdout
    rec.write_text(json.dumps([1, 2]))
    out = run(str(rec), "a", "b")
    assert out.returncode == 2 and "not a per-op record" in out.stderr
    out = run(str(tmp_path / "none.json"), "a", "b")
    assert out.returncode == 2 and "none.json" in out.stderr
    assert run().returncode == 2


def test_less_takes_a_saving_a_call_off_before_s_time_a_token(tmp_path):
    """A change measured as a saving a call (a probe's pair with and without it): 500 us a token less 28 calls of
    2 us is 444 us, a factor 1.126; a saving larger than the whole is refused."""
    rec = tmp_path / "perop-rowwarp.json"
    rec.write_text(json.dumps({"per_token_seconds": {"cupy_rowwarp": 500e-6}}))
    out = run(str(rec), "cupy_rowwarp", "--less", "28", "2e-6")
    assert out.returncode == 0 and out.stdout.strip() == "1.126"
    out = run(str(rec), "cupy_rowwarp", "--less", "28", "20e-6")
    assert out.returncode == 2 and "more than cupy_rowwarp's" in out.stderr and not out.stdout
    out = run(str(rec), "triton", "--less", "28", "2e-6")
    assert out.returncode == 2 and "no per-token time of 'triton'" in out.stderr


def test_fastest_names_the_candidate_with_the_least_time_and_refuses_an_unknown_one(tmp_path):
    rec = tmp_path / "perop-kdanorm.json"
    rec.write_text(json.dumps({"per_token_seconds": {"chain": 120e-6, "triton": 90e-6, "triton_split": 80e-6}}))
    out = run(str(rec), "--fastest", "triton", "triton_split")
    assert out.returncode == 0 and out.stdout.strip() == "triton_split"
    out = run(str(rec), "--fastest", "triton", "chain")
    assert out.returncode == 0 and out.stdout.strip() == "triton"
    rec.write_text(json.dumps({"per_token_seconds": {"a": 1e-6, "b": 1e-6}}))
    assert run(str(rec), "--fastest", "b", "a").stdout.strip() == "b"  # a tie: the first named
    out = run(str(rec), "--fastest", "a", "c")
    assert out.returncode == 2 and "no implementation 'c'" in out.stderr and not out.stdout


def test_a_record_the_triton_side_by_sides_write_gives_the_rung_its_factor(tmp_path, monkeypatch):
    """record_perop (the Triton GPU tests' writer) and this reader agree: 20 calls a token of 6 us against 4 us is a
    factor 1.5, and the fastest form is named."""
    pytest.importorskip("triton")
    from types import SimpleNamespace

    from tests.backends.triton_support import record_perop

    monkeypatch.setenv("SPARKOPS_PEROP_DIR", str(tmp_path))
    times = {n: SimpleNamespace(us=us) for n, us in (("chain", 6.0), ("triton", 4.5), ("triton_split", 4.0))}
    record_perop("kdanorm", "a title", times, 20, ["row"])
    rec = tmp_path / "perop-kdanorm-bfloat16.json"
    assert json.loads(rec.read_text())["per_token_seconds"]["chain"] == pytest.approx(120e-6)
    assert run(str(rec), "chain", "triton_split").stdout.strip() == "1.500"
    assert run(str(rec), "--fastest", "triton", "triton_split").stdout.strip() == "triton_split"


def test_minus_takes_the_chain_without_the_op_off_both_columns(tmp_path):
    """An op timed inside a chain (the norm after its GEMV): its own time is each column less the chain without it,
    and the factor is before's own time over after's."""
    rec = tmp_path / "perop-normwait.json"
    rec.write_text(json.dumps({"per_token_seconds": {"triton_pdl": 540e-6, "triton_pdl_wait": 470e-6,
                                                     "no norm": 400e-6}}))
    out = run(str(rec), "triton_pdl", "triton_pdl_wait", "--minus", "no norm")
    assert out.returncode == 0 and out.stdout.strip() == "2.000", out.stderr
    out = run(str(rec), "triton_pdl", "triton_pdl_wait", "--minus", "absent")
    assert out.returncode == 2 and "no implementation 'absent'" in out.stderr and not out.stdout
    rec.write_text(json.dumps({"per_token_seconds": {"a": 5e-6, "b": 3e-6, "c": 4e-6}}))
    out = run(str(rec), "a", "b", "--minus", "c")
    assert out.returncode == 2 and "not positive" in out.stderr and not out.stdout


def test_gap_is_what_a_change_adds_a_call_in_microseconds(tmp_path):
    """A fused kernel's longer tail: its chain's column less the chain without the folded op, over the calls a token
    (26 MoE layers: 52 us a token more is 2 us a call); a column that is less is refused, and so is a count of 0."""
    rec = tmp_path / "perop-moenorm.json"
    rec.write_text(json.dumps({"per_token_seconds": {"fused": 852e-6, "no closing norm": 800e-6}}))
    out = run(str(rec), "fused", "no closing norm", "--gap", "26")
    assert out.returncode == 0 and out.stdout.strip() == "2.00", out.stderr
    out = run(str(rec), "no closing norm", "fused", "--gap", "26")
    assert out.returncode == 2 and "no time added" in out.stderr and not out.stdout
    out = run(str(rec), "fused", "no closing norm", "--gap", "0")
    assert out.returncode == 2 and "positive count" in out.stderr


def test_share_puts_the_minus_factor_on_part_of_the_op(tmp_path):
    """A fold that takes 27 of an op's 54 calls: the --minus factor (2 here) on half the op's time is x1.333 on the
    whole op; a share outside (0, 1] is refused."""
    rec = tmp_path / "perop-oprojnorm.json"
    rec.write_text(json.dumps({"per_token_seconds": {"chain": 270e-6, "fused": 243e-6, "no norm": 216e-6}}))
    out = run(str(rec), "chain", "fused", "--minus", "no norm", "--share", "0.5")
    assert out.returncode == 0 and out.stdout.strip() == "1.333", out.stderr
    assert run(str(rec), "chain", "fused", "--minus", "no norm", "--share", "1").stdout.strip() == "2.000"
    out = run(str(rec), "chain", "fused", "--minus", "no norm", "--share", "1.5")
    assert out.returncode == 2 and "--share takes a fraction" in out.stderr
