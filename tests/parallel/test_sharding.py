"""How the weights split over ranks: spans, shapes, reassembly, and the splits that must be refused."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from sparkops.config import load_preset
from sparkops.errors import BadInput
from sparkops.gguf.mix import quant_mix_bytes
from sparkops.parallel.graph import Placement
from sparkops.parallel.sharding import (SPLITS, ColumnBlocks, ShardPlan, Span, column_blocks_of_mix,
                                        column_blocks_of_weights, even_spans, rank_bytes, shard_model,
                                        slice_qweight)
from sparkops.qweight import QWeight
from sparkops.synth import synth_weights


@pytest.fixture(scope="module")
def nano():
    return synth_weights("k3-nano", "f32", 0)


@pytest.fixture(scope="module")
def nano_q4():
    return synth_weights("k3-nano", "q4_k_m", 0)


@pytest.mark.parametrize("n,world", [(4, 1), (4, 2), (4, 3), (16, 4), (896, 8), (6, 8)])
def test_even_spans_cover_once(n, world):
    spans = even_spans(n, world)
    assert len(spans) == world and spans[0].lo == 0 and spans[-1].hi == n
    assert all(a.hi == b.lo for a, b in zip(spans, spans[1:]))
    assert max(s.n for s in spans) - min(s.n for s in spans) <= 1


def test_plan_spans_for_k3_nano(nano):
    c = nano.config
    for world in (1, 2, 3, 4):
        plans = [ShardPlan.build(c, world, r, column_blocks_of_weights(nano)) for r in range(world)]
        for unit, total in (("kda_heads", c.kda_heads), ("mla_heads", c.mla_heads), ("experts", c.n_experts),
                            ("dense", c.intermediate_size), ("shared", c.shared_intermediate)):
            owned = sorted(i for p in plans for i in range(getattr(p, unit).lo, getattr(p, unit).hi))
            assert owned == list(range(total)), (world, unit)
        for p in plans:
            local = p.local_config()
            assert (local.kda_heads, local.mla_heads) == (p.kda_heads.n, p.mla_heads.n)
            assert (local.n_experts, local.hidden_size, local.vocab_size) == (c.n_experts, c.hidden_size, c.vocab_size)


def _values(x):
    if isinstance(x, QWeight):
        return x.raw
    return x


def test_shards_reassemble_the_whole_model(nano_q4):
    """Every split weight, concatenated over the ranks along its cut axis, is the whole weight, byte for byte
    (q4_k_m: block-quantized rows and whole-block column cuts); replicated weights are the same on every rank."""
    w = nano_q4
    world = 2
    plans = [ShardPlan.build(w.config, world, r, column_blocks_of_weights(w)) for r in range(world)]
    shards = [shard_model(w, p) for p in plans]
    checked = 0
    for i, layer in enumerate(w.layers):
        for part, table in (("attn", layer.kind), ("ffn", "dense" if i < w.config.first_k_dense else "moe")):
            whole = getattr(layer, part)
            for f in dataclasses.fields(whole):
                full = getattr(whole, f.name)
                if full is None:
                    continue
                pieces = [getattr(getattr(s.layers[i], part), f.name) for s in shards]
                rule = SPLITS[table][f.name]
                if rule is None:
                    for p in pieces:
                        assert torch.equal(_values(p), _values(full)), (i, f.name)
                    continue
                axis = rule[0]
                raw_axis = axis % len(full.shape) if isinstance(full, QWeight) else axis
                got = torch.cat([_values(p) for p in pieces if p is not None], dim=raw_axis)
                assert torch.equal(got, _values(full)), (i, f.name)
                if isinstance(full, QWeight):
                    shape = [p.shape for p in pieces if p is not None]
                    assert sum(s[axis] for s in shape) == full.shape[axis]
                checked += 1
    assert checked > 20


def test_shard_shapes_k3_nano_world2(nano):
    c = nano.config
    p = ShardPlan.build(c, 2, 1, column_blocks_of_weights(nano))
    s = shard_model(nano, p)
    P, D, dk = c.kda_inner, c.hidden_size, c.kda_head_dim
    kda = s.layers[0].attn
    assert kda.q.shape == (P // 2, D) and kda.o_proj.shape == (D, P // 2)
    assert tuple(kda.conv_q.shape) == (P // 2, c.conv_kernel) and tuple(kda.a.shape) == (c.kda_heads // 2,)
    assert tuple(kda.dt_bias.shape) == (P // 2,) and kda.beta.shape == (c.kda_heads // 2, D)
    assert kda.f_a.shape == (dk, D) and kda.f_b.shape == (P // 2, dk) and kda.g_b.shape == (P // 2, dk)
    # rank 1's heads are the second half: its a and conv taps are those rows of the whole
    assert torch.equal(kda.a, nano.layers[0].attn.a[c.kda_heads // 2:])
    mla = s.layers[3].attn
    n = c.mla_heads // 2
    assert mla.q.shape == (n * c.qk_head_dim, D) and tuple(mla.w_uk.shape) == (n, c.qk_nope_head_dim, c.kv_lora_rank)
    assert mla.o_proj.shape == (D, n * c.v_head_dim) and mla.kv_a.shape == (c.latent_dim, D)
    moe = s.layers[1].ffn
    assert moe.gate_exps.shape == (c.n_experts // 2, c.moe_intermediate_size, D)
    assert moe.s_down.shape == (D, c.shared_intermediate // 2) and tuple(moe.router.shape) == (c.n_experts, D)
    assert s.layers[0].ffn.down.shape == (D, c.intermediate_size // 2)
    assert s.config.kda_heads == 2 and s.metadata["shard"]["experts"] == [8, 16]


def test_misaligned_row_parallel_split_is_refused():
    c = load_preset("k3-nano")
    with pytest.raises(BadInput, match="o_proj cannot be split over 2 ranks"):
        ShardPlan.build(c, 2, 0, ColumnBlocks(kda_o_proj=256))


def test_column_cut_off_a_block_is_refused(nano_q4):
    w = nano_q4.layers[0].ffn.down  # Q4_K columns in blocks of 256
    assert w.qtype.name == "Q4_K"
    with pytest.raises(BadInput, match="blocks"):
        slice_qweight(w, -1, Span(0, 128))
    assert slice_qweight(w, -1, Span(0, 0)) is None


def test_too_many_ranks_is_refused():
    with pytest.raises(BadInput, match="use at most 4 ranks"):
        ShardPlan.build(load_preset("k3-nano"), 8, 0)
    with pytest.raises(BadInput, match="outside a world"):
        ShardPlan.build(load_preset("k3-nano"), 2, 2)


def test_plan_refuses_weights_of_another_model(nano):
    other = ShardPlan.build(load_preset("kimi-linear-48b-a3b"), 2, 0)
    with pytest.raises(BadInput, match="build the plan from the weights' own config"):
        shard_model(nano, other)


def test_k3_2_8t_fits_eight_h200s():
    """The seed's 2.8T model at ud_iq1_s over 8 ranks: every weight accounted for once, ~73 GiB a rank."""
    c = load_preset("k3-2.8t")
    per = rank_bytes(c, "ud_iq1_s", 8)
    whole = quant_mix_bytes(c, "ud_iq1_s")["total"]
    held = sum(r["sharded"] for r in per) + per[0]["replicated"]
    # w_uk / w_uv are float32 in memory (quantized in a file): the only difference from the file's bytes
    n_mla = len(c.full_attn_layers)
    extra = n_mla * c.mla_heads * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank * 4
    assert held == pytest.approx(whole + extra, rel=0.02)
    assert max(r["total"] for r in per) < 80 * 2**30  # of an H200's ~139 GiB: room for a 131072-token cache
    plans = [ShardPlan.build(c, 8, r, column_blocks_of_mix(c, "ud_iq1_s")) for r in range(8)]
    assert [p.experts.n for p in plans] == [112] * 8 and [p.kda_heads.n for p in plans] == [16] * 8
    assert [p.shared.n for p in plans] == [256] * 6 + [0, 0]  # six Q6_K blocks of the 1536-wide shared expert


def test_placement_validates():
    with pytest.raises(BadInput, match="reduce points are attn, ffn"):
        Placement(late=frozenset({"lm_head"}))
    with pytest.raises(BadInput, match="dispatch"):
        Placement(dispatch="all_to_all")


def test_a_huge_preset_is_never_synthesized_whole_in_a_rank():
    from sparkops.parallel.launch import ModelSource

    with pytest.raises(BadInput, match="--source ondevice"):
        ModelSource("synth", "k3-2.8t", "ud_iq1_s")
    assert ModelSource("ondevice", "k3-2.8t", "ud_iq1_s").kind == "ondevice"
