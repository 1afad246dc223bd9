"""ModelConfig <-> GGUF metadata key/values (the keys are listed in `names.META_KEYS`).

Floats llama.cpp wants as f32 (rms eps, expert_weights_scale) are read back as the shortest
decimal that gives the same f32 (1e-5 stays 1e-5, 2.446 stays 2.446), so a written config reads
back equal. Config fields llama.cpp has no key for are kept under `sparkops.*` (f64); a file
without them (llama.cpp's own converter) gets ModelConfig's defaults, and the reader lists which
ones it defaulted.
"""

from __future__ import annotations

from dataclasses import fields as dc_fields
from typing import Any

import numpy as np
from gguf import GGUFValueType

from ..config import ModelConfig
from ..errors import BadInput
from .names import ARCH, GATING_SIGMOID, meta_key

V = GGUFValueType


def _f32_exact(x: float) -> float:
    """The shortest decimal that rounds to the same float32 (undoes the f32 storage of 1e-5)."""
    return float(np.format_float_positional(np.float32(x), unique=True, trim="-"))  # shortest f32 repr


def config_to_kv(config: ModelConfig) -> list[tuple[str, Any, GGUFValueType, GGUFValueType | None]]:
    """(key, value, type, array element type) for every config key, in write order."""
    c = config
    a = lambda k: meta_key(k, ARCH)  # noqa: E731
    kinds = [0 if k == "kda" else 1 for k in c.layer_kinds]
    kv: list[tuple[str, Any, GGUFValueType, GGUFValueType | None]] = [
        ("general.name", c.name, V.STRING, None),
        (a("{arch}.context_length"), c.context_length, V.UINT32, None),
        (a("{arch}.embedding_length"), c.hidden_size, V.UINT32, None),
        (a("{arch}.block_count"), c.num_layers, V.UINT32, None),
        (a("{arch}.vocab_size"), c.vocab_size, V.UINT32, None),
        (a("{arch}.feed_forward_length"), c.intermediate_size, V.UINT32, None),
    ]
    if c.kda_heads == c.mla_heads:
        kv.append((a("{arch}.attention.head_count"), c.mla_heads, V.UINT32, None))
    else:  # llama.cpp would use element 0 for every layer; sparkops reads it per layer
        heads = [c.kda_heads if k == 0 else c.mla_heads for k in kinds]
        kv.append((a("{arch}.attention.head_count"), heads, V.ARRAY, V.UINT32))
        kv.append(("sparkops.kda_head_count", c.kda_heads, V.UINT32, None))
    kv += [
        (a("{arch}.attention.head_count_kv"), kinds, V.ARRAY, V.INT32),
        (a("{arch}.attention.layer_norm_rms_epsilon"), c.rms_norm_eps, V.FLOAT32, None),
        (a("{arch}.attention.kv_lora_rank"), c.kv_lora_rank, V.UINT32, None),
        (a("{arch}.attention.key_length_mla"), c.qk_head_dim, V.UINT32, None),
        (a("{arch}.attention.value_length_mla"), c.v_head_dim, V.UINT32, None),
        (a("{arch}.attention.key_length"), c.latent_dim, V.UINT32, None),
        (a("{arch}.attention.value_length"), c.kv_lora_rank, V.UINT32, None),
        (a("{arch}.rope.dimension_count"), c.qk_rope_head_dim, V.UINT32, None),
        (a("{arch}.ssm.conv_kernel"), c.conv_kernel, V.UINT32, None),
        (a("{arch}.kda.head_dim"), c.kda_head_dim, V.UINT32, None),
        (a("{arch}.expert_count"), c.n_experts, V.UINT32, None),
        (a("{arch}.expert_used_count"), c.n_experts_per_token, V.UINT32, None),
        (a("{arch}.expert_feed_forward_length"), c.moe_intermediate_size, V.UINT32, None),
        (a("{arch}.expert_shared_count"), c.n_shared_experts, V.UINT32, None),
        (a("{arch}.leading_dense_block_count"), c.first_k_dense, V.UINT32, None),
        (a("{arch}.expert_weights_scale"), c.routed_scaling_factor, V.FLOAT32, None),
        (a("{arch}.expert_gating_func"), GATING_SIGMOID, V.UINT32, None),
        (a("{arch}.expert_group_count"), c.n_group, V.UINT32, None),
        (a("{arch}.expert_group_used_count"), c.topk_group, V.UINT32, None),
        ("sparkops.kv_norm_eps", c.kv_norm_eps, V.FLOAT64, None),
        ("sparkops.l2_eps", c.l2_eps, V.FLOAT64, None),
        ("sparkops.router_renorm_eps", c.router_renorm_eps, V.FLOAT64, None),
    ]
    if c.notes:
        kv.append(("sparkops.notes", c.notes, V.STRING, None))
    return kv


def config_fields_from_kv(values: dict[str, Any], where: str, fallback_name: str) -> tuple[dict, list[str]]:
    """ModelConfig fields from a file's key/values (see `build_config`), and the fields that were defaulted.

    BadInput names the missing key, or the value sparkops cannot run (non-sigmoid routing, a q-lora).
    """
    def get(key: str, default: Any = ...) -> Any:
        full = meta_key(key, ARCH)
        if full in values:
            return values[full]
        if default is ...:
            raise BadInput(f"{where}: metadata key '{full}' is missing; a kimi-linear GGUF must carry it "
                           f"(re-create the file with `sparkops convert` or `sparkops synth`)")
        return default

    def as_int(key: str, default: Any = ...) -> int:
        v = get(key, default)
        if isinstance(v, list):
            raise BadInput(f"{where}: metadata key '{meta_key(key)}' is an array, expected one number")
        return int(v)

    n_layers = as_int("{arch}.block_count")
    kinds = get("{arch}.attention.head_count_kv")
    if not isinstance(kinds, list) or len(kinds) != n_layers:
        raise BadInput(f"{where}: '{meta_key('{arch}.attention.head_count_kv')}' must be a per-layer array of "
                       f"{n_layers} entries (0 = KDA layer, 1 = MLA layer), got {kinds!r}")
    kda_layers = tuple(i + 1 for i, k in enumerate(kinds) if int(k) == 0)
    mla_layers = tuple(i + 1 for i, k in enumerate(kinds) if int(k) != 0)
    heads = get("{arch}.attention.head_count")
    if isinstance(heads, list):
        if len(heads) != n_layers:
            raise BadInput(f"{where}: per-layer '{meta_key('{arch}.attention.head_count')}' has {len(heads)} "
                           f"entries for {n_layers} layers")
        kda_h = {int(heads[i - 1]) for i in kda_layers}
        mla_h = {int(heads[i - 1]) for i in mla_layers}
        if len(kda_h) > 1 or len(mla_h) > 1:
            raise BadInput(f"{where}: head counts must be the same for every layer of a kind, got {heads}")
        kda_heads, mla_heads = (kda_h or mla_h).pop(), (mla_h or kda_h).pop()
    else:
        mla_heads = int(heads)
        kda_heads = as_int("sparkops.kda_head_count", mla_heads) if "sparkops.kda_head_count" in values \
            else mla_heads
    gating = as_int("{arch}.expert_gating_func")
    if gating != GATING_SIGMOID:
        raise BadInput(f"{where}: expert_gating_func is {gating}; kimi-linear routes with sigmoid "
                       f"({GATING_SIGMOID}) and sparkops runs nothing else")
    if meta_key("{arch}.attention.q_lora_rank") in values and as_int("{arch}.attention.q_lora_rank"):
        raise BadInput(f"{where}: the file has a q-lora (attention.q_lora_rank > 0); kimi-linear's MLA uses a "
                       f"plain attn_q and sparkops does not run a q-lora")
    key_mla = as_int("{arch}.attention.key_length_mla")
    rope = as_int("{arch}.rope.dimension_count")
    if rope >= key_mla:
        raise BadInput(f"{where}: rope.dimension_count {rope} must be smaller than key_length_mla {key_mla}")
    scale = _f32_exact(get("{arch}.expert_weights_scale", 1.0))
    defaulted: list[str] = []

    def ours(key: str, field: str) -> dict:
        if key in values:
            return {field: float(values[key])}
        defaulted.append(field)
        return {}

    token = {}
    for field, key in (("bos_token_id", "tokenizer.ggml.bos_token_id"), ("eos_token_id", "tokenizer.ggml.eos_token_id"),
                       ("pad_token_id", "tokenizer.ggml.padding_token_id")):
        if key in values:
            token[field] = int(values[key])
    name = values.get("general.name") or fallback_name
    cfg = dict(
        name=str(name),
        hidden_size=as_int("{arch}.embedding_length"),
        num_layers=n_layers,
        vocab_size=as_int("{arch}.vocab_size", 0),  # filled from token_embd by the reader when absent
        context_length=as_int("{arch}.context_length"),
        kda_layers=kda_layers,
        full_attn_layers=mla_layers,
        kda_heads=kda_heads,
        kda_head_dim=as_int("{arch}.kda.head_dim"),
        conv_kernel=as_int("{arch}.ssm.conv_kernel"),
        mla_heads=mla_heads,
        kv_lora_rank=as_int("{arch}.attention.kv_lora_rank"),
        qk_nope_head_dim=key_mla - rope,
        qk_rope_head_dim=rope,
        v_head_dim=as_int("{arch}.attention.value_length_mla"),
        intermediate_size=_first(get("{arch}.feed_forward_length")),
        first_k_dense=as_int("{arch}.leading_dense_block_count"),
        n_experts=as_int("{arch}.expert_count"),
        n_experts_per_token=as_int("{arch}.expert_used_count"),
        n_shared_experts=as_int("{arch}.expert_shared_count"),
        moe_intermediate_size=_first(get("{arch}.expert_feed_forward_length")),
        routed_scaling_factor=scale if scale not in (0.0,) else 1.0,
        n_group=as_int("{arch}.expert_group_count", 1),
        topk_group=as_int("{arch}.expert_group_used_count", 1),
        rms_norm_eps=_f32_exact(get("{arch}.attention.layer_norm_rms_epsilon")),
        **ours("sparkops.kv_norm_eps", "kv_norm_eps"),
        **ours("sparkops.l2_eps", "l2_eps"),
        **ours("sparkops.router_renorm_eps", "router_renorm_eps"),
        **token,
    )
    if "sparkops.notes" in values:
        cfg["notes"] = str(values["sparkops.notes"])
    if cfg["vocab_size"] == 0:
        defaulted.append("vocab_size")
    return cfg, defaulted


def _first(v: Any) -> int:
    """A width key may be one number or a per-layer array (take the first non-zero entry)."""
    if isinstance(v, list):
        nz = [int(x) for x in v if int(x)]
        return nz[0] if nz else 0
    return int(v)


def build_config(cfg: dict, where: str) -> ModelConfig:
    """ModelConfig(**cfg), with a config error reported against the file."""
    known = {f.name for f in dc_fields(ModelConfig)}
    try:
        return ModelConfig(**{k: v for k, v in cfg.items() if k in known})
    except BadInput as exc:
        raise BadInput(f"{where}: the metadata describes an invalid model: {exc}") from None
