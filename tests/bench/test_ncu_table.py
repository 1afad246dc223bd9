"""bench/probes/ncu_table.py: Nsight Compute's text report as one table, read from session 14's real report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import load_probe

REPO = Path(__file__).resolve().parents[2]
REPORT = REPO / "bench" / "gpu-runs" / "2026-11-30-session14" / "call5" / "probe-ncu-rowwarp.log"


@pytest.fixture(scope="module")
def ncu_table():
    return load_probe("ncu_table")


def test_reads_every_kernel_of_session_14_s_report_with_its_figures(ncu_table):
    rows = ncu_table.parse(REPORT.read_text())
    assert len(rows) == 14
    assert [r["kernel"] for r in rows[:7]] == ["linear_q4_k_rowwarp_bf16", "linear_q4_k_rowoct_bf16",
                                               "linear_q4_k_rowcp_bf16", "linear_q4_k_mma_bf16",
                                               "linear_q4_k_mmapipe4_bf16", "_gemv_kernel", "_read_kernel"]
    read = rows[6]
    assert read["grid"] == 972 and read["block"] == 128
    assert read["us"] == pytest.approx(5.98) and read["dram_pct"] == pytest.approx(55.56)
    pipe16 = rows[11]
    assert pipe16["kernel"] == "linear_q4_k_mmapipe16_bf16" and pipe16["block"] == 512 and pipe16["registers"] == 58
    for r in rows:
        assert {"us", "dram_pct", "sm_pct", "occupancy_pct", "warps_active", "warps_eligible"} <= set(r), r


def test_converts_durations_and_reads_stall_metrics_when_the_report_has_them(ncu_table):
    text = """
  fast_kernel (4, 2, 1)x(64, 2, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    ----------------------- ----------- ------------
    Duration                    nsecond       850.50
    DRAM Throughput                   %        12.00
    ----------------------- ----------- ------------
    smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio    inst      3.10
    smsp__average_warps_issue_stalled_wait_per_issue_active.ratio               inst      1,204.50
  slow_kernel (1, 1, 1)x(32, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Duration                    msecond         1.25
"""
    fast, slow = ncu_table.parse(text)
    assert fast["grid"] == 8 and fast["block"] == 128
    assert fast["us"] == pytest.approx(0.8505)
    assert fast["stalls"] == {"long_scoreboard": 3.10, "wait": 1204.5}
    assert slow["us"] == pytest.approx(1250.0) and "stalls" not in slow and "dram_pct" not in slow
    table = ncu_table.render([fast, slow])
    assert table.splitlines()[0].split()[-2:] == ["stall:wait", "stall:long_scoreboard"]


def test_reads_the_instructions_and_stalls_of_session_15_s_second_pass(ncu_table):
    """The stall pass of session 15 (`--metrics smsp__inst_executed.sum,...`): 16 launches, each with its warp
    instructions. At 12288 x 2304 the warp form issued 11,366,400 of them: x 32 lanes over 28.3M weights, ~12.9 a
    weight, where the tensor-core tile issued 4,752,384 (~5.4)."""
    log = REPORT.parents[2] / "2026-11-30-session15" / "call1" / "probe-ncu-stalls.log"
    rows = ncu_table.parse(log.read_text(errors="replace"))
    assert len(rows) == 16
    warp, mma = rows[0], rows[4]
    assert warp["kernel"] == "linear_q4_k_rowwarp_bf16" and warp["warp_inst"] == 11_366_400
    assert mma["kernel"] == "linear_q4_k_mma_bf16" and mma["warp_inst"] == 4_752_384
    assert warp["stalls"]["not_selected"] == pytest.approx(2.71, abs=0.01)
    assert "warp_inst" in ncu_table.render(rows).splitlines()[0]


def test_the_command_writes_json_and_refuses_a_report_without_kernels(ncu_table, tmp_path, capsys):
    out = tmp_path / "t.json"
    assert ncu_table.main([str(REPORT), "--json", str(out)]) == 0
    assert len(json.loads(out.read_text())) == 14
    empty = tmp_path / "empty.log"
    empty.write_text("==PROF== Disconnected from process 1\n")
    assert ncu_table.main([str(empty)]) == 1
    assert "no kernel section" in capsys.readouterr().err
    assert ncu_table.main([str(tmp_path / "missing.log")]) == 2
