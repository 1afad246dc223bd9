"""ModelConfig: one Kimi-Linear-family model as data (the presets live in model/presets/*.toml).

Every field is a number a reader can check against spec/kimi-linear-architecture.md; the layer
kinds come from explicit 1-based lists (spec classic bug 3). The epsilon conventions are fields so
either transformers' or llama.cpp's constants can be reproduced exactly (spec preface).
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from .errors import BadInput, UnknownName
from .paths import model_dir


@dataclass(frozen=True)
class ModelConfig:
    name: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    context_length: int
    # layer kinds, 1-based as in the checkpoint config
    kda_layers: tuple[int, ...]
    full_attn_layers: tuple[int, ...]
    # KDA
    kda_heads: int
    kda_head_dim: int
    conv_kernel: int
    # MLA (NoPE; q_lora_rank must be absent for kimi-linear)
    mla_heads: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    # FFN
    intermediate_size: int  # dense FFN of the leading layers
    first_k_dense: int
    n_experts: int
    n_experts_per_token: int
    n_shared_experts: int
    moe_intermediate_size: int
    routed_scaling_factor: float
    n_group: int = 1
    topk_group: int = 1
    # epsilons (transformers' defaults; llama.cpp uses rms_norm_eps for kv_norm and l2 too)
    rms_norm_eps: float = 1e-5
    kv_norm_eps: float = 1e-6
    l2_eps: float = 1e-6
    router_renorm_eps: float = 1e-20
    # tokens
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    notes: str = ""
    assumptions: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        self.validate()

    # -- structure -------------------------------------------------------------------------------
    def layer_kind(self, layer: int) -> str:
        """'kda' or 'mla' for a 0-based layer index."""
        return "kda" if layer + 1 in self.kda_layers else "mla"

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        return tuple(self.layer_kind(i) for i in range(self.num_layers))

    def is_moe(self, layer: int) -> bool:
        return layer >= self.first_k_dense

    @property
    def kda_inner(self) -> int:
        return self.kda_heads * self.kda_head_dim

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:
        """One MLA cache row: the normed latent and the shared k_pe."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def shared_intermediate(self) -> int:
        return self.moe_intermediate_size * self.n_shared_experts

    def validate(self) -> None:
        def bad(msg: str) -> None:
            raise BadInput(f"model config '{self.name}': {msg}")

        everything = sorted((*self.kda_layers, *self.full_attn_layers))
        if everything != list(range(1, self.num_layers + 1)):
            bad(f"kda_layers + full_attn_layers (1-based) must cover 1..{self.num_layers} exactly once")
        if not self.kda_layers or not self.full_attn_layers:
            bad("a kimi-linear model needs at least one KDA and one MLA layer (llama.cpp aborts otherwise)")
        if self.n_experts % self.n_group:
            bad(f"n_experts {self.n_experts} is not divisible by n_group {self.n_group}")
        if not 0 < self.n_experts_per_token <= self.n_experts:
            bad("n_experts_per_token must be in 1..n_experts")
        if not 0 < self.topk_group <= self.n_group:
            bad("topk_group must be in 1..n_group")
        if self.first_k_dense < 1 or self.first_k_dense > self.num_layers:
            bad("first_k_dense must be in 1..num_layers (a leading dense layer)")
        if self.conv_kernel < 1:
            bad("conv_kernel must be positive")
        for name_ in ("hidden_size", "kda_head_dim", "kv_lora_rank", "moe_intermediate_size", "intermediate_size"):
            if getattr(self, name_) <= 0:
                bad(f"{name_} must be positive")

    # -- sizes -----------------------------------------------------------------------------------
    def param_counts(self) -> dict[str, int]:
        """Parameters by part, computed from the shapes (no weights allocated)."""
        d, dk, p = self.hidden_size, self.kda_head_dim, self.kda_inner
        kda = 3 * p * d + 3 * p * self.conv_kernel + d * dk + dk * p + p + self.kda_heads + self.kda_heads * d \
            + d * dk + dk * p + dk + d * p
        mla = (self.mla_heads * self.qk_head_dim * d + self.latent_dim * d + self.kv_lora_rank
               + self.mla_heads * (self.qk_nope_head_dim + self.v_head_dim) * self.kv_lora_rank
               + d * self.mla_heads * self.v_head_dim)
        dense = 3 * d * self.intermediate_size
        expert = 3 * d * self.moe_intermediate_size
        shared = 3 * d * self.shared_intermediate
        router = self.n_experts * d + self.n_experts
        n_kda = sum(k == "kda" for k in self.layer_kinds)
        n_mla = self.num_layers - n_kda
        n_moe = self.num_layers - self.first_k_dense
        counts = {
            "embedding": self.vocab_size * d,
            "lm_head": self.vocab_size * d,
            "norms": (2 * self.num_layers + 1) * d,
            "kda": n_kda * kda,
            "mla": n_mla * mla,
            "dense_ffn": self.first_k_dense * dense,
            "routed_experts": n_moe * self.n_experts * expert,
            "shared_experts": n_moe * shared,
            "routers": n_moe * router,
        }
        counts["total"] = sum(counts.values())
        counts["active_per_token"] = (counts["total"] - counts["routed_experts"]
                                      + n_moe * self.n_experts_per_token * expert)
        return counts

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items() if v is not None}


def preset_names() -> list[str]:
    return sorted(p.stem for p in (model_dir() / "presets").glob("*.toml"))


def load_preset(name: str) -> ModelConfig:
    path = model_dir() / "presets" / f"{name}.toml"
    if not path.exists():
        raise UnknownName(f"unknown model preset '{name}'; the presets are: {', '.join(preset_names())}")
    return config_from_toml(path)


def config_from_toml(path: Path) -> ModelConfig:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{path}: malformed TOML: {exc}") from None
    return config_from_dict(data, where=str(path))


def config_from_dict(data: dict, where: str = "config") -> ModelConfig:
    known = {f.name for f in fields(ModelConfig)}
    unknown = set(data) - known
    if unknown:
        raise BadInput(f"{where}: unknown config field(s) {sorted(unknown)}")
    missing = [f.name for f in fields(ModelConfig)
               if f.name not in data and f.default is f.default_factory is __import__("dataclasses").MISSING]
    if missing:
        raise BadInput(f"{where}: missing config field(s) {missing}")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    return ModelConfig(**values)
