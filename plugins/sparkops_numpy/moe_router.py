"""moe_router, the reference: DeepSeek-V3-style sigmoid routing with a selection-only bias (float64).

Spec 5 steps 1-4: s = sigmoid(x W^T); s' = s + bias chooses; grouped top-k keeps the topk_group
groups whose two best s' sum highest and zeroes the rest of s'; ids = top_k of s'; the weights are
the UNBIASED s of the chosen experts, renormalised and scaled.
"""

import numpy as np

from sparkops.errors import BadInput

from ._checks import expect_shape
from ._convert import numpy_op
from .swiglu import sigmoid


def top_order(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries along the last axis, descending, ties to the lower index."""
    return np.argsort(-values, axis=-1, kind="stable")[..., :k]


def group_mask(chooser: np.ndarray, n_group: int, topk_group: int) -> np.ndarray:
    """bool [T, E]: True for experts in the topk_group groups with the highest sum of their 2 best scores."""
    t, e = chooser.shape
    grouped = chooser.reshape(t, n_group, e // n_group)  # [T, G, E/G]
    best = -np.sort(-grouped, axis=-1)[..., :2]  # the (up to) two best per group
    group_score = best.sum(axis=-1)  # [T, G]
    kept = np.zeros((t, n_group), bool)
    np.put_along_axis(kept, top_order(group_score, topk_group), True, axis=-1)
    return np.repeat(kept, e // n_group, axis=-1)  # [T, E]


@numpy_op("moe_router", like=None)
def moe_router(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
    expect_shape("moe_router", "x", x, (None, None), "[T, D]")
    expect_shape("moe_router", "weight", weight, (None, np.shape(x)[1]), "[E, D]")
    experts = np.shape(weight)[0]
    expect_shape("moe_router", "bias", bias, (experts,), "one selection bias per expert")
    if n_group < 1 or experts % n_group:
        raise BadInput(f"moe_router: n_group={n_group} does not divide the {experts} experts; "
                       f"use a divisor of the expert count")
    if not 1 <= topk_group <= n_group:
        raise BadInput(f"moe_router: topk_group={topk_group} must lie in [1, n_group={n_group}]")
    if not 1 <= top_k <= experts:
        raise BadInput(f"moe_router: top_k={top_k} must lie in [1, {experts}] (the expert count)")
    scores = sigmoid(np.asarray(x, np.float64) @ np.asarray(weight, np.float64).T)  # s [T, E]
    chooser = scores + np.asarray(bias, np.float64)  # s' [T, E]: bias chooses, never weighs
    chooser = np.where(group_mask(chooser, n_group, topk_group), chooser, 0.0)  # 0.0 as the reference code does
    ids = top_order(chooser, top_k)  # [T, K]
    chosen = np.take_along_axis(scores, ids, axis=-1)  # unbiased scores of the chosen experts
    weights = chosen / (chosen.sum(axis=-1, keepdims=True) + renorm_eps) * scale
    return weights.astype(np.float32), ids.astype(np.int64)
