"""Fixtures of the per-op tests.

A test module sets `OP = "<op>"`. Any test that takes an `impl` argument runs once per available
CPU implementation of that op registered in the plugin catalog (so an implementation a backend adds
later is tested with no change here), and a test that takes `seed` runs on the pinned seeds plus a
fresh one per run; a failure message carries the seed and how to replay it.
"""

from __future__ import annotations

import pytest

from ._check import SEEDS, catalog, cpu_impls


def pytest_generate_tests(metafunc):
    op = getattr(metafunc.module, "OP", None)
    if op is None:
        return
    if "impl" in metafunc.fixturenames:
        metafunc.parametrize("impl", cpu_impls(op))
    if "seed" in metafunc.fixturenames:
        metafunc.parametrize("seed", SEEDS, ids=[f"seed{s}" for s in SEEDS])


@pytest.fixture
def impl_fn(request, impl):
    """The callable of the implementation under test."""
    return catalog().get(request.module.OP, impl).resolve()
