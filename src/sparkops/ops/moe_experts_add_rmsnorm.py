"""moe_experts_add_rmsnorm: a MoE layer's experts, then the residual add and the next block's norm, as one op (a fused
op: moe_experts, then add_rmsnorm on its output)."""

from . import add_rmsnorm as _norm
from . import moe_experts as _experts
from ._cases import gen, randn
from ._contract import Case, Param, make_contract


def moe_experts_add_rmsnorm(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, residual, norm_weight, eps):
    """y = moe_experts(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)   # [T, D], x's dtype
    normed, summed = add_rmsnorm(y, residual, norm_weight, eps). Returns (normed, summed), both x's dtype.

    A fused op: its reference is the composition of the unfused references exactly as the graph chains them - the
    experts' output is rounded to x's dtype before it is added to the residual stream (the unfused chain hands
    add_rmsnorm that tensor), and the norm is taken of the sum before that is rounded (add_rmsnorm's rule).

    Why it exists: at decode a MoE layer ends with the experts' down projection and then the next block's residual
    add and norm, a launch of its own on the critical path (the 48B: 26 a token, ~2.4 us a layer from the down's end
    to the norm's in GPU session 33's timeline, of which the norm's own time is ~1.8). The norm is 2304 values, little
    enough for the down kernel's last block to finish once every output is stored. The engine calls it where
    `[engine] fuse_moe_norm` is on, for decode calls (graph.MOE_NORM_MAX_T tokens at most) of a MoE layer; a prefill
    chunk and a dense-FFN layer keep the two apart.
    """


def cases(seed: int) -> list[Case]:
    """moe_experts' cases (every weight type, one token and a prefill, with and without a shared expert), each with a
    residual stream three times the block output's spread and a norm gain around one, as add_rmsnorm's cases draw
    them."""
    g = gen(seed + 7919)  # the norm's inputs drawn apart, so the experts' inputs are moe_experts' own cases
    out = []
    for case in _experts.cases(seed):
        (call,) = case.calls
        t, d = call["x"].shape
        out.append(Case(case.name, [dict(call, residual=randn(g, t, d, std=3.0),
                                         norm_weight=1.0 + randn(g, d, std=0.2), eps=1e-5)]))
    return out


_EXPERTS = tuple(_experts.CONTRACT.params)
_NORM = {p.name: p for p in _norm.CONTRACT.params}

CONTRACT = make_contract(
    moe_experts_add_rmsnorm,
    summary="routed + shared SwiGLU experts, then residual add + RMSNorm, returning (normed, summed)",
    params=(
        *_EXPERTS,
        _NORM["residual"],
        Param("norm_weight", "tensor", "[D]", "float32", "gain of the next block's norm"),
        _NORM["eps"],
    ),
    returns="(normed [T, D], summed [T, D]), dtype of x",
    cases=cases,
)
