"""Quant mixes: which GGUF type each tensor gets, and what that costs in bytes — without allocating.

A mix maps each tensor role (`names.EMBED`, `names.ATTN`, ...) to a type. Norms, conv taps, ssm_a,
dt_bias, the router and its bias are always F32 (llama.cpp does not quantize them either). When a
tensor's rows are not a whole number of the type's blocks (the 48B's attn_k_b has rows of 128 for a
256-value K-quant; k3-nano's down projections rows of 64), it falls back to Q8_0 (blocks of 32), or
to F16 when not even 32 divides the row; every fallback is reported, and the writer records them in
the file (`sparkops.quant_fallbacks`).

`q4_k_m` and `iq1_s` are the files of spec/anchors.md (sizes 25.9 / 9.3 GiB, A = 1.96 / 0.98 GB for
the 48B, reproduced to 0.1%): matrices in the named type, lm_head Q6_K, and KDA's small low-rank
gate matrices (ssm_f_a/f_b/g_a/g_b) and ssm_beta in F16. Unlike llama.cpp's Q4_K_M, q4_k_m does not
raise attn_v / ffn_down to Q6_K on some layers: with that the anchors' A would be 5% higher.

`quant_mix_bytes` is the file size by tensor class; `bytes_per_token` the bytes one decode step
reads (spec/anchors.md section 3): every weight except the routed experts and the embedding, top-k
of the routed experts, one embedding row, plus the MLA latent cache (bf16) and the KDA state read
and written (fp32).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from ..config import ModelConfig
from ..errors import UnknownName
from . import names as N
from .names import TensorSpec, tensor_specs

Q = GGMLQuantizationType


@dataclass(frozen=True)
class Mix:
    name: str
    description: str
    default: GGMLQuantizationType  # every quantizable role not listed in `roles`
    roles: dict[str, GGMLQuantizationType] = field(default_factory=dict)
    # (n, type): ffn_down_exps of the first n and the last n MoE layers get `type` (Unsloth-style "dynamic")
    edge_down: tuple[int, GGMLQuantizationType] | None = None

    def role_type(self, role: str) -> GGMLQuantizationType:
        if role == N.SMALL:
            return Q.F32
        return self.roles.get(role, self.default)


MIXES: dict[str, Mix] = {m.name: m for m in (
    Mix("f32", "everything F32 (the exact oracle)", Q.F32),
    Mix("f16", "matrices F16, small tensors F32", Q.F16),
    Mix("bf16", "matrices BF16, small tensors F32 (lossless for a bf16 checkpoint)", Q.BF16),
    Mix("q8_0", "matrices Q8_0, small tensors F32", Q.Q8_0),
    Mix("q4_k_m", "matrices Q4_K; output Q6_K; KDA low-rank gates and beta F16 (the anchors' 'Q4_K (output "
                  "Q6_K)' file: 25.9 GiB for the 48B)", Q.Q4_K, {N.OUTPUT: Q.Q6_K, N.GATE: Q.F16}),
    Mix("iq1_s", "matrices IQ1_S; output Q6_K; KDA low-rank gates and beta F16 (the anchors' IQ1_S file: "
                 "9.3 GiB for the 48B)", Q.IQ1_S, {N.OUTPUT: Q.Q6_K, N.GATE: Q.F16}),
    Mix("ud_iq1_s", "routed experts IQ1_S, except ffn_down_exps of the first 3 and last 3 MoE layers Q4_K; "
                    "every other matrix Q6_K; KDA gates F16 (a model of Unsloth's dynamic UD-IQ1_S, which "
                    "keeps the non-expert tensors at high precision: the seed's 553 GiB K3 file)",
        Q.Q6_K, {N.EXPERTS: Q.IQ1_S, N.EXPERTS_DOWN: Q.IQ1_S, N.GATE: Q.F16}, edge_down=(3, Q.Q4_K)),
)}

#: other spellings accepted by `get_mix`
ALIASES = {"q4_k": "q4_k_m", "q4_km": "q4_k_m", "iq1s": "iq1_s", "ud-iq1_s": "ud_iq1_s", "q8": "q8_0",
           "fp32": "f32", "fp16": "f16"}


def get_mix(name: str | Mix) -> Mix:
    if isinstance(name, Mix):
        return name
    try:
        key = name.lower()
        return MIXES[ALIASES.get(key, key)]
    except KeyError:
        raise UnknownName(f"unknown quant mix '{name}'; the mixes are: {', '.join(MIXES)}") from None


def block_size(qtype: int) -> int:
    return GGML_QUANT_SIZES[Q(qtype)][0]


def nbytes(qtype: int, shape: tuple[int, ...]) -> int:
    """Bytes of a [*lead, rows, cols] tensor stored in `qtype` (cols a whole number of blocks)."""
    block, size = GGML_QUANT_SIZES[Q(qtype)]
    return math.prod(shape[:-1]) * (shape[-1] // block) * size


@dataclass(frozen=True)
class Planned:
    """One tensor as a mix stores it."""

    spec: TensorSpec
    shape: tuple[int, ...]  # NumPy shape in the file
    qtype: GGMLQuantizationType
    fallback: str | None  # why it is not the mix's type, or None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def nbytes(self) -> int:
        return nbytes(self.qtype, self.shape)


def choose_type(config: ModelConfig, spec: TensorSpec, mix: Mix) -> tuple[GGMLQuantizationType, str | None]:
    """The type `mix` gives this tensor, after the row-length fallback (and the reason, if it fell back)."""
    want = mix.role_type(spec.role)
    if mix.edge_down is not None and spec.role == N.EXPERTS_DOWN and spec.layer is not None:
        n, edge_type = mix.edge_down
        if spec.layer < config.first_k_dense + n or spec.layer >= config.num_layers - n:
            want = edge_type
    cols = spec.stored_shape(config)[-1]
    if cols % block_size(want) == 0:
        return want, None
    for alt in (Q.Q8_0, Q.F16):
        if cols % block_size(alt) == 0:
            return alt, (f"{spec.name}: rows of {cols} are not a multiple of {block_size(want)} "
                         f"({want.name}) -> {alt.name}")
    raise AssertionError("F16 fits any row")


def plan(config: ModelConfig, mix: str | Mix) -> list[Planned]:
    """Every tensor of a file for `config` written with `mix`, in file order."""
    m = get_mix(mix)
    out = []
    for spec in tensor_specs(config):
        qtype, why = choose_type(config, spec, m)
        out.append(Planned(spec, spec.stored_shape(config), qtype, why))
    return out


# ----------------------------------------------------------------------------------------------
# Bytes
# ----------------------------------------------------------------------------------------------

def tensor_class(spec: TensorSpec) -> str:
    """The part of the model a tensor belongs to (for the size and bytes-per-token tables)."""
    f = spec.rule.field
    if spec.layer is None:
        return {"embed": "embedding", "output": "lm_head"}.get(f, "norms")
    if f in ("attn_norm", "ffn_norm"):
        return "norms"
    if f.startswith("attn."):
        return "kda" if spec.rule in N.KDA_RULES else "mla"
    if f in ("ffn.router", "ffn.bias"):
        return "routers"
    if f.endswith("_exps"):
        return "routed_experts"
    if f.startswith("ffn.s_"):
        return "shared_experts"
    return "dense_ffn"


def quant_mix_bytes(config: ModelConfig, mix: str | Mix) -> dict:
    """File bytes of the tensor data by class, with the total, the type counts and the fallbacks."""
    by_class: dict[str, int] = {}
    by_type: dict[str, int] = {}
    fallbacks = []
    for p in plan(config, mix):
        cls = tensor_class(p.spec)
        by_class[cls] = by_class.get(cls, 0) + p.nbytes
        by_type[p.qtype.name] = by_type.get(p.qtype.name, 0) + p.nbytes
        if p.fallback:
            fallbacks.append(p.fallback)
    total = sum(by_class.values())
    return {"mix": get_mix(mix).name, "classes": by_class, "types": by_type, "fallbacks": fallbacks,
            "total": total, "total_gib": total / 2**30}


def cache_bytes_per_token(config: ModelConfig, context: int) -> dict[str, int]:
    """State read (and written) by one decode step at `context` cached tokens."""
    n_kda = sum(k == "kda" for k in config.layer_kinds)
    n_mla = config.num_layers - n_kda
    return {
        # the normed latent + k_pe of every cached token, bf16, read once per MLA layer (shared by heads)
        "mla_cache": n_mla * context * config.latent_dim * 2,
        # the [H, Dk, Dv] fp32 recurrent state, read and written
        "kda_state": n_kda * config.kda_heads * config.kda_head_dim * config.kda_head_dim * 4 * 2,
        # the last W-1 raw q/k/v projections per channel, fp32, read and written
        "kda_conv_state": n_kda * 3 * (config.conv_kernel - 1) * config.kda_inner * 4 * 2,
    }


def bytes_per_token(config: ModelConfig, mix: str | Mix, context: int) -> dict:
    """Bytes one batch-1 decode step moves at `context`: weights read + cache/state traffic.

    weights: every tensor once, except the routed experts (top-k of E: k/E of each stacked tensor)
    and the embedding (one row). `weights` is the anchors' A; `total` = A + K(context).
    """
    weights_by_class: dict[str, float] = {}
    for p in plan(config, mix):
        cls = tensor_class(p.spec)
        b = float(p.nbytes)
        if cls == "routed_experts":
            b *= config.n_experts_per_token / config.n_experts
        elif cls == "embedding":
            b /= config.vocab_size
        weights_by_class[cls] = weights_by_class.get(cls, 0.0) + b
    weights = sum(weights_by_class.values())
    cache = cache_bytes_per_token(config, context)
    return {"mix": get_mix(mix).name, "context": context, "weights": weights,
            "weights_by_class": weights_by_class, **cache, "total": weights + sum(cache.values())}
