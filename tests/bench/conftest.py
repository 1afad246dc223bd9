"""Fixtures of the scoreboard tests: one synthesized k3-nano per session, small ceiling benchmarks,
a scoreboard directory per test (never the checkout's bench/), and a gate stand-in for tests that are
about the harness rather than the gate (the real gate runs in the refusal and CLI tests)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest



@pytest.fixture(scope="session")
def nano():
    """k3-nano (float32 weights), synthesized in memory: the real preset's shapes, random weights."""
    from sparkops.synth import synth_weights

    return synth_weights("k3-nano", "f32", seed=0)


@pytest.fixture(autouse=True)
def small_ceilings(monkeypatch):
    """Bandwidth and matmul micro-benchmarks sized for a 2-core CI box (still far beyond L2)."""
    from sparkops.bench import ceilings

    monkeypatch.setattr(ceilings, "CPU_BYTES", 16 * 2**20)


@pytest.fixture
def bench_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "bench"
    monkeypatch.setenv("SPARKOPS_BENCH_DIR", str(d))
    return d


@pytest.fixture(scope="session")
def reference_registry(tmp_path_factory) -> Path:
    """Every op on its NumPy reference on the CPU: always runnable (the reference needs no check record),
    whatever the checkout's registry.toml selects while other work goes on."""
    from sparkops.ops import OP_NAMES, get_contract
    from sparkops.registry.file import Registry

    path = tmp_path_factory.mktemp("registry") / "reference.toml"
    reg = Registry.empty(path)
    for op in OP_NAMES:
        reg.set(op, "cpu", get_contract(op).reference, fallback="reference")
    reg.save()
    return path


@pytest.fixture
def registries(tmp_path, reference_registry) -> tuple[Path, Path]:
    """Two registry files with the same selections (A and B of an A/A run)."""
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    shutil.copy(reference_registry, a)
    shutil.copy(reference_registry, b)
    return a, b


@pytest.fixture
def passing_gate(monkeypatch):
    """Replace the model gate by one that passes and logs who it gated (harness-only tests)."""
    from sparkops.bench import gating, harness

    seen = []

    def gate(weights, registry, **kw):
        seen.append(str(registry))
        return gating.GateVerdict(True, str(registry), f"stand-in gate: {registry} passes", "stand-in",
                                  worst_depth=1, worst_kl=1e-12, worst_top1=1.0, depths=[1])

    monkeypatch.setattr(harness, "GATE", gate)
    monkeypatch.setattr(gating, "default_dtype", lambda *a, **k: __import__("torch").float32)
    return seen
