"""Deterministic random-weight Kimi-Linear models, as GGUF files or in memory.

    synth_gguf("k3-nano.gguf", "k3-nano", "q4_k_m", seed=0)   # -> summary dict
    weights = synth_weights(load_preset("k3-nano"), "f32", seed=0)

Values are drawn so activations stay finite and logits vary through every layer: projections
normal with std 1/sqrt(fan_in) (lm_head 2/sqrt(D)), embedding std 1, norm weights 1 + N(0, 0.1),
conv taps N(0, 0.5), ssm_a = -A with A ~ U(1, 16) (transformers' A_log init), dt_bias the inverse
softplus of dt ~ logU(1e-3, 1e-1) (fla's init: moderate decays), router bias N(0, 0.05).

Two ways to make quantized weights, same distributions:
- "honest" (small models, the default below 2e8 parameters): float values, quantized with the
  reference round-to-nearest quantizers of `gguf.quants`;
- "direct" (the 48B): codes and scales drawn straight into the blocks (`quants.random_blocks`),
  about 0.5 GB/s per core, streamed tensor by tensor into the writer.

Determinism: every tensor has its own generator, seeded from (seed, crc32(tensor name)), so the
same preset + mix + seed gives a byte-identical file regardless of order or chunking.
"""

from __future__ import annotations

import dataclasses
import math
import time
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np

from .config import ModelConfig, load_preset
from .errors import BadInput
from .gguf import names as N
from .gguf.mix import Planned, get_mix, plan
from .gguf.quants import quantize, random_blocks
from .tokenizer import TokenizerData, byte_bpe_for
from .weights import ModelWeights

METHODS = ("auto", "honest", "direct")
HONEST_MAX_PARAMS = 200_000_000


def synth_config(config: ModelConfig | str, tokenizer: str = "bpe") -> tuple[ModelConfig, TokenizerData]:
    """The config as synth writes it (token ids filled from the tokenizer) and its tokenizer.

    tokenizer: "bpe" (k3-nano's byte-level BPE padded to the vocab, see sparkops.tokenizer) or "none".
    """
    cfg = load_preset(config) if isinstance(config, str) else config
    if tokenizer == "none":
        tok = TokenizerData("none", cfg.vocab_size, bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id,
                            pad_token_id=cfg.pad_token_id, source="synth")
        return cfg, tok
    if tokenizer != "bpe":
        raise BadInput(f"unknown synth tokenizer '{tokenizer}' (use 'bpe' or 'none')")
    tok = byte_bpe_for(cfg.vocab_size, cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id)
    cfg = dataclasses.replace(cfg, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                              pad_token_id=tok.pad_token_id)
    return cfg, tok


def choose_method(config: ModelConfig, method: str) -> str:
    if method not in METHODS:
        raise BadInput(f"unknown synth method '{method}' (use one of {', '.join(METHODS)})")
    if method == "auto":
        return "honest" if config.param_counts()["total"] <= HONEST_MAX_PARAMS else "direct"
    return method


# ----------------------------------------------------------------------------------------------
# Values
# ----------------------------------------------------------------------------------------------

def tensor_std(config: ModelConfig, spec: N.TensorSpec) -> float:
    """Standard deviation of a matrix's values: 1/sqrt(fan_in) (embedding 1, lm_head 2/sqrt(D))."""
    c, f = config, spec.rule.field
    fan_in = {
        "embed": None, "output": c.hidden_size / 4.0,
        "attn.f_b": c.kda_head_dim, "attn.g_b": c.kda_head_dim,
        "attn.w_uk": c.kv_lora_rank, "attn.w_uv": c.kv_lora_rank,
        "ffn.down": c.intermediate_size, "ffn.s_down": c.shared_intermediate,
        "ffn.down_exps": c.moe_intermediate_size,
    }
    if f == "attn.o_proj":
        return 1.0 / math.sqrt(c.kda_inner if spec.rule in N.KDA_RULES else c.mla_heads * c.v_head_dim)
    if f in fan_in:
        return 1.0 if fan_in[f] is None else 1.0 / math.sqrt(fan_in[f])
    return 1.0 / math.sqrt(c.hidden_size)


def small_values(config: ModelConfig, spec: N.TensorSpec, rng: np.random.Generator) -> np.ndarray:
    """Values of a small (always F32) tensor, in its stored shape."""
    shape = spec.stored_shape(config)
    f = spec.rule.field
    if f in ("attn_norm", "ffn_norm", "output_norm", "attn.o_norm", "attn.kv_norm"):
        x = 1.0 + 0.1 * rng.standard_normal(shape)
    elif f.startswith("attn.conv_"):
        x = 0.5 * rng.standard_normal(shape)
    elif f == "attn.a":  # -exp(A_log) with A_log = log(U(1, 16))
        x = -rng.uniform(1.0, 16.0, shape)
    elif f == "attn.dt_bias":  # inverse softplus of dt ~ logU(1e-3, 1e-1)
        dt = np.exp(rng.uniform(math.log(1e-3), math.log(1e-1), shape))
        x = dt + np.log(-np.expm1(-dt))
    elif f == "ffn.router":
        x = rng.standard_normal(shape) / math.sqrt(config.hidden_size)
    elif f == "ffn.bias":
        x = 0.05 * rng.standard_normal(shape)
    else:  # pragma: no cover - every SMALL rule is listed above
        raise AssertionError(f"no distribution for {spec.name}")
    return x.astype(np.float32)


def tensor_rng(seed: int, name: str, part: int = 0) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), zlib.crc32(name.encode()), part]))


def synth_tensor(config: ModelConfig, p: Planned, seed: int, method: str) -> np.ndarray:
    """The stored data of one planned tensor (see `gguf.quants` for the layouts)."""
    rng = tensor_rng(seed, p.name)
    if p.spec.role == N.SMALL:
        return quantize(small_values(config, p.spec, rng), p.qtype)
    std = tensor_std(config, p.spec)
    if method == "direct":
        return random_blocks(rng, p.shape, p.qtype, std)
    values = (rng.standard_normal(p.shape, dtype=np.float32) * np.float32(std))
    return quantize(values, p.qtype)


def synth_arrays(config: ModelConfig, planned: list[Planned], seed: int, method: str) -> Iterator[np.ndarray]:
    for p in planned:
        yield synth_tensor(config, p, seed, method)


# ----------------------------------------------------------------------------------------------
# Files and in-memory models
# ----------------------------------------------------------------------------------------------

def synth_gguf(path: str | Path, preset: ModelConfig | str, mix: str = "q4_k_m", seed: int = 0,
               method: str = "auto", tokenizer: str = "bpe", progress: bool = False) -> dict:
    """Write a random-weight model (see the module docstring); returns a summary of what was written."""
    from .gguf.writer import write_gguf

    t0 = time.perf_counter()
    config, tok = synth_config(preset, tokenizer)
    m = get_mix(mix)
    how = choose_method(config, method)
    planned = plan(config, m)
    fallbacks = [p.fallback for p in planned if p.fallback]
    extra = [("sparkops.source", "synth", "str"),
             ("sparkops.synth.preset", config.name, "str"),
             ("sparkops.synth.seed", int(seed), "u64"),
             ("sparkops.synth.method", how, "str"),
             ("sparkops.quant_fallbacks", fallbacks, "str[]")]
    out = write_gguf(path, config, planned, synth_arrays(config, planned, seed, how), tok, extra_kv=extra,
                     mix=m.name, progress=progress, desc=f"synth {config.name} {m.name}")
    types: dict[str, int] = {}
    for p in planned:
        types[p.qtype.name] = types.get(p.qtype.name, 0) + 1
    return {**out, "preset": config.name, "mix": m.name, "seed": int(seed), "method": how,
            "tokenizer": tok.model, "types": types, "fallbacks": fallbacks,
            "params": config.param_counts()["total"], "seconds": time.perf_counter() - t0}


def synth_weights(config: ModelConfig | str, mix: str = "f32", seed: int = 0, method: str = "auto",
                  tokenizer: str = "bpe") -> ModelWeights:
    """The same model as `synth_gguf` would write, built in memory (for tests; no file)."""
    from .gguf.reader import assemble_weights

    cfg, tok = synth_config(config, tokenizer)
    how = choose_method(cfg, method)
    planned = plan(cfg, get_mix(mix))
    arrays = {p.name: (p, synth_tensor(cfg, p, seed, how)) for p in planned}
    weights = assemble_weights(cfg, arrays, where=f"synth {cfg.name}")
    weights.metadata.update({"source": "synth (in memory)", "quant_mix": get_mix(mix).name, "synth_seed": seed,
                             "synth_preset": cfg.name, "tokenizer": tok,
                             "quant_fallbacks": [p.fallback for p in planned if p.fallback]})
    return weights


def synth_file(preset: ModelConfig | str, mix: str, path: str | Path, seed: int = 0, progress: bool = False,
               **kwargs) -> dict:
    """`synth_gguf` with the engine's argument order (preset, mix, path)."""
    return synth_gguf(path, preset, mix, seed=seed, progress=progress, **kwargs)
