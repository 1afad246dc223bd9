"""The model's weights as the engine consumes them, whatever file they came from.

Large matrices stay `QWeight`s (quantized blocks as stored); the small per-layer vectors and the
MLA up-projections (w_uk, w_uv), the conv taps and the router are float32 tensors, dequantized once
at load (they are read whole by their ops and are a few MB in the 48B model).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

import torch

from .config import ModelConfig
from .qweight import QWeight


@dataclass
class KDAWeights:
    q: QWeight  # [P, D] with P = kda_heads * kda_head_dim
    k: QWeight  # [P, D]
    v: QWeight  # [P, D]
    conv_q: torch.Tensor  # [P, W] float32
    conv_k: torch.Tensor  # [P, W]
    conv_v: torch.Tensor  # [P, W]
    f_a: QWeight  # [Dk, D]  decay gate, low rank
    f_b: QWeight  # [P, Dk]
    beta: QWeight  # [H, D]
    a: torch.Tensor  # [H] float32: -exp(A_log), as GGUF's ssm_a stores it
    dt_bias: torch.Tensor  # [P] float32
    g_a: QWeight  # [Dk, D]  output gate, low rank
    g_b: QWeight  # [P, Dk]
    o_norm: torch.Tensor  # [Dk] float32
    o_proj: QWeight  # [D, P]


@dataclass
class MLAWeights:
    q: QWeight  # [N * (Dn + R), D]
    kv_a: QWeight  # [Lkv + R, D]
    kv_norm: torch.Tensor  # [Lkv] float32
    w_uk: torch.Tensor  # [N, Dn, Lkv] float32 (attn_k_b)
    w_uv: torch.Tensor  # [N, Dv, Lkv] float32 (attn_v_b)
    o_proj: QWeight  # [D, N * Dv]


@dataclass
class DenseFFNWeights:
    gate: QWeight  # [F, D]
    up: QWeight  # [F, D]
    down: QWeight  # [D, F]


@dataclass
class MoEWeights:
    router: torch.Tensor  # [E, D] float32
    bias: torch.Tensor  # [E] float32, selection only
    gate_exps: QWeight  # [E, F, D]
    up_exps: QWeight  # [E, F, D]
    down_exps: QWeight  # [E, D, F]
    s_gate: QWeight | None  # [Fs, D]
    s_up: QWeight | None  # [Fs, D]
    s_down: QWeight | None  # [D, Fs]


@dataclass
class LayerWeights:
    kind: str  # "kda" | "mla"
    attn_norm: torch.Tensor  # [D] float32
    ffn_norm: torch.Tensor  # [D] float32
    attn: KDAWeights | MLAWeights
    ffn: DenseFFNWeights | MoEWeights


@dataclass
class ModelWeights:
    config: ModelConfig
    embed: QWeight  # [V, D]
    layers: list[LayerWeights]
    output_norm: torch.Tensor  # [D] float32
    output: QWeight  # [V, D]
    metadata: dict[str, Any] = field(default_factory=dict)  # where they came from (file, digest, quant mix)

    def to(self, device: str | torch.device) -> "ModelWeights":
        """A copy with every tensor and QWeight on `device` (the config and metadata are shared)."""
        return _move(self, torch.device(device))

    @property
    def nbytes(self) -> int:
        total = 0

        def add(obj: Any) -> None:
            nonlocal total
            if isinstance(obj, QWeight):
                total += obj.nbytes
            elif isinstance(obj, torch.Tensor):
                total += obj.numel() * obj.element_size()
            elif isinstance(obj, list):
                for o in obj:
                    add(o)
            elif is_dataclass(obj) and not isinstance(obj, ModelConfig):
                for f in fields(obj):
                    add(getattr(obj, f.name))

        add(self)
        return total


def _move(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, (QWeight, torch.Tensor)):
        return obj.to(device)
    if isinstance(obj, list):
        return [_move(o, device) for o in obj]
    if is_dataclass(obj) and not isinstance(obj, ModelConfig):
        return type(obj)(**{f.name: _move(getattr(obj, f.name), device) for f in fields(obj)})
    return obj
