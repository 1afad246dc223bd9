"""tests/worker_threads.py: a `pytest -n N` run gives its workers one CPU thread each, and leaves alone what the user
set and what a one-process run or a worker sees."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.helpers import REPO
from tests.worker_threads import SET_MARKER, THREAD_VARS, one_thread_per_worker


def _config(workers):
    return SimpleNamespace(option=SimpleNamespace(numprocesses=workers))


def test_the_controller_of_a_run_with_workers_sets_each_missing_variable_to_one():
    env = {"PATH": "/bin"}
    assert one_thread_per_worker(_config(2), env) == list(THREAD_VARS)
    assert all(env[v] == "1" for v in THREAD_VARS)
    assert env[SET_MARKER] == ",".join(THREAD_VARS)


def test_a_variable_the_user_set_is_left_alone():
    env = {"OMP_NUM_THREADS": "4"}
    assert one_thread_per_worker(_config(2), env) == ["MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"]
    assert env["OMP_NUM_THREADS"] == "4" and env[SET_MARKER] == "MKL_NUM_THREADS,OPENBLAS_NUM_THREADS"


def test_a_run_without_workers_and_a_worker_itself_change_nothing():
    for workers, env in ((None, {}), (0, {}), (2, {"PYTEST_XDIST_WORKER": "gw0"})):
        before = dict(env)
        assert one_thread_per_worker(_config(workers), env) == []
        assert env == before


def test_this_worker_runs_its_cpu_libraries_on_one_thread():
    """Inside an xdist worker: the controller said what it set (SET_MARKER), each of those variables is "1" here,
    and torch has one thread if OMP_NUM_THREADS was one of them (skipped in a one-process run, where nothing is
    set)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        pytest.skip("runs inside an xdist worker (`pytest -n 2`, the README's command)")
    assert SET_MARKER in os.environ, "the controller did not run one_thread_per_worker before starting this worker"
    set_here = [v for v in os.environ[SET_MARKER].split(",") if v]
    assert all(os.environ[v] == "1" for v in set_here), {v: os.environ.get(v) for v in THREAD_VARS}
    if "OMP_NUM_THREADS" in set_here:
        import torch

        assert torch.get_num_threads() == 1


def test_a_run_with_two_workers_gives_each_one_thread():
    """End to end, as the README's command runs: `pytest -n 2` with none of the variables in its environment runs
    the worker's check above (it must pass, not be skipped), so the controller set them before its workers
    started."""
    env = {k: v for k, v in os.environ.items()  # as a fresh shell: none of ours, and not inside this run's worker
           if k not in THREAD_VARS and k != SET_MARKER and not k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}
    node = "tests/test_worker_threads.py::test_this_worker_runs_its_cpu_libraries_on_one_thread"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider", "-rs", node],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "1 passed" in proc.stdout and "skipped" not in proc.stdout, \
        proc.stdout + proc.stderr
