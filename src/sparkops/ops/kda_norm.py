"""kda_norm: KDA's recurrence and its output norm as one op (a fused op: kda, then gated_rmsnorm)."""

from . import kda as _kda
from ._cases import gen, randn
from ._contract import Case, Param, make_contract


def kda_norm(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps):
    """y = gated_rmsnorm(kda(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps), gate, weight, eps).

    A fused op: its reference is the composition of the unfused references, with nothing rounded in
    between (the core output o stays float64 in the reference, float32 in a fused kernel), so an
    implementation that rounds o to v's dtype before the norm (the unfused chain on bfloat16
    activations) sits within the "bf16" row, not the "fp32" one. `state` is updated in place exactly
    as kda updates it. The norm runs over each head's D channels (never over H*D) and its gate is a
    sigmoid (spec classic bug 5).

    Why it exists: at decode the two ops are two launches a KDA layer whose second reads back what
    the first just wrote (the 48B: 20 launches a token). One kernel that holds a head's whole output
    row can norm it before storing it. The engine calls it where `[engine] fuse_kda_norm` is on,
    for one-token calls (decode); a prefill chunk keeps the chunked kda and the norm apart.
    """


def cases(seed: int) -> list[Case]:
    """kda's cases (decode steps, prefills not a multiple of a chunk, D from 16 to 128), each call given an output
    gate and the layer's norm gain; the norm's gain is one per case (a layer's weight), the gate one per call."""
    g = gen(seed + 7919)  # apart from kda's stream, so kda's own inputs stay what its cases are
    out = []
    for case in _kda.cases(seed):
        d = case.calls[0]["q"].shape[2]
        weight = randn(g, d)
        calls = [dict(call, gate=randn(g, *call["q"].shape, std=2.0), weight=weight, eps=1e-5) for call in case.calls]
        out.append(Case(case.name, calls, state=case.state))
    return out


CONTRACT = make_contract(
    kda_norm,
    summary="KDA gated delta rule then its per-head gated RMSNorm, in one call; state updated in place",
    params=(
        *_kda.CONTRACT.params,
        Param("gate", "tensor", "[T, H, D]", "activation", "output-gate logits (the g_b projection)"),
        Param("weight", "tensor", "[D]", "float32", "the output norm's gain, shared by the heads"),
        Param("eps", "scalar", "", "float", "added to the mean square"),
    ),
    returns="[T, H, D], dtype of v",
    cases=cases,
)
