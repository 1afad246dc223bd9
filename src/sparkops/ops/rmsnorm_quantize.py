"""rmsnorm_quantize: RMSNorm fused with Q8_0 activation quantization (the input of a quantized-activation linear)."""

import torch

from ._cases import gen, name, randn
from ._contract import Case, Param, make_contract


def rmsnorm_quantize(x, weight, eps):
    """(q, d) = quantize_act(rmsnorm(x, weight, eps)), the normalised rows rounded to float32 first.

    A fused op: its reference is the composition of the unfused references - `rmsnorm` (float64
    inside), its result rounded to float32, then `quantize_act` (ggml's float32 Q8_0 quantizer). It
    saves writing the normalised row and reading it back before an integer-dot-product linear.

    An implementation that normalises in float32 sits an ulp or so from the rounded float64 norm,
    so where x * (1/d) lands next to a rounding boundary its q may differ by one step, and where a
    block maximum lands next to a float16 rounding boundary its scale may differ by one float16
    step: the tolerance row ("qdq") allows exactly that and nothing more. Bit-identity is claimed
    between a fused kernel and the unfused chain of the same backend.

    Returns (q int8 [T, D], d float32 [T, D/32]) as quantize_act does (d holds float16 values).
    """


#: (T, D): one row, odd row counts, one block, the 2304-wide block norms, a 9216-wide row
SHAPES = [(1, 32), (7, 96), (3, 256), (5, 2304), (2, 9216)]


def cases(seed: int) -> list[Case]:
    g = gen(seed)
    out = []
    for t, d in SHAPES:
        scale = float(1 + 10 * torch.rand(1, generator=g))
        x = randn(g, t, d, std=scale)
        if d > 32:
            x[0, :32] = 0.0  # an all-zero block: it stays zero through the norm, so d = 0 and q = 0
        if t > 2:
            x[t // 2] = 0.0  # an all-zero row: mean square 0, the norm is 0 * rsqrt(eps), not NaN
        out.append(Case(name(f"T{t}_D{d}", seed), [dict(x=x, weight=randn(g, d), eps=1e-5)]))
    return out


CONTRACT = make_contract(
    rmsnorm_quantize,
    summary="RMSNorm then Q8_0 activation quantization, returning (q, d)",
    params=(
        Param("x", "tensor", "[T, D]", "float32", "rows to normalise and quantize; D a multiple of 32"),
        Param("weight", "tensor", "[D]", "float32", "per-channel gain of the norm"),
        Param("eps", "scalar", "", "float", "added to the mean square"),
    ),
    returns="(q int8 [T, D], d float32 [T, D/32])",
    cases=cases,
)
