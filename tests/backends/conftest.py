"""Fixtures the CuPy backend's GPU tests share (a module's own fixture of the same name takes precedence)."""

from __future__ import annotations

import pytest

from tests.backends.cupy_support import nan_scratch_in


@pytest.fixture
def cuda():
    """CuPy importable (every CuPy kernel launches through it); skipped with the reason otherwise."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")


@pytest.fixture
def nan_scratch(monkeypatch):
    """The MLA attention's intermediate buffers NaN-filled (cupy_support.nan_scratch_in): a value read that no kernel
    wrote shows in the output."""
    from sparkops_cupy import attention as cu_attention

    nan_scratch_in(monkeypatch, cu_attention)
