"""bench/registry_keep.py: a carried registry is kept only where every check record in it still holds today."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO


def _keep(*paths, device="cpu"):
    return subprocess.run([sys.executable, "bench/registry_keep.py", "--device", device, *map(str, paths)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_a_registry_whose_records_hold_is_kept_and_a_stale_one_dropped_with_its_base(tmp_path):
    good, stale = tmp_path / "cuda-good.toml", tmp_path / "cuda-stale.toml"
    text = (REPO / "registry.toml").read_text()
    good.write_text(text)
    # the CPU swiglu's record as if its source had changed since it was checked
    i = text.index("[ops.swiglu.cpu.check]")
    j = text.index("source_hash = ", i)
    stale.write_text(text[:j] + 'source_hash = "' + "0" * 64 + '"' + text[text.index("\n", j):])
    (tmp_path / "cuda-stale.toml.base").write_text("the base\n")
    r = _keep(good, stale)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "kept cuda-good.toml" in r.stdout
    assert "dropped cuda-stale.toml: swiglu:" in r.stdout and "source changed" in r.stdout
    assert r.stdout.strip().endswith("1 of 2 carried registries kept")
    assert good.exists() and not stale.exists() and not (tmp_path / "cuda-stale.toml.base").exists()


def test_an_unreadable_registry_is_dropped_by_name(tmp_path):
    bad = tmp_path / "cuda-bad.toml"
    bad.write_text("[ops.swiglu.cpu\n")
    r = _keep(bad)
    assert r.returncode == 0 and "dropped cuda-bad.toml:" in r.stdout and not bad.exists()
