"""synth: deterministic files; sane value scales; the model computes finite, varying logits."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.config import load_preset
from sparkops.errors import BadInput
from sparkops.gguf import names as N
from sparkops.gguf.mix import plan
from sparkops.synth import synth_config, synth_gguf, synth_tensor, synth_weights


def test_same_seed_same_bytes(tmp_path, nano_q4):
    again = synth_gguf(tmp_path / "again.gguf", "k3-nano", "q4_k_m", seed=3)
    assert (tmp_path / "again.gguf").read_bytes() == nano_q4.read_bytes()
    assert again["fallbacks"] and again["types"]["Q4_K"] > 0 and again["method"] == "honest"
    other = synth_gguf(tmp_path / "other.gguf", "k3-nano", "q4_k_m", seed=4)
    assert other["bytes"] == again["bytes"]
    assert (tmp_path / "other.gguf").read_bytes() != nano_q4.read_bytes()


def test_direct_method_is_deterministic_and_has_the_asked_scale():
    c, _ = synth_config("kimi-linear-48b-a3b")
    p = next(p for p in plan(c, "iq1_s") if p.name == "blk.5.ffn_up_shexp.weight")  # [1024, 2304] IQ1_S
    a = synth_tensor(c, p, seed=1, method="direct")
    assert np.array_equal(a, synth_tensor(c, p, seed=1, method="direct"))
    assert not np.array_equal(a, synth_tensor(c, p, seed=2, method="direct"))
    from sparkops.gguf.quants import dequantize

    x = dequantize(a, Q.IQ1_S, p.shape)
    assert np.isfinite(x).all()
    assert x.std() == pytest.approx(1 / np.sqrt(c.hidden_size), rel=0.1)


def test_small_tensor_distributions():
    w = synth_weights("k3-nano", "f32", seed=0)
    kda = w.layers[0].attn
    assert bool(((kda.a < -1) & (kda.a > -16)).all())
    decay = torch.nn.functional.softplus(kda.dt_bias)  # the gate's bias alone: dt in 1e-3..1e-1
    assert bool(((decay > 9e-4) & (decay < 0.11)).all())
    for norm in (w.output_norm, w.layers[2].attn_norm, kda.o_norm, w.layers[3].attn.kv_norm):
        assert abs(float(norm.mean()) - 1) < 0.1 and 0.03 < float(norm.std()) < 0.3
    assert float(w.layers[1].ffn.bias.abs().max()) < 0.3


def test_the_model_runs_finite_with_varying_logits():
    """Through transformers' own Kimi-Linear: every layer's output finite, logits spread over the vocab."""
    transformers = pytest.importorskip("transformers")
    from sparkops.convert import hf_config_dict, hf_state_dict

    w = synth_weights("k3-nano", "f32", seed=0)
    model = transformers.KimiLinearForCausalLM(transformers.KimiLinearConfig(**hf_config_dict(w.config))).eval()
    model.load_state_dict(hf_state_dict(w), strict=True)
    ids = torch.tensor([list(range(0, 317, 13))])
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    for i, h in enumerate(out.hidden_states):
        assert torch.isfinite(h).all(), i
        assert 0.5 < float(h.std()) < 10, (i, float(h.std()))  # neither vanishing nor exploding
    logits = out.logits[0]
    assert torch.isfinite(logits).all()
    assert 1.0 < float(logits.std(-1).mean()) < 5.0  # spread over the vocabulary
    assert len(set(logits.argmax(-1).tolist())) > len(ids[0]) // 2  # the top token changes with the input


def test_48b_preset_takes_the_direct_path_and_k3_nano_the_honest_one():
    from sparkops.synth import choose_method

    assert choose_method(load_preset("kimi-linear-48b-a3b"), "auto") == "direct"
    assert choose_method(load_preset("k3-nano"), "auto") == "honest"
    with pytest.raises(BadInput, match="method"):
        choose_method(load_preset("k3-nano"), "fast")


def test_synth_fills_the_token_ids_from_the_tokenizer():
    c, tok = synth_config("k3-nano")
    assert (c.bos_token_id, c.eos_token_id, c.pad_token_id) == (317, 318, 319) == \
        (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    c48, tok48 = synth_config("kimi-linear-48b-a3b")
    assert c48.bos_token_id == 163584 and tok48.tokens[163584] == "<|bos|>"
    cn, tokn = synth_config("k3-nano", tokenizer="none")  # no vocabulary: the preset's ids are kept as they are
    assert tokn.model == "none" and (cn.bos_token_id, tokn.bos_token_id) == (317, 317)


def test_every_role_gets_a_distribution():
    c = load_preset("k3-nano")
    rng_names = {s.rule.field for s in N.tensor_specs(c) if s.role == N.SMALL}
    w = synth_weights(c, "f32", seed=5)
    assert len(rng_names) == 12
    # nothing constant anywhere
    for t in (w.embed.raw, w.layers[0].attn.conv_q, w.layers[1].ffn.router, w.layers[3].attn.w_uk):
        assert float(t.float().std()) > 0


def test_cli_synth_and_plan(tmp_path, capsys):
    import json

    from sparkops.cli import main

    out = tmp_path / "cli.gguf"
    assert main(["synth", "--preset", "k3-nano", "--quant", "q8_0", "-o", str(out), "--seed", "7", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["bytes"] == out.stat().st_size and summary["mix"] == "q8_0" and summary["seed"] == 7
    assert main(["synth", "--preset", "k3-2.8t", "--quant", "ud_iq1_s", "--plan", "--context", "131072",
                 "--json"]) == 0
    plan_ = json.loads(capsys.readouterr().out)
    assert plan_["file"]["total_gib"] == pytest.approx(553, rel=0.01)
    assert plan_["bytes_per_token"]["mla_cache"] == 24 * 131072 * 576 * 2
    assert main(["synth", "--preset", "k3-nano", "--quant", "q3_k"]) == 2  # unknown mix: exit 2, no file
    assert main(["synth", "--preset", "nope", "--plan"]) == 2
