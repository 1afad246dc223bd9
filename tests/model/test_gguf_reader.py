"""load_gguf: a synthesized file comes back as the right ModelWeights; every bad file is a clear BadInput."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType

from sparkops.errors import BadInput
from sparkops.gguf.reader import load_gguf, read_config
from sparkops.qweight import QWeight
from sparkops.synth import synth_config, synth_weights
from sparkops.weights import DenseFFNWeights, KDAWeights, MLAWeights, MoEWeights


def _bytes(path):
    return path.read_bytes()


# ----------------------------------------------------------------------------------------------
# Round trip
# ----------------------------------------------------------------------------------------------

def test_synth_file_loads_as_weights_of_every_layer_kind(nano_q8):
    w = load_gguf(nano_q8)
    c = w.config
    want, _ = synth_config("k3-nano")
    assert c == want  # every field, epsilons included, survives the file
    assert c.layer_kinds == ("kda", "kda", "kda", "mla")
    assert isinstance(w.embed, QWeight) and w.embed.shape == (c.vocab_size, c.hidden_size)
    assert w.output.shape == (c.vocab_size, c.hidden_size) and w.output_norm.dtype == torch.float32
    for i, layer in enumerate(w.layers):
        assert layer.kind == c.layer_kind(i)
        assert layer.attn_norm.shape == (c.hidden_size,) and layer.ffn_norm.dtype == torch.float32
        if layer.kind == "kda":
            a = layer.attn
            assert isinstance(a, KDAWeights)
            assert a.q.shape == a.k.shape == a.v.shape == (c.kda_inner, c.hidden_size)
            assert a.conv_q.shape == (c.kda_inner, c.conv_kernel) and a.conv_q.dtype == torch.float32
            assert a.f_a.shape == (c.kda_head_dim, c.hidden_size) and a.f_b.shape == (c.kda_inner, c.kda_head_dim)
            assert a.beta.shape == (c.kda_heads, c.hidden_size)
            assert a.a.shape == (c.kda_heads,) and bool((a.a < 0).all())  # -exp(A_log), stored as such
            assert a.dt_bias.shape == (c.kda_inner,) and a.o_norm.shape == (c.kda_head_dim,)
            assert a.o_proj.shape == (c.hidden_size, c.kda_inner)
        else:
            a = layer.attn
            assert isinstance(a, MLAWeights)
            assert a.q.shape == (c.mla_heads * c.qk_head_dim, c.hidden_size)
            assert a.kv_a.shape == (c.latent_dim, c.hidden_size) and a.kv_norm.shape == (c.kv_lora_rank,)
            assert a.w_uk.shape == (c.mla_heads, c.qk_nope_head_dim, c.kv_lora_rank)
            assert a.w_uv.shape == (c.mla_heads, c.v_head_dim, c.kv_lora_rank)
            assert a.o_proj.shape == (c.hidden_size, c.mla_heads * c.v_head_dim)
        if c.is_moe(i):
            f = layer.ffn
            assert isinstance(f, MoEWeights)
            assert f.router.shape == (c.n_experts, c.hidden_size) and f.bias.shape == (c.n_experts,)
            assert f.gate_exps.shape == f.up_exps.shape == (c.n_experts, c.moe_intermediate_size, c.hidden_size)
            assert f.down_exps.shape == (c.n_experts, c.hidden_size, c.moe_intermediate_size)
            assert f.gate_exps[3].shape == (c.moe_intermediate_size, c.hidden_size)
            assert f.s_gate.shape == (c.shared_intermediate, c.hidden_size)
        else:
            assert isinstance(layer.ffn, DenseFFNWeights)
            assert layer.ffn.down.shape == (c.hidden_size, c.intermediate_size)
    md = w.metadata
    assert md["quant_mix"] == "q8_0" and md["synth_seed"] == 7 and md["tensor_count"] == 89
    assert md["quant_types"]["Q8_0"]["tensors"] == 55 and md["file_size"] == nano_q8.stat().st_size
    assert md["tokenizer"].model == "gpt2" and md["tokenizer"].vocab_size == 320
    assert len(md["weight_digest"]) == 64 and md["ignored_tensors"] == []


@pytest.mark.parametrize("fixture", ["nano_q8", "nano_q4"])
def test_file_equals_the_in_memory_model(fixture, request):
    """What the writer stores and the reader gives back is exactly what synth made (raw blocks and floats)."""
    path = request.getfixturevalue(fixture)
    w = load_gguf(path)
    mem = synth_weights("k3-nano", w.metadata["quant_mix"], seed=w.metadata["synth_seed"])

    def same(a, b, where):
        if isinstance(a, QWeight):
            assert a.qtype == b.qtype and a.shape == b.shape, where
            assert torch.equal(a.raw.view(torch.uint8) if a.raw.dtype == torch.bfloat16 else a.raw,
                               b.raw.view(torch.uint8) if b.raw.dtype == torch.bfloat16 else b.raw), where
        elif isinstance(a, torch.Tensor):
            assert torch.equal(a, b), where
        elif a is None:
            assert b is None, where
        else:
            for k in vars(a):
                if k not in ("kind",):
                    same(getattr(a, k), getattr(b, k), f"{where}.{k}")

    same(w.embed, mem.embed, "embed")
    same(w.output, mem.output, "output")
    for i, (x, y) in enumerate(zip(w.layers, mem.layers)):
        same(x, y, f"layers[{i}]")


def test_weights_are_a_view_of_the_file_not_a_copy(nano_q8):
    maps = Path("/proc/self/maps")
    if not maps.exists():
        pytest.skip("needs Linux's /proc/self/maps to see where memory comes from")
    w = load_gguf(nano_q8)
    ranges = []
    for line in maps.read_text().splitlines():
        if line.endswith(str(nano_q8.resolve())):
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            ranges.append((lo, hi))
    for q in (w.embed, w.output, w.layers[1].ffn.gate_exps, w.layers[0].attn.q):
        ptr = q.raw.data_ptr()
        assert any(lo <= ptr and ptr + q.nbytes <= hi for lo, hi in ranges), q.name  # inside the file's map
    assert not any(lo <= w.layers[0].attn.a.data_ptr() < hi for lo, hi in ranges)  # small tensors: own f32 copies


def test_bf16_and_f16_files_load(tmp_path):
    from sparkops.synth import synth_gguf

    for mix in ("bf16", "f16"):
        path = synth_gguf(tmp_path / f"{mix}.gguf", "k3-nano", mix, seed=1)["path"]
        w = load_gguf(path)
        mem = synth_weights("k3-nano", mix, seed=1)
        want = {"bf16": torch.bfloat16, "f16": torch.float16}[mix]
        assert w.embed.raw.dtype == want
        assert torch.equal(w.layers[2].attn.q.dequantize(), mem.layers[2].attn.q.dequantize())


def test_legacy_attn_kv_b_is_split_into_w_uk_and_w_uv(nano_q8, tmp_path, rewrite):
    """A file with attn_kv_b [N*(Dn+Dv), Lkv] instead of attn_k_b / attn_v_b loads the same w_uk / w_uv."""
    w = load_gguf(nano_q8)
    c, mla = w.config, w.layers[3].attn
    kv_b = torch.cat([mla.w_uk, mla.w_uv], dim=1).reshape(-1, c.kv_lora_rank).numpy()  # HF kv_b_proj rows
    out = rewrite(nano_q8, tmp_path / "legacy.gguf", drop={"blk.3.attn_v_b.weight"},
                  replace={"blk.3.attn_k_b.weight": ("blk.3.attn_kv_b.weight", Q.F32, kv_b)})
    legacy = load_gguf(out).layers[3].attn
    assert torch.equal(legacy.w_uk, mla.w_uk) and torch.equal(legacy.w_uv, mla.w_uv)


def test_digest_pins_the_file(nano_q8, tmp_path):
    d1 = load_gguf(nano_q8).metadata["weight_digest"]
    assert load_gguf(nano_q8).metadata["weight_digest"] == d1
    r = GGUFReader(nano_q8)
    t = next(t for t in r.tensors if t.name == "blk.0.attn_q.weight")
    data = bytearray(_bytes(nano_q8))
    data[t.data_offset + 5] ^= 0x55  # one byte of one tensor's quantized data
    other = tmp_path / "other.gguf"
    other.write_bytes(bytes(data))
    assert load_gguf(other).metadata["weight_digest"] != d1


def test_read_config_reads_only_the_metadata(nano_q8):
    assert read_config(nano_q8) == load_gguf(nano_q8).config


# ----------------------------------------------------------------------------------------------
# Bad files
# ----------------------------------------------------------------------------------------------

def _bad(path, *words):
    with pytest.raises(BadInput) as exc:
        load_gguf(path)
    msg = str(exc.value)
    assert str(path) in msg, msg
    for word in words:
        assert word in msg, msg
    return msg


@pytest.mark.parametrize("keep", [0.999, 0.6, 0.3])
def test_truncated_data(nano_q8, tmp_path, keep):
    data = _bytes(nano_q8)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:int(len(data) * keep)])
    msg = _bad(cut, "truncated")
    assert str(int(len(data) * keep)) in msg  # says how big it is


def test_truncated_header(nano_q8, tmp_path):
    r = GGUFReader(nano_q8)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(_bytes(nano_q8)[:r.data_offset // 2])  # inside the metadata
    _bad(cut, "header")


def test_not_a_gguf(nano_q8, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGML" + _bytes(nano_q8)[4:])
    _bad(bad, "not a GGUF", "b'GGML'")
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    _bad(empty, "not a GGUF", "empty")
    with pytest.raises(BadInput, match="no such file"):
        load_gguf(tmp_path / "missing.gguf")


def test_wrong_architecture(nano_q8, tmp_path, rewrite):
    out = rewrite(nano_q8, tmp_path / "llama.gguf", arch="llama")
    _bad(out, "'llama'", "kimi-linear")


def test_missing_tensor(nano_q8, tmp_path, rewrite):
    out = rewrite(nano_q8, tmp_path / "missing.gguf", drop={"blk.2.ssm_beta.weight"})
    _bad(out, "blk.2.ssm_beta.weight", "missing")


def test_wrong_shape(nano_q8, tmp_path, rewrite):
    r = GGUFReader(nano_q8)
    t = next(t for t in r.tensors if t.name == "blk.1.ffn_up_exps.weight")
    fewer = np.array(t.data)[:, :-1]  # one row fewer per expert
    out = rewrite(nano_q8, tmp_path / "shape.gguf", replace={t.name: (t.name, Q.Q8_0, fewer)})
    _bad(out, "blk.1.ffn_up_exps.weight", "[16, 63, 256]", "expected [16, 64, 256]")


def test_wrong_shape_small_tensor(nano_q8, tmp_path, rewrite):
    norm = np.linspace(0.5, 1.5, 100, dtype=np.float32)
    out = rewrite(nano_q8, tmp_path / "norm.gguf", replace={"blk.0.ssm_norm.weight": ("blk.0.ssm_norm.weight",
                                                                                       Q.F32, norm)})
    _bad(out, "blk.0.ssm_norm.weight", "[100]", "expected [32]")


def test_unsupported_quant_type(nano_q8, tmp_path, rewrite):
    rng = np.random.default_rng(0)
    q5k = rng.integers(0, 256, (512, 256 // 256 * 176), dtype=np.uint8)  # Q5_K: 176 bytes per 256 values
    name = "blk.0.ffn_gate.weight"
    out = rewrite(nano_q8, tmp_path / "q5k.gguf", replace={name: (name, Q.Q5_K, q5k)})
    _bad(out, name, "Q5_K", "not supported")


@pytest.mark.parametrize("key", ["kimi-linear.kda.head_dim", "kimi-linear.attention.kv_lora_rank",
                                 "kimi-linear.attention.head_count_kv", "kimi-linear.expert_gating_func",
                                 "tokenizer.ggml.model"])
def test_missing_metadata(nano_q8, tmp_path, rewrite, key):
    out = rewrite(nano_q8, tmp_path / "meta.gguf", drop_kv={key})
    _bad(out, key, "missing")


def test_softmax_routing_is_refused(nano_q8, tmp_path, rewrite):
    out = rewrite(nano_q8, tmp_path / "gating.gguf",
                  set_kv={"kimi-linear.expert_gating_func": (1, GGUFValueType.UINT32, None)})
    _bad(out, "expert_gating_func", "sigmoid")


def test_original_file_untouched_by_failed_loads(nano_q8, tmp_path):
    copy = tmp_path / "copy.gguf"
    shutil.copy(nano_q8, copy)
    load_gguf(copy)
    assert copy.read_bytes() == nano_q8.read_bytes()
