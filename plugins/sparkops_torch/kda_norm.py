"""kda_norm in torch: this plugin's kda (float32 state and gates) then its gated_rmsnorm, the core output kept
float32 in between whatever v's dtype (the contract's composition rounds nothing there)."""

from ._common import f32
from .gated_rmsnorm import gated_rmsnorm
from .kda import kda


def kda_norm(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps):
    o = kda(q, k, f32(v), g, beta, a, dt_bias, state, scale, l2_eps)  # [T, H, D] float32
    return gated_rmsnorm(o, gate, weight, eps).to(v.dtype)  # [T, H, D]
