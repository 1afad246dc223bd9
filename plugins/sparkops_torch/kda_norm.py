"""kda_norm in torch: this plugin's kda (float32 state and gates) then its gated_rmsnorm, the core output kept
float32 in between whatever v's dtype (the contract's composition rounds nothing there)."""

from ._common import f32, require
from .gated_rmsnorm import gated_rmsnorm
from .kda import kda


def kda_norm(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps):
    # the norm's inputs are checked before the recurrence writes the state: a refused call leaves it as it was
    require(gate.shape == v.shape, f"kda_norm: gate {list(gate.shape)} must have v's shape {list(v.shape)} [T, H, D]")
    require(weight.shape == v.shape[-1:], f"kda_norm: weight {list(weight.shape)} must be one gain per head channel "
                                          f"[{v.shape[-1]}]")
    o = kda(q, k, f32(v), g, beta, a, dt_bias, state, scale, l2_eps)  # [T, H, D] float32
    return gated_rmsnorm(o, gate, weight, eps).to(v.dtype)  # [T, H, D]
