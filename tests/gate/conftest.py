"""Fixtures of the gate tests: the plugin of wrong implementations, in-process and as an installed plugin.

In-process, the plugin is imported from tests/fixtures/wrong_impls (which holds no .dist-info, so no
other test's catalog ever sees it) and handed to `load_catalog(extra=...)`. For the CLI tests a copy
of it is laid out with a generated .dist-info whose entry_points.txt names it in the `sparkops`
group, exactly as `pip install` would, and put on PYTHONPATH of a fresh interpreter.

Every gate test runs against a private copy of reference.lock (SPARKOPS_REFERENCE_LOCK), so tests
that change the pinned reference never touch the checkout's file.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from sparkops.gate.check import Session
from sparkops.plugins import load_catalog
from tests.helpers import REPO

FIXTURES = REPO / "tests" / "fixtures" / "wrong_impls"
PACKAGE = "sparkops_wrong_impls"


@pytest.fixture(scope="session")
def wrong_module():
    if str(FIXTURES) not in sys.path:
        sys.path.insert(0, str(FIXTURES))
    import sparkops_wrong_impls

    return sparkops_wrong_impls


@pytest.fixture(scope="session")
def catalog(wrong_module):
    cat = load_catalog(extra=[("wrong_impls", wrong_module)])
    info = next(p for p in cat.plugins if p.name == "wrong_impls")
    assert info.status == "ok" and not info.rejected, (info.error, info.rejected)
    return cat


@pytest.fixture(scope="session")
def session():
    """Pinned seeds + one fresh seed, shared by the tests so reference traces are computed once."""
    return Session()


@pytest.fixture(scope="session")
def repo_lock(tmp_path_factory) -> Path:
    """A private copy of the checkout's reference.lock, as it was when the session started."""
    src = REPO / "reference.lock"
    if not src.exists():
        pytest.fail("the checkout has no reference.lock; create it with `sparkops reference update --reason ...`")
    dst = tmp_path_factory.mktemp("lock") / "reference.lock"
    shutil.copy(src, dst)
    return dst


@pytest.fixture(autouse=True)
def private_lock(monkeypatch, repo_lock, tmp_path) -> Path:
    """Each test sees its own copy of the lock (tests may tamper with it)."""
    path = tmp_path / "reference.lock"
    shutil.copy(repo_lock, path)
    monkeypatch.setenv("SPARKOPS_REFERENCE_LOCK", str(path))
    return path


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory) -> Path:
    """A directory that holds the wrong plugin as an installed distribution (for PYTHONPATH)."""
    site = tmp_path_factory.mktemp("site")
    shutil.copytree(FIXTURES / PACKAGE, site / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    info = site / "sparkops_wrong_impls-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sparkops-wrong-impls\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[sparkops]\nwrong_impls = {PACKAGE}\n")
    return site
