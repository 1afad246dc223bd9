"""add_rmsnorm_router in torch: this plugin's add_rmsnorm, then its moe_router on the normed row as add_rmsnorm returns
it (x's dtype), as the graph chains the two: the same values the unfused torch chain computes."""

from ._common import require
from .add_rmsnorm import add_rmsnorm
from .moe_router import moe_router


def add_rmsnorm_router(x, residual, weight, eps, router_weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
    require(router_weight.dim() == 2 and router_weight.shape[-1] == x.shape[-1],
            f"add_rmsnorm_router: router_weight {list(router_weight.shape)} must be [E, D] with D = {x.shape[-1]} "
            f"(x's rows)")
    normed, summed = add_rmsnorm(x, residual, weight, eps)  # [T, D] each, x's dtype
    route_weights, ids = moe_router(normed, router_weight, bias, top_k, n_group, topk_group, scale,
                                    renorm_eps)  # [T, K] float32, [T, K] int64
    return normed, summed, route_weights, ids
