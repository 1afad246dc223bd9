"""moe_router in torch: sigmoid router, bias for selection only, grouped top-k, float32 throughout.

Ordering and ties follow the contract: a stable descending sort picks the experts, so equal scores
go to the lower expert id (and, for the group choice, to the lower group). Everything stays on the
device: no host synchronisation, graph-capturable.
"""

import torch

from ._common import f32, last_dim, require


def moe_router(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
    n_experts = weight.shape[0]
    last_dim("moe_router", "x", x, weight.shape[-1])
    require(n_group >= 1 and n_experts % n_group == 0 and 1 <= topk_group <= n_group,
            f"moe_router: {n_experts} experts cannot form {n_group} groups keeping {topk_group}; "
            f"n_group must divide the expert count and 1 <= topk_group <= n_group")
    require(1 <= top_k <= n_experts, f"moe_router: top_k={top_k} must lie in [1, {n_experts}]")
    scores = torch.sigmoid(f32(x) @ f32(weight).t())  # [T, E]
    choice = scores + f32(bias)  # the bias chooses, never weighs
    if n_group > 1:
        t = choice.shape[0]
        grouped = choice.reshape(t, n_group, n_experts // n_group)  # [T, G, E/G]
        best2 = torch.sort(grouped, dim=-1, descending=True, stable=True).values[..., :min(2, grouped.shape[-1])]
        group_score = best2.sum(dim=-1)  # [T, G]
        kept = torch.sort(group_score, dim=-1, descending=True, stable=True).indices[:, :topk_group]
        keep = torch.zeros_like(group_score, dtype=torch.bool).scatter_(1, kept, True)  # [T, G]
        choice = grouped.masked_fill(~keep.unsqueeze(-1), 0.0).reshape(t, n_experts)  # 0.0, as the reference
    ids = torch.sort(choice, dim=-1, descending=True, stable=True).indices[:, :top_k]  # [T, K]
    chosen = scores.gather(1, ids)
    weights = chosen / (chosen.sum(dim=-1, keepdim=True) + renorm_eps) * scale
    return weights, ids
