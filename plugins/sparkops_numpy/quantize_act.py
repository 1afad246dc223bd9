"""quantize_act, the reference: ggml's Q8_0 row quantizer, in float32 because that is its definition.

ggml's `quantize_row_q8_0_ref` (ggml-quants.c) per block of 32 floats: amax = max|x|,
d = amax / 127, id = d ? 1/d : 0, scale stored as fp16(d), q = roundf(x * id). Every step is a
float32 operation, so this module keeps float32 (not float64) and rounds half away from zero, as C's
roundf does. (ggml's SIMD CPU path for activations is a different function: it rounds half to even.)
"""

import numpy as np

from sparkops.errors import BadInput

from ._checks import expect_shape
from ._convert import numpy_op

#: values per Q8_0 block (ggml QK8_0)
Q8_BLOCK = 32


def round_half_away(v: np.ndarray) -> np.ndarray:
    """C roundf on float32 values: exact, because v + 0.5 is exact in float64 for |v| < 2^29."""
    v64 = v.astype(np.float64)
    return np.trunc(v64 + np.copysign(0.5, v64))


def q8_0_blocks(x32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q int8 [..., n, 32], d float32 [..., n] fp16-rounded) for float32 blocks [..., n, 32]."""
    amax = np.max(np.abs(x32), axis=-1)  # [..., n], float32 (exact)
    d = amax / np.float32(127)  # float32 division
    inv = np.zeros_like(d)
    np.divide(np.float32(1), d, out=inv, where=d != 0)  # float32 1/d, 0 where d == 0
    q = round_half_away(x32 * inv[..., None])  # float32 product, then roundf
    return q.astype(np.int8), d.astype(np.float16).astype(np.float32)


@numpy_op("quantize_act", like=None)
def quantize_act(x):
    expect_shape("quantize_act", "x", x, (None, None), "[T, D]")
    t, width = np.shape(x)
    if width % Q8_BLOCK:
        raise BadInput(f"quantize_act: 'x' rows have {width} values, not a multiple of {Q8_BLOCK}; "
                       f"Q8_0 quantizes whole blocks of {Q8_BLOCK}, pad the rows")
    x32 = np.asarray(x).astype(np.float32).reshape(t, width // Q8_BLOCK, Q8_BLOCK)
    q, d = q8_0_blocks(x32)
    return q.reshape(t, width), d  # [T, D] int8, [T, D/32] float32
