"""linear_add_rmsnorm: a block's output projection, then the residual add and the next norm, as one op (a fused op:
linear, then add_rmsnorm on its output)."""

from gguf import GGMLQuantizationType as Q

from ..qweight import QWeight
from . import add_rmsnorm as _norm
from . import linear as _linear
from ._cases import gen, name, randn
from ._contract import Case, Param, make_contract


def linear_add_rmsnorm(x, weight, residual, norm_weight, eps):
    """y = linear(x, weight)                              # [T, OUT], x's dtype
    normed, summed = add_rmsnorm(y, residual, norm_weight, eps). Returns (normed, summed), both x's dtype.

    A fused op: its reference is the composition of the unfused references exactly as the graph chains them - the
    projection's output is rounded to x's dtype before it is added to the residual stream (the unfused chain hands
    add_rmsnorm that tensor), and the norm is taken of the sum before that is rounded (add_rmsnorm's rule).

    Why it exists: at decode an attention block ends with its output projection (o_proj) and then the FFN's residual
    add and norm, a launch of its own on the critical path (the 48B: 27 a token, ~2.5-2.8 us a layer from the o_proj's
    end to the norm's in GPU session 33's timeline). The norm is one row of OUT values, little enough for the
    projection kernel's last block to finish once every output is stored. The engine calls it where `[engine]
    fuse_oproj_norm` is on, for decode calls (graph.OPROJ_NORM_MAX_T tokens at most); a prefill chunk keeps the two
    apart.
    """


#: one-token Q4_K calls beyond linear's own: the rows a partial block of four (42: the last block's warps half idle)
_MORE = [(Q.Q4_K, 512, 42)]


def cases(seed: int) -> list[Case]:
    """linear's cases (every weight type, one token and more) and a one-token Q4_K call of a partial block of rows,
    each with a residual stream of OUT values three times the projection's spread and a norm gain around one."""
    g = gen(seed + 104729)  # the norm's inputs drawn apart, so the projection's inputs are linear's own cases
    out = []
    for case in _linear.cases(seed):
        (call,) = case.calls
        t, n = call["x"].shape[0], call["weight"].shape[0]
        y_std = 0.05 * call["x"].shape[1] ** 0.5  # the projection's spread: weights of 0.05, unit inputs
        out.append(Case(case.name, [dict(call, residual=randn(g, t, n, std=3.0 * y_std),
                                         norm_weight=1.0 + randn(g, n, std=0.2), eps=1e-5)]))
    for qtype, k, n in _MORE:
        w = QWeight.from_float(randn(g, n, k, std=0.05), qtype, name=f"w2_{qtype.name}")
        out.append(Case(name(f"{qtype.name}_T1_N{n}_K{k}", seed), [dict(
            x=randn(g, 1, k), weight=w, residual=randn(g, 1, n, std=3.0 * 0.05 * k ** 0.5),
            norm_weight=1.0 + randn(g, n, std=0.2), eps=1e-5)]))
    return out


_LINEAR = {p.name: p for p in _linear.CONTRACT.params}
_NORM = {p.name: p for p in _norm.CONTRACT.params}

CONTRACT = make_contract(
    linear_add_rmsnorm,
    summary="x @ W^T, then residual add + RMSNorm, returning (normed, summed)",
    params=(
        _LINEAR["x"], _LINEAR["weight"],
        Param("residual", "tensor", "[T, OUT]", "activation", "the residual stream"),
        Param("norm_weight", "tensor", "[OUT]", "float32", "gain of the next norm"),
        _NORM["eps"],
    ),
    returns="(normed [T, OUT], summed [T, OUT]), dtype of x",
    cases=cases,
)
