"""kda_lowrank_norm: KDA's two low-rank gate up-projections, its recurrence and its output norm as one op."""

from gguf import GGMLQuantizationType as Q

from ..qweight import QWeight
from . import kda_norm as _kda_norm
from ._cases import gen, randn
from ._contract import Case, Param, make_contract


def kda_lowrank_norm(q, k, v, f, f_b, beta, a, dt_bias, state, scale, l2_eps, ga, g_b, weight, eps):
    """y = kda_norm(q, k, v, linear(f, f_b) as [T, H, D], beta, a, dt_bias, state, scale, l2_eps,
                    linear(ga, g_b) as [T, H, D], weight, eps).

    A fused op: its reference is the composition of the linear and kda_norm references, nothing rounded
    in between (the decay logits and the output gate stay float64 in the reference, float32 in a fused
    kernel; the unfused chain on bfloat16 activations rounds both to bf16, which the "bf16" row covers).
    `f` and `ga` are f_a's and g_a's outputs ([T, P], P the low rank: the head dim on Kimi-Linear); f_b
    and g_b are the up-projections as stored ([H*D, P], float GGUF types). `state` is updated in place
    exactly as kda updates it.

    Why it exists: at decode f_b and g_b are two GEMVs of ~1 MB each a KDA layer, ~2.7 us a launch in
    GPU session 22's step (40 launches a token on the 48B), whose outputs only the recurrence and its
    norm read. A kernel that already holds a head's state can form its head's decay logits and output
    gate from the two [P] codes itself. The engine calls it where `[engine] fuse_kda_gates` is on, for
    one-token calls (decode); a prefill chunk keeps the linears, the chunked kda and the norm apart.
    """


#: the low rank of each kda_norm case, by head dim: P = D as on Kimi-Linear, and one P != D
_RANK = {16: 16, 32: 24, 64: 64, 128: 128}


def cases(seed: int) -> list[Case]:
    """kda_norm's cases with the decay logits and the output gate made by the two up-projections from [P] codes
    (F16 weights, the mix's type, and one case in F32), scaled so that g and the gate keep kda_norm's spreads (1,
    or 6 for the long prompts with strong decay; 2)."""
    g = gen(seed + 104729)  # apart from kda_norm's stream, so its own inputs stay what its cases are
    out = []
    for i, case in enumerate(_kda_norm.cases(seed)):
        first = case.calls[0]
        t0, h, d = first["q"].shape
        p = _RANK[d]
        qtype = Q.F32 if i == 1 else Q.F16
        spread = 6.0 if t0 >= 100 else 1.0
        f_b = QWeight.from_float(randn(g, h * d, p, std=spread / p ** 0.5), qtype, name=f"f_b_{qtype.name}")
        g_b = QWeight.from_float(randn(g, h * d, p, std=2.0 / p ** 0.5), qtype, name=f"g_b_{qtype.name}")
        calls = []
        for call in case.calls:
            t = call["q"].shape[0]
            rest = {k: v for k, v in call.items() if k not in ("g", "gate")}
            calls.append(dict(rest, f=randn(g, t, p), f_b=f_b, ga=randn(g, t, p), g_b=g_b))
        out.append(Case(case.name, calls, state=case.state))
    return out


_KDA_NORM = {p.name: p for p in _kda_norm.CONTRACT.params}

CONTRACT = make_contract(
    kda_lowrank_norm,
    summary="KDA's decay and output-gate up-projections, gated delta rule and per-head gated RMSNorm, in one call",
    params=(
        _KDA_NORM["q"], _KDA_NORM["k"], _KDA_NORM["v"],
        Param("f", "tensor", "[T, P]", "activation", "the decay gate's low-rank code: f_a's output"),
        Param("f_b", "weight", "[H*D, P]", "a float GGUF type", "the decay gate's up-projection, as stored"),
        _KDA_NORM["beta"], _KDA_NORM["a"], _KDA_NORM["dt_bias"], _KDA_NORM["state"], _KDA_NORM["scale"],
        _KDA_NORM["l2_eps"],
        Param("ga", "tensor", "[T, P]", "activation", "the output gate's low-rank code: g_a's output"),
        Param("g_b", "weight", "[H*D, P]", "a float GGUF type", "the output gate's up-projection, as stored"),
        _KDA_NORM["weight"], _KDA_NORM["eps"],
    ),
    returns="[T, H, D], dtype of v",
    cases=cases,
)
