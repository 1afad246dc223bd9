"""kda, the reference: the KDA gated delta rule in float64, two independent forms of one function.

`kda` is the recurrence of spec 3.3, token by token. `kda_chunked` is the chunked parallel form of
spec 3.4, which a prefill kernel follows; the tests prove the two agree to rounding. Both share the
gate / beta / L2-norm preparation (spec 3.2 steps 4-6) and update `state` ([H, D_k, D_v]) in place.
"""

import numpy as np

from sparkops.errors import BadInput

from ._checks import expect_shape
from ._convert import numpy_op
from .swiglu import sigmoid


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)) without overflow."""
    return np.logaddexp(0.0, x)


def l2_normalize(x: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(sum(x^2) + eps) over the last axis (fla/HF place eps inside the sqrt)."""
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


def prepare(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps):
    """Check shapes; return float64 (q, k, v, log-decay gate, beta) laid out [H, T, ...]."""
    expect_shape("kda", "q", q, (None, None, None), "[T, H, D]")
    t, h, d = np.shape(q)
    for name, arr in (("k", k), ("v", v), ("g", g)):
        expect_shape("kda", name, arr, (t, h, d), "the same [T, H, D] as q")
    expect_shape("kda", "beta", beta, (t, h), "one beta logit per token and head")
    expect_shape("kda", "a", a, (h,), "-exp(A_log) per head")
    expect_shape("kda", "dt_bias", dt_bias, (h * d,), "head-major decay-gate bias [H*D]")
    expect_shape("kda", "state", state, (h, d, d), "S[h] = [D_k, D_v]")
    q = scale * l2_normalize(np.asarray(q, np.float64), l2_eps)
    k = l2_normalize(np.asarray(k, np.float64), l2_eps)
    bias = np.asarray(dt_bias, np.float64).reshape(h, d)  # head-major: channel h*D + d
    gate = np.asarray(a, np.float64)[:, None] * softplus(np.asarray(g, np.float64) + bias)  # [T, H, D], <= 0
    b = sigmoid(beta)  # [T, H]
    return tuple(_heads_first(x) for x in (q, k, np.asarray(v, np.float64), gate, b))


def _heads_first(x: np.ndarray) -> np.ndarray:
    """[T, H, ...] -> [H, T, ...], contiguous."""
    return np.ascontiguousarray(np.moveaxis(x, 0, 1))


@numpy_op("kda", like="v")
def kda(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps):
    q, k, v, gate, b = prepare(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps)  # [H, T, D], b [H, T]
    s = np.array(state, np.float64)  # [H, Dk, Dv]
    out = np.empty_like(v)
    for t in range(q.shape[1]):
        s *= np.exp(gate[:, t])[:, :, None]  # decay the key rows first
        u = v[:, t] - np.einsum("hkv,hk->hv", s, k[:, t])  # error against the decayed state [H, Dv]
        s += b[:, t, None, None] * k[:, t, :, None] * u[:, None, :]  # rank-1 delta-rule write
        out[:, t] = np.einsum("hkv,hk->hv", s, q[:, t])  # read after the write
    state[...] = s
    return np.moveaxis(out, 0, 1)  # [T, H, D]


@numpy_op("kda", like="v")
def kda_chunked(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, chunk_size=64):
    """Spec 3.4. The last chunk is simply shorter: the same as padding it with q=k=v=0, g=0, beta=0."""
    if int(chunk_size) < 1:
        raise BadInput(f"kda_chunked: chunk_size is {chunk_size}; pass a positive chunk size")
    q, k, v, gate, b = prepare(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps)
    s = np.array(state, np.float64)  # [H, Dk, Dv]
    out = np.empty_like(v)
    for start in range(0, q.shape[1], int(chunk_size)):
        span = slice(start, start + int(chunk_size))
        out[:, span], s = _chunk(q[:, span], k[:, span], v[:, span], gate[:, span], b[:, span], s)
    state[...] = s
    return np.moveaxis(out, 0, 1)  # [T, H, D]


def _chunk(q, k, v, gate, b, s):
    """One chunk of n tokens for all heads: (outputs [H, n, Dv], the state leaving the chunk)."""
    n = q.shape[1]
    cum = np.cumsum(gate, axis=1)  # Γ [H, n, Dk], non-increasing along n
    rows, cols = np.tril_indices(n)  # pairs s <= r
    lower = np.zeros((n, n), bool)
    lower[rows, cols] = True
    diff = cum[:, :, None, :] - cum[:, None, :, :]  # Γ_r - Γ_s [H, r, s, Dk]
    # mask s > r BEFORE exp: only non-positive differences are exponentiated, nothing can overflow
    decay = np.exp(np.where(lower[None, :, :, None], diff, -np.inf))  # [H, n, n, Dk]
    kk = np.einsum("hrd,hsd,hrsd->hrs", k, k, decay)  # decayed key-key products
    qk = np.einsum("hrd,hsd,hrsd->hrs", q, k, decay)  # A_qk, diagonal included
    strict = np.tril(np.ones((n, n), bool), -1)
    lmat = np.where(strict, b[:, :, None] * kk, 0.0)  # L = strict_lower(diag(beta) P) [H, n, n]
    inv = _unit_lower_inverse(lmat)  # (I + L)^-1
    m = inv * b[:, None, :]  # M = (I + L)^-1 diag(beta)
    decay_in = np.exp(cum)  # exp(Γ_r) <= 1
    w = m @ (decay_in * k)  # [H, n, Dk]
    u = m @ v  # [H, n, Dv]
    v_new = u - w @ s  # [H, n, Dv]
    out = (q * decay_in) @ s + qk @ v_new
    last = cum[:, -1]  # Γ_C [H, Dk]
    tail = np.exp(last[:, None, :] - cum) * k  # exp(Γ_C - Γ_s) k_s [H, n, Dk]
    s = np.exp(last)[:, :, None] * s + np.einsum("hsk,hsv->hkv", tail, v_new)
    return out, s


def _unit_lower_inverse(lmat: np.ndarray) -> np.ndarray:
    """(I + L)^-1 for strictly lower-triangular L [H, n, n], by forward substitution row by row."""
    n = lmat.shape[-1]
    x = np.zeros_like(lmat)
    for r in range(n):
        x[:, r, r] = 1.0
        if r:
            x[:, r, :r] = -np.einsum("hm,hms->hs", lmat[:, r, :r], x[:, :r, :r])
    return x
