"""The routing arguments moe_router's contract allows, checked once for the implementations that route (moe_router's
and the fused add_rmsnorm_router's). Apart from ops/moe_router.py so that the contract module, whose source pins its
cases (gate/cases.py's cases_digest), stays as it is; the NumPy reference keeps its own check, as the definition."""

from __future__ import annotations

from ..errors import BadInput


def check_routing(op: str, experts: int, top_k, n_group, topk_group) -> tuple[int, int, int]:
    """(top_k, n_group, topk_group) as ints, once they describe a routing of `experts` experts the contract allows;
    else BadInput naming OP, the value and the fix."""
    top_k, n_group, topk_group = int(top_k), int(n_group), int(topk_group)
    if n_group < 1 or experts % n_group:
        raise BadInput(f"{op}: n_group={n_group} does not divide the {experts} experts; use a divisor of the expert "
                       f"count")
    if not 1 <= topk_group <= n_group:
        raise BadInput(f"{op}: topk_group={topk_group} must lie in [1, n_group={n_group}]")
    if not 1 <= top_k <= experts:
        raise BadInput(f"{op}: top_k={top_k} must lie in [1, {experts}] (the expert count)")
    return top_k, n_group, topk_group
