"""add_rmsnorm, the reference: the composition of an add and `rmsnorm` (float64 inside)."""

import numpy as np

from ._checks import expect_shape
from ._convert import numpy_op
from .rmsnorm import rms_normalize


@numpy_op("add_rmsnorm", like="x")
def add_rmsnorm(x, residual, weight, eps):
    expect_shape("add_rmsnorm", "residual", residual, np.shape(x), "the same shape as x")
    summed = np.asarray(residual, np.float64) + np.asarray(x, np.float64)  # [T, D]
    return rms_normalize(summed, weight, eps), summed
