"""gated_rmsnorm in torch: per-head RMSNorm (over D, not H*D) times sigmoid(gate), float32 inside."""

import torch

from ._common import f32, last_dim, require, rms_normalize


def gated_rmsnorm(x, gate, weight, eps):
    require(x.shape == gate.shape, f"gated_rmsnorm: x {list(x.shape)} and gate {list(gate.shape)} must have "
                                   f"the same shape [T, H, D]")
    last_dim("gated_rmsnorm", "x", x, weight.shape[-1])
    y = rms_normalize(f32(x), weight, eps) * torch.sigmoid(f32(gate))  # [T, H, D]
    return y.to(x.dtype)
