"""rmsnorm: RMSNorm over the last dimension."""

from ._cases import gen, name, randn
from ._contract import Case, Param, make_contract


def rmsnorm(x, weight, eps):
    """y = weight * x / sqrt(mean(x^2) + eps), the mean over the last dimension.

    Statistics in float32 at least; the output has x's dtype. Used for the block norms (D = hidden
    size), the final norm and MLA's kv_a_layernorm (D = kv_lora_rank).
    """


def cases(seed: int) -> list[Case]:
    g = gen(seed)
    out = []
    for t, d in [(1, 64), (7, 96), (33, 256), (3, 2304)]:
        scale = float(1 + 10 * _rand(g))
        out.append(Case(name(f"T{t}_D{d}", seed), [dict(x=randn(g, t, d, std=scale), weight=randn(g, d),
                                                        eps=1e-5)]))
    return out


def _rand(g) -> float:
    import torch

    return float(torch.rand(1, generator=g))


CONTRACT = make_contract(
    rmsnorm,
    summary="RMSNorm over the last dimension",
    params=(
        Param("x", "tensor", "[T, D]", "activation", "rows to normalise"),
        Param("weight", "tensor", "[D]", "float32", "per-channel gain"),
        Param("eps", "scalar", "", "float", "added to the mean square"),
    ),
    returns="[T, D], dtype of x",
    cases=cases,
)
