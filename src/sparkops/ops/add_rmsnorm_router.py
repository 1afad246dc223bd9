"""add_rmsnorm_router: the residual add, the FFN norm and the MoE router as one op (a fused op: add_rmsnorm, then
moe_router on its normed output)."""

from . import add_rmsnorm as _norm
from . import moe_router as _router
from ._cases import gen, name, randn
from ._contract import Case, Param, make_contract


def add_rmsnorm_router(x, residual, weight, eps, router_weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
    """normed, summed = add_rmsnorm(x, residual, weight, eps);
    route_weights, ids = moe_router(normed, router_weight, bias, top_k, n_group, topk_group, scale, renorm_eps).
    Returns (normed, summed, route_weights, ids).

    A fused op: its reference is the composition of the unfused references exactly as the graph chains them - the
    router reads normed as add_rmsnorm returns it, rounded to x's dtype (the unfused chain hands the router that
    tensor). normed and summed have x's dtype; route_weights are float32 [T, top_k], ids int64 [T, top_k], ordered as
    moe_router orders them (descending selection score, ties to the lower expert id).

    Why it exists: at decode a MoE layer's norm and router are two launches on the critical path (the 48B: 26 of each
    a token), the router reading back the row the norm just wrote. One kernel whose warps each norm the row themselves
    can dot it with their expert's weight row at once, so the norm's launch leaves the chain. The engine calls it
    where `[engine] fuse_router_norm` is on, for calls of at most 8 tokens (decode) of a MoE layer; a prefill chunk
    and a dense-FFN layer keep add_rmsnorm (and moe_router) apart.
    """


#: (T, D, E, top_k, n_group, topk_group): one token and a few, odd D multiples of 4, 16 to 256 experts, top-1 to top-8,
#: one group and several (the router's own odd grouped case among them), a row longer than one round of a CUDA lane's
#: loads (4100), and more tokens than a decode kernel takes (17); the 48B's router is (2304, 256, 8, 1, 1)
_SHAPES = [(1, 64, 16, 4, 1, 1), (1, 2304, 256, 8, 1, 1), (3, 92, 64, 1, 1, 1), (5, 96, 32, 8, 4, 2),
           (2, 64, 20, 3, 5, 3), (8, 260, 64, 6, 8, 4), (1, 4100, 64, 7, 8, 4), (17, 44, 16, 2, 2, 1)]


def cases(seed: int) -> list[Case]:
    """add_rmsnorm's inputs (the residual three times the block output's spread) and moe_router's weights (rows of
    spread D^-0.5, so a logit is of order one), a norm gain around one so the router sees a normed row of unit scale."""
    g = gen(seed)
    out = []
    for t, d, e, k, ng, tg in _SHAPES:
        out.append(Case(name(f"T{t}_D{d}_E{e}_k{k}_g{ng}-{tg}", seed), [dict(
            x=randn(g, t, d), residual=randn(g, t, d, std=3.0), weight=1.0 + randn(g, d, std=0.2), eps=1e-5,
            router_weight=randn(g, e, d, std=d ** -0.5), bias=randn(g, e, std=0.1), top_k=k, n_group=ng,
            topk_group=tg, scale=2.446, renorm_eps=1e-20)]))
    return out


_NORM = {p.name: p for p in _norm.CONTRACT.params}
_ROUTER = {p.name: p for p in _router.CONTRACT.params}

CONTRACT = make_contract(
    add_rmsnorm_router,
    summary="residual add + RMSNorm, then the MoE router on the normed row, returning (normed, summed, weights, ids)",
    params=(
        _NORM["x"], _NORM["residual"], _NORM["weight"], _NORM["eps"],
        Param("router_weight", "tensor", "[E, D]", "float32", "router weight (ffn_gate_inp)"),
        _ROUTER["bias"], _ROUTER["top_k"], _ROUTER["n_group"], _ROUTER["topk_group"], _ROUTER["scale"],
        _ROUTER["renorm_eps"],
    ),
    returns="(normed [T, D], summed [T, D]: dtype of x; route_weights float32 [T, top_k], ids int64 [T, top_k])",
    cases=cases,
)
