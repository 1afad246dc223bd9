"""gated_rmsnorm: KDA's output norm: per-head RMSNorm times a sigmoid gate."""

from ._cases import gen, name, randn
from ._contract import Case, Param, make_contract


def gated_rmsnorm(x, gate, weight, eps):
    """y[t, h, :] = rmsnorm(x[t, h, :], weight, eps) * sigmoid(gate[t, h, :]).

    The norm is over each head's D channels (not over H*D) and the gate is a sigmoid, not a swish
    (spec classic bug 5). Computed in float32; the output has x's dtype.
    """


def cases(seed: int) -> list[Case]:
    g = gen(seed)
    return [Case(name(f"T{t}_H{h}_D{d}", seed),
                 [dict(x=randn(g, t, h, d, std=2.0), gate=randn(g, t, h, d, std=2.0), weight=randn(g, d), eps=1e-5)])
            for t, h, d in [(1, 4, 32), (7, 3, 64), (2, 32, 128)]]


CONTRACT = make_contract(
    gated_rmsnorm,
    summary="per-head RMSNorm * sigmoid(gate)",
    params=(
        Param("x", "tensor", "[T, H, D]", "activation", "the KDA core output"),
        Param("gate", "tensor", "[T, H, D]", "activation", "output-gate logits (g_b projection)"),
        Param("weight", "tensor", "[D]", "float32", "norm gain shared by all heads"),
        Param("eps", "scalar", "", "float", "added to the mean square"),
    ),
    returns="[T, H, D], dtype of x",
    cases=cases,
)
