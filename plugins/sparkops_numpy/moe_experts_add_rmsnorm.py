"""moe_experts_add_rmsnorm, the reference: the composition of the moe_experts and add_rmsnorm references as the graph
chains them. Both are called through the carrier (tensors in, tensors out), so add_rmsnorm adds the experts' output
exactly as the moe_experts reference returns it: rounded to x's dtype, as the unfused chain hands it over."""

import numpy as np

from ._checks import expect_shape
from .add_rmsnorm import add_rmsnorm
from .moe_experts import moe_experts


def moe_experts_add_rmsnorm(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, residual, norm_weight, eps):
    expect_shape("moe_experts_add_rmsnorm", "residual", residual, np.shape(x),
                 "[T, D]: the residual stream, the same shape as x")
    y = moe_experts(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)  # [T, D], x's dtype
    return add_rmsnorm(y, residual, norm_weight, eps)  # (normed, summed) [T, D] each, x's dtype
