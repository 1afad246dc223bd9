"""add_rmsnorm in torch: the residual add and the norm in one pass over float32 values."""

from ._common import f32, last_dim, require, rms_normalize


def add_rmsnorm(x, residual, weight, eps):
    require(x.shape == residual.shape, f"add_rmsnorm: x {list(x.shape)} and residual {list(residual.shape)} "
                                       f"must have the same shape")
    last_dim("add_rmsnorm", "x", x, weight.shape[-1])
    summed = f32(residual) + f32(x)  # [T, D] float32: the normed output is computed before any rounding
    return rms_normalize(summed, weight, eps).to(x.dtype), summed.to(x.dtype)
