"""One CPU thread per pytest-xdist worker.

`pytest -n N` (the README's test command is `pytest -n 2`) runs N worker processes, and each one's torch (OpenMP)
and NumPy (OpenBLAS) would otherwise start a thread per core: N x cores threads on N cores, spinning against each
other. Measured on this project's CI shape (2 cores, `pytest -n 2`, 2026-12-06): tests/ops and tests/gate took 92 s
with the libraries' defaults and 54 s with one thread a worker. The variables are set in the controller's
environment before the workers start, so that each worker has them before it imports either library. A variable the
user set is left alone, and a plain `pytest` (one process) keeps the libraries' defaults.
"""

from __future__ import annotations

import os

#: what torch's OpenMP pool, MKL and NumPy's OpenBLAS read when they start
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: the names one_thread_per_worker set, comma-separated, for the workers' own check (tests/test_worker_threads.py)
SET_MARKER = "SPARKOPS_TEST_THREADS_SET"


def one_thread_per_worker(config, environ=os.environ) -> list[str]:
    """In the controller of a run with xdist workers, set each of THREAD_VARS the environment lacks to "1"; the
    names it set (none in a worker, in a run without workers, or where the user set them all)."""
    workers = getattr(config.option, "numprocesses", None)
    if not workers or "PYTEST_XDIST_WORKER" in environ:
        return []
    missing = [v for v in THREAD_VARS if v not in environ]
    for v in missing:
        environ[v] = "1"
    environ[SET_MARKER] = ",".join(missing)
    return missing
