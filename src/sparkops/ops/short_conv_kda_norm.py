"""short_conv_kda_norm: KDA's short conv, recurrence and output norm as one op (a fused op: short_conv over the
projected q|k|v row, then kda_norm on its three column blocks)."""

import torch

from . import kda_norm as _kda_norm
from ._cases import gen, name, randn, uniform
from ._contract import Case, Param, make_contract


def short_conv_kda_norm(x, conv_weight, window, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps):
    """qkv = short_conv(x, conv_weight, window)  # [T, 3P], x's dtype, window rolled in place
    y = kda_norm(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps), where q, k, v are qkv's
    column blocks [0, P), [P, 2P), [2P, 3P) viewed as [T, H, D] (P = H * D). Returns y [T, H, D], x's dtype.

    A fused op: its reference is the composition of the unfused references exactly as the graph chains them (the
    merged conv of [engine] fuse_projections, then kda_norm): the conv's output is rounded to x's dtype before the
    recurrence reads it, as the unfused chain hands kda_norm that tensor. Both states are updated in place exactly as
    the two ops update them: `window` holds the last W-1 raw rows of [window ; x], `state` the recurrent S.

    Why it exists: at decode a KDA layer's short conv and its recurrence are two launches in series on the critical
    path (the 48B: 20 of each a token, ~4.8 + ~5.6 us a layer in GPU session 32's timeline), the recurrence reading
    back the 3P values the conv just wrote. The conv's work (W taps over a head's q, k and v channels, then SiLU) is
    small enough for the recurrence's own programs to do. The engine calls it where `[engine] fuse_conv_kda` is on,
    for decode calls (graph.FUSED_NORM_MAX_T tokens at most, as kda_norm) of a KDA layer whose q, k and v share one
    conv (fuse_short_conv); a prefill chunk keeps the conv and the chunked recurrence apart.
    """


#: (H, D, W, token counts per call): decode steps into a continued window and state; a prefill not a multiple of
#: a chunk into a fresh (zero) window and state, then decode; three taps and two; the 48B's shape (32 x 128, W 4)
#: for a few tokens; calls of 2 and 8 tokens (the kernels loop over T) and one of 130
_SHAPES = [(2, 16, 4, (1, 1, 1)), (3, 32, 4, (37, 1, 2)), (1, 64, 3, (5, 1)), (4, 128, 4, (1, 8)),
           (2, 32, 2, (130, 1)), (32, 128, 4, (1, 2))]


def cases(seed: int) -> list[Case]:
    """kda's inputs but q, k, v as one raw projected row [T, 3P] (spread 2, as short_conv's cases) with taps of
    spread 0.5, so the conv's SiLU outputs are of order one; decay logits stronger for long prompts (kda's cases)."""
    gn = gen(seed)
    out = []
    for h, d, w, steps in _SHAPES:
        p = h * d
        fresh = steps[0] > 1  # a prefill opens a sequence: zero window and state
        window = torch.zeros(w - 1, 3 * p) if fresh else randn(gn, w - 1, 3 * p, std=2.0)
        state = torch.zeros(h, d, d) if fresh else randn(gn, h, d, d, std=0.1)
        conv_weight = randn(gn, 3 * p, w, std=0.5)
        a = -torch.exp(uniform(gn, h, lo=-1.0, hi=1.0))  # a = -exp(A_log)
        dt_bias = randn(gn, p, std=0.5)
        weight = randn(gn, d)
        calls = []
        for t in steps:
            gate_std = 1.0 if t < 100 else 6.0
            calls.append(dict(x=randn(gn, t, 3 * p, std=2.0), conv_weight=conv_weight, g=randn(gn, t, h, d,
                              std=gate_std), beta=randn(gn, t, h, std=2.0), a=a, dt_bias=dt_bias, scale=d ** -0.5,
                              l2_eps=1e-6, gate=randn(gn, t, h, d, std=2.0), weight=weight, eps=1e-5))
        out.append(Case(name(f"H{h}_D{d}_W{w}_steps{'-'.join(map(str, steps))}", seed), calls,
                        state={"window": window, "state": state},
                        note="a fresh (zero) window and state" if fresh else "continues a window and a state"))
    return out


_NORM = {p.name: p for p in _kda_norm.CONTRACT.params}

CONTRACT = make_contract(
    short_conv_kda_norm,
    summary="short conv + SiLU over the projected q|k|v row, then KDA's recurrence and per-head gated norm; "
            "window and state updated in place",
    params=(
        Param("x", "tensor", "[T, 3P]", "activation", "the raw q|k|v projections of T tokens, P = H * D each"),
        Param("conv_weight", "tensor", "[3P, W]", "float32", "the merged q|k|v conv taps, the last on the current "
                                                             "token"),
        Param("window", "state", "[W-1, 3P]", "float32", "the previous W-1 raw q|k|v rows, oldest first; updated"),
        *(_NORM[n] for n in ("g", "beta", "a", "dt_bias", "state", "scale", "l2_eps", "gate", "weight", "eps")),
    ),
    returns="[T, H, D], dtype of x",
    cases=cases,
)
