"""kda_lowrank_norm in torch: this plugin's float32 up-projections (the linear's weight policy) then its kda_norm,
the decay logits and output gate kept float32 in between whatever the activations' dtype (the contract's
composition rounds nothing there)."""

from ._common import require
from ._weights import linear_t
from .kda_norm import kda_norm


def kda_lowrank_norm(q, k, v, f, f_b, beta, a, dt_bias, state, scale, l2_eps, ga, g_b, weight, eps):
    t, h, d = v.shape
    # every input checked before the recurrence writes the state: a refused call leaves it as it was
    for name, code, wname, w in (("f", f, "f_b", f_b), ("ga", ga, "g_b", g_b)):
        require(tuple(w.shape) == (h * d, w.shape[-1]) and len(w.shape) == 2,
                f"kda_lowrank_norm: {wname} {list(w.shape)} must be [H*D, P] = [{h * d}, P]")
        require(tuple(code.shape) == (t, w.shape[-1]),
                f"kda_lowrank_norm: {name} {list(code.shape)} must be [T, P] = [{t}, {w.shape[-1]}]")
    require(weight.shape == v.shape[-1:], f"kda_lowrank_norm: weight {list(weight.shape)} must be one gain per head "
                                          f"channel [{d}]")
    g = linear_t(f, f_b).view(t, h, d)  # [T, H, D] float32 decay logits
    gate = linear_t(ga, g_b).view(t, h, d)  # [T, H, D] float32 output gate
    return kda_norm(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps)
