"""pytest configuration: GPU tests are skipped, with the reason, where there is no CUDA device; Triton's interpreter
runs without its redundant re-patching (tests/interpreter_speed.py: the same bits, less time); xdist workers run
their CPU libraries on one thread each (tests/worker_threads.py: two workers on two cores, not four threads); the
workers steal each other's tests and the test files run longest first (tests/file_order.py: they finish together)."""

import os

import pytest

from tests.helpers import skip_gpu_tests_without_cuda


def pytest_addoption(parser):
    parser.addoption("--record-seconds", action="store_true",
                     help="write tests/file-seconds.json (each test file's seconds in this run), the order later "
                          "runs start the files in (tests/file_order.py)")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    from tests.file_order import steal_work

    steal_work(config)  # (before xdist's own hook turns -n's "no" into "load")


def pytest_configure(config):
    from tests.file_order import Recorder
    from tests.interpreter_speed import install
    from tests.worker_threads import one_thread_per_worker

    one_thread_per_worker(config)
    install()
    if config.getoption("record_seconds") and "PYTEST_XDIST_WORKER" not in os.environ:
        config.pluginmanager.register(Recorder(), "sparkops-record-seconds")


def pytest_collection_modifyitems(config, items):
    from tests.file_order import longest_first

    skip_gpu_tests_without_cuda(items, "needs a CUDA device (none on this machine); run bench/gpu_suite.sh on a GPU")
    longest_first(items)
