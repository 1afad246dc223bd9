"""Bytes and FLOPs one token costs, from the config and the weights' quant types (no device needed).

Bytes (decode, batch 1; anchors section 3): A = quantized weight bytes read per token (every matrix
once, the routed experts top-k of E, one embedding row) plus K(L) = the MLA latent cache read at
context L (the shared latent counted once per layer, not once per head: spec trap "counting bytes
wrong") plus the KDA recurrent and conv states read and written. From a loaded model the actual
tensors' bytes are summed (what the file holds); on paper `gguf.mix.bytes_per_token` gives the
same sum for a named quant mix.

FLOPs (2 per multiply-add):
  linears   2 x the matrix parameters a token touches (active experts only). Prefill computes the
            lm_head for the last token only (what `prefill(last_only=True)` does), decode for it.
  MLA       decode, absorbed form, per layer at context L: scores 2*N*(Lkv+R)*L + values 2*N*Lkv*L
            (the q absorption and the output un-absorption are matrix products of the same size as
            w_uk / w_uv and are counted with the linears). Prefill, naive form over a causal prompt,
            per token at context l: 2*N*(Dn+R)*l + 2*N*Dv*l, averaged over the prompt.
  KDA       decode, recurrent form, per head: decay S, S^T k, rank-1 update, q^T S: 7*Dk*Dv.
            Prefill, chunked form (chunk C = 64), per head and token: three state products
            6*Dk*Dv plus the intra-chunk products 2*C*(3*Dk + 2*Dv) plus the triangular solve 2*C^2/3.
For the 48B at a 32k prompt this gives linears 5.5, MLA 2.35, KDA 0.11 GFLOP/token - anchors
section 3 quotes ~8 (5.5 / 2.3 / 0.2); the KDA term depends on the kernel's exact algebra and is
the smallest of the three.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

import torch

from ..config import ModelConfig
from ..qweight import QWeight
from ..weights import DenseFFNWeights, KDAWeights, MLAWeights, ModelWeights, MoEWeights

#: the KDA chunk length the prefill FLOP count assumes (fla's chunk_kda uses 64)
KDA_CHUNK = 64


@dataclass
class TokenCost:
    """Per-token cost of one phase at one depth: FLOPs and bytes by part of the model."""

    phase: str  # "decode" | "prefill"
    tokens: int  # tokens in the timed forward (1 for decode)
    depth: int  # context already cached before the timed tokens
    flops_by_class: dict[str, float] = field(default_factory=dict)
    bytes_by_class: dict[str, float] = field(default_factory=dict)
    source: str = ""  # where the byte counts came from

    @property
    def flops(self) -> float:
        return sum(self.flops_by_class.values())

    @property
    def bytes(self) -> float:
        return sum(self.bytes_by_class.values())

    @property
    def intensity(self) -> float:
        """FLOPs per byte: where the token sits on the roofline."""
        return self.flops / self.bytes if self.bytes else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "tokens": self.tokens, "depth": self.depth, "flops": self.flops,
                "bytes": self.bytes, "intensity": self.intensity, "flops_by_class": self.flops_by_class,
                "bytes_by_class": self.bytes_by_class, "source": self.source}


def _counts(config: ModelConfig) -> tuple[int, int]:
    n_kda = sum(k == "kda" for k in config.layer_kinds)
    return n_kda, config.num_layers - n_kda


# -- FLOPs -----------------------------------------------------------------------------------------
def linear_params(config: ModelConfig) -> tuple[float, float]:
    """(matrix parameters a token touches without the lm_head, the lm_head's)."""
    pc = config.param_counts()
    body = pc["active_per_token"] - pc["embedding"] - pc["norms"] - pc["lm_head"]
    return float(body), float(pc["lm_head"])


def mla_flops(config: ModelConfig, phase: str, tokens: int, depth: int) -> float:
    """Attention-core FLOPs per token, all MLA layers (see the module docstring for the forms)."""
    _, n_mla = _counts(config)
    n, lkv, r = config.mla_heads, config.kv_lora_rank, config.qk_rope_head_dim
    if phase == "decode":
        ctx = depth + 1
        return n_mla * (2 * n * (lkv + r) * ctx + 2 * n * lkv * ctx)
    mean_ctx = depth + (tokens + 1) / 2  # token t of the prompt attends to depth + t + 1 rows
    return n_mla * (2 * n * config.qk_head_dim * mean_ctx + 2 * n * config.v_head_dim * mean_ctx)


def kda_flops(config: ModelConfig, phase: str) -> float:
    n_kda, _ = _counts(config)
    dk = dv = config.kda_head_dim
    if phase == "decode":
        per_head = 7 * dk * dv
    else:
        c = KDA_CHUNK
        per_head = 6 * dk * dv + 2 * c * (3 * dk + 2 * dv) + 2 * c * c / 3
    return n_kda * config.kda_heads * per_head


def flops_per_token(config: ModelConfig, phase: str, tokens: int, depth: int) -> dict[str, float]:
    body, head = linear_params(config)
    lm_share = 1.0 if phase == "decode" else 1.0 / max(tokens, 1)
    return {"linears": 2 * (body + head * lm_share), "mla_attention": mla_flops(config, phase, tokens, depth),
            "kda": kda_flops(config, phase)}


# -- bytes -----------------------------------------------------------------------------------------
def state_bytes(config: ModelConfig, context: float, cache_elsize: int) -> dict[str, float]:
    """Cache and state traffic of one decode step at `context` cached tokens."""
    n_kda, n_mla = _counts(config)
    return {
        "mla_cache": float(n_mla * context * config.latent_dim * cache_elsize),
        "kda_state": float(n_kda * config.kda_heads * config.kda_head_dim * config.kda_head_dim * 4 * 2),
        "kda_conv_state": float(n_kda * 3 * (config.conv_kernel - 1) * config.kda_inner * 4 * 2),
    }


def _nbytes(obj: Any) -> float:
    if isinstance(obj, QWeight):
        return float(obj.nbytes)
    if isinstance(obj, torch.Tensor):
        return float(obj.numel() * obj.element_size())
    if obj is None:
        return 0.0
    if is_dataclass(obj):
        return sum(_nbytes(getattr(obj, f.name)) for f in fields(obj))
    return 0.0


def weight_bytes_loaded(weights: ModelWeights) -> dict[str, float]:
    """Bytes of the actual tensors one decode token reads, by class (routed experts: top-k of E)."""
    cfg = weights.config
    share = cfg.n_experts_per_token / cfg.n_experts
    out = {"embedding": _nbytes(weights.embed) / cfg.vocab_size, "lm_head": _nbytes(weights.output),
           "norms": _nbytes(weights.output_norm)}

    def add(k: str, v: float) -> None:
        out[k] = out.get(k, 0.0) + v

    for layer in weights.layers:
        add("norms", _nbytes(layer.attn_norm) + _nbytes(layer.ffn_norm))
        add("kda" if isinstance(layer.attn, KDAWeights) else "mla", _nbytes(layer.attn))
        ffn = layer.ffn
        if isinstance(ffn, DenseFFNWeights):
            add("dense_ffn", _nbytes(ffn))
        elif isinstance(ffn, MoEWeights):
            add("routers", _nbytes(ffn.router) + _nbytes(ffn.bias))
            add("routed_experts", share * (_nbytes(ffn.gate_exps) + _nbytes(ffn.up_exps) + _nbytes(ffn.down_exps)))
            add("shared_experts", _nbytes(ffn.s_gate) + _nbytes(ffn.s_up) + _nbytes(ffn.s_down))
    assert all(isinstance(layer.attn, (KDAWeights, MLAWeights)) for layer in weights.layers)
    return out


def weight_bytes_paper(config: ModelConfig, mix: str) -> dict[str, float]:
    from ..gguf.mix import bytes_per_token

    return dict(bytes_per_token(config, mix, 0)["weights_by_class"])


def all_weight_bytes(by_class_decode: dict[str, float], config: ModelConfig) -> float:
    """Every weight byte of the model (a prefill forward of many tokens reads all experts)."""
    share = config.n_experts_per_token / config.n_experts
    return sum(v / share if k == "routed_experts" else v for k, v in by_class_decode.items())


def token_cost(config: ModelConfig, phase: str, *, tokens: int = 1, depth: int = 0,
               weights: ModelWeights | None = None, mix: str | None = None, cache_elsize: int = 2) -> TokenCost:
    """The per-token cost of decode at `depth`, or of prefilling `tokens` after `depth` (averaged).

    Bytes come from `weights` (the loaded file's actual types) when given, else from the quant `mix`
    on paper. Prefill reads every weight once per forward (T tokens x top-k cover all experts), and the
    MLA cache once per forward too: the floor of a tiled attention, whose key blocks serve a whole tile
    of queries from on-chip memory. Each token's share of both is 1/T. (Until session 11 each query was
    charged every earlier row, as if nothing were reused: 132 MB a token at T = 32768, a bandwidth
    "floor" of 1.07 s for a forward the compute floor puts at 0.33 s, so prefill rows reported shares of
    a wrong, bandwidth-bound roofline - 81% for 25.2k tok/s, where the compute roofline gives ~26%.)
    """
    if phase not in ("decode", "prefill"):
        raise ValueError(f"unknown phase {phase!r}")
    if weights is not None:
        wb, source = weight_bytes_loaded(weights), "loaded weights (actual tensor types)"
    elif mix is not None:
        wb, source = weight_bytes_paper(config, mix), f"quant mix {mix} on paper"
    else:
        raise ValueError("token_cost needs the loaded weights or a quant mix name")
    cost = TokenCost(phase, tokens if phase == "prefill" else 1, depth, source=source)
    cost.flops_by_class = flops_per_token(config, phase, tokens, depth)
    if phase == "decode":
        cost.bytes_by_class = {**wb, **state_bytes(config, depth + 1, cache_elsize)}
    else:
        t = max(tokens, 1)
        every = all_weight_bytes(wb, config)
        n_kda, n_mla = _counts(config)
        cache_read = n_mla * config.latent_dim * cache_elsize * (depth + t) / t  # every row once per forward
        cost.bytes_by_class = {"weights": every / t, "mla_cache": float(cache_read),
                               "kda_state": state_bytes(config, 0, cache_elsize)["kda_state"] / t}
    return cost
