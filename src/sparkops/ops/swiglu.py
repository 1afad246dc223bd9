"""swiglu: the SwiGLU gate, silu(gate) * up."""

from ._cases import gen, name, randn
from ._contract import Case, Param, make_contract


def swiglu(gate, up):
    """y = silu(gate) * up = gate * sigmoid(gate) * up, elementwise. Output has gate's dtype."""


def cases(seed: int) -> list[Case]:
    g = gen(seed)
    return [Case(name(f"T{t}_F{f}", seed), [dict(gate=randn(g, t, f, std=3.0), up=randn(g, t, f))])
            for t, f in [(1, 64), (9, 200), (4, 1024)]]


CONTRACT = make_contract(
    swiglu,
    summary="silu(gate) * up",
    params=(
        Param("gate", "tensor", "[T, F]", "activation", "gate projection output"),
        Param("up", "tensor", "[T, F]", "activation", "up projection output"),
    ),
    returns="[T, F], dtype of gate",
    cases=cases,
)
