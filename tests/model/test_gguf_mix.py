"""Quant mixes and the byte arithmetic the scoreboard uses (spec/anchors.md sections 2 and 3)."""

from __future__ import annotations

import dataclasses

import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader

from sparkops.config import load_preset
from sparkops.errors import UnknownName
from sparkops.gguf import names as N
from sparkops.gguf.mix import bytes_per_token, get_mix, plan, quant_mix_bytes

BANDWIDTH = 4.04e12  # anchors section 1: measured H200 read bandwidth, bytes/s

# anchors section 3: decode roofline tokens/s at depths 0, 4096, 32768, 131072
ROOFLINE = {"q4_k_m": (1.96e9, (1978, 1946, 1751, 1303)), "iq1_s": (0.98e9, (3792, 3678, 3038, 1903))}


@pytest.mark.parametrize("mix", ["q4_k_m", "iq1_s"])
def test_bytes_per_token_reproduce_the_anchors(mix):
    c = load_preset("kimi-linear-48b-a3b")
    a, tok_s = ROOFLINE[mix]
    assert bytes_per_token(c, mix, 0)["weights"] == pytest.approx(a, rel=0.02)
    for depth, want in zip((0, 4096, 32768, 131072), tok_s):
        assert BANDWIDTH / bytes_per_token(c, mix, depth)["total"] == pytest.approx(want, rel=0.02), depth


def test_cache_terms_count_what_the_anchors_count():
    c = load_preset("kimi-linear-48b-a3b")
    b = bytes_per_token(c, "q4_k_m", 131072)
    assert b["mla_cache"] == 7 * 131072 * 576 * 2  # 7 MLA layers x L x 576 bf16, the shared latent once
    assert b["kda_state"] == 20 * 32 * 128 * 128 * 4 * 2  # read and written, fp32
    assert b["weights_by_class"]["embedding"] == pytest.approx(2304 / 256 * 144)  # one Q4_K row


@pytest.mark.parametrize("mix,gib", [("q4_k_m", 25.9), ("iq1_s", 9.3)])
def test_file_sizes_match_the_anchor_files(mix, gib):
    assert quant_mix_bytes(load_preset("kimi-linear-48b-a3b"), mix)["total_gib"] == pytest.approx(gib, rel=0.01)


def test_48b_has_the_610_tensors_of_the_real_file():
    assert len(plan(load_preset("kimi-linear-48b-a3b"), "q4_k_m")) == 610


def test_k3_preset_is_the_seed_model():
    c = load_preset("k3-2.8t")
    assert c.num_layers == 93 and c.n_experts == 896 and c.context_length == 1048576
    assert set(c.layer_kinds) == {"kda", "mla"}
    assert c.param_counts()["total"] == pytest.approx(2.8e12, rel=0.015)
    assert quant_mix_bytes(c, "ud_iq1_s")["total_gib"] == pytest.approx(553, rel=0.01)
    assert len(c.assumptions) >= 4 and all(len(a) > 20 for a in c.assumptions)


def test_file_bytes_equal_the_plan(nano_q4):
    c = load_preset("k3-nano")
    planned = {p.name: p for p in plan(c, "q4_k_m")}
    r = GGUFReader(nano_q4)
    for t in r.tensors:
        assert t.tensor_type == planned[t.name].qtype, t.name
        assert int(t.n_bytes) == planned[t.name].nbytes, t.name
    assert sum(int(t.n_bytes) for t in r.tensors) == quant_mix_bytes(c, "q4_k_m")["total"]


def test_fallback_types():
    c = load_preset("k3-nano")
    types = {p.name: (p.qtype, p.fallback) for p in plan(c, "q4_k_m")}
    assert types["blk.1.ffn_gate_exps.weight"] == (Q.Q4_K, None)  # rows of 256
    qt, why = types["blk.3.attn_k_b.weight"]  # rows of qk_nope = 32
    assert qt == Q.Q8_0 and "rows of 32" in why and "Q4_K" in why
    odd = dataclasses.replace(c, qk_nope_head_dim=24)  # rows of 24: not even Q8_0's 32
    qt, why = {p.name: (p.qtype, p.fallback) for p in plan(odd, "q4_k_m")}["blk.3.attn_k_b.weight"]
    assert qt == Q.F16 and "rows of 24" in why
    for p in plan(c, "iq1_s"):
        if p.spec.role == N.SMALL:
            assert p.qtype == Q.F32, p.name


def test_ud_iq1_s_edge_layers():
    c = load_preset("k3-2.8t")
    down = {p.spec.layer: p.qtype for p in plan(c, "ud_iq1_s") if p.spec.rule.field == "ffn.down_exps"}
    assert [l for l, t in down.items() if t == Q.Q4_K] == [1, 2, 3, 90, 91, 92]
    assert all(t == Q.IQ1_S for l, t in down.items() if l not in (1, 2, 3, 90, 91, 92))


def test_unknown_mix():
    with pytest.raises(UnknownName, match="q4_k_m"):
        get_mix("q3_k_s")
    assert get_mix("Q4_K").name == "q4_k_m"
