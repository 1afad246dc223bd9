"""short_conv_kda_norm, the reference: the composition of the short_conv and kda_norm references as the graph chains
them. Both are called through the carrier (tensors in, tensors out), so the recurrence reads q, k and v exactly as the
short_conv reference returns them: rounded to x's dtype, as the unfused chain hands them over. Every input is checked
before either state is written: a refused call leaves the window and the state as they were."""

import numpy as np

from ._checks import expect_shape
from .kda_norm import kda_norm
from .short_conv import short_conv


def short_conv_kda_norm(x, conv_weight, window, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps):
    op = "short_conv_kda_norm"
    expect_shape(op, "g", g, (None, None, None), "[T, H, D]: the decay logits give the heads' shape")
    t, h, d = np.shape(g)
    p = h * d
    expect_shape(op, "x", x, (t, 3 * p), f"[T, 3P]: the q|k|v projections of g's {t} tokens, P = H*D = {p}")
    expect_shape(op, "conv_weight", conv_weight, (3 * p, None), "[3P, W]: the merged q|k|v taps")
    width = np.shape(conv_weight)[1]
    expect_shape(op, "window", window, (width - 1, 3 * p), "[W-1, 3P]: the previous W-1 raw q|k|v rows")
    for nm, arr, want, what in (("beta", beta, (t, h), "one beta logit per token and head"),
                                ("a", a, (h,), "-exp(A_log) per head"),
                                ("dt_bias", dt_bias, (p,), "head-major decay-gate bias [H*D]"),
                                ("state", state, (h, d, d), "S[h] = [D_k, D_v]"),
                                ("gate", gate, (t, h, d), "the same [T, H, D] as g"),
                                ("weight", weight, (d,), "one gain per head channel")):
        expect_shape(op, nm, arr, want, what)
    qkv = short_conv(x, conv_weight, window)  # [T, 3P], x's dtype; the window rolled
    q, k, v = (qkv[:, j * p:(j + 1) * p].reshape(t, h, d) for j in range(3))  # [T, H, D] each
    return kda_norm(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps)  # [T, H, D], x's dtype
