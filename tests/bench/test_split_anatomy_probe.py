"""bench/probes/split_anatomy.py: each variant's edits match attention.cu exactly once and leave out what they say (and
nothing of the other kernel's loop), a source the kernels no longer match is refused by name, the edited sources
compile, and the probe refuses a median of too few."""

import subprocess

import pytest

from tests.cuda_sass import tools
from tests.helpers import REPO, load_probe


def _source() -> str:
    import sys

    sys.path.insert(0, str(REPO / "plugins"))
    from sparkops_cupy._runtime import expanded_source

    return expanded_source("attention.cu")


def test_every_variant_leaves_out_its_parts_and_only_them():
    probe, src = load_probe("split_anatomy"), _source()
    assert probe.edited_source(src, "mla_split_mma", ()) == src
    for kernel, (_, tile_call, refill) in probe.KERNELS.items():
        assert f"void __launch_bounds__({probe.KERNELS[kernel][0]}, 1) {kernel}(" in src
        edits = {"tile": tile_call, "refill": refill, **probe.tile_edits(kernel)}
        for label, leave_out in probe.VARIANTS.items():
            out = probe.edited_source(src, kernel, leave_out)
            for part, old in edits.items():
                assert (old in out) == (part not in leave_out), (kernel, label, part)
            removed = sum(len(edits[p]) for p in leave_out)
            assert len(out) == len(src) - removed, (kernel, label)


def test_a_source_the_kernels_no_longer_match_is_refused_by_name():
    probe, src = load_probe("split_anatomy"), _source()
    _, tile_call, _ = probe.KERNELS["mla_split_twin"]
    with pytest.raises(ValueError, match="the tile statement of mla_split_twin appears 0 times"):
        probe.edited_source(src.replace(tile_call, tile_call.replace("gtid", "tid")), "mla_split_twin", ("tile",))


def test_the_edited_sources_compile(tmp_path):
    nvcc, _ = tools()
    probe, src = load_probe("split_anatomy"), _source()
    for label in ("whole", "no tile", "no refill", "no mma"):
        for kernel in probe.KERNELS:
            path = tmp_path / f"{kernel}-{label.replace(' ', '_')}.cu"
            path.write_text(probe.edited_source(src, kernel, probe.VARIANTS[label]))
            done = subprocess.run([nvcc, "-arch=sm_90", "-std=c++17", "-cubin", "-o", str(path.with_suffix(".cubin")),
                                   str(path)], capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, (kernel, label, done.stderr[-2000:])


def test_the_probe_refuses_a_median_of_too_few(capsys):
    with pytest.raises(SystemExit) as e:
        load_probe("split_anatomy").main(["--replays", "2"])
    assert e.value.code == 2 and "--replays must be at least 3" in capsys.readouterr().err
