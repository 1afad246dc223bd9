"""short_conv in torch: causal depthwise conv + SiLU over [state ; x], the window updated in place.

The W taps are a Python loop of W shifted multiply-adds over all T tokens at once (W = 4), in float32.
"""

import torch
import torch.nn.functional as F

from ._common import f32, require


def short_conv(x, weight, state):
    t, c = x.shape
    w = weight.shape[-1]
    require(weight.shape == (c, w), f"short_conv: weight must be [C={c}, W], got {list(weight.shape)}")
    require(tuple(state.shape) == (w - 1, c), f"short_conv: state must be [W-1={w - 1}, C={c}], got "
                                              f"{list(state.shape)}")
    ext = torch.cat([f32(state), f32(x)], dim=0)  # [W-1+T, C], oldest first
    taps = f32(weight)
    acc = ext[0:t] * taps[:, 0]
    for i in range(1, w):
        acc = acc + ext[i:i + t] * taps[:, i]  # [T, C]
    if w > 1:
        state.copy_(ext[t:])  # the last W-1 raw inputs
    return F.silu(acc).to(x.dtype)
