"""kda: the Kimi Delta Attention core: gates, q/k L2-norm and the gated delta rule with its state."""

import torch

from ._cases import gen, name, randn, uniform
from ._contract import Case, Param, make_contract


def kda(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps):
    """Per token t and head h (spec 3.2 steps 4-7, recurrence 3.3):

        q_t = scale * q_t / sqrt(sum(q_t^2) + l2_eps);  k_t = k_t / sqrt(sum(k_t^2) + l2_eps)
        gate[d] = a[h] * softplus(g_t[d] + dt_bias[h*D + d])        (<= 0; a = -exp(A_log) < 0)
        b = sigmoid(beta_t[h])
        S <- diag(exp(gate)) S                (decay the key rows first)
        S <- S + b * k_t (v_t - S^T k_t)^T    (delta-rule write with the decayed state)
        o_t = S^T q_t                         (read after the write)

    S = state[h] is [D_k, D_v] float32, updated in place (zero for a new sequence). q, k, v are the
    short-conv outputs; v is not normalised. All gate and state arithmetic is float32 at least.
    A chunked (prefill) implementation computes the same function (spec 3.4). Output has v's dtype.
    """


def cases(seed: int) -> list[Case]:
    gn = gen(seed)
    out = []
    # (H, D, token counts per call): decode steps, a prefill not a multiple of any chunk size, then decode
    for h, d, steps in [(2, 16, (1, 1, 1)), (3, 32, (37, 1, 2)), (1, 64, (70,)), (4, 128, (1,)), (2, 32, (130, 1))]:
        a = -torch.exp(uniform(gn, h, lo=-1.0, hi=1.0))  # a = -exp(A_log)
        dt_bias = randn(gn, h * d, std=0.5)
        state = randn(gn, h, d, d, std=0.1) if steps[0] == 1 else torch.zeros(h, d, d)
        calls = []
        for t in steps:
            gate_std = 1.0 if t < 100 else 6.0  # long prompts with strong decay: Γ reaches hundreds
            calls.append(dict(q=randn(gn, t, h, d), k=randn(gn, t, h, d), v=randn(gn, t, h, d),
                              g=randn(gn, t, h, d, std=gate_std), beta=randn(gn, t, h, std=2.0),
                              a=a, dt_bias=dt_bias, scale=d ** -0.5, l2_eps=1e-6))
        out.append(Case(name(f"H{h}_D{d}_steps{'-'.join(map(str, steps))}", seed), calls, state={"state": state}))
    return out


CONTRACT = make_contract(
    kda,
    summary="KDA gated delta rule (gates + l2norm + recurrence), state updated in place",
    params=(
        Param("q", "tensor", "[T, H, D]", "activation", "queries after short conv + SiLU, not yet normalised"),
        Param("k", "tensor", "[T, H, D]", "activation", "keys after short conv + SiLU, not yet normalised"),
        Param("v", "tensor", "[T, H, D]", "activation", "values after short conv + SiLU"),
        Param("g", "tensor", "[T, H, D]", "activation", "decay logits: the f_b projection output"),
        Param("beta", "tensor", "[T, H]", "activation", "beta logits: the b projection output"),
        Param("a", "tensor", "[H]", "float32", "-exp(A_log) per head (what GGUF's ssm_a stores)"),
        Param("dt_bias", "tensor", "[H*D]", "float32", "decay-gate bias, head-major"),
        Param("state", "state", "[H, D, D]", "float32", "recurrent state S[h] = [D_k, D_v]; updated"),
        Param("scale", "scalar", "", "float", "query scale, D^-0.5"),
        Param("l2_eps", "scalar", "", "float", "epsilon inside the q/k L2-norm sqrt"),
    ),
    returns="[T, H, D], dtype of v",
    cases=cases,
)
