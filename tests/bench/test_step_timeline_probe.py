"""bench/probes/step_timeline.py: its arithmetic over a replay's kernels (spans, busy time, concurrency, gaps, the
share of the side stream's time beside the main one) on hand-made timelines; what needs a GPU stays behind its
check."""

from __future__ import annotations

import pytest

from tests.helpers import load_probe

probe = load_probe("step_timeline")
K = probe.Kernel


def test_union_merges_overlapping_and_touching_intervals():
    assert probe.union_us([(0, 2), (1, 3), (3, 4), (6, 7)]) == 5
    assert probe.union_us([]) == 0


def test_one_stream_with_gaps():
    """Three kernels in a row with 1 and 3 µs between them: busy 6 of a 10 µs span, two gaps, the larger first with
    the kernels around it; one stream, nothing off it."""
    ks = [K("a", 7, 0, 2), K("b", 7, 3, 5), K("c", 7, 8, 10)]
    s = probe.summarize(ks)
    assert (s["span_us"], s["busy_us"], s["kernel_sum_us"], s["idle_us"]) == (10, 6, 6, 4)
    assert s["concurrent_us"] == 0 and s["gaps"] == 2 and s["gap_us"] == 4
    assert s["largest_gaps"][0] == {"us": 3, "after": "b", "before": "c"}
    assert s["main_stream"] == 7 and s["off_main_us"] == 0 and s["off_main_beside_main_share"] is None


def test_a_side_stream_half_beside_the_main_line():
    """Main: q/k/v 0-10, conv 10-12, kda 14-16. Side: f 8-12 (beside q/k/v and conv: all 4 µs), g 12-16 (beside kda
    2 of its 4 µs). 6 of the side's 8 µs ran beside a main kernel; 6 µs of kernel time overlapped."""
    ks = [K("qkv", 1, 0, 10), K("conv", 1, 10, 12), K("kda", 1, 14, 16), K("f", 2, 8, 12), K("g", 2, 12, 16)]
    s = probe.summarize(ks)
    assert s["main_stream"] == 1 and s["off_main_us"] == 8
    assert s["off_main_beside_main_us"] == 6 and s["off_main_beside_main_share"] == pytest.approx(0.75)
    assert s["busy_us"] == 16 and s["kernel_sum_us"] == 22 and s["concurrent_us"] == 6 and s["idle_us"] == 0
    assert s["gaps"] == 0  # the side kernel covered the main line's 12-14 pause
    assert s["streams"] == {"1": {"kernels": 3, "us": 14.0}, "2": {"kernels": 2, "us": 8.0}}


def test_a_long_kernel_keeps_covering_later_short_ones():
    """A gap is measured from the furthest end so far, not from the last kernel to start."""
    ks = [K("long", 1, 0, 10), K("short", 2, 1, 2), K("next", 1, 12, 13)]
    s = probe.summarize(ks)
    assert s["gaps"] == 1 and s["largest_gaps"][0] == {"us": 2, "after": "long", "before": "next"}


def test_an_empty_replay_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="the profiler saw none"):
        probe.summarize([])


def test_medians_over_replays_and_the_names():
    reps = [probe.summarize([K("a", 1, 0, 2 + i), K("b", 2, 1, 3)]) for i in range(3)]
    med = probe.median_summary(reps)
    assert med["replays"] == 3 and med["span_us"] == 3 and med["kernels"] == 2
    assert probe.by_name([K("a", 1, 0, 2), K("a", 1, 3, 4), K("b", 1, 5, 8)]) == {
        "a": {"launches": 2, "us": 3.0}, "b": {"launches": 1, "us": 3.0}}


@pytest.mark.parametrize("args", [["--replays", "0"], ["--depth", "-1"], ["--window", "0"]])
def test_the_probe_refuses_what_it_cannot_time(args, capsys):
    with pytest.raises(SystemExit) as e:
        probe.main(["--model", "k3-nano", "--registry", "r.toml", *args])
    assert e.value.code == 2
    assert "--depth must be at least 0, --replays at least 1" in capsys.readouterr().err


def test_the_probe_refuses_bad_registries_and_models_before_any_gpu_work(tmp_path, capsys):
    """A missing or malformed registry, one named twice, or a model that is neither a file nor a preset: exit 2 with
    the reason, before the CUDA check and the model's load."""
    good = tmp_path / "good.toml"
    good.write_text("")
    bad = tmp_path / "bad.toml"
    bad.write_text("[ops\n")
    cases = [(["--model", "k3-nano", "--registry", str(tmp_path / "none.toml")], "no such registry file"),
             (["--model", "k3-nano", "--registry", str(bad)], "malformed TOML"),
             (["--model", "k3-nano", "--registry", str(good), "--registry", str(good)], "given twice"),
             (["--model", "k3-nano", "--registry", str(good), "--fill-registry", str(bad)], "malformed TOML"),
             (["--model", str(tmp_path / "no.gguf"), "--registry", str(good)], "no such file and no such preset")]
    for argv, why in cases:
        assert probe.main(argv) == 2, argv
        assert why in capsys.readouterr().err, argv


def test_the_drawing_has_a_row_a_stream(tmp_path):
    ks = [K("qkv", 1, 0, 10), K("f", 2, 8, 12)]
    out = tmp_path / "t.png"
    probe.draw({"A": ks, "B": ks[:1]}, 20.0, str(out))
    assert out.stat().st_size > 1000


def test_the_kernels_that_moved_most_between_two_replays():
    """Kernel by kernel against the first registry: the largest change first, whichever its sign; a kernel in one
    replay only counts as absent (0 us, 0 launches) in the other; ties in size go by name."""
    a = probe.by_name([K("gemv", 1, 0, 5), K("gemv", 1, 6, 11), K("norm", 1, 11, 12), K("fb", 2, 3, 6)])
    b = probe.by_name([K("gemv", 1, 0, 4), K("gemv", 1, 5, 9), K("norm", 1, 9, 10), K("fused", 1, 10, 14)])
    rows = probe.moved(a, b)
    assert [r["name"] for r in rows] == ["fused", "fb", "gemv", "norm"]
    assert rows[0] == {"name": "fused", "launches": [0, 1], "us": [0.0, 4.0], "delta_us": 4.0}
    assert rows[1]["delta_us"] == -3 and rows[1]["launches"] == [1, 0]
    assert rows[2]["delta_us"] == -2 and rows[2]["launches"] == [2, 2]
    assert probe.moved(a, b, top=1) == rows[:1]
