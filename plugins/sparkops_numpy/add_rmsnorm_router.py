"""add_rmsnorm_router, the reference: the composition of the add_rmsnorm and moe_router references as the graph chains
them. Both are called through the carrier (tensors in, tensors out), so the router reads normed exactly as the
add_rmsnorm reference returns it: rounded to x's dtype, as the unfused chain hands it over."""

import numpy as np

from ._checks import expect_shape
from .add_rmsnorm import add_rmsnorm
from .moe_router import moe_router


def add_rmsnorm_router(x, residual, weight, eps, router_weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
    expect_shape("add_rmsnorm_router", "router_weight", router_weight, (None, np.shape(x)[-1]),
                 "[E, D]: one router row per expert, as long as x's rows")
    normed, summed = add_rmsnorm(x, residual, weight, eps)  # [T, D] each, x's dtype
    route_weights, ids = moe_router(normed, router_weight, bias, top_k, n_group, topk_group, scale,
                                    renorm_eps)  # [T, K] float32, [T, K] int64
    return normed, summed, route_weights, ids
