"""bench/probes/ncu_source_table.py: where the copy form's warps waited, read from session 17's real source page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import load_probe

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "bench" / "gpu-runs" / "2026-11-30-session17"


@pytest.fixture(scope="module")
def table():
    return load_probe("ncu_source_table")


def test_session_17_s_copy_form_waited_most_on_its_first_use_of_x(table, tmp_path):
    out = tmp_path / "s.json"
    assert table.main([str(RUN / "call1" / "probe-ncu-source.log"), "--top", "3", "--json", str(out)]) == 0
    s = json.loads(out.read_text())
    assert s["instructions"] == 408 and s["samples"] == 1324
    assert sum(s["by_reason"].values()) == 1324 and next(iter(s["by_reason"])) == "stall_long_sb"
    first = s["top"][0]
    assert first["index"] == 78 and first["samples"] == 315 and first["reason"] == "stall_long_sb"
    assert first["sass"].startswith("LOP3.LUT") and "0xffff0000" in first["sass"]  # the bf16 widening of x
    assert [t["samples"] for t in s["top"]] == sorted((t["samples"] for t in s["top"]), reverse=True)


def test_a_log_without_the_source_page_is_refused_by_name(table, tmp_path, capsys):
    log = tmp_path / "other.log"
    log.write_text("==PROF== Connected\nlaunched 12288x2304 copy\n")
    assert table.main([str(log)]) == 2
    assert "no source-page table" in capsys.readouterr().err


def test_a_source_page_without_stall_samples_says_which_sections_to_ask_for(table, tmp_path, capsys):
    log = tmp_path / "nostall.log"
    log.write_text('"Address","Source","Instructions Executed"\n"0x0","NOP","1"\n')
    assert table.main([str(log)]) == 2
    assert "--section WarpStateStats --section SourceCounters" in capsys.readouterr().err


def test_a_top_below_one_is_refused_by_name(table, capsys):
    with pytest.raises(SystemExit) as e:
        table.main([str(RUN / "call1" / "probe-ncu-source.log"), "--top", "0"])
    assert e.value.code == 2 and "--top must be at least 1" in capsys.readouterr().err
