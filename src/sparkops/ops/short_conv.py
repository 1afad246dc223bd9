"""short_conv: KDA's causal depthwise convolution + SiLU, with its rolling window state."""

from ._cases import gen, name, randn
from ._contract import Case, Param, make_contract


def short_conv(x, weight, state):
    """Causal depthwise conv of width W over time, then SiLU, per channel c:

        y[t, c] = silu( sum_{i=0..W-1} weight[c, i] * x_ext[t - (W-1) + i, c] )

    where x_ext is x preceded by the W-1 previous raw inputs held in `state` ([W-1, C], oldest
    first; zeros for a new sequence). weight[c, W-1] multiplies the current token. Afterwards
    `state` holds the last W-1 raw (pre-conv, pre-SiLU) inputs of x_ext, updated in place.
    Output has x's dtype.
    """


def cases(seed: int) -> list[Case]:
    g = gen(seed)
    out = []
    for c, w, steps in [(64, 4, (1,)), (96, 4, (5, 1, 1)), (40, 4, (2, 1, 7)), (128, 3, (1, 1))]:
        state = randn(g, w - 1, c) if steps[0] != 5 else randn(g, w - 1, c) * 0
        weight = randn(g, c, w, std=0.5)
        calls = [dict(x=randn(g, t, c, std=2.0), weight=weight) for t in steps]
        out.append(Case(name(f"C{c}_W{w}_steps{'-'.join(map(str, steps))}", seed), calls, state={"state": state},
                        note="a fresh (zero) window" if steps[0] == 5 else "continues a window"))
    return out


CONTRACT = make_contract(
    short_conv,
    summary="causal depthwise conv + SiLU with a rolling window",
    params=(
        Param("x", "tensor", "[T, C]", "activation", "raw projection outputs of T new tokens"),
        Param("weight", "tensor", "[C, W]", "float32", "per-channel taps, the last one on the current token"),
        Param("state", "state", "[W-1, C]", "float32", "the previous W-1 raw inputs, oldest first; updated"),
    ),
    returns="[T, C], dtype of x",
    cases=cases,
)
