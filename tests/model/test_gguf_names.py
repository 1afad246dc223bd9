"""The kimi-linear contract tables agree with sparkops.weights and with spec section 10."""

from __future__ import annotations

from dataclasses import fields

from sparkops.config import load_preset
from sparkops.gguf import names as N
from sparkops.weights import DenseFFNWeights, KDAWeights, MLAWeights, MoEWeights


def _fields(rules, prefix):
    return {r.field.split(".", 1)[1] for r in rules if r.field.startswith(prefix)}


def test_every_weights_field_has_exactly_one_tensor():
    assert _fields(N.KDA_RULES, "attn.") == {f.name for f in fields(KDAWeights)}
    assert _fields(N.MLA_RULES, "attn.") == {f.name for f in fields(MLAWeights)}
    assert _fields(N.DENSE_RULES, "ffn.") == {f.name for f in fields(DenseFFNWeights)}
    assert _fields(N.MOE_RULES, "ffn.") == {f.name for f in fields(MoEWeights)}


def test_48b_shapes_are_spec_section_6():
    c = load_preset("kimi-linear-48b-a3b")
    ne = {s.name: list(reversed(s.stored_shape(c))) for s in N.tensor_specs(c)}
    assert ne["blk.0.ssm_conv1d_q.weight"] == [4, 1, 4096, 1]
    assert ne["blk.0.ssm_a"] == [1, 32, 1, 1]
    assert ne["blk.3.attn_k_b.weight"] == [128, 512, 32] and ne["blk.3.attn_v_b.weight"] == [512, 128, 32]
    assert ne["blk.1.ffn_gate_exps.weight"] == [2304, 1024, 256] and ne["blk.1.ffn_down_exps.weight"] == [1024, 2304, 256]
    assert ne["blk.26.attn_output.weight"] == [4096, 2304]
    kinds = {s.layer for s in N.tensor_specs(c) if s.name.endswith("attn_kv_a_mqa.weight")}
    assert kinds == {3, 7, 11, 15, 19, 23, 26}  # the 0-based MLA layers of spec section 1


def test_required_keys_are_spec_section_10():
    bold = {k.name() for k in N.META_KEYS if k.llama_required}
    assert bold == {"general.architecture", "kimi-linear.context_length", "kimi-linear.embedding_length",
                    "kimi-linear.block_count", "kimi-linear.attention.layer_norm_rms_epsilon",
                    "kimi-linear.attention.kv_lora_rank", "kimi-linear.attention.key_length_mla",
                    "kimi-linear.attention.value_length_mla", "kimi-linear.ssm.conv_kernel",
                    "kimi-linear.kda.head_dim", "kimi-linear.expert_feed_forward_length",
                    "kimi-linear.expert_shared_count", "kimi-linear.expert_gating_func", "tokenizer.ggml.model"}
