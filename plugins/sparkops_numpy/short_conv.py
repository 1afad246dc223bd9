"""short_conv, the reference: causal depthwise conv over [window ; x], SiLU, and the rolled window."""

import numpy as np

from ._checks import expect_shape
from ._convert import numpy_op
from .swiglu import silu


@numpy_op("short_conv", like="x")
def short_conv(x, weight, state):
    expect_shape("short_conv", "x", x, (None, None), "[T, C]")
    channels = np.shape(x)[1]
    expect_shape("short_conv", "weight", weight, (channels, None), "[C, W] taps per channel")
    width = np.shape(weight)[1]
    expect_shape("short_conv", "state", state, (width - 1, channels), "[W-1, C]: the previous W-1 raw inputs")
    t = np.shape(x)[0]
    x_ext = np.concatenate([np.asarray(state, np.float64), np.asarray(x, np.float64)])  # [W-1+T, C]
    taps = np.asarray(weight, np.float64)  # [C, W]
    acc = np.zeros((t, channels))
    for i in range(width):  # tap i meets the input i steps after the window start; tap W-1 is the current token
        acc += taps[:, i] * x_ext[i:i + t]
    if width > 1:
        state[...] = x_ext[-(width - 1):]  # the last W-1 raw (pre-conv, pre-SiLU) inputs, oldest first
    return silu(acc)  # [T, C]
