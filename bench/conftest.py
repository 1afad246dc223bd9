"""Shared setup of the per-op benchmarks in bench/ (`pytest bench/ --benchmark-only`).

The whole directory times one device: the GPU when there is one, else the CPU (fixture `device`).
Tests marked `gpu` are skipped, with the reason, where there is no CUDA device. Which implementations
may be timed, and the session's cache of gate verdicts, live in `sparkops.bench.opbench`.
"""

from __future__ import annotations

import pytest

from tests.helpers import skip_gpu_tests_without_cuda


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped with a reason where none is present)")


def pytest_collection_modifyitems(config, items):
    skip_gpu_tests_without_cuda(items, "needs a CUDA device (none on this machine)")


def pytest_benchmark_update_machine_info(config, machine_info):
    """The device the run timed, in the JSON's machine_info (`sparkops ledger opbench` labels the run with it)."""
    from sparkops.bench.opbench import bench_device

    dev = bench_device()
    if dev == "cuda":
        import torch

        dev = torch.cuda.get_device_name()
    machine_info["sparkops_device"] = dev


@pytest.fixture(scope="session")
def device() -> str:
    from sparkops.bench.opbench import bench_device

    return bench_device()


@pytest.fixture(scope="session")
def catalog():
    from sparkops.bench.opbench import session_catalog

    return session_catalog()


@pytest.fixture(scope="session")
def eligibility():
    """The session's gate verdicts: `eligibility.why_not(op, impl, device)` is None when it may be timed."""
    from sparkops.bench.opbench import session_eligibility

    return session_eligibility()
