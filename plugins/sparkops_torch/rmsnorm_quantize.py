"""rmsnorm_quantize in torch: this plugin's rmsnorm (float32 statistics) then its Q8_0 quantizer.

Not one fused kernel, but the same meaning in one call; the rows are float32 throughout (the
quantizer is defined on float32), so the norm runs in float32 whatever x's dtype.
"""

from ._common import f32, require
from .quantize_act import BLOCK, quantize_act
from .rmsnorm import rmsnorm


def rmsnorm_quantize(x, weight, eps):
    require(x.dim() == 2 and x.shape[-1] % BLOCK == 0,
            f"rmsnorm_quantize: x must be [T, D] with D a multiple of {BLOCK}, got {list(x.shape)}")
    return quantize_act(rmsnorm(f32(x), weight, eps))  # (q [T, D] int8, d [T, D/32] float32)
