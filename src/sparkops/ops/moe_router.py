"""moe_router: sigmoid scores, bias for selection only, grouped top-k, renormalise, scale."""

from ._cases import gen, name, randn
from ._contract import Case, Param, make_contract


def moe_router(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
    """Per token (spec 5, steps 1-4), in float32 at least:

        s = sigmoid(x @ weight^T)                     [E]
        s' = s + bias                                 (bias chooses, never weighs)
        group score = sum of the top-2 s' in each of n_group groups; keep the topk_group best
        groups, set s' of the others to 0; ids = the top_k entries of s'
        w = s[ids] / (sum(s[ids]) + renorm_eps) * scale

    ids are ordered by descending s' (ties: the lower expert id first). Returns
    (weights float32 [T, top_k], ids int64 [T, top_k]).
    """


def cases(seed: int) -> list[Case]:
    g = gen(seed)
    out = []
    for t, d, e, k, ng, tg in [(1, 64, 16, 4, 1, 1), (5, 96, 32, 8, 4, 2), (3, 256, 256, 8, 1, 1), (2, 64, 20, 3, 5, 3)]:
        out.append(Case(name(f"T{t}_E{e}_k{k}_g{ng}-{tg}", seed),
                        [dict(x=randn(g, t, d), weight=randn(g, e, d, std=d ** -0.5), bias=randn(g, e, std=0.1),
                              top_k=k, n_group=ng, topk_group=tg, scale=2.446, renorm_eps=1e-20)]))
    return out


CONTRACT = make_contract(
    moe_router,
    summary="DeepSeek-V3-style sigmoid router with selection bias and grouped top-k",
    params=(
        Param("x", "tensor", "[T, D]", "activation", "normed FFN input"),
        Param("weight", "tensor", "[E, D]", "float32", "router weight (ffn_gate_inp)"),
        Param("bias", "tensor", "[E]", "float32", "selection bias (exp_probs_b / e_score_correction_bias)"),
        Param("top_k", "scalar", "", "int", "experts per token"),
        Param("n_group", "scalar", "", "int", "expert groups (E divisible by it)"),
        Param("topk_group", "scalar", "", "int", "groups kept"),
        Param("scale", "scalar", "", "float", "routed scaling factor (2.446 for Kimi-Linear)"),
        Param("renorm_eps", "scalar", "", "float", "added to the weight sum before renormalising"),
    ),
    returns="(weights float32 [T, top_k], ids int64 [T, top_k])",
    cases=cases,
)
