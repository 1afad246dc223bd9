"""The scoreboard's CUDA paths on a GPU (skipped with the reason elsewhere): CUDA-event timing, the
depth proof on device caches, the profiler's kernel count, busy vs wall, graph-replay launch cost.

The registry here is every op on its torch implementation, planned without check records (these tests
are about timing and profiling, not about the gate, which has its own GPU tests); the gate is the
stand-in of conftest.py.
"""

from __future__ import annotations

import pytest
import torch

from sparkops.bench import ceilings as ceil
from sparkops.bench import diagnose as D
from sparkops.bench import harness
from sparkops.bench.harness import BenchRequest, run_bench
from sparkops.ops import OP_NAMES

pytestmark = pytest.mark.gpu


@pytest.fixture
def torch_registry(tmp_path, monkeypatch):
    from sparkops.dispatch import Ops
    from sparkops.engine import loading
    from sparkops.plugins import load_catalog
    from sparkops.registry.file import Registry
    from sparkops.registry.plan import make_plan

    path = tmp_path / "torch-cuda.toml"
    reg = Registry.empty(path)
    for op in OP_NAMES:
        reg.set(op, "cuda", "torch")
    reg.save()
    catalog = load_catalog()

    def unchecked(device, registry=None, **kw):
        return Ops(make_plan(Registry.load(registry), catalog, device, verify_checks=False))

    monkeypatch.setattr(harness, "make_ops", unchecked)
    monkeypatch.setattr(loading, "make_ops", unchecked)
    return path


def test_cuda_ceilings():
    c = ceil.measure("cuda", nbytes=1 << 30, matmul_n=4096, launches=500)
    assert 1e12 < c.read_bandwidth < 2e13 and c.copy_bandwidth > 1e12
    assert c.matmul_flops > 1e14 and c.matmul_dtype == "bfloat16"
    assert 0 < c.launch_graph_s < c.launch_eager_s


def test_cuda_decode_abab_at_a_verified_depth(nano, passing_gate, torch_registry):
    req = BenchRequest("decode", (0, 1024), 8, [("A", torch_registry), ("B", torch_registry)], repeats=4, warmup=1,
                       device="cuda", ceiling_bytes=1 << 30)
    run = run_bench(req, nano)
    assert run.env["device_name"] and run.env["clocks"]["query"]
    for p in run.points:
        assert p.order == ["A", "B"] * 4
        for arm in p.arms.values():
            assert arm.proof["device_pos"] == p.depth and arm.proof["rows_checked"] == p.depth
            assert all(r > 0 for r in arm.rates) and 0 < arm.roofline["fraction"] < 1


def test_cuda_diagnose_counts_kernels_and_busy_time(nano, torch_registry):
    d = D.measured(nano, torch_registry, 512, device="cuda", dtype=torch.float32, steps=4, ceiling_bytes=1 << 30,
                   matmul_n=4096)
    p = d.profile
    assert p.kernels >= 68  # every named op call launches at least one kernel
    assert 0 < p.busy_s <= p.wall_s
    assert d.verdict["launch_graph_s"] is not None and d.verdict["launch_graph_s"] < d.verdict["launch_eager_s"]
    assert d.verdict["binding"] in ("launch overhead", "occupancy", "bandwidth", "compute")
    # the same step replayed as one CUDA graph: measured, faster than eager, and diagnosed on its own
    assert p.graph_error is None and p.graph_wall_s is not None and p.graph_wall_s < p.wall_s
    assert d.verdict["graph_binding"] in ("launch overhead", "occupancy", "bandwidth")
    assert "warning" not in d.verdict, d.verdict["warning"]  # busy is never below the bandwidth floor
    # per op: the device time of the kernels each op launched, which sums to (nearly) the busy time - never the
    # host's launch time, which on an eager step is several times larger
    per_op = sum(x["seconds"] for x in p.by_op.values())
    assert 0.5 * p.busy_s < per_op <= 1.05 * p.busy_s, (per_op, p.busy_s)
    launched = sum(x["kernels"] for x in p.by_op.values())  # each op's kernels; the rest is the graph's glue
    assert 0.5 * p.kernels <= launched <= p.kernels, (launched, p.kernels)
    # the kernels by name: the TOP_KERNELS with the most device time, most first, within the busy time
    secs = [x["seconds"] for x in p.by_kernel.values()]
    assert 0 < len(secs) <= D.TOP_KERNELS and secs == sorted(secs, reverse=True) and sum(secs) <= 1.05 * p.busy_s
    assert all(x["launches"] > 0 for x in p.by_kernel.values())


def test_cuda_prefill_chunk_diagnosis(nano, torch_registry):
    """One prefill chunk of 256 after 512 rows on CUDA: each op's device time and kernels, summing to (nearly) the
    busy time; the FLOP classes' achieved rates under the matmul ceiling."""
    from sparkops.bench import diagnose_prefill as P

    d = P.measured(nano, torch_registry, 512, 256, device="cuda", dtype=torch.float32, ceiling_bytes=1 << 30,
                   matmul_n=4096)
    assert d.kernels >= 68 and 0 < d.busy_s <= d.wall_s
    per_op = sum(x["seconds"] for x in d.by_op.values())
    assert 0.5 * d.busy_s < per_op <= 1.05 * d.busy_s, (per_op, d.busy_s)
    assert all(x["kernels"] >= 1 for x in d.by_op.values())
    for cls, x in d.verdict["flop_classes"].items():
        assert 0 < x["share_of_matmul_ceiling"] < 1, (cls, x)
    assert d.verdict["binding"] in ("host", "kernels")


def test_cuda_graph_arm_against_eager(nano, passing_gate, torch_registry):
    """Same registry, A eager and B one graph replay per step: both prove their depth, and on a
    launch-bound model the graph arm is the faster one in every pair."""
    req = BenchRequest("decode", (256,), 16, [("A", torch_registry), ("B", torch_registry)], repeats=3, warmup=1,
                       device="cuda", ceiling_bytes=1 << 30, graph=("B",))
    p = run_bench(req, nano).points[0]
    assert p.arms["B"].mode == "graph" and p.arms["A"].mode == "eager"
    for arm in p.arms.values():
        assert arm.proof["device_pos"] == 256
    assert all(r > 1.0 for r in p.ratios)
