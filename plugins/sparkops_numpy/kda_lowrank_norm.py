"""kda_lowrank_norm, the reference: the linear reference's two up-projections handed in float64 to the kda_norm
reference, nothing rounded in between."""

import numpy as np

from ._checks import expect_shape, expect_weight
from ._convert import numpy_op
from .kda_norm import kda_norm
from .linear import linear


@numpy_op("kda_lowrank_norm", like="v")
def kda_lowrank_norm(q, k, v, f, f_b, beta, a, dt_bias, state, scale, l2_eps, ga, g_b, weight, eps):
    t, h, d = np.shape(v)
    # every input checked before the recurrence writes the state: a refused call leaves it as it was
    for name, code, wname, w in (("f", f, "f_b", f_b), ("ga", ga, "g_b", g_b)):
        expect_weight("kda_lowrank_norm", wname, w, (h * d, None), f"[H*D, P] = [{h * d}, P]")
        expect_shape("kda_lowrank_norm", name, code, (t, w.shape[1]), f"[T, P] = [{t}, {w.shape[1]}]")
    expect_shape("kda_lowrank_norm", "weight", weight, (d,), "one gain per head channel")
    g = linear.__wrapped__(f, f_b).reshape(t, h, d)  # [T, H, D] float64 decay logits
    gate = linear.__wrapped__(ga, g_b).reshape(t, h, d)  # [T, H, D] float64 output gate
    return kda_norm.__wrapped__(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps)
