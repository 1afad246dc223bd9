"""moe_experts, the reference: a loop over the chosen experts, dequantizing only those (float64)."""

import numpy as np

from sparkops.errors import BadInput

from ._checks import expect_ids, expect_shape, expect_weight
from ._convert import dequant, numpy_op
from .swiglu import silu


def swiglu_ffn(x: np.ndarray, gate, up, down) -> np.ndarray:
    """down (silu(gate x) * (up x)) for rows x [T, D]; the weights are QWeights [F, D], [F, D], [D, F]."""
    return (silu(x @ dequant(gate).T) * (x @ dequant(up).T)) @ dequant(down).T


@numpy_op("moe_experts", like="x")
def moe_experts(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    expect_shape("moe_experts", "x", x, (None, None), "[T, D]")
    t, d = np.shape(x)
    expect_shape("moe_experts", "ids", ids, (t, None), "[T, K] chosen expert ids")
    expect_shape("moe_experts", "weights", weights, np.shape(ids), "[T, K], one weight per chosen expert")
    expect_weight("moe_experts", "w_gate", w_gate, (None, None, d), "[E, F, D]")
    n_exp, ffn = w_gate.shape[:2]
    expect_weight("moe_experts", "w_up", w_up, (n_exp, ffn, d), "[E, F, D] like w_gate")
    expect_weight("moe_experts", "w_down", w_down, (n_exp, d, ffn), "[E, D, F]")
    expect_ids("moe_experts", "ids", ids, n_exp)
    shared = (s_gate, s_up, s_down)
    if any(w is None for w in shared) and not all(w is None for w in shared):
        raise BadInput("moe_experts: pass all three shared-expert weights (s_gate, s_up, s_down) or none of them")
    x = np.asarray(x, np.float64)
    ids = np.asarray(ids)
    route = np.asarray(weights, np.float64)
    out = np.zeros((t, d))
    for e in np.unique(ids):  # only the chosen experts are ever dequantized
        tok, slot = np.nonzero(ids == e)
        y = swiglu_ffn(x[tok], w_gate[int(e)], w_up[int(e)], w_down[int(e)])  # [n, D]
        np.add.at(out, tok, route[tok, slot, None] * y)  # a token may list an expert twice: both count
    if s_gate is not None:
        fs = s_gate.shape[0]
        expect_weight("moe_experts", "s_gate", s_gate, (fs, d), "[Fs, D]")
        expect_weight("moe_experts", "s_up", s_up, (fs, d), "[Fs, D]")
        expect_weight("moe_experts", "s_down", s_down, (d, fs), "[D, Fs]")
        out += swiglu_ffn(x, s_gate, s_up, s_down)
    return out  # [T, D]
