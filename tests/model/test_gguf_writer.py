"""write_gguf: the file gguf-py reads back carries spec section 10's keys and names; writing is atomic."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType

from sparkops.errors import BadInput
from sparkops.gguf import names as N
from sparkops.gguf.mix import plan
from sparkops.gguf.writer import write_gguf
from sparkops.synth import synth_arrays, synth_config


def _fields(path):
    r = GGUFReader(path)
    return r, {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}, \
        {k: f.types for k, f in r.fields.items()}


def test_every_required_key_with_its_value_and_type(nano_q8):
    r, kv, types = _fields(nano_q8)
    c, _ = synth_config("k3-nano")
    assert kv["general.architecture"] == "kimi-linear"
    for key in N.META_KEYS:
        if key.llama_required or key.sparkops_required:
            assert key.name() in kv, key.name()
            assert types[key.name()][0] == (GGUFValueType.ARRAY if key.array else key.vtype), key.name()
    a = "kimi-linear."
    expect = {
        "context_length": 4096, "embedding_length": 256, "block_count": 4, "feed_forward_length": 512,
        "attention.head_count": 4, "attention.head_count_kv": [0, 0, 0, 1], "attention.kv_lora_rank": 64,
        "attention.key_length_mla": 48, "attention.value_length_mla": 32, "attention.key_length": 80,
        "attention.value_length": 64, "rope.dimension_count": 16, "ssm.conv_kernel": 4, "kda.head_dim": 32,
        "expert_count": 16, "expert_used_count": 4, "expert_feed_forward_length": 64, "expert_shared_count": 1,
        "leading_dense_block_count": 1, "expert_gating_func": 2, "vocab_size": 320,
    }
    for k, v in expect.items():
        assert kv[a + k] == v, k
    assert kv[a + "attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    assert kv[a + "expert_weights_scale"] == pytest.approx(2.446)
    assert types[a + "attention.layer_norm_rms_epsilon"] == [GGUFValueType.FLOAT32]
    assert kv["tokenizer.ggml.model"] == "gpt2" and kv["tokenizer.ggml.pre"] == "gpt-2"
    assert len(kv["tokenizer.ggml.tokens"]) == 320 and len(kv["tokenizer.ggml.token_type"]) == 320
    assert kv["tokenizer.ggml.merges"] and kv["tokenizer.ggml.add_bos_token"] is False
    assert "attention.q_lora_rank" not in " ".join(kv)  # a kimi-linear file must not have a q-lora
    assert kv["general.quantization_version"] == 2 and kv["sparkops.quant_mix"] == "q8_0"


def test_tensor_names_and_ggml_shapes(nano_q8):
    r = GGUFReader(nano_q8)
    c, _ = synth_config("k3-nano")
    ne = {t.name: [int(x) for x in t.shape] for t in r.tensors}
    assert list(ne) == [s.name for s in N.tensor_specs(c)]
    P, H, D = c.kda_inner, c.kda_heads, c.hidden_size
    assert ne["token_embd.weight"] == [D, c.vocab_size] and ne["output.weight"] == [D, c.vocab_size]
    assert ne["blk.0.ssm_a"] == [1, H, 1, 1]
    assert ne["blk.0.ssm_conv1d_q.weight"] == [c.conv_kernel, 1, P, 1]
    assert ne["blk.0.ssm_dt.bias"] == [P] and ne["blk.0.ssm_norm.weight"] == [c.kda_head_dim]
    assert ne["blk.0.ssm_f_b.weight"] == [c.kda_head_dim, P] and ne["blk.0.ssm_beta.weight"] == [D, H]
    assert ne["blk.3.attn_k_b.weight"] == [c.qk_nope_head_dim, c.kv_lora_rank, c.mla_heads]
    assert ne["blk.3.attn_v_b.weight"] == [c.kv_lora_rank, c.v_head_dim, c.mla_heads]
    assert ne["blk.3.attn_kv_a_mqa.weight"] == [D, c.kv_lora_rank + c.qk_rope_head_dim]
    assert ne["blk.1.ffn_gate_exps.weight"] == [D, c.moe_intermediate_size, c.n_experts]
    assert ne["blk.1.ffn_down_exps.weight"] == [c.moe_intermediate_size, D, c.n_experts]
    assert ne["blk.1.exp_probs_b.bias"] == [c.n_experts] and ne["blk.0.ffn_down.weight"] == [c.intermediate_size, D]
    types = {t.name: t.tensor_type for t in r.tensors}
    assert types["blk.0.ssm_a"] == Q.F32 and types["blk.1.ffn_gate_inp.weight"] == Q.F32
    assert types["blk.1.ffn_gate_exps.weight"] == Q.Q8_0


def test_ssm_a_is_minus_exp_a_log(nano_q8):
    """The stored ssm_a is already -exp(A_log): negative, in transformers' init range -16..-1."""
    r = GGUFReader(nano_q8)
    a = np.array(next(t for t in r.tensors if t.name == "blk.1.ssm_a").data)
    assert (a < -1.0).all() and (a > -16.0).all() and np.unique(a).size == a.size


def test_fallbacks_are_recorded_in_the_file(nano_q4):
    _, kv, _ = _fields(nano_q4)
    fallbacks = kv["sparkops.quant_fallbacks"]
    assert any(f.startswith("blk.1.ffn_down_exps.weight: rows of 64") and f.endswith("-> Q8_0") for f in fallbacks)
    r = GGUFReader(nano_q4)
    types = {t.name: t.tensor_type for t in r.tensors}
    assert types["blk.1.ffn_down_exps.weight"] == Q.Q8_0 and types["blk.1.ffn_gate_exps.weight"] == Q.Q4_K
    assert types["output.weight"] == Q.Q6_K and types["blk.0.ssm_f_a.weight"] == Q.F16


# ----------------------------------------------------------------------------------------------
# Atomic, checked writing
# ----------------------------------------------------------------------------------------------

def _nano_plan():
    c, tok = synth_config("k3-nano")
    return c, tok, plan(c, "q8_0")


def test_a_failure_midway_leaves_the_old_file_and_no_temp(tmp_path, nano_q8):
    c, tok, planned = _nano_plan()
    target = tmp_path / "model.gguf"
    target.write_bytes(nano_q8.read_bytes())

    def arrays():
        for i, a in enumerate(synth_arrays(c, planned, 0, "honest")):
            if i == 40:
                raise RuntimeError("disk on fire")
            yield a

    with pytest.raises(RuntimeError, match="disk on fire"):
        write_gguf(target, c, planned, arrays(), tok)
    assert target.read_bytes() == nano_q8.read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["model.gguf"]


def test_data_that_does_not_match_the_plan(tmp_path):
    c, tok, planned = _nano_plan()
    arrays = list(synth_arrays(c, planned, 0, "honest"))
    bad = list(arrays)
    bad[5] = bad[5][..., :-2]  # [rows, row_bytes - 2]
    with pytest.raises(BadInput, match=planned[5].name):
        write_gguf(tmp_path / "x.gguf", c, planned, bad, tok)
    with pytest.raises(BadInput, match="ran out"):
        write_gguf(tmp_path / "x.gguf", c, planned, arrays[:-1], tok)
    with pytest.raises(BadInput, match="more arrays"):
        write_gguf(tmp_path / "x.gguf", c, planned, arrays + [arrays[0]], tok)
    assert list(tmp_path.iterdir()) == []


def test_plan_must_hold_every_tensor_the_contract_needs(tmp_path):
    c, tok, planned = _nano_plan()
    without = [p for p in planned if p.name != "blk.2.ssm_dt.bias"]
    with pytest.raises(BadInput, match="blk.2.ssm_dt.bias"):
        write_gguf(tmp_path / "x.gguf", c, without, iter(()), tok)
