"""rmsnorm_quantize, the reference: the composition of the unfused references.

`rms_normalize` (float64) rounded to float32 - exactly what the `rmsnorm` reference hands back for
float32 rows - then the float32 Q8_0 quantizer of `quantize_act`.
"""

import numpy as np

from sparkops.errors import BadInput

from ._checks import expect_shape
from ._convert import numpy_op
from .quantize_act import Q8_BLOCK, q8_0_blocks
from .rmsnorm import rms_normalize


@numpy_op("rmsnorm_quantize", like=None)
def rmsnorm_quantize(x, weight, eps):
    expect_shape("rmsnorm_quantize", "x", x, (None, None), "[T, D]")
    t, width = np.shape(x)
    expect_shape("rmsnorm_quantize", "weight", weight, (width,), "one gain per channel of x")
    if width % Q8_BLOCK:
        raise BadInput(f"rmsnorm_quantize: 'x' rows have {width} values, not a multiple of {Q8_BLOCK}; "
                       f"Q8_0 quantizes whole blocks of {Q8_BLOCK}, pad the rows")
    normed = rms_normalize(x, weight, eps).astype(np.float32)  # [T, D], rounded once, as rmsnorm returns it
    q, d = q8_0_blocks(normed.reshape(t, width // Q8_BLOCK, Q8_BLOCK))
    return q.reshape(t, width), d  # [T, D] int8, [T, D/32] float32
