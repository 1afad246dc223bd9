"""The NumPy reference engine against an outside implementation: transformers' KimiLinearForCausalLM.

A random tiny checkpoint with both layer kinds, a leading dense layer and MoE is saved by transformers,
imported with `sparkops convert`, and run by sparkops on the NumPy reference (float64). The logits
must agree at every position of a 130-token sequence (NMSE <= 1e-8, identical top-1), for a
whole-prompt prefill and for prefill-then-decode at several split points (KDA chunk boundaries
included: transformers runs the chunked KDA for T > 64, we run the recurrence in decode).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from sparkops.dispatch import Ops  # noqa: E402
from sparkops.engine import Engine  # noqa: E402
from sparkops.gguf.reader import load_gguf  # noqa: E402
from sparkops.plugins import load_catalog  # noqa: E402
from sparkops.registry.file import Registry  # noqa: E402
from sparkops.registry.plan import make_plan  # noqa: E402
from tests.helpers import run_cli  # noqa: E402

T = 130
SPLITS = (1, 63, 64, 65, 129)


def _tiny_config():
    from transformers.models.kimi_linear import KimiLinearConfig

    return KimiLinearConfig(
        vocab_size=320, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=4,
        num_attention_heads=2, num_key_value_heads=2, kv_lora_rank=32, q_lora_rank=None, qk_rope_head_dim=8,
        qk_nope_head_dim=16, v_head_dim=16, num_experts=8, num_experts_per_token=3, n_shared_experts=1,
        routed_scaling_factor=2.446, n_group=1, topk_group=1, rms_norm_eps=1e-5, tie_word_embeddings=False,
        linear_attn_config={"kda_layers": [1, 2, 3], "full_attn_layers": [4], "num_heads": 2, "head_dim": 16,
                            "short_conv_kernel_size": 4},
        first_k_dense_replace=1, pad_token_id=319, bos_token_id=317, eos_token_id=318)


@pytest.fixture(scope="module")
def hf_and_gguf(tmp_path_factory):
    torch.manual_seed(1234)
    cfg = _tiny_config()
    model = transformers.KimiLinearForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(99)
    with torch.no_grad():  # transformers' init is tiny (std 0.02): give every weight a real scale
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) * fan_in ** -0.5)
            elif "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:  # A_log, dt_bias, the router bias
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
    hf_dir = tmp_path_factory.mktemp("hf")
    model.save_pretrained(hf_dir, safe_serialization=True)
    gguf = hf_dir / "model.gguf"
    r = run_cli("convert", str(hf_dir), "-o", str(gguf))
    assert r.returncode == 0, r.stdout + r.stderr
    tokens = torch.randint(0, 317, (T,), generator=g)
    with torch.no_grad():
        ref = model(tokens[None]).logits[0].double().numpy()  # [T, V] (float32 model: grouped_mm has no float64)
    return ref, gguf, tokens


def _reference_engine(gguf):
    reg = Registry.empty("numpy-only.toml")
    from sparkops.ops import OP_NAMES

    for op in OP_NAMES:
        reg.set(op, "cpu", "numpy", fallback="error")
    ops = Ops(make_plan(reg, load_catalog(), "cpu"))
    return Engine(load_gguf(gguf), ops, max_context=256, dtype=torch.float64)


def _nmse(a, b):
    return float(((a - b) ** 2).sum() / (b ** 2).sum())


def test_prefill_matches_transformers(hf_and_gguf):
    ref, gguf, tokens = hf_and_gguf
    got = _reference_engine(gguf).prefill(tokens).double().numpy()
    assert np.std(ref[:, :317]) > 0.1, "the checkpoint must produce logits that vary"
    assert _nmse(got, ref) <= 1e-8
    assert (got.argmax(-1) == ref.argmax(-1)).all()


@pytest.mark.parametrize("split", SPLITS)
def test_prefill_then_decode_matches_transformers(hf_and_gguf, split):
    ref, gguf, tokens = hf_and_gguf
    eng = _reference_engine(gguf)
    rows = [eng.prefill(tokens[:split])] + [eng.decode(tokens[i:i + 1]) for i in range(split, T)]
    got = torch.cat(rows).double().numpy()
    assert _nmse(got, ref) <= 1e-8
    assert (got.argmax(-1) == ref.argmax(-1)).all()
