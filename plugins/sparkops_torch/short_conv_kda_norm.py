"""short_conv_kda_norm in torch: this plugin's short_conv on the q|k|v row, then its kda_norm on the three column
blocks as short_conv returns them (x's dtype), as the graph chains the two: the same values the unfused torch chain
computes. Every input is checked before either state is written."""

from ._common import require
from .kda_norm import kda_norm
from .short_conv import short_conv


def short_conv_kda_norm(x, conv_weight, window, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps):
    op = "short_conv_kda_norm"
    require(g.dim() == 3, f"{op}: g {list(g.shape)} must be [T, H, D] (the decay logits give the heads' shape)")
    t, h, d = g.shape
    p = h * d
    require(tuple(x.shape) == (t, 3 * p), f"{op}: x {list(x.shape)} must be [T, 3P] = [{t}, {3 * p}]: the q|k|v "
                                          f"projections of g's tokens")
    require(conv_weight.dim() == 2 and conv_weight.shape[0] == 3 * p,
            f"{op}: conv_weight {list(conv_weight.shape)} must be [3P, W] with 3P = {3 * p}")
    width = conv_weight.shape[1]
    for name, ten, want in (("window", window, (width - 1, 3 * p)), ("beta", beta, (t, h)), ("a", a, (h,)),
                            ("dt_bias", dt_bias, (p,)), ("state", state, (h, d, d)), ("gate", gate, (t, h, d)),
                            ("weight", weight, (d,))):
        require(tuple(ten.shape) == want, f"{op}: {name} {list(ten.shape)} must be {list(want)}")
    qkv = short_conv(x, conv_weight, window)  # [T, 3P], x's dtype; the window rolled
    q, k, v = (qkv[:, j * p:(j + 1) * p].reshape(t, h, d) for j in range(3))  # [T, H, D] each
    return kda_norm(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps)  # [T, H, D], x's dtype
