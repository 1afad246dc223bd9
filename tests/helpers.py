"""Helpers shared by the tests: run the CLI as a subprocess, fake installed distributions, load a bench probe."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path | None = None, extra_path: list[Path] | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`sparkops ARGS` in a fresh interpreter (entry points are re-read there)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    if extra_path:
        e["PYTHONPATH"] = os.pathsep.join([*map(str, extra_path), e.get("PYTHONPATH", "")])
    e["COLUMNS"] = "200"  # wide tables: a long tmp path (an xdist worker's) must not wrap what tests look for
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "sparkops", *args], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=300)


def fake_distribution(root: Path, name: str, entry_points: dict[str, str], modules: dict[str, str]) -> Path:
    """A minimal installed distribution (dist-info + modules) under `root`, found by importlib.metadata."""
    root.mkdir(parents=True, exist_ok=True)
    info = root / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = ["[sparkops]"] + [f"{k} = {v}" for k, v in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for mod, src in modules.items():
        (root / f"{mod}.py").write_text(src)
    return root


def skip_gpu_tests_without_cuda(items, reason: str) -> None:
    """Mark every test marked `gpu` skipped, with the reason, where this machine has no CUDA device."""
    import pytest
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def load_probe(name: str):
    """bench/probes/NAME.py as a module (the probes are scripts, not a package): its parsers and readers run on the
    CPU; what needs a GPU stays behind the probe's own check."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / "probes" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # as running it would: dataclasses (and pickling) look their module up there
    spec.loader.exec_module(mod)
    return mod
