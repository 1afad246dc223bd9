"""The `kimi-linear` GGUF contract (spec section 10) as data: metadata keys and tensor names.

For every tensor this says its GGUF name, the NumPy shape it is stored with (the reverse of
ggml's `ne`), its mix role (which quant type a mix gives it), and where it lands in
`sparkops.weights` — including the few that change layout on the way:

- `blk.N.ssm_a` holds -exp(A_log) (the converter applies the -exp), ne [1, H, 1, 1]; ours: a [H].
- `blk.N.ssm_conv1d_{q,k,v}.weight`, ne [W, 1, P, 1] (or [W, 1, P]); ours: [P, W] (same memory order).
- `blk.N.attn_k_b.weight`, ne [Dn, Lkv, N] = NumPy [N, Lkv, Dn] = W_UK transposed per head; ours:
  w_uk [N, Dn, Lkv], so the loader transposes the last two axes (and the writer transposes back).
- `blk.N.attn_v_b.weight`, ne [Lkv, Dv, N] = NumPy [N, Dv, Lkv] = ours w_uv as is.
- stacked experts, ne [D, F, E] = NumPy [E, F, D] = ours [E, F, D] (down: [E, D, F]).
- legacy `blk.N.attn_kv_b.weight` NumPy [N*(Dn+Dv), Lkv] (instead of k_b / v_b): the loader splits it.

Nothing here reads a file; `reader.py`, `writer.py`, `mix.py` and `synth.py` all use these tables,
so there is one place that says what a kimi-linear GGUF holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from gguf import GGUFValueType

from ..config import ModelConfig

#: general.architecture of every file sparkops reads and writes
ARCH = "kimi-linear"

#: llama.cpp's code for sigmoid routing in `{arch}.expert_gating_func` (1 softmax, 3 softmax_weight, 4 sqrt-softplus)
GATING_SIGMOID = 2

V = GGUFValueType


# ----------------------------------------------------------------------------------------------
# Metadata keys
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MetaKey:
    key: str  # with "{arch}" for the architecture prefix
    vtype: GGUFValueType  # for arrays: the element type (see `array`)
    meaning: str
    llama_required: bool = False  # llama.cpp's loader refuses a file without it (bold in spec section 10)
    sparkops_required: bool = False  # sparkops cannot build a ModelConfig without it
    array: bool = False

    def name(self, arch: str = ARCH) -> str:
        return self.key.format(arch=arch)


def _k(key, vtype, meaning, llama=False, ours=None, array=False) -> MetaKey:
    return MetaKey(key, vtype, meaning, llama, llama if ours is None else ours, array)


#: every key the writer writes and the reader reads, in the order the writer writes them
META_KEYS: tuple[MetaKey, ...] = (
    _k("general.architecture", V.STRING, "must be 'kimi-linear'", True),
    _k("general.name", V.STRING, "model name -> ModelConfig.name (else the file name)"),
    _k("{arch}.context_length", V.UINT32, "context_length", True),
    _k("{arch}.embedding_length", V.UINT32, "hidden_size", True),
    _k("{arch}.block_count", V.UINT32, "num_layers", True),
    _k("{arch}.vocab_size", V.UINT32, "vocab_size (also checked against token_embd)"),
    _k("{arch}.feed_forward_length", V.UINT32, "intermediate_size of the leading dense layers", ours=True),
    _k("{arch}.attention.head_count", V.UINT32,
       "heads of KDA and MLA (llama.cpp uses one count for both); a per-layer array is accepted", ours=True),
    _k("{arch}.attention.head_count_kv", V.UINT32, "per layer: 0 = KDA, 1 = MLA (the layer kinds)",
       ours=True, array=True),
    _k("{arch}.attention.layer_norm_rms_epsilon", V.FLOAT32, "rms_norm_eps (llama.cpp: also the q/k l2 eps)", True),
    _k("{arch}.attention.kv_lora_rank", V.UINT32, "kv_lora_rank", True),
    _k("{arch}.attention.key_length_mla", V.UINT32, "qk_nope_head_dim + qk_rope_head_dim", True),
    _k("{arch}.attention.value_length_mla", V.UINT32, "v_head_dim", True),
    _k("{arch}.attention.key_length", V.UINT32, "kv_lora_rank + qk_rope_head_dim (one latent-cache row)"),
    _k("{arch}.attention.value_length", V.UINT32, "kv_lora_rank"),
    _k("{arch}.rope.dimension_count", V.UINT32, "qk_rope_head_dim (the un-rotated shared k_pe width)", ours=True),
    _k("{arch}.ssm.conv_kernel", V.UINT32, "conv_kernel", True),
    _k("{arch}.kda.head_dim", V.UINT32, "kda_head_dim", True),
    _k("{arch}.expert_count", V.UINT32, "n_experts", ours=True),
    _k("{arch}.expert_used_count", V.UINT32, "n_experts_per_token", ours=True),
    _k("{arch}.expert_feed_forward_length", V.UINT32, "moe_intermediate_size", True),
    _k("{arch}.expert_shared_count", V.UINT32, "n_shared_experts", True),
    _k("{arch}.leading_dense_block_count", V.UINT32, "first_k_dense", ours=True),
    _k("{arch}.expert_weights_scale", V.FLOAT32, "routed_scaling_factor (0 means 1)", ours=True),
    _k("{arch}.expert_gating_func", V.UINT32, "2 = sigmoid (the only routing sparkops runs)", True),
    _k("{arch}.expert_group_count", V.UINT32, "n_group (not read by llama.cpp for kimi-linear; default 1)"),
    _k("{arch}.expert_group_used_count", V.UINT32, "topk_group (not read by llama.cpp; default 1)"),
    _k("tokenizer.ggml.model", V.STRING, "'gpt2' (byte-level BPE) or 'none'", True),
)

#: sparkops' own keys: the ModelConfig fields llama.cpp has no key for (it ignores unknown keys)
SPARKOPS_KEYS: tuple[MetaKey, ...] = (
    _k("sparkops.kv_norm_eps", V.FLOAT64, "kv_norm_eps (transformers 1e-6; llama.cpp uses rms_norm_eps)"),
    _k("sparkops.l2_eps", V.FLOAT64, "l2_eps of the KDA q/k L2 norm (fla/transformers 1e-6)"),
    _k("sparkops.router_renorm_eps", V.FLOAT64, "router_renorm_eps (transformers 1e-20)"),
    _k("sparkops.kda_head_count", V.UINT32, "kda_heads when it differs from mla_heads (llama.cpp cannot run that)"),
    _k("sparkops.notes", V.STRING, "ModelConfig.notes"),
    _k("sparkops.quant_mix", V.STRING, "the mix the file was written with (f32, q8_0, q4_k_m, iq1_s, ...)"),
    _k("sparkops.quant_fallbacks", V.STRING, "tensors whose rows did not fit the mix's type, and what they got",
       array=True),
    _k("sparkops.synth.preset", V.STRING, "synth: the preset"),
    _k("sparkops.synth.seed", V.UINT64, "synth: the seed"),
    _k("sparkops.source", V.STRING, "where the weights came from (synth / convert HF_DIR)"),
)


def meta_key(key: str, arch: str = ARCH) -> str:
    return key.format(arch=arch)


# ----------------------------------------------------------------------------------------------
# Tensors
# ----------------------------------------------------------------------------------------------

#: how a stored tensor becomes our field (and back): see the module docstring
AS_IS = "as_is"  # same shape
FLAT = "flat"  # any stored shape with the same elements -> our shape (ssm_a, conv, dt)
SWAP_LAST2 = "swap_last2"  # attn_k_b [N, Lkv, Dn] <-> w_uk [N, Dn, Lkv]

#: mix roles (mix.py maps each to a type; "small" tensors are always F32). GATE: KDA's low-rank decay and
#: output gates and beta, which the quantized mixes keep in F16 (the anchors' files do).
EMBED, OUTPUT, ATTN, ATTN_V, GATE, FFN, FFN_DOWN, EXPERTS, EXPERTS_DOWN, SMALL = (
    "embed", "output", "attn", "attn_v", "gate", "ffn", "ffn_down", "experts", "experts_down", "small")


@dataclass(frozen=True)
class TensorRule:
    suffix: str  # name after "blk.N." (or the whole name for a global tensor)
    field: str  # attribute path: "attn.q", "ffn.gate_exps", "attn_norm", "embed", ...
    stored: Callable[[ModelConfig], tuple[int, ...]]  # NumPy shape written to the file
    ours: Callable[[ModelConfig], tuple[int, ...]]  # shape of the sparkops.weights field
    role: str
    small: bool = False  # a float32 torch tensor in sparkops.weights (not a QWeight)
    layout: str = AS_IS
    optional: bool = False  # may be absent (the shared experts)


def _r(suffix, field, stored, ours=None, role=ATTN, small=False, layout=AS_IS, optional=False) -> TensorRule:
    return TensorRule(suffix, field, stored, ours or stored, role, small, layout, optional)


# shapes, with c = the config
def _d(c): return (c.hidden_size,)
def _vd(c): return (c.vocab_size, c.hidden_size)
def _pd(c): return (c.kda_inner, c.hidden_size)
def _kda_mla_q(c): return (c.mla_heads * c.qk_head_dim, c.hidden_size)


GLOBAL_RULES: tuple[TensorRule, ...] = (
    _r("token_embd.weight", "embed", _vd, role=EMBED),
    _r("output_norm.weight", "output_norm", _d, role=SMALL, small=True),
    _r("output.weight", "output", _vd, role=OUTPUT),
)

NORM_RULES: tuple[TensorRule, ...] = (
    _r("attn_norm.weight", "attn_norm", _d, role=SMALL, small=True),
    _r("ffn_norm.weight", "ffn_norm", _d, role=SMALL, small=True),
)

KDA_RULES: tuple[TensorRule, ...] = (
    _r("attn_q.weight", "attn.q", _pd),
    _r("attn_k.weight", "attn.k", _pd),
    _r("attn_v.weight", "attn.v", _pd, role=ATTN_V),
    _r("ssm_conv1d_q.weight", "attn.conv_q", lambda c: (1, c.kda_inner, 1, c.conv_kernel),
       lambda c: (c.kda_inner, c.conv_kernel), role=SMALL, small=True, layout=FLAT),
    _r("ssm_conv1d_k.weight", "attn.conv_k", lambda c: (1, c.kda_inner, 1, c.conv_kernel),
       lambda c: (c.kda_inner, c.conv_kernel), role=SMALL, small=True, layout=FLAT),
    _r("ssm_conv1d_v.weight", "attn.conv_v", lambda c: (1, c.kda_inner, 1, c.conv_kernel),
       lambda c: (c.kda_inner, c.conv_kernel), role=SMALL, small=True, layout=FLAT),
    _r("ssm_f_a.weight", "attn.f_a", lambda c: (c.kda_head_dim, c.hidden_size), role=GATE),
    _r("ssm_f_b.weight", "attn.f_b", lambda c: (c.kda_inner, c.kda_head_dim), role=GATE),
    _r("ssm_beta.weight", "attn.beta", lambda c: (c.kda_heads, c.hidden_size), role=GATE),
    _r("ssm_a", "attn.a", lambda c: (1, 1, c.kda_heads, 1), lambda c: (c.kda_heads,),
       role=SMALL, small=True, layout=FLAT),
    _r("ssm_dt.bias", "attn.dt_bias", lambda c: (c.kda_inner,), role=SMALL, small=True, layout=FLAT),
    _r("ssm_g_a.weight", "attn.g_a", lambda c: (c.kda_head_dim, c.hidden_size), role=GATE),
    _r("ssm_g_b.weight", "attn.g_b", lambda c: (c.kda_inner, c.kda_head_dim), role=GATE),
    _r("ssm_norm.weight", "attn.o_norm", lambda c: (c.kda_head_dim,), role=SMALL, small=True),
    _r("attn_output.weight", "attn.o_proj", lambda c: (c.hidden_size, c.kda_inner)),
)

MLA_RULES: tuple[TensorRule, ...] = (
    _r("attn_q.weight", "attn.q", _kda_mla_q),
    _r("attn_kv_a_mqa.weight", "attn.kv_a", lambda c: (c.latent_dim, c.hidden_size)),
    _r("attn_kv_a_norm.weight", "attn.kv_norm", lambda c: (c.kv_lora_rank,), role=SMALL, small=True),
    _r("attn_k_b.weight", "attn.w_uk", lambda c: (c.mla_heads, c.kv_lora_rank, c.qk_nope_head_dim),
       lambda c: (c.mla_heads, c.qk_nope_head_dim, c.kv_lora_rank), small=True, layout=SWAP_LAST2),
    _r("attn_v_b.weight", "attn.w_uv", lambda c: (c.mla_heads, c.v_head_dim, c.kv_lora_rank),
       role=ATTN_V, small=True),
    _r("attn_output.weight", "attn.o_proj", lambda c: (c.hidden_size, c.mla_heads * c.v_head_dim)),
)

#: legacy MLA files carry this instead of attn_k_b + attn_v_b: per head h, rows h*(Dn+Dv) .. +Dn are
#: W_UK_h and the next Dv rows W_UV_h (HF kv_b_proj layout)
LEGACY_KV_B = _r("attn_kv_b.weight", "attn.kv_b",
                 lambda c: (c.mla_heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank),
                 role=ATTN_V, small=True)

DENSE_RULES: tuple[TensorRule, ...] = (
    _r("ffn_gate.weight", "ffn.gate", lambda c: (c.intermediate_size, c.hidden_size), role=FFN),
    _r("ffn_up.weight", "ffn.up", lambda c: (c.intermediate_size, c.hidden_size), role=FFN),
    _r("ffn_down.weight", "ffn.down", lambda c: (c.hidden_size, c.intermediate_size), role=FFN_DOWN),
)

MOE_RULES: tuple[TensorRule, ...] = (
    _r("ffn_gate_inp.weight", "ffn.router", lambda c: (c.n_experts, c.hidden_size), role=SMALL, small=True),
    _r("exp_probs_b.bias", "ffn.bias", lambda c: (c.n_experts,), role=SMALL, small=True),
    _r("ffn_gate_exps.weight", "ffn.gate_exps",
       lambda c: (c.n_experts, c.moe_intermediate_size, c.hidden_size), role=EXPERTS),
    _r("ffn_up_exps.weight", "ffn.up_exps",
       lambda c: (c.n_experts, c.moe_intermediate_size, c.hidden_size), role=EXPERTS),
    _r("ffn_down_exps.weight", "ffn.down_exps",
       lambda c: (c.n_experts, c.hidden_size, c.moe_intermediate_size), role=EXPERTS_DOWN),
    _r("ffn_gate_shexp.weight", "ffn.s_gate", lambda c: (c.shared_intermediate, c.hidden_size),
       role=FFN, optional=True),
    _r("ffn_up_shexp.weight", "ffn.s_up", lambda c: (c.shared_intermediate, c.hidden_size),
       role=FFN, optional=True),
    _r("ffn_down_shexp.weight", "ffn.s_down", lambda c: (c.hidden_size, c.shared_intermediate),
       role=FFN_DOWN, optional=True),
)


def layer_rules(config: ModelConfig, layer: int) -> tuple[TensorRule, ...]:
    """The rules of one block (0-based), in the order the writer writes them."""
    attn = KDA_RULES if config.layer_kind(layer) == "kda" else MLA_RULES
    if not config.is_moe(layer):
        ffn = DENSE_RULES
    elif config.n_shared_experts == 0:
        ffn = tuple(r for r in MOE_RULES if not r.optional)
    else:
        ffn = MOE_RULES
    return (NORM_RULES[0], *attn, NORM_RULES[1], *ffn)


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a file for a given config."""

    name: str  # full GGUF name
    rule: TensorRule
    layer: int | None  # 0-based block, None for global tensors

    @property
    def role(self) -> str:
        return self.rule.role

    def stored_shape(self, config: ModelConfig) -> tuple[int, ...]:
        return tuple(self.rule.stored(config))

    def our_shape(self, config: ModelConfig) -> tuple[int, ...]:
        return tuple(self.rule.ours(config))


def tensor_name(rule: TensorRule, layer: int | None) -> str:
    return rule.suffix if layer is None else f"blk.{layer}.{rule.suffix}"


def tensor_specs(config: ModelConfig) -> list[TensorSpec]:
    """Every tensor a kimi-linear file for `config` holds, in file order (token_embd, blocks, output)."""
    specs = [TensorSpec(tensor_name(GLOBAL_RULES[0], None), GLOBAL_RULES[0], None)]
    for layer in range(config.num_layers):
        specs += [TensorSpec(tensor_name(r, layer), r, layer) for r in layer_rules(config, layer)]
    specs += [TensorSpec(tensor_name(r, None), r, None) for r in GLOBAL_RULES[1:]]
    return specs
