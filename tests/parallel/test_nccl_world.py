"""The same checks over NCCL, one GPU per rank (skipped without CUDA; needs 2 GPUs, uses up to 4).

What the 8-GPU figures rest on: the sharded graph gives one GPU's logits over NCCL, a late reduce is
refused there too, shards drawn on each GPU match the one-GPU model, and the bench runs end to end.
"""

from __future__ import annotations

import pytest
import torch

from sparkops.parallel import runbench
from sparkops.parallel.check import sharded_check
from sparkops.parallel.graph import Placement
from sparkops.parallel.launch import SAFE_ENV, ModelSource, PoolSpec, ShardedPool
from sparkops.parallel.scaling import measure_scaling

pytestmark = pytest.mark.gpu


def _gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.fixture
def two_gpus():
    if _gpus() < 2:
        pytest.skip(f"needs 2 CUDA devices, this machine has {_gpus()}")


def test_nccl_world_gives_one_gpus_logits(two_gpus):
    world = min(4, _gpus())  # k3-nano has 4 heads
    for source in (ModelSource("synth", "k3-nano", "f32"), ModelSource("ondevice", "k3-nano", "q4_k_m", 2)):
        out = sharded_check(PoolSpec(world, source, device="cuda", max_context=96), (1, 65))
        assert out.passed, out.summary


def test_nccl_late_reduce_is_refused(two_gpus):
    spec = PoolSpec(2, ModelSource("synth", "k3-nano", "f32"), device="cuda", max_context=32,
                    placement=Placement(late=frozenset({"ffn"})))
    out = sharded_check(spec, (9,))
    assert out.error is None and not out.passed


def test_nccl_bf16_and_masked_dispatch(two_gpus):
    spec = PoolSpec(2, ModelSource("ondevice", "k3-nano", "q8_0"), device="cuda", dtype="bfloat16", max_context=96,
                    placement=Placement(dispatch="masked"))
    out = sharded_check(spec, (1, 65))
    assert out.variant == "bf16" and out.passed, out.summary


def test_ranks_run_without_nvlink_multicast(two_gpus):
    with ShardedPool(PoolSpec(2, ModelSource("synth", "k3-nano", "f32"), device="cuda", max_context=16)) as pool:
        info = pool.call("describe")
        assert [i["device"] for i in info] == ["cuda:0", "cuda:1"]
    import os

    assert all(os.environ[k] == v for k, v in SAFE_ENV.items())


def test_nccl_bench_and_scaling(two_gpus, tmp_path):
    spec = PoolSpec(2, ModelSource("ondevice", "k3-nano", "q4_k_m"), device="cuda", max_context=600)
    result = runbench.run(spec, prefill=512, depth=512, steps=8, rounds=3, chunk=256)
    assert "refused" not in result, result.get("refused")
    for phase in ("prefill", "decode"):
        assert 0 < result["summary"][phase]["collective_share"] < 1
    rows = runbench.record(result, "test", tmp_path)
    assert rows[1]["key"].startswith("decode.k3-nano.q4_k_m.2x")
    rep = measure_scaling(spec, (1, 2), depth=256, steps=8, rounds=3)
    assert "amdahl" in rep["collectives"]
