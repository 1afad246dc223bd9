"""Weights drawn on the device: the hash, the per-rank shards against the whole, the distributions."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from sparkops.config import load_preset
from sparkops.engine import Engine
from sparkops.engine.loading import make_ops
from sparkops.gguf.mix import plan as mix_plan
from sparkops.parallel.ondevice_synth import (hash32, hash32_int, random_words, synth_full, synth_shard,
                                              synth_tensor_shard, tensor_key)
from sparkops.parallel.sharding import ShardPlan, Span, column_blocks_of_mix, shard_model
from sparkops.qweight import QWeight
from sparkops.synth import tensor_std


def test_hash_matches_the_integer_reference():
    rng = np.random.default_rng(7)
    xs = [0, 1, 2**31 - 1, 2**31, 2**32 - 1] + [int(v) for v in rng.integers(0, 2**32, 200, dtype=np.uint64)]
    got = hash32(torch.tensor(xs, dtype=torch.int64)).tolist()
    assert got == [hash32_int(x) for x in xs]
    assert len(set(got)) == len(got)  # a bijection on 32 bits


def test_the_short_path_gives_the_same_bits():
    idx = torch.arange(0, 2**32, 2**32 // 1000, dtype=torch.int64)
    key = tensor_key(9, "blk.0.attn_q.weight")
    assert torch.equal(random_words(key, idx, below_2_32=True), random_words(key, idx))


def test_keys_depend_on_seed_and_name():
    assert tensor_key(0, "a") != tensor_key(1, "a") != tensor_key(0, "b")
    assert tensor_key(2**40, "a") != tensor_key(0, "a")  # the seed's high half counts


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, QWeight):
        return a.qtype == b.qtype and a.shape == b.shape and torch.equal(a.raw, b.raw)
    return a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.parametrize("mix,world", [("f16", 3), ("q4_k_m", 2), ("iq1_s", 4)])
def test_shard_is_the_slice_of_the_whole(mix, world):
    """A rank's shard drawn on its own is byte-identical to that rank's slice of the whole model drawn by
    one process, for any world size: what makes a sharded run comparable with one process."""
    cfg = load_preset("k3-nano")
    whole = synth_full(cfg, mix, 3, "cpu")
    blocks = column_blocks_of_mix(cfg, mix)
    for r in range(world):
        p = ShardPlan.build(cfg, world, r, blocks)
        drawn, cut = synth_shard(p, mix, 3, "cpu"), shard_model(whole, p)
        assert drawn.config == cut.config
        for name in ("embed", "output", "output_norm"):
            assert _same(getattr(drawn, name), getattr(cut, name)), name
        for i, (a, b) in enumerate(zip(drawn.layers, cut.layers)):
            assert _same(a.attn_norm, b.attn_norm)
            for part in ("attn", "ffn"):
                for f in dataclasses.fields(getattr(a, part)):
                    assert _same(getattr(getattr(a, part), f.name), getattr(getattr(b, part), f.name)), \
                        (mix, world, r, i, f.name)


def test_seed_changes_every_tensor():
    cfg = load_preset("k3-nano")
    a, b = synth_full(cfg, "q8_0", 0, "cpu"), synth_full(cfg, "q8_0", 1, "cpu")
    assert not torch.equal(a.embed.raw, b.embed.raw)
    assert not torch.equal(a.layers[1].ffn.gate_exps.raw, b.layers[1].ffn.gate_exps.raw)
    assert not torch.equal(a.layers[0].attn.a, b.layers[0].attn.a)


@pytest.mark.parametrize("mix", ["q8_0", "q4_k_m", "iq1_s", "f16", "bf16", "f32"])
def test_values_have_the_tensor_std(mix):
    cfg = load_preset("k3-nano")
    p = next(x for x in mix_plan(cfg, mix) if x.name == "blk.1.ffn_up_exps.weight")
    w = synth_tensor_shard(cfg, p, None, 5, torch.device("cpu"))
    v = w.dequantize()
    assert torch.isfinite(v).all()
    std = tensor_std(cfg, p.spec)
    assert float(v.std()) == pytest.approx(std, rel=0.1)
    assert abs(float(v.mean())) < 0.05 * std
    assert int((v == 0).sum()) < v.numel() // 4  # never constant or mostly zero


def test_small_tensors_follow_synth_distributions():
    cfg = load_preset("k3-nano")
    w = synth_full(cfg, "q8_0", 0, "cpu")  # small tensors are float32 in every mix
    kda = w.layers[0].attn
    assert float(kda.a.max()) <= -1.0 and float(kda.a.min()) >= -16.0
    dt = torch.nn.functional.softplus(kda.dt_bias.double())
    assert float(dt.min()) >= 1e-3 * 0.999 and float(dt.max()) <= 1e-1 * 1.001
    assert float(w.output_norm.mean()) == pytest.approx(1.0, abs=0.05)
    assert float(w.layers[1].ffn.router.std()) == pytest.approx(1 / math.sqrt(cfg.hidden_size), rel=0.1)


def test_synth_full_runs_in_the_engine():
    w = synth_full(load_preset("k3-nano"), "q4_k_m", 0, "cpu")
    e = Engine(w, make_ops("cpu"), max_context=32)
    logits = e.prefill(list(range(5, 20)))
    assert torch.isfinite(logits).all() and float(logits.std()) > 0.1
    assert len(set(logits.argmax(-1).tolist())) > 1  # varies with the tokens


def test_k3_2_8t_expert_shard_draws_only_its_part():
    """A slice of one of the 2.8T model's expert stacks, drawn without the rest (4 of 896 experts)."""
    cfg = load_preset("k3-2.8t")
    p = next(x for x in mix_plan(cfg, "ud_iq1_s") if x.name == "blk.40.ffn_gate_exps.weight")
    w = synth_tensor_shard(cfg, p, (0, Span(500, 501)), 0, torch.device("cpu"))
    assert w.shape == (1, cfg.moe_intermediate_size, cfg.hidden_size) and w.qtype.name == "IQ1_S"
    v = w.dequantize()[0, :64]
    assert float(v.std()) == pytest.approx(1 / math.sqrt(cfg.hidden_size), rel=0.15)


@pytest.mark.gpu
def test_cuda_shard_is_bit_identical_to_cpu():
    cfg = load_preset("k3-nano")
    for mix in ("q4_k_m", "iq1_s", "bf16"):
        p = ShardPlan.build(cfg, 2, 1, column_blocks_of_mix(cfg, mix))
        cpu, gpu = synth_shard(p, mix, 11, "cpu"), synth_shard(p, mix, 11, "cuda")
        assert _same(cpu.embed, gpu.embed.to("cpu"))
        for a, b in zip(cpu.layers, gpu.layers):
            for part in ("attn", "ffn"):
                for f in dataclasses.fields(getattr(a, part)):
                    x, y = getattr(getattr(a, part), f.name), getattr(getattr(b, part), f.name)
                    assert _same(x, None if y is None else y.to("cpu")), (mix, f.name)
