"""linear, the reference: dequantize the weight exactly as gguf-py does, multiply in float64."""

import numpy as np

from ._checks import expect_shape, expect_weight
from ._convert import dequant, numpy_op


@numpy_op("linear", like="x")
def linear(x, weight):
    expect_weight("linear", "weight", weight, (None, None), "a 2-D [OUT, IN] weight")
    in_features = weight.shape[1]
    expect_shape("linear", "x", x, (None, in_features), f"rows of the weight's {in_features} input features")
    return np.asarray(x, np.float64) @ dequant(weight).T  # [T, OUT]
