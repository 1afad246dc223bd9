"""pytest configuration: GPU tests are skipped, with the reason, where there is no CUDA device; Triton's interpreter
runs without its redundant re-patching (tests/interpreter_speed.py: the same bits, less time); xdist workers run
their CPU libraries on one thread each (tests/worker_threads.py: two workers on two cores, not four threads)."""

from tests.helpers import skip_gpu_tests_without_cuda


def pytest_configure(config):
    from tests.interpreter_speed import install
    from tests.worker_threads import one_thread_per_worker

    one_thread_per_worker(config)
    install()


def pytest_collection_modifyitems(config, items):
    skip_gpu_tests_without_cuda(items, "needs a CUDA device (none on this machine); run bench/gpu_suite.sh on a GPU")
