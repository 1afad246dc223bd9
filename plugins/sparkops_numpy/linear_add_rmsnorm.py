"""linear_add_rmsnorm, the reference: the composition of the linear and add_rmsnorm references as the graph chains
them. Both are called through the carrier (tensors in, tensors out), so add_rmsnorm adds the projection's output
exactly as the linear reference returns it: rounded to x's dtype, as the unfused chain hands it over."""

import numpy as np

from ._checks import expect_shape
from .add_rmsnorm import add_rmsnorm
from .linear import linear


def linear_add_rmsnorm(x, weight, residual, norm_weight, eps):
    expect_shape("linear_add_rmsnorm", "residual", residual, (np.shape(x)[0], weight.shape[0]),
                 "[T, OUT]: the residual stream, one row per token of x, as wide as the weight's rows")
    y = linear(x, weight)  # [T, OUT], x's dtype
    return add_rmsnorm(y, residual, norm_weight, eps)  # (normed, summed) [T, OUT] each, x's dtype
