"""gated_rmsnorm, the reference: per-head RMSNorm times sigmoid(gate) (float64 inside)."""

import numpy as np

from ._checks import expect_shape
from ._convert import numpy_op
from .rmsnorm import rms_normalize
from .swiglu import sigmoid


@numpy_op("gated_rmsnorm", like="x")
def gated_rmsnorm(x, gate, weight, eps):
    expect_shape("gated_rmsnorm", "x", x, (None, None, None), "[T, H, D]")
    expect_shape("gated_rmsnorm", "gate", gate, np.shape(x), "the same shape as x")
    expect_shape("gated_rmsnorm", "weight", weight, (np.shape(x)[-1],), "one gain per head channel")
    return rms_normalize(x, weight, eps) * sigmoid(gate)  # [T, H, D]; the norm runs over each head's D channels
