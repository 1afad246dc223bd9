"""bench/probes/timeline_tails.py: what each kernel adds after the main-stream kernel before it, on hand-made
replays (no GPU), and the command's answers for a file that is not a timeline."""

from __future__ import annotations

import json

import pytest

from tests.helpers import load_probe

probe = load_probe("timeline_tails")


def test_a_pdl_kernel_is_charged_its_tail_not_its_duration():
    """norm 0-2, then a GEMV launched 1 us into it that ends at 10 (tail 8, duration 9), a side-stream GEMV (left
    out of the chain) and a second layer of the same two: medians over the two layers, the largest total first."""
    ks = [["norm", 7, 0, 2, 2], ["gemv", 7, 1, 10, 8], ["_gemv_kernel", 9, 3, 6, 0.5],
          ["norm", 7, 10.5, 12.5, 2], ["gemv", 7, 11.5, 18.5, 6]]
    rows = probe.tails(ks, ("_gemv_kernel",))
    assert [(r["kernel"], r["before"], r["launches"]) for r in rows] == [("gemv", "norm", 2), ("norm", "gemv", 1)]
    gemv = rows[0]
    assert gemv["tail_us"] == pytest.approx(7.0) and gemv["total_tail_us"] == pytest.approx(14.0)  # 8 and 6
    assert gemv["start_after_us"] == pytest.approx(1.0) and gemv["duration_us"] == pytest.approx(8.0)
    assert rows[1]["tail_us"] == pytest.approx(2.5)  # the second norm: 12.5 - 10


def test_a_kernel_after_the_side_stream_s_join_says_when_the_side_stream_was_done():
    """Session 33's KDA layer, rounded: the tall GEMV ends at 156.6; the conv runs 157.0-161.2 beside the side
    stream's second GEMV (157.9-161.4); the recurrence starts at 161.3. The recurrence's row says the side stream was
    done 0.2 us after the conv (fusing the conv away saves nothing); the conv's row counts the first side GEMV (it
    ended at 157.4, within the slack of the conv's start), done 0.8 us after the tall GEMV. With no side kernel the
    field is None."""
    ks = [["gemv_tall", 7, 144.5, 156.6, 10], ["_gemv_kernel", 9, 147.9, 157.4, 1], ["conv", 7, 157.0, 161.2, 3.8],
          ["_gemv_kernel", 9, 157.9, 161.4, 0.2], ["kda", 7, 161.3, 167.6, 6.2]]
    rows = {r["kernel"]: r for r in probe.tails(ks, ("_gemv_kernel",))}
    assert rows["kda"]["side_done_us"] == pytest.approx(0.2)  # 161.4 - 161.2: the side stream, not the conv, gated it
    assert rows["conv"]["side_done_us"] == pytest.approx(0.8)  # the first side GEMV, 157.4 - 156.6
    ks2 = [["norm", 7, 0, 2, 2], ["gemv", 7, 1, 10, 8]]
    assert probe.tails(ks2, ("_gemv_kernel",))[0]["side_done_us"] is None


def test_the_command_prints_a_registry_and_names_a_missing_one(tmp_path, capsys):
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"registries": {"/tmp/a.toml": {"kernels": [["x", 1, 0, 1, 1], ["y", 1, 1, 4, 3]]}}}))
    assert probe.main([str(f)]) == 0
    assert "y" in capsys.readouterr().out
    assert probe.main([str(f), "--registry", "/tmp/b.toml"]) == 2
    err = capsys.readouterr().err
    assert "no registry '/tmp/b.toml'" in err and "it has: /tmp/a.toml" in err
    (tmp_path / "empty.json").write_text("{}")
    assert probe.main([str(tmp_path / "empty.json")]) == 2


@pytest.mark.parametrize("text,said", [("not json", "cannot read"), ("[1, 2]", "holds no replayed registry"),
                                       ('{"registries": {"r": {"kernels": [["x", 1]]}}}', "has no kernel list")])
def test_a_file_that_is_not_a_timeline_is_named_not_a_traceback(tmp_path, capsys, text, said):
    f = tmp_path / "bad.json"
    f.write_text(text)
    assert probe.main([str(f)]) == 2
    assert said in capsys.readouterr().err
    assert probe.main([str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
