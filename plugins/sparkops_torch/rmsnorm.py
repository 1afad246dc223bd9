"""rmsnorm in torch: float32 statistics, output in x's dtype."""

from ._common import f32, last_dim, rms_normalize


def rmsnorm(x, weight, eps):
    last_dim("rmsnorm", "x", x, weight.shape[-1])
    return rms_normalize(f32(x), weight, eps).to(x.dtype)  # [T, D]
