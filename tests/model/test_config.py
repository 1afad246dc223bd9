"""Presets, and ModelConfig <-> GGUF metadata without loss."""

from __future__ import annotations

import dataclasses

import pytest
from gguf import GGUFValueType

from sparkops.config import load_preset, preset_names
from sparkops.errors import BadInput
from sparkops.gguf.metadata import build_config, config_fields_from_kv, config_to_kv


def _roundtrip(c):
    kv = {key: value for key, value, _, _ in config_to_kv(c)}
    # the token ids travel with the tokenizer (TokenizerData.to_kv), as llama.cpp reads them
    kv.update({k: v for k, v in (("tokenizer.ggml.bos_token_id", c.bos_token_id),
                                 ("tokenizer.ggml.eos_token_id", c.eos_token_id),
                                 ("tokenizer.ggml.padding_token_id", c.pad_token_id)) if v is not None})
    fields, defaulted = config_fields_from_kv(kv, "test", "fallback")
    assert defaulted == []
    return build_config(fields, "test")


@pytest.mark.parametrize("name", ["k3-nano", "kimi-linear-48b-a3b", "k3-2.8t"])
def test_presets_survive_the_metadata(name):
    c = load_preset(name)
    back = _roundtrip(c)
    assert back == dataclasses.replace(c, assumptions=())  # assumptions are documentation, not metadata
    assert back.rms_norm_eps == 1e-5 and back.routed_scaling_factor == 2.446  # exact after f32 storage


def test_presets_listed():
    assert {"k3-nano", "kimi-linear-48b-a3b", "k3-2.8t"} <= set(preset_names())


def test_different_kda_and_mla_head_counts_use_a_per_layer_array():
    c = dataclasses.replace(load_preset("k3-nano"), kda_heads=2)
    kv = {key: (value, vtype) for key, value, vtype, _ in config_to_kv(c)}
    heads, vtype = kv["kimi-linear.attention.head_count"]
    assert vtype == GGUFValueType.ARRAY and heads == [2, 2, 2, 4]
    assert _roundtrip(c) == c


def test_foreign_file_without_sparkops_keys_gets_defaults():
    c = load_preset("kimi-linear-48b-a3b")
    kv = {key: value for key, value, _, _ in config_to_kv(c) if not key.startswith("sparkops.")}
    fields, defaulted = config_fields_from_kv(kv, "x.gguf", "x")
    assert set(defaulted) == {"kv_norm_eps", "l2_eps", "router_renorm_eps"}
    assert build_config(fields, "x.gguf").kv_norm_eps == 1e-6


def test_q_lora_is_refused():
    kv = {key: value for key, value, _, _ in config_to_kv(load_preset("k3-nano"))}
    kv["kimi-linear.attention.q_lora_rank"] = 1536
    with pytest.raises(BadInput, match="q-lora"):
        config_fields_from_kv(kv, "x.gguf", "x")


def test_inconsistent_metadata_is_a_bad_file():
    kv = {key: value for key, value, _, _ in config_to_kv(load_preset("k3-nano"))}
    kv["kimi-linear.attention.head_count_kv"] = [1, 1, 1, 1]  # no KDA layer: llama.cpp aborts on this too
    fields, _ = config_fields_from_kv(kv, "x.gguf", "x")
    with pytest.raises(BadInput, match="x.gguf.*KDA"):
        build_config(fields, "x.gguf")
