"""Import a Hugging Face Kimi-Linear checkpoint (config.json + *.safetensors) into a kimi-linear GGUF.

    convert_hf("Kimi-Linear-48B-A3B-Instruct/", "kimi.gguf", mix="bf16")

Both weight namings are read, tensor by tensor:
- the checkpoint's own (remote-code) names, spec sections 3.1 / 4 / 5: self_attn.{q,k,v}_conv1d,
  f_a_proj, f_b_proj, b_proj, A_log, dt_bias, g_a_proj, g_b_proj, o_norm; block_sparse_moe.gate,
  block_sparse_moe.experts.{e}.w1 (gate) / w3 (up) / w2 (down); kv_b_proj;
- transformers' native kimi_linear names: self_attn.conv1d (q, k, v convs concatenated, [3P, 1, W]),
  self_attn.forget_gate.{f_a_proj, f_b_proj, A_log, dt_bias}; mlp.gate, mlp.experts.gate_up_proj
  ([E, 2F, D], gate rows first) and mlp.experts.down_proj ([E, D, F]); also beta_proj,
  forget_gate_down/up and output_gate_down/up where a version uses them.

On the way: A_log -> ssm_a = -exp(A_log); kv_b_proj [N*(Dn+Dv), Lkv] -> attn_k_b (per head W_UK
transposed, [N, Lkv, Dn]) and attn_v_b ([N, Dv, Lkv]); conv [P, 1, W] -> [1, P, 1, W] (ggml ne
[W, 1, P, 1]); experts stacked [E, F, D]. Then each tensor is quantized to the mix's type and
streamed into the writer (one tensor in memory at a time; the largest is one stacked expert tensor).

The default mix keeps the checkpoint's precision (bf16 -> "bf16", f16 -> "f16", f32 -> "f32").
The tokenizer comes from tokenizer.json (a byte-level BPE); without one the file gets tokenizer
model "none" (token ids only) unless `tokenizer="bpe"` asks for sparkops' byte-level BPE.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from .config import ModelConfig
from .errors import BadInput
from .gguf import names as N
from .gguf.metadata import build_config
from .gguf.mix import Planned, get_mix, plan
from .gguf.quants import quantize
from .tokenizer import CONTROL, NORMAL, UNUSED, TokenizerData, byte_bpe_for

# ----------------------------------------------------------------------------------------------
# config.json
# ----------------------------------------------------------------------------------------------


def _pick(cfg: dict, *keys: str, default: Any = ...) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    if default is ...:
        raise BadInput(f"config.json: none of {list(keys)} is set; it is needed to build the model")
    return default


def config_from_hf(cfg: dict, name: str) -> ModelConfig:
    """A ModelConfig from a Kimi-Linear config.json (remote-code or transformers-native field names)."""
    model_type = cfg.get("model_type")
    if model_type not in (None, "kimi_linear"):
        raise BadInput(f"config.json: model_type is '{model_type}', expected 'kimi_linear'")
    if cfg.get("q_lora_rank"):
        raise BadInput("config.json: q_lora_rank is set; Kimi-Linear's MLA has a plain q_proj and sparkops runs "
                       "nothing else")
    if str(cfg.get("moe_router_activation_func", "sigmoid")).lower() != "sigmoid":
        raise BadInput(f"config.json: moe_router_activation_func is {cfg['moe_router_activation_func']!r}; "
                       f"Kimi-Linear routes with sigmoid")
    if cfg.get("mla_use_nope") is False:
        raise BadInput("config.json: mla_use_nope is false (RoPE in MLA); Kimi-Linear is NoPE and sparkops "
                       "has no RoPE")
    n_layers = int(_pick(cfg, "num_hidden_layers"))
    lin = cfg.get("linear_attn_config") or {}
    if "kda_layers" in lin and "full_attn_layers" in lin:
        kda = tuple(int(x) for x in lin["kda_layers"])
        mla = tuple(int(x) for x in lin["full_attn_layers"])
    elif cfg.get("layer_types"):
        types = cfg["layer_types"]
        kda = tuple(i + 1 for i, t in enumerate(types) if t == "linear_attention")
        mla = tuple(i + 1 for i, t in enumerate(types) if t != "linear_attention")
    else:
        raise BadInput("config.json: neither linear_attn_config.kda_layers/full_attn_layers nor layer_types says "
                       "which layers are KDA and which MLA")
    if "first_k_dense_replace" in cfg:
        first_dense = int(cfg["first_k_dense_replace"])
    elif cfg.get("mlp_layer_types"):
        kinds = cfg["mlp_layer_types"]
        first_dense = next((i for i, k in enumerate(kinds) if k != "dense"), len(kinds))
        if any(k == "dense" for k in kinds[first_dense:]):
            raise BadInput("config.json: dense MLP layers after the first MoE layer are not a Kimi-Linear layout")
    else:
        first_dense = 1
    eos = _pick(cfg, "eos_token_id", default=None)
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    fields = dict(
        name=name,
        hidden_size=int(_pick(cfg, "hidden_size")),
        num_layers=n_layers,
        vocab_size=int(_pick(cfg, "vocab_size")),
        context_length=int(_pick(cfg, "model_max_length", "max_position_embeddings", default=1048576)),
        kda_layers=kda,
        full_attn_layers=mla,
        kda_heads=int(_pick(lin, "num_heads", default=None) or _pick(cfg, "linear_num_heads")),
        kda_head_dim=int(_pick(lin, "head_dim", default=None) or _pick(cfg, "linear_head_dim")),
        conv_kernel=int(_pick(lin, "short_conv_kernel_size", default=None)
                        or _pick(cfg, "linear_conv_kernel_dim", default=4)),
        mla_heads=int(_pick(cfg, "num_attention_heads")),
        kv_lora_rank=int(_pick(cfg, "kv_lora_rank")),
        qk_nope_head_dim=int(_pick(cfg, "qk_nope_head_dim")),
        qk_rope_head_dim=int(_pick(cfg, "qk_rope_head_dim")),
        v_head_dim=int(_pick(cfg, "v_head_dim")),
        intermediate_size=int(_pick(cfg, "intermediate_size")),
        first_k_dense=first_dense,
        n_experts=int(_pick(cfg, "num_experts", "n_routed_experts", "num_local_experts")),
        n_experts_per_token=int(_pick(cfg, "num_experts_per_token", "num_experts_per_tok")),
        n_shared_experts=int(_pick(cfg, "num_shared_experts", "n_shared_experts", default=0)),
        moe_intermediate_size=int(_pick(cfg, "moe_intermediate_size")),
        routed_scaling_factor=float(_pick(cfg, "routed_scaling_factor", default=1.0)),
        n_group=int(_pick(cfg, "num_expert_group", "n_group", default=1)),
        topk_group=int(_pick(cfg, "topk_group", default=1)),
        rms_norm_eps=float(_pick(cfg, "rms_norm_eps", default=1e-5)),
        bos_token_id=_pick(cfg, "bos_token_id", default=None),
        eos_token_id=eos,
        pad_token_id=_pick(cfg, "pad_token_id", default=None),
        notes=f"converted from a Hugging Face checkpoint ({cfg.get('architectures', ['?'])[0]})",
    )
    return build_config(fields, "config.json")


# ----------------------------------------------------------------------------------------------
# safetensors
# ----------------------------------------------------------------------------------------------

class Checkpoint:
    """The tensors of every *.safetensors file of a folder, read one at a time."""

    def __init__(self, folder: Path):
        from safetensors import safe_open

        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise BadInput(f"{folder}: no *.safetensors files (convert reads safetensors checkpoints only)")
        self.folder = folder
        self._handles = {}
        self.where: dict[str, Path] = {}
        for f in files:
            try:
                h = safe_open(str(f), framework="pt")
            except Exception as exc:
                raise BadInput(f"{f}: cannot read this safetensors file ({exc}); it is damaged or incomplete") from None
            self._handles[f] = h
            for k in h.keys():
                self.where[k] = f
        self.used: set[str] = set()

    def has(self, name: str) -> bool:
        return name in self.where

    def get(self, name: str) -> torch.Tensor:
        self.used.add(name)
        return self._handles[self.where[name]].get_tensor(name)

    def first(self, *names: str) -> tuple[str, torch.Tensor]:
        for n in names:
            if self.has(n):
                return n, self.get(n)
        raise BadInput(f"{self.folder}: tensor {names[0]!r} is missing (also looked for {list(names[1:])}); "
                       f"the checkpoint is incomplete or not Kimi-Linear")

    def dtype_name(self, name: str) -> str:
        """The stored dtype ("BF16", "F16", "F32", ...) without reading the data."""
        return str(self._handles[self.where[name]].get_slice(name).get_dtype()).upper()


def _f32(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).contiguous().numpy()


def _shaped(name: str, x: np.ndarray, shape: tuple[int, ...], what: str) -> np.ndarray:
    if x.size != int(np.prod(shape)):
        raise BadInput(f"checkpoint tensor '{name}' has shape {list(x.shape)}, which does not hold {what} "
                       f"{list(shape)} for this config.json")
    return x.reshape(shape)


def _exact(name: str, x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if tuple(x.shape) != tuple(shape):
        raise BadInput(f"checkpoint tensor '{name}' has shape {list(x.shape)}, expected {list(shape)} "
                       f"for this config.json")
    return x


class _Source:
    """Float32 values of every GGUF tensor, in its stored shape, from the checkpoint."""

    def __init__(self, ck: Checkpoint, config: ModelConfig):
        self.ck, self.c = ck, config

    def values(self, spec: N.TensorSpec) -> np.ndarray:
        c, ck = self.c, self.ck
        stored = spec.stored_shape(c)
        if spec.layer is None:
            hf = {"embed": ("model.embed_tokens.weight",), "output_norm": ("model.norm.weight",),
                  "output": ("lm_head.weight", "model.embed_tokens.weight")}[spec.rule.field]
            name, t = ck.first(*hf)
            return _exact(name, _f32(t), stored)
        p = f"model.layers.{spec.layer}."
        a, m = p + "self_attn.", p + "block_sparse_moe."
        f = spec.rule.field
        simple: dict[str, tuple[str, ...]] = {
            "attn_norm": (p + "input_layernorm.weight",),
            "ffn_norm": (p + "post_attention_layernorm.weight",),
            "attn.q": (a + "q_proj.weight",), "attn.k": (a + "k_proj.weight",), "attn.v": (a + "v_proj.weight",),
            "attn.f_a": (a + "f_a_proj.weight", a + "forget_gate.f_a_proj.weight", a + "forget_gate_down.weight"),
            "attn.f_b": (a + "f_b_proj.weight", a + "forget_gate.f_b_proj.weight", a + "forget_gate_up.weight"),
            "attn.beta": (a + "b_proj.weight", a + "beta_proj.weight"),
            "attn.g_a": (a + "g_a_proj.weight", a + "output_gate_down.weight"),
            "attn.g_b": (a + "g_b_proj.weight", a + "output_gate_up.weight"),
            "attn.o_norm": (a + "o_norm.weight",),
            "attn.o_proj": (a + "o_proj.weight",),
            "attn.kv_a": (a + "kv_a_proj_with_mqa.weight",),
            "attn.kv_norm": (a + "kv_a_layernorm.weight",),
            # the dense layer: mlp.* in the checkpoint; transformers' save_pretrained renames it block_sparse_moe.*
            "ffn.gate": (p + "mlp.gate_proj.weight", m + "gate_proj.weight"),
            "ffn.up": (p + "mlp.up_proj.weight", m + "up_proj.weight"),
            "ffn.down": (p + "mlp.down_proj.weight", m + "down_proj.weight"),
            "ffn.router": (m + "gate.weight", p + "mlp.gate.weight"),
            "ffn.bias": (m + "gate.e_score_correction_bias", p + "mlp.gate.e_score_correction_bias"),
            "ffn.s_gate": (m + "shared_experts.gate_proj.weight", p + "mlp.shared_experts.gate_proj.weight"),
            "ffn.s_up": (m + "shared_experts.up_proj.weight", p + "mlp.shared_experts.up_proj.weight"),
            "ffn.s_down": (m + "shared_experts.down_proj.weight", p + "mlp.shared_experts.down_proj.weight"),
        }
        if f in simple:
            name, t = ck.first(*simple[f])
            x = _f32(t)
            return _exact(name, x, stored) if not spec.rule.small else _shaped(name, x, stored, spec.name)
        if f.startswith("attn.conv_"):
            which = "qkv".index(f[-1])
            own = a + f"{f[-1]}_conv1d.weight"
            if ck.has(own):
                return _shaped(own, _f32(ck.get(own)), stored, spec.name)
            name, t = ck.first(a + "conv1d.weight", own)
            x = _f32(t).reshape(3, c.kda_inner, -1)  # [q|k|v, P, W]
            return _shaped(name, x[which], stored, spec.name)
        if f == "attn.a":
            name, t = ck.first(a + "A_log", a + "forget_gate.A_log")
            return _shaped(name, -np.exp(_f32(t)), stored, spec.name)
        if f == "attn.dt_bias":
            name, t = ck.first(a + "dt_bias", a + "forget_gate.dt_bias")
            return _shaped(name, _f32(t), stored, spec.name)  # [H, Dk] flattens head-major
        if f in ("attn.w_uk", "attn.w_uv"):
            name, t = ck.first(a + "kv_b_proj.weight")
            kv = _exact(name, _f32(t), (c.mla_heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank))
            kv = kv.reshape(c.mla_heads, c.qk_nope_head_dim + c.v_head_dim, c.kv_lora_rank)
            if f == "attn.w_uk":
                return np.ascontiguousarray(kv[:, :c.qk_nope_head_dim].transpose(0, 2, 1))  # [N, Lkv, Dn]
            return np.ascontiguousarray(kv[:, c.qk_nope_head_dim:])  # [N, Dv, Lkv]
        if f in ("ffn.gate_exps", "ffn.up_exps", "ffn.down_exps"):
            return self._experts(spec, p, m, stored)
        raise AssertionError(f"no checkpoint source for {spec.name}")  # pragma: no cover

    def _experts(self, spec: N.TensorSpec, p: str, m: str, stored: tuple[int, ...]) -> np.ndarray:
        c, ck, f = self.c, self.ck, spec.rule.field
        w = {"ffn.gate_exps": "w1", "ffn.up_exps": "w3", "ffn.down_exps": "w2"}[f]
        if ck.has(f"{m}experts.0.{w}.weight"):
            out = np.empty(stored, np.float32)
            for e in range(c.n_experts):
                name = f"{m}experts.{e}.{w}.weight"
                if not ck.has(name):
                    raise BadInput(f"{ck.folder}: tensor '{name}' is missing (expert {e} of {c.n_experts})")
                out[e] = _exact(name, _f32(ck.get(name)), stored[1:])
            return out
        if f == "ffn.down_exps":
            name, t = ck.first(p + "mlp.experts.down_proj")
            return _exact(name, _f32(t), stored)
        name, t = ck.first(p + "mlp.experts.gate_up_proj", f"{m}experts.0.{w}.weight")
        x = _exact(name, _f32(t), (c.n_experts, 2 * c.moe_intermediate_size, c.hidden_size))
        half = c.moe_intermediate_size
        return np.ascontiguousarray(x[:, :half] if f == "ffn.gate_exps" else x[:, half:])


# ----------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------

def tokenizer_from_hf(folder: Path, config: ModelConfig, how: str) -> tuple[TokenizerData, str]:
    """(tokenizer, note). how: "auto" (tokenizer.json if there, else "none"), "none", or "bpe"."""
    if how == "none":
        return _none(config), "tokenizer 'none' (asked for)"
    if how == "bpe":
        return byte_bpe_for(config.vocab_size, config.bos_token_id, config.eos_token_id, config.pad_token_id), \
            "sparkops' byte-level BPE (asked for)"
    if how != "auto":
        raise BadInput(f"unknown tokenizer choice '{how}' (use auto, none or bpe)")
    tj = folder / "tokenizer.json"
    if not tj.exists():
        why = "tiktoken.model is not converted yet" if (folder / "tiktoken.model").exists() else "no tokenizer.json"
        return _none(config), f"tokenizer 'none': {why} (token ids only; pass --tokenizer bpe for a test vocabulary)"
    data = json.loads(tj.read_text(encoding="utf-8"))
    model = data.get("model") or {}
    if model.get("type") != "BPE":
        return _none(config), f"tokenizer 'none': tokenizer.json holds a {model.get('type')} model, not BPE"
    vocab: dict[str, int] = model.get("vocab") or {}
    size = max(config.vocab_size, max(vocab.values(), default=-1) + 1)
    tokens: list[str | None] = [None] * size
    types = [NORMAL] * size
    for tok, i in vocab.items():
        tokens[i] = tok
    for added in data.get("added_tokens") or []:
        i = int(added["id"])
        if i < size:
            tokens[i] = added["content"]
            types[i] = CONTROL if added.get("special") else NORMAL
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i] = f"<|unused_{i}|>"
            types[i] = UNUSED
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    if size != config.vocab_size:
        raise BadInput(f"{tj}: the vocabulary has {size} entries but config.json says vocab_size "
                       f"{config.vocab_size}")
    tok = TokenizerData("gpt2", size, tuple(tokens), tuple(types), tuple(merges), "gpt-2",  # type: ignore[arg-type]
                        config.bos_token_id, config.eos_token_id, config.pad_token_id, source=str(tj))
    return tok, f"byte-level BPE from {tj.name}"


def _none(config: ModelConfig) -> TokenizerData:
    return TokenizerData("none", config.vocab_size, bos_token_id=config.bos_token_id,
                         eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id)


# ----------------------------------------------------------------------------------------------
# The conversion
# ----------------------------------------------------------------------------------------------

def _default_mix(ck: Checkpoint) -> str:
    """The mix that keeps the checkpoint's precision (judged by its first q_proj)."""
    name = next((k for k in sorted(ck.where) if k.endswith("q_proj.weight")), None)
    return {"BF16": "bf16", "F16": "f16"}.get(ck.dtype_name(name) if name else "F32", "f32")


def convert_hf(hf_dir: str | Path, out: str | Path, mix: str | None = None, tokenizer: str = "auto",
               name: str | None = None, progress: bool = False) -> dict:
    """Convert the checkpoint in `hf_dir` to a GGUF at `out`; returns a summary."""
    from .gguf.writer import write_gguf

    t0 = time.perf_counter()
    folder = Path(hf_dir)
    cfg_path = folder / "config.json"
    if not cfg_path.exists():
        raise BadInput(f"{folder}: no config.json (is this a Hugging Face checkpoint folder?)")
    try:
        hf_cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise BadInput(f"{cfg_path}: not valid JSON ({exc})") from None
    config = config_from_hf(hf_cfg, name or folder.resolve().name)
    ck = Checkpoint(folder)
    m = get_mix(mix or _default_mix(ck))
    tok, tok_note = tokenizer_from_hf(folder, config, tokenizer)
    planned = plan(config, m)
    if config.n_shared_experts and not any(ck.has(f"model.layers.{config.first_k_dense}.{s}")
                                           for s in ("block_sparse_moe.shared_experts.gate_proj.weight",
                                                     "mlp.shared_experts.gate_proj.weight")):
        raise BadInput(f"{folder}: config.json says {config.n_shared_experts} shared expert(s) but layer "
                       f"{config.first_k_dense} has no shared_experts tensors")
    source = _Source(ck, config)
    fallbacks = [p.fallback for p in planned if p.fallback]
    extra = [("sparkops.source", f"convert {folder.resolve().name}", "str"),
             ("sparkops.quant_fallbacks", fallbacks, "str[]")]
    result = write_gguf(out, config, planned, _arrays(source, planned), tok, extra_kv=extra, mix=m.name,
                        progress=progress, desc=f"convert {config.name} {m.name}")
    unused = sorted(set(ck.where) - ck.used)
    return {**result, "model": config.name, "mix": m.name, "tokenizer": tok_note, "fallbacks": fallbacks,
            "unused_checkpoint_tensors": unused, "params": config.param_counts()["total"],
            "seconds": time.perf_counter() - t0}


def _arrays(source: _Source, planned: list[Planned]) -> Iterator[np.ndarray]:
    for p in planned:
        yield quantize(source.values(p.spec), p.qtype)


# ----------------------------------------------------------------------------------------------
# The other way: sparkops weights as a transformers KimiLinearForCausalLM (for comparisons)
# ----------------------------------------------------------------------------------------------

def hf_config_dict(config: ModelConfig) -> dict:
    """KimiLinearConfig(**this) describes `config` (transformers' field names)."""
    c = config
    return dict(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        moe_intermediate_size=c.moe_intermediate_size, num_hidden_layers=c.num_layers,
        num_attention_heads=c.mla_heads, num_key_value_heads=c.mla_heads, kv_lora_rank=c.kv_lora_rank,
        q_lora_rank=None, qk_rope_head_dim=c.qk_rope_head_dim, qk_nope_head_dim=c.qk_nope_head_dim,
        v_head_dim=c.v_head_dim, n_group=c.n_group, topk_group=c.topk_group,
        num_experts_per_tok=c.n_experts_per_token, num_local_experts=c.n_experts,
        n_shared_experts=c.n_shared_experts, routed_scaling_factor=c.routed_scaling_factor,
        rms_norm_eps=c.rms_norm_eps, max_position_embeddings=c.context_length, tie_word_embeddings=False,
        first_k_dense_replace=c.first_k_dense,
        linear_attn_config={"kda_layers": list(c.kda_layers), "full_attn_layers": list(c.full_attn_layers),
                            "head_dim": c.kda_head_dim, "num_heads": c.kda_heads,
                            "short_conv_kernel_size": c.conv_kernel},
        bos_token_id=c.bos_token_id, eos_token_id=c.eos_token_id, pad_token_id=c.pad_token_id,
    )


def hf_state_dict(weights) -> dict[str, torch.Tensor]:
    """The weights, dequantized to float32, under transformers' native kimi_linear names.

    `KimiLinearForCausalLM(KimiLinearConfig(**hf_config_dict(c))).load_state_dict(hf_state_dict(w))`
    gives the transformers model of exactly these (dequantized) weights.
    """
    c = weights.config

    def dq(x) -> torch.Tensor:
        return x if isinstance(x, torch.Tensor) else x.dequantize()

    sd = {"model.embed_tokens.weight": dq(weights.embed), "model.norm.weight": weights.output_norm,
          "lm_head.weight": dq(weights.output)}
    for i, layer in enumerate(weights.layers):
        p = f"model.layers.{i}."
        a, at = p + "self_attn.", layer.attn
        sd[p + "input_layernorm.weight"] = layer.attn_norm
        sd[p + "post_attention_layernorm.weight"] = layer.ffn_norm
        if layer.kind == "kda":
            sd.update({a + "q_proj.weight": dq(at.q), a + "k_proj.weight": dq(at.k), a + "v_proj.weight": dq(at.v),
                       a + "conv1d.weight": torch.cat([at.conv_q, at.conv_k, at.conv_v])[:, None, :],
                       a + "forget_gate.dt_bias": at.dt_bias,
                       a + "forget_gate.A_log": torch.log(-at.a).view(1, 1, c.kda_heads, 1),
                       a + "forget_gate.f_a_proj.weight": dq(at.f_a), a + "forget_gate.f_b_proj.weight": dq(at.f_b),
                       a + "b_proj.weight": dq(at.beta), a + "g_a_proj.weight": dq(at.g_a),
                       a + "g_b_proj.weight": dq(at.g_b), a + "o_norm.weight": at.o_norm,
                       a + "o_proj.weight": dq(at.o_proj)})
        else:
            kv_b = torch.cat([at.w_uk, at.w_uv], dim=1).reshape(-1, c.kv_lora_rank)  # [N*(Dn+Dv), Lkv]
            sd.update({a + "q_proj.weight": dq(at.q), a + "kv_a_proj_with_mqa.weight": dq(at.kv_a),
                       a + "kv_a_layernorm.weight": at.kv_norm, a + "kv_b_proj.weight": kv_b,
                       a + "o_proj.weight": dq(at.o_proj)})
        f, m = layer.ffn, p + "mlp."
        if c.is_moe(i):
            sd.update({m + "gate.weight": f.router, m + "gate.e_score_correction_bias": f.bias,
                       m + "experts.gate_up_proj": torch.cat([dq(f.gate_exps), dq(f.up_exps)], dim=1),
                       m + "experts.down_proj": dq(f.down_exps)})
            if f.s_gate is not None:
                sd.update({m + "shared_experts.gate_proj.weight": dq(f.s_gate),
                           m + "shared_experts.up_proj.weight": dq(f.s_up),
                           m + "shared_experts.down_proj.weight": dq(f.s_down)})
        else:
            sd.update({m + "gate_proj.weight": dq(f.gate), m + "up_proj.weight": dq(f.up),
                       m + "down_proj.weight": dq(f.down)})
    return {k: v.detach().to(torch.float32).contiguous() for k, v in sd.items()}
