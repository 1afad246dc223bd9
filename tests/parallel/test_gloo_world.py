"""k3-nano over 2 and 4 gloo processes against one process, the late reduce the gate must refuse, and
the collective share measured. Tiny prompts: 4 processes on a 2-core box are slow."""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import replace

import numpy as np
import pytest
import torch

from sparkops.engine import Engine
from sparkops.engine.loading import make_ops
from sparkops.gate.model_gate import run_depths
from sparkops.gate.tolerances import MODEL_RULES
from sparkops.parallel.check import sharded_check
from sparkops.parallel.graph import Placement
from sparkops.parallel.launch import ModelSource, ParallelError, PoolSpec, ShardedPool
from sparkops.parallel.scaling import measure_scaling
from sparkops.synth import synth_weights

NANO = ModelSource("synth", "k3-nano", "f32", 0)
SPEC2 = PoolSpec(2, NANO, max_context=96)


@pytest.fixture(scope="module")
def pool2():
    with ShardedPool(SPEC2) as pool:
        yield pool


def test_two_ranks_give_the_single_process_logits(pool2):
    """Prefill at 1 token and past a 64-token KDA chunk, then 3 decode steps each: within MODEL_RULES["fp32"]."""
    out = sharded_check(SPEC2, (1, 65), pool=pool2)
    assert out.error is None and out.rule == MODEL_RULES["fp32"]
    assert out.passed, out.summary
    assert [d.positions for d in out.depths] == [4, 68]
    # routing pinned to the single process's choices on every rank: 3 MoE layers x 72 positions decided
    assert out.routing.pinned and out.routing.decisions == 3 * 72 and out.routing.passed
    assert "routing pinned" in out.summary


def test_masked_dispatch_gives_the_same_logits(pool2):
    out = sharded_check(replace(SPEC2, placement=Placement(dispatch="masked")), (9,), pool=pool2)
    assert out.passed, out.summary


@pytest.mark.parametrize("late", ["ffn", "attn"])
def test_a_reduce_placed_late_is_refused_without_a_crash(pool2, late):
    """The reduce moved past the residual add sums world copies of the replicated residual (h -> y + 2h):
    the run completes with finite logits - nothing crashes - and only the model gate sees it."""
    wrong = replace(SPEC2, placement=Placement(late=frozenset({late})))
    out = sharded_check(wrong, (9,), pool=pool2)
    assert out.error is None, out.error  # it ran
    assert not out.passed
    assert out.worst.kl_max > 1e4 * out.rule.kl_max  # decades beyond the limit, not a near miss
    pool2.call("configure", wrong.placement)
    try:
        pool2.reset()
        logits = pool2.prefill([5, 17, 3, 250])
    finally:
        pool2.call("configure", Placement())
        pool2.reset()
    assert torch.isfinite(logits).all()


def test_every_rank_holds_the_same_replicated_logits(pool2):
    per_rank = pool2.logits_all_ranks([7, 1, 300, 42, 42, 9])
    assert len(per_rank) == 2 and np.isfinite(per_rank[0]).all()
    assert all(np.array_equal(per_rank[0], r) for r in per_rank[1:])  # bitwise: routing cannot diverge


def test_the_pool_drives_like_an_engine(pool2):
    weights = synth_weights("k3-nano", "f32", 0)
    single = Engine(weights, make_ops("cpu"), max_context=16)
    tokens = [11, 2, 319, 64, 8, 150]
    ref = run_depths(single, tokens, (3,), 2)[3]
    got = run_depths(pool2, tokens, (3,), 2)[3]  # the model gate's own loop, on the pool
    assert pool2.length == 5
    assert got.shape == ref.shape == (5, weights.config.vocab_size)
    assert torch.allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_collective_share_and_the_amdahl_crossover(pool2):
    rep = measure_scaling(SPEC2, (1, 2), depth=8, steps=2, rounds=2, pools={2: pool2})
    two = rep["worlds"][2]
    assert two["reduces_per_step"] == {"attn": 4.0, "ffn": 4.0}  # 2 per layer, 4 layers
    assert 0 < two["collective_share"] < 1 and rep["worlds"][1]["collective_share"] == 0.0
    c = rep["collectives"]
    assert c["collective_share"] == pytest.approx(two["collective_share"])
    a = c["amdahl"]
    assert 0 <= a["serial_fraction"] <= 1 and a["crossover_world"] >= 1
    assert a["measured_speedup"][2] == pytest.approx(a["t1_s"] / two["step_s"])


def test_four_ranks_give_the_single_process_logits():
    out = sharded_check(PoolSpec(4, NANO, max_context=32), (1, 9))
    assert out.passed, out.summary


def test_shards_drawn_on_device_match_one_process():
    """ondevice_synth's shards over 2 ranks against the whole model drawn the same way in one process."""
    out = sharded_check(PoolSpec(2, ModelSource("ondevice", "k3-nano", "q8_0", 4), max_context=32), (9,))
    assert out.passed, out.summary


def test_a_failing_rank_is_reported_and_the_ranks_stopped(tmp_path):
    before = {p.pid for p in mp.active_children()}  # the module's pool is alive meanwhile: leave it be
    missing = tmp_path / "absent.gguf"
    with pytest.raises(ParallelError, match="rank [01] failed(.|\n)*absent.gguf: no such file"):
        ShardedPool(PoolSpec(2, ModelSource("gguf", str(missing))))
    assert not [p for p in mp.active_children() if p.pid not in before and p.name.startswith("sparkops-rank")]
