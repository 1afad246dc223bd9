"""The GPU tests' side-by-side records into the ledger: the record the test writes (with its own node id), the row
(times a token, the fastest, the command that reproduces it, the device and the code), bad records refused, and
LADDER.md's section."""

from __future__ import annotations

import json

import pytest

from sparkops.bench import ledger as L
from sparkops.bench.perop import PEROP_DIR, perop_row, read_record, write_record
from sparkops.cli import main
from sparkops.errors import BadInput

TIMES = {"triton_prefetch": 250.0e-6, "cupy_rowwarp": 226.3e-6, "cupy_rowwarp_pdl": 217.2e-6}


def test_a_record_names_the_test_that_wrote_it(tmp_path, monkeypatch):
    monkeypatch.setenv(PEROP_DIR, str(tmp_path / "perop"))
    path = write_record("routerpdl-bfloat16", "router [256x2304]", TIMES, dtype="bfloat16")
    doc = read_record(path)
    assert path.name == "perop-routerpdl-bfloat16.json" and doc["per_token_seconds"] == TIMES
    assert doc["test"] == ("tests/bench/test_scoreboard_perop.py::"
                           "test_a_record_names_the_test_that_wrote_it")  # the node id, not "(call)"
    monkeypatch.delenv(PEROP_DIR)
    assert write_record("x", "y", TIMES) is None  # without the directory, nothing is written


def test_the_row_has_the_times_the_fastest_and_a_command(tmp_path, monkeypatch):
    monkeypatch.setenv(PEROP_DIR, str(tmp_path))
    path = write_record("routerpdl-bfloat16", "router [256x2304]", TIMES)
    row = perop_row(path, device_name="NVIDIA H200")
    assert row["kind"] == "perop" and row["record"] == path.name and row["fastest"] == "cupy_rowwarp_pdl"
    assert row["per_token_us"]["cupy_rowwarp"] == pytest.approx(226.3)
    assert row["command"] == (f"{PEROP_DIR}=DIR python3 -m pytest -m gpu "
                              "'tests/bench/test_scoreboard_perop.py::test_the_row_has_the_times_the_fastest_and_a_command'")
    assert row["device_name"] == "NVIDIA H200" and row["code_digest"] and "commit" in row
    said = perop_row(path, command="bash bench/gpu_suite.sh x", device_name="H")
    assert said["command"] == "bash bench/gpu_suite.sh x"


@pytest.mark.parametrize("doc,why", [
    ({"per_token_seconds": {"a": 1e-6}}, "needs a 'title'"),
    ({"title": "t", "per_token_seconds": {}}, "needs a 'title'"),
    ({"title": "t", "per_token_seconds": {"a": 0.0}}, r"\['a'\] have no positive"),
    ({"title": "t", "per_token_seconds": {"a": float("nan")}}, "no positive, finite"),
])
def test_bad_records_are_refused_by_name(tmp_path, doc, why):
    f = tmp_path / "perop-x.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=why):
        perop_row(f, command="c", device_name="H")


def test_a_record_without_its_test_or_device_needs_them_said(tmp_path, monkeypatch):
    f = tmp_path / "perop-old.json"
    f.write_text(json.dumps({"title": "t", "per_token_seconds": {"a": 1e-6}}))  # written before records named tests
    with pytest.raises(BadInput, match="--command"):
        perop_row(f, device_name="H")
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(BadInput, match="--device-name"):
        perop_row(f, command="c")


def test_the_cli_records_it_and_the_ladder_lists_it(tmp_path, bench_dir, capsys):
    f = tmp_path / "perop-routerpdl-bfloat16.json"
    f.write_text(json.dumps({"title": "router [256x2304]", "per_token_seconds": TIMES}))
    assert main(["ledger", "perop", str(f), "--command", "pytest -m gpu tests/backends/test_cupy_timing.py -k pdl",
                 "--device-name", "NVIDIA H200"]) == 0
    assert "cupy_rowwarp_pdl 217.2" in capsys.readouterr().out
    (row,) = L.read(bench_dir / L.LEDGER)
    assert row["kind"] == "perop" and row["fastest"] == "cupy_rowwarp_pdl"
    ladder = (bench_dir / L.LADDER).read_text()
    assert "## Per-op side-by-sides" in ladder and "**cupy_rowwarp_pdl 217.2**; cupy_rowwarp 226.3" in ladder
    assert main(["ledger", "show"]) == 0 and "perop" in capsys.readouterr().out
    assert main(["ledger", "retract", row["id"], "--why", "timed on the racing form"]) == 0
    assert "## Per-op side-by-sides" not in (bench_dir / L.LADDER).read_text()  # a retracted record leaves the table
    assert main(["ledger", "perop"]) == 2  # no file named


def test_a_record_brought_home_names_the_commit_that_ran_it(tmp_path):
    """--ran-commit: the row's commit and code digest are that commit's (what `ledger provenance` matches), not the
    checkout's that records it; a name that is no commit is refused."""
    from sparkops.bench.sources import _git, digest_of_commit
    from sparkops.paths import repo_root

    f = tmp_path / "perop-x.json"
    f.write_text(json.dumps({"title": "t", "per_token_seconds": {"a": 1e-6}}))
    parent = _git(repo_root(), "rev-parse", "HEAD").decode().strip()  # a clone may hold one commit only
    row = perop_row(f, command="c", device_name="H", ran_commit=parent[:10])
    assert row["commit"] == parent and row["dirty"] is False
    assert row["code_digest"] == digest_of_commit(repo_root(), parent)
    with pytest.raises(BadInput, match="not a commit"):
        perop_row(f, command="c", device_name="H", ran_commit="no-such-commit")


def test_several_records_in_one_call_are_all_checked_before_any_is_recorded(tmp_path, bench_dir, capsys):
    good, bad = tmp_path / "perop-a.json", tmp_path / "perop-b.json"
    good.write_text(json.dumps({"title": "a", "per_token_seconds": {"x": 1e-6}}))
    bad.write_text(json.dumps({"title": "b", "per_token_seconds": {"x": -1.0}}))
    args = ["--command", "c", "--device-name", "H"]
    assert main(["ledger", "perop", str(good), str(bad), *args]) == 2
    assert not (bench_dir / L.LEDGER).exists() or L.read(bench_dir / L.LEDGER) == []  # nothing half-written
    other = tmp_path / "perop-c.json"
    other.write_text(json.dumps({"title": "c", "per_token_seconds": {"y": 2e-6}}))
    assert main(["ledger", "perop", str(good), str(other), *args]) == 0
    assert [r["record"] for r in L.read(bench_dir / L.LEDGER)] == ["perop-a.json", "perop-c.json"]
    assert main(["ledger", "retract", "a", "b", "--why", "w"]) == 2  # other actions take one target
