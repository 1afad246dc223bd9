"""Every CuPy implementation through the gate on CUDA: the op contract's cases (pinned seeds plus a
fresh one), moved to the GPU, outputs poisoned, compared with the NumPy reference by the op's row of
the tolerance table (and byte for byte for quantize_act, which claims bit-identity to the reference).

This is exactly what `sparkops check OP=IMPL --device cuda` runs; a failure prints the gate's report.
Skipped with a reason where there is no CUDA device (tests/conftest.py) or no CuPy.
"""

from __future__ import annotations

import pytest

import sparkops_cupy
from sparkops.gate.check import Session, prove
from sparkops.plugins import load_catalog

pytestmark = pytest.mark.gpu

IMPLS = [(op, name) for op, name, *_ in sparkops_cupy.IMPLEMENTATIONS]


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture(scope="module")
def session():
    return Session()  # one set of seeds and one reference run per case, shared by the implementations


@pytest.mark.parametrize("op,name", IMPLS, ids=[f"{op}={name}" for op, name in IMPLS])
def test_passes_the_gate_on_cuda(op, name, catalog, session):
    impl = catalog.get(op, name)
    if impl.unavailable:
        pytest.skip(f"{impl.key}: {impl.unavailable}")
    outcome = prove(impl, "cuda", catalog, session=session)
    assert outcome.cases > 0, f"{impl.key}: the gate ran no cases"
    assert outcome.passed, outcome.report
    print(outcome.summary)
