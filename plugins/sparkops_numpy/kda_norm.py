"""kda_norm, the reference: the composition of the unfused references, nothing rounded in between.

The kda reference's recurrence (float64, state updated in place) hands its float64 output straight to
the gated_rmsnorm reference's per-head norm and sigmoid gate.
"""

import numpy as np

from ._checks import expect_shape
from ._convert import numpy_op
from .gated_rmsnorm import gated_rmsnorm
from .kda import kda


@numpy_op("kda_norm", like="v")
def kda_norm(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps):
    # the norm's inputs are checked before the recurrence writes the state: a refused call leaves it as it was
    expect_shape("kda_norm", "gate", gate, np.shape(v), "the same [T, H, D] as v")
    expect_shape("kda_norm", "weight", weight, (np.shape(v)[-1],), "one gain per head channel")
    o = kda.__wrapped__(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps)  # [T, H, D] float64, state updated
    return gated_rmsnorm.__wrapped__(o, gate, weight, eps)  # [T, H, D]
