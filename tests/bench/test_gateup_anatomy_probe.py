"""bench/probes/gateup_anatomy.py: each variant's edits match the step's gate/up source exactly once and leave out
what they say, a source the kernel no longer matches is refused by name, and the probe refuses a median of too few."""

import pytest

from tests.helpers import REPO, load_probe


def _source() -> str:
    import sys

    sys.path.insert(0, str(REPO / "plugins"))
    from sparkops_cupy._runtime import expanded_source

    return expanded_source("moe_rowwarp.cu")


def test_every_variant_edits_the_step_s_gate_up_and_only_it():
    probe, src = load_probe("gateup_anatomy"), _source()
    assert f'__global__ void __launch_bounds__(128) {probe.KERNEL}(' in src
    start = src.index(probe.FUNCTION)
    end = src.index("\n}\n", start) + 3
    for label, leave_out in probe.VARIANTS.items():
        out = probe.edited_source(src, leave_out)
        assert out[:start] == src[:start] and out[len(out) - (len(src) - end):] == src[end:], label
        for part, (old, new) in probe.EDITS.items():
            body = out[start:len(out) - (len(src) - end)]
            assert (old in body) == (part not in leave_out), (label, part)
    assert probe.edited_source(src, ()) == src


def test_the_grouped_variants_change_only_the_grouped_kernel_s_group_count():
    probe, src = load_probe("gateup_anatomy"), _source()
    assert f'__global__ void __launch_bounds__(128) {probe.GROUPED}(' in src
    for groups in probe.GROUP_COUNTS:
        out = probe.grouped_source(src, groups)
        assert out.count(f"gateup_q8_q4_k<DT_BF16, true, true, true, true, {groups}>(") == 1
        assert len(out.splitlines()) == len(src.splitlines())
    assert probe.grouped_source(src, 3) == src
    for groups, depth in probe.PIPE_FORMS:
        assert 1 <= depth < groups <= 9
        out = probe.grouped_source(src, groups, depth)
        call = f"gateup_q8_q4_k<DT_BF16, true, true, true, true, {groups}, {depth}>("
        assert out.count(call) == src.count(call) + 1  # (3, 1) is also a registered kernel's (session 46's streamed)
    with pytest.raises(ValueError, match="appears 0 times"):
        probe.grouped_source(src.replace(probe.GROUPED_CALL, "gone("), 2)


def test_a_source_the_kernel_no_longer_matches_is_refused_by_name():
    probe, src = load_probe("gateup_anatomy"), _source()
    old = probe.EDITS["stage"][0]
    with pytest.raises(ValueError, match="the stage statement .* appears 0 times"):
        probe.edited_source(src.replace(old, old.replace("s16", "s16x")), ("stage",))
    with pytest.raises(ValueError, match="appears 0 times in moe_rowwarp.cu"):
        probe.edited_source(src.replace(probe.FUNCTION, "void renamed("), ())


def test_the_probe_refuses_a_median_of_too_few(capsys):
    with pytest.raises(SystemExit) as e:
        load_probe("gateup_anatomy").main(["--replays", "2"])
    assert e.value.code == 2
    assert "--replays must be at least 3" in capsys.readouterr().err
