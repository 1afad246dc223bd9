"""Per-op benchmarks at the 48B's decode shapes: the cupy, triton and torch implementations of each op
side by side in one run (pytest-benchmark groups them by workload).

    python3 -m pytest bench/test_bench_cupy.py --benchmark-only --benchmark-group-by=group -s

Each benchmark round replays one CUDA graph of many calls (extra_info["calls_per_round"]) over
rotating argument sets (3x the L2; sparkops_cupy._workloads) and synchronises, so a round's wall time
over its calls is the per-call cost with the launch overhead a graph leaves; `extra_info` also holds
the CUDA-event device time per call,
the bytes the op must move, GB/s and the fraction of the measured 4.04 TB/s. Implementations that
cannot be captured are timed eagerly (extra_info["mode"] says so). Goals from the issue: linear GEMV
Q4_K / IQ1_S >= 70% of 4.04 TB/s; MLA split-K decode at L = 131072 >= 70%; the KDA decode step within
2x of its state-bytes roofline (4 MiB / 4.04 TB/s = 1.04 us). Skipped, with the reason, without CUDA.
"""

from __future__ import annotations

import functools

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("the per-op GPU benchmarks need a CUDA device (none on this machine)", allow_module_level=True)

from sparkops.plugins import load_catalog  # noqa: E402
from sparkops_cupy._workloads import BANDWIDTH, describe, time_op, workloads  # noqa: E402

BACKENDS = ("cupy", "triton", "torch")
WORKLOADS = workloads()


@functools.cache
def catalog():
    return load_catalog()


def _candidates():
    out = []
    for w in WORKLOADS:
        seen = set()  # one function registered under two claims (cupy_splitk / _bf16) is timed once
        for name, impl in sorted(catalog().implementations(w.op).items(), key=lambda kv: (kv[1].backend, kv[0])):
            if impl.backend in BACKENDS and "cuda" in impl.devices and str(impl.fn) not in seen:
                seen.add(str(impl.fn))
                out.append(pytest.param(w, name, id=f"{w.op}:{w.label}:{name}"))
    return out


_built: dict[str, tuple] = {}


def _sets(w):
    """One workload's argument sets at a time (the big ones hold gigabytes)."""
    if w.label not in _built:
        _built.clear()
        torch.cuda.empty_cache()
        _built[w.label] = w.build(torch.device("cuda"), 1234)
    return _built[w.label]


@pytest.mark.parametrize("w,name", _candidates())
def test_bench(benchmark, w, name):
    impl = catalog().get(w.op, name)
    if impl.unavailable:
        pytest.skip(f"{impl.key}: {impl.unavailable}")
    sets, nbytes = _sets(w)
    fn = impl.resolve()
    try:
        t = time_op(w.op, fn, sets, nbytes)
    except Exception as exc:  # noqa: BLE001 - an implementation that cannot run this shape is reported, not fatal
        pytest.skip(f"{impl.key} cannot run {w.label}: {type(exc).__name__}: {exc}")
    benchmark.group = f"{w.op} {w.label}"
    benchmark.extra_info.update(dict(impl=impl.key, backend=impl.backend, us_per_call=t.seconds * 1e6,
                                     bytes=nbytes, gb_per_s=t.bandwidth / 1e9, fraction_of_ceiling=t.fraction,
                                     ceiling_gb_per_s=BANDWIDTH / 1e9, mode=t.mode, goal=w.target))
    print(f"\n{impl.key:>28}  {w.label:<48} {describe(t)}")

    def one_round():
        t.run()  # `calls` calls: the captured graph (or the eager loop where capture failed)
        torch.cuda.synchronize()

    benchmark.extra_info["calls_per_round"] = t.calls
    benchmark.pedantic(one_round, rounds=10, iterations=1, warmup_rounds=1)
