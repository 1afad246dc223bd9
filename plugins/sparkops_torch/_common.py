"""Small numerics shared by the torch ops: float32 views, the RMS normalisation, input checks."""

from __future__ import annotations

import torch

from sparkops.errors import BadInput


def f32(t: torch.Tensor) -> torch.Tensor:
    """t as float32 (the tensor itself when it already is)."""
    return t if t.dtype == torch.float32 else t.to(torch.float32)


def rms_normalize(x32: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / sqrt(mean(x^2) + eps) over the last dimension, all float32."""
    inv = torch.rsqrt((x32 * x32).mean(dim=-1, keepdim=True) + eps)
    return x32 * inv * f32(weight)


def require(ok: bool, message: str) -> None:
    """Raise BadInput(message) unless ok: for shape checks (static facts, never tensor values)."""
    if not ok:
        raise BadInput(message)


def last_dim(op: str, name: str, t: torch.Tensor, size: int) -> None:
    require(t.shape[-1] == size, f"{op}: {name} has last dimension {t.shape[-1]}, expected {size} "
                                 f"(shape {list(t.shape)}); pass a tensor whose rows match the weight")
