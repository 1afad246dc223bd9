"""add_rmsnorm: the residual add fused with the next RMSNorm."""

from ._cases import gen, name, randn
from ._contract import Case, Param, make_contract


def add_rmsnorm(x, residual, weight, eps):
    """summed = residual + x; normed = rmsnorm(summed, weight, eps). Returns (normed, summed).

    This is how the graph adds a block's output to the residual stream and normalises for the next
    block in one op. Its reference is the composition of the unfused references: an add, then
    `rmsnorm`. The norm is taken of the sum before it is rounded to x's dtype. Both outputs have
    x's dtype.
    """


def cases(seed: int) -> list[Case]:
    g = gen(seed)
    return [
        Case(name(f"T{t}_D{d}", seed), [dict(x=randn(g, t, d), residual=randn(g, t, d, std=3.0),
                                            weight=randn(g, d), eps=1e-5)])
        for t, d in [(1, 64), (5, 96), (17, 256)]
    ]


CONTRACT = make_contract(
    add_rmsnorm,
    summary="residual add + RMSNorm, returning (normed, summed)",
    params=(
        Param("x", "tensor", "[T, D]", "activation", "the block output to add"),
        Param("residual", "tensor", "[T, D]", "activation", "the residual stream"),
        Param("weight", "tensor", "[D]", "float32", "gain of the norm"),
        Param("eps", "scalar", "", "float", "added to the mean square"),
    ),
    returns="(normed [T, D], summed [T, D]), dtype of x",
    cases=cases,
)
