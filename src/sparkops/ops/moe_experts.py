"""moe_experts: the routed SwiGLU experts, their weighted combine, and the always-on shared expert."""

import torch
from gguf import GGMLQuantizationType as Q

from ..qweight import QWeight
from ._cases import gen, name, randn, uniform
from ._contract import Case, Param, make_contract


def moe_experts(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """y[t] = sum_k weights[t, k] * E_{ids[t, k]}(x[t]) + S(x[t]), where

        E_e(f) = w_down[e] (silu(w_gate[e] f) * w_up[e] f)       (routed expert e)
        S(f)   = s_down (silu(s_gate f) * s_up f)                 (the shared expert)

    The stacked expert weights are [E, F, D] (gate, up) and [E, D, F] (down); only the chosen
    experts' rows may be read; an expert listed twice for a token counts twice. The shared expert
    weights may be None (no shared expert). Output has x's dtype.
    """


def cases(seed: int) -> list[Case]:
    g = gen(seed)
    out = []
    for t, d, f, e, k, qtype, shared in [(1, 64, 32, 16, 4, Q.F32, True), (4, 256, 64, 16, 4, Q.Q8_0, True),
                                         (3, 256, 256, 8, 2, Q.Q4_K, False), (2, 256, 256, 6, 3, Q.IQ1_S, True),
                                         # a prefill: T past the decode GEMVs (T <= 8), 6 slots per expert
                                         (24, 256, 256, 8, 2, Q.Q4_K, True),
                                         # a decode step's one token, Q4_K rows of whole blocks: what the one-token
                                         # expert kernels take (every case above they hand on), with the shared
                                         # expert and without
                                         (1, 512, 256, 8, 2, Q.Q4_K, True), (1, 256, 512, 6, 3, Q.Q4_K, False)]:
        def qw(*shape, nm):
            return QWeight.from_float(randn(g, *shape, std=shape[-1] ** -0.5), qtype, name=nm)

        ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)])
        args = dict(x=randn(g, t, d), weights=uniform(g, t, k, lo=0.1, hi=1.0), ids=ids,
                    w_gate=qw(e, f, d, nm="gate_exps"), w_up=qw(e, f, d, nm="up_exps"),
                    w_down=qw(e, d, f, nm="down_exps"),
                    s_gate=qw(f, d, nm="gate_shexp") if shared else None,
                    s_up=qw(f, d, nm="up_shexp") if shared else None,
                    s_down=qw(d, f, nm="down_shexp") if shared else None)
        out.append(Case(name(f"{qtype.name}_T{t}_E{e}_k{k}{'_shared' if shared else ''}", seed), [args]))
    return out


CONTRACT = make_contract(
    moe_experts,
    summary="routed SwiGLU experts, weighted combine, plus the shared expert",
    params=(
        Param("x", "tensor", "[T, D]", "activation", "normed FFN input"),
        Param("weights", "tensor", "[T, K]", "float32", "routing weights (moe_router)"),
        Param("ids", "tensor", "[T, K]", "int64", "chosen expert ids (moe_router)"),
        Param("w_gate", "weight", "[E, F, D]", "any", "stacked expert gate projections"),
        Param("w_up", "weight", "[E, F, D]", "any", "stacked expert up projections"),
        Param("w_down", "weight", "[E, D, F]", "any", "stacked expert down projections"),
        Param("s_gate", "weight", "[Fs, D]", "any or None", "shared expert gate projection"),
        Param("s_up", "weight", "[Fs, D]", "any or None", "shared expert up projection"),
        Param("s_down", "weight", "[D, Fs]", "any or None", "shared expert down projection"),
    ),
    returns="[T, D], dtype of x",
    cases=cases,
)
