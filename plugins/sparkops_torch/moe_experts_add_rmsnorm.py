"""moe_experts_add_rmsnorm in torch: this plugin's moe_experts, then its add_rmsnorm on the experts' output as
moe_experts returns it (x's dtype), as the graph chains the two: the same values the unfused torch chain computes."""

from ._common import require
from .add_rmsnorm import add_rmsnorm
from .moe_experts import moe_experts


def moe_experts_add_rmsnorm(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, residual, norm_weight, eps):
    require(tuple(residual.shape) == tuple(x.shape),
            f"moe_experts_add_rmsnorm: residual {list(residual.shape)} must have x's shape {list(x.shape)} (the "
            f"residual stream the experts' output is added to)")
    y = moe_experts(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)  # [T, D], x's dtype
    return add_rmsnorm(y, residual, norm_weight, eps)  # (normed, summed) [T, D] each, x's dtype
