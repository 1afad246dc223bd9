"""convert: a random transformers KimiLinearForCausalLM checkpoint becomes a GGUF holding exactly its weights."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from sparkops.convert import config_from_hf, convert_hf, hf_state_dict
from sparkops.errors import BadInput
from sparkops.gguf.reader import load_gguf

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

HF_CONFIG = dict(
    vocab_size=320, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=4,
    num_attention_heads=2, num_key_value_heads=2, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16,
    v_head_dim=16, n_group=1, topk_group=1, num_experts_per_tok=2, num_local_experts=4, n_shared_experts=1,
    routed_scaling_factor=2.446, rms_norm_eps=1e-5, first_k_dense_replace=1,
    linear_attn_config={"kda_layers": [1, 2, 4], "full_attn_layers": [3], "head_dim": 16, "num_heads": 2,
                        "short_conv_kernel_size": 4},
    bos_token_id=317, eos_token_id=318, pad_token_id=319)


@pytest.fixture(scope="module")
def hf_model():
    """A tiny KimiLinearForCausalLM with both layer kinds and every parameter random (no ones, no zeros)."""
    torch.manual_seed(0)
    model = transformers.KimiLinearForCausalLM(transformers.KimiLinearConfig(**HF_CONFIG))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(0.0, 2.7))
            elif "norm" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
    return model


@pytest.fixture(scope="module")
def remote_dir(hf_model, tmp_path_factory):
    """save_pretrained: the checkpoint's own names (q_conv1d, block_sparse_moe.experts.{e}.w1, ...)."""
    d = tmp_path_factory.mktemp("hf") / "remote"
    hf_model.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def native_dir(hf_model, remote_dir, tmp_path_factory):
    """transformers' native names (conv1d fused, forget_gate.*, mlp.experts.gate_up_proj)."""
    d = tmp_path_factory.mktemp("hf") / "native"
    d.mkdir()
    safetensors_torch.save_file({k: v.contiguous() for k, v in hf_model.state_dict().items()},
                                str(d / "model.safetensors"))
    shutil.copy(remote_dir / "config.json", d / "config.json")
    return d


def test_checkpoints_use_the_two_namings(remote_dir, native_dir):
    from safetensors import safe_open

    remote = set(safe_open(str(remote_dir / "model.safetensors"), "pt").keys())
    native = set(safe_open(str(native_dir / "model.safetensors"), "pt").keys())
    assert "model.layers.1.block_sparse_moe.experts.3.w1.weight" in remote
    assert "model.layers.0.self_attn.q_conv1d.weight" in remote
    assert "model.layers.1.mlp.experts.gate_up_proj" in native
    assert "model.layers.0.self_attn.forget_gate.A_log" in native


@pytest.mark.parametrize("which", ["remote_dir", "native_dir"])
def test_f32_convert_holds_exactly_the_hf_weights(which, hf_model, request, tmp_path):
    src = request.getfixturevalue(which)
    summary = convert_hf(src, tmp_path / "m.gguf", tokenizer="bpe")
    assert summary["mix"] == "f32" and summary["unused_checkpoint_tensors"] == []
    w = load_gguf(tmp_path / "m.gguf")
    c = w.config
    assert c.layer_kinds == ("kda", "kda", "mla", "kda") and c.first_k_dense == 1
    assert (c.hidden_size, c.kda_heads, c.kda_head_dim, c.mla_heads, c.kv_lora_rank) == (64, 2, 16, 2, 16)
    assert (c.n_experts, c.n_experts_per_token, c.moe_intermediate_size, c.routed_scaling_factor) == (4, 2, 32, 2.446)
    assert (c.bos_token_id, c.eos_token_id) == (317, 318) and c.rms_norm_eps == 1e-5
    ours = hf_state_dict(w)  # our weights under transformers' native names, dequantized
    theirs = hf_model.state_dict()
    assert set(ours) == set(theirs)
    for k, v in theirs.items():
        if k.endswith("A_log"):  # the file stores -exp(A_log); log(-(-exp(x))) is x only to rounding
            torch.testing.assert_close(ours[k], v, rtol=1e-6, atol=1e-7)
        else:
            assert torch.equal(ours[k], v.reshape(ours[k].shape)), k
    a = w.layers[0].attn.a
    a_log = theirs["model.layers.0.self_attn.forget_gate.A_log"].flatten().numpy()
    assert np.array_equal(a.numpy(), -np.exp(a_log))  # ssm_a = -exp(A_log), in float32


def test_quantized_convert_is_the_quantized_hf_weights(native_dir, hf_model, tmp_path):
    from sparkops.gguf.quants import dequantize, quantize
    from gguf import GGMLQuantizationType as Q

    convert_hf(native_dir, tmp_path / "q8.gguf", mix="q8_0", tokenizer="none")
    w = load_gguf(tmp_path / "q8.gguf")
    assert w.metadata["tokenizer"].model == "none" and w.metadata["quant_mix"] == "q8_0"
    up = hf_model.state_dict()["model.layers.1.mlp.experts.gate_up_proj"][:, 32:].contiguous().numpy()
    want = dequantize(quantize(up, Q.Q8_0), Q.Q8_0, up.shape)
    assert w.layers[1].ffn.up_exps.qtype == Q.Q8_0
    assert np.array_equal(w.layers[1].ffn.up_exps.dequantize().numpy(), want)
    assert np.abs(want - up).max() < 0.02  # and it is close to the original


def test_bf16_checkpoint_keeps_its_precision(hf_model, remote_dir, tmp_path):
    d = tmp_path / "bf16"
    d.mkdir()
    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in hf_model.state_dict().items()}
    safetensors_torch.save_file(sd, str(d / "model.safetensors"))
    shutil.copy(remote_dir / "config.json", d / "config.json")
    summary = convert_hf(d, tmp_path / "bf16.gguf")
    assert summary["mix"] == "bf16" and "none" in summary["tokenizer"]
    w = load_gguf(tmp_path / "bf16.gguf")
    assert w.layers[2].attn.q.raw.dtype == torch.bfloat16
    assert torch.equal(w.layers[2].attn.q.raw, sd["model.layers.2.self_attn.q_proj.weight"])


def test_tokenizer_json_is_used(remote_dir, tmp_path):
    from sparkops.tokenizer import Tokenizer, load_asset

    d = tmp_path / "tok"
    shutil.copytree(remote_dir, d)
    nano = load_asset("k3-nano")
    vocab = {t: i for i, t in enumerate(nano.tokens[:317])}
    added = [{"id": 317 + i, "content": t, "special": True} for i, t in enumerate(nano.tokens[317:])]
    (d / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": vocab,
                                                            "merges": [m.split(" ") for m in nano.merges]},
                                                  "added_tokens": added}))
    convert_hf(d, tmp_path / "t.gguf")
    tok = Tokenizer(load_gguf(tmp_path / "t.gguf").metadata["tokenizer"])
    assert tok.data.tokens == nano.tokens and tok.decode(tok.encode("the MoE router")) == "the MoE router"


def test_bad_checkpoints(remote_dir, native_dir, tmp_path):
    with pytest.raises(BadInput, match="config.json"):
        convert_hf(tmp_path, tmp_path / "x.gguf")
    d = tmp_path / "missing"
    d.mkdir()
    shutil.copy(native_dir / "config.json", d / "config.json")
    from safetensors.torch import load_file

    sd = load_file(str(native_dir / "model.safetensors"))
    del sd["model.layers.1.self_attn.b_proj.weight"]
    safetensors_torch.save_file(sd, str(d / "model.safetensors"))
    with pytest.raises(BadInput, match=r"model\.layers\.1\.self_attn\.b_proj\.weight"):
        convert_hf(d, tmp_path / "x.gguf")
    sd = load_file(str(native_dir / "model.safetensors"))
    sd["model.layers.0.self_attn.o_proj.weight"] = sd["model.layers.0.self_attn.o_proj.weight"][:, :16].contiguous()
    safetensors_torch.save_file(sd, str(d / "model.safetensors"))
    with pytest.raises(BadInput, match=r"o_proj\.weight.*\[64, 16\].*\[64, 32\]"):
        convert_hf(d, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def test_config_aliases():
    remote = {**HF_CONFIG, "num_experts": 4, "num_experts_per_token": 2, "num_shared_experts": 1,
              "model_max_length": 4096, "model_type": "kimi_linear"}
    for k in ("num_local_experts", "num_experts_per_tok", "n_shared_experts"):
        remote.pop(k)
    c = config_from_hf(remote, "x")
    assert (c.n_experts, c.n_experts_per_token, c.n_shared_experts, c.context_length) == (4, 2, 1, 4096)
    native = {**HF_CONFIG, "layer_types": ["linear_attention", "linear_attention", "full_attention",
                                           "linear_attention"], "linear_num_heads": 2, "linear_head_dim": 16,
              "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"]}
    native.pop("linear_attn_config")
    native.pop("first_k_dense_replace")
    assert config_from_hf(native, "x") == c.__class__(**{**c.__dict__, "context_length": 1048576})
    with pytest.raises(BadInput, match="sigmoid"):
        config_from_hf({**HF_CONFIG, "moe_router_activation_func": "softmax"}, "x")
    with pytest.raises(BadInput, match="q_lora_rank"):
        config_from_hf({**HF_CONFIG, "q_lora_rank": 64}, "x")


def test_cli_convert(native_dir, tmp_path, capsys):
    from sparkops.cli import main

    out = tmp_path / "cli.gguf"
    assert main(["convert", str(native_dir), "-o", str(out), "--quant", "q8_0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mix"] == "q8_0" and out.exists()
    assert main(["convert", str(tmp_path / "nowhere"), "-o", str(tmp_path / "x.gguf")]) == 2
