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
        "a": {"launches": 2, "us": 3.0, "own_us": 3.0}, "b": {"launches": 1, "us": 3.0, "own_us": 3.0}}


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


def test_own_time_gives_a_pdl_kernels_wait_to_the_kernel_still_running():
    """A PDL chain: b starts at 1 inside a (0-5) and ends at 8; c starts at 6 inside b and ends at 10. Summed
    intervals say 5 + 7 + 4 = 16 in a 10 µs replay; own time says 5, 3, 2: the span, kernel by kernel."""
    ks = [K("a", 1, 0, 5), K("b", 1, 1, 8), K("c", 1, 6, 10)]
    assert probe.own_us(ks) == [5, 3, 2]
    assert probe.by_name(ks)["b"] == {"launches": 1, "us": 7.0, "own_us": 3.0}


def test_own_time_of_a_side_stream_is_what_it_ran_past_the_main_line():
    """Side kernel f (8-12) beside q/k/v (0-10) owns 2 µs, the part after q/k/v ended; conv (10-12), started after
    f, owns nothing (f covered it); g (12-16) owns its 4 and kda (14-16), started inside g, nothing. The kernels may
    come in any order; the result follows the order given."""
    ks = [K("kda", 1, 14, 16), K("qkv", 1, 0, 10), K("conv", 1, 10, 12), K("f", 2, 8, 12), K("g", 2, 12, 16)]
    assert probe.own_us(ks) == [0, 10, 0, 2, 4]


@pytest.mark.parametrize("seed", range(5))
def test_own_times_sum_to_the_busy_time(seed):
    """Whatever the overlaps, own time partitions the union of the kernels' intervals: its sum is `summarize`'s busy
    time, and no kernel owns more than its interval or less than nothing."""
    import random

    rnd = random.Random(seed)
    ks = []
    for i in range(60):
        s = rnd.uniform(0, 100)
        ks.append(K(f"k{i % 7}", rnd.choice([1, 2, 3]), s, s + rnd.uniform(0.1, 9)))
    own = probe.own_us(ks)
    assert sum(own) == pytest.approx(probe.summarize(ks)["busy_us"])
    assert all(-1e-12 <= o <= k.us + 1e-12 for o, k in zip(own, ks))
    assert sum(d["own_us"] for d in probe.by_name(ks).values()) == pytest.approx(sum(own))


def test_the_kernels_that_moved_most_by_own_time():
    """The same comparison on own time: a PDL form that waits inside its predecessor moves little of its own even
    when its interval grew."""
    a = probe.by_name([K("gemv", 1, 0, 5), K("norm", 1, 5, 6)])
    b = probe.by_name([K("gemv", 1, 0, 5), K("norm_pdl", 1, 1, 6)])  # launched early, waited 4 of its 5 µs
    rows = probe.moved(a, b, key="own_us")
    assert [(r["name"], r["own_us"]) for r in rows] == [("norm", [1.0, 0.0]), ("norm_pdl", [0.0, 1.0]),
                                                         ("gemv", [5.0, 5.0])]
    assert probe.moved(a, b)[0] == {"name": "norm_pdl", "launches": [0, 1], "us": [0.0, 5.0], "delta_us": 5.0}


def test_the_kept_kernels_are_in_start_order_from_the_first_start():
    ks = [K("b", 2, 13, 14.5), K("a", 1, 10, 14)]
    assert probe.kernel_rows(ks) == [["a", 1, 0.0, 4.0, 4.0], ["b", 2, 3.0, 4.5, 0.5]]


def test_the_registry_is_timed_around_the_capture_on_the_cpu(monkeypatch):
    """What the probe does around the capture and the profiler, on the CPU with k3-nano and the repository's own
    registry: the activation dtype from the registry's path, both engines, the filled context, the step, the
    selections. Session 24's first GPU run of the probe failed here (a loaded Registry where a path belongs), 12 s in,
    after its call had paid for the machine."""
    import torch

    from sparkops.engine import load_model
    from sparkops.paths import repo_root

    steps = []

    class FakeStep:  # the capture needs CUDA; the step's call is the engine's own eager decode
        def __init__(self, engine):
            self.engine, self.token = engine, torch.zeros(1, dtype=torch.long)

        def capture(self):
            steps.append("capture")

        def __call__(self):
            steps.append("step")

    import sparkops.engine.decode_step as ds

    monkeypatch.setattr(ds, "DecodeStep", FakeStep)
    monkeypatch.setattr(probe, "_profiled_replay", lambda step: (step(), [K("gemv", 1, 0, 2)])[1])
    weights = load_model("k3-nano")
    reg = str(repo_root() / "registry.toml")
    out, sel = probe._time_registry(weights, reg, reg, depth=8, replays=2, seed=0, device="cpu")
    assert out == [[K("gemv", 1, 0, 2)]] * 2
    assert steps == ["capture"] + ["step"] * 5  # the capture, three warm replays, the two profiled
    assert sel["linear"] and sel["attention"]
