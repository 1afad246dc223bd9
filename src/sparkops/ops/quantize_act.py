"""quantize_act: activations to 8-bit blocks of 32 (GGUF Q8_0 layout), for integer dot products."""

from ._cases import gen, name, randn
from ._contract import Case, Param, make_contract


def quantize_act(x):
    """Per block of 32 consecutive values of a row: d = max|x| / 127, stored rounded to float16;
    q = round_half_away_from_zero(x * (1/d)) as int8, with 1/d computed in float32 from the
    unrounded d (0 where d = 0). This is exactly ggml's Q8_0 row quantizer.

    Returns (q int8 [T, D], d float32 [T, D/32]) where d holds the float16-rounded scales. The
    arithmetic is float32 by definition (not float64): implementations must be bit-identical.
    """


def cases(seed: int) -> list[Case]:
    g = gen(seed)
    out = []
    for t, d in [(1, 32), (3, 256), (5, 2304)]:
        x = randn(g, t, d, std=4.0)
        x[0, :32] = 0.0  # an all-zero block: d = 0 must give q = 0, not NaN
        out.append(Case(name(f"T{t}_D{d}", seed), [dict(x=x)]))
    return out


CONTRACT = make_contract(
    quantize_act,
    summary="activations to Q8_0 blocks (int8 values + a float16 scale per 32)",
    params=(Param("x", "tensor", "[T, D]", "float32", "rows to quantize; D a multiple of 32"),),
    returns="(q int8 [T, D], d float32 [T, D/32])",
    cases=cases,
)
