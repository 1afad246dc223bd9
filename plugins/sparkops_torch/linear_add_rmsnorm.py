"""linear_add_rmsnorm in torch: this plugin's linear, then its add_rmsnorm on the projection's output as linear returns
it (x's dtype), as the graph chains the two: the same values the unfused torch chain computes."""

from ._common import require
from .add_rmsnorm import add_rmsnorm
from .linear import linear


def linear_add_rmsnorm(x, weight, residual, norm_weight, eps):
    require(tuple(residual.shape) == (x.shape[0], weight.shape[0]),
            f"linear_add_rmsnorm: residual {list(residual.shape)} must be [T, OUT] = {[x.shape[0], weight.shape[0]]} "
            f"(the residual stream the projection's output is added to)")
    y = linear(x, weight)  # [T, OUT], x's dtype
    return add_rmsnorm(y, residual, norm_weight, eps)  # (normed, summed) [T, OUT] each, x's dtype
