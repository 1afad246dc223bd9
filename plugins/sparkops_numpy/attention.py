"""attention, the reference: MLA (NoPE) over the latent cache, in two forms of one function (float64).

`attention` is the absorbed form (spec 4): the query's nope part is pulled into latent space with
w_uk, attention runs MQA-like over the cached rows [c ; k_pe], and w_uv lifts the result per head.
`attention_naive` materialises k_nope and v per head from w_uk / w_uv and runs ordinary causal
attention with k_h = [k_nope_h ; k_pe], q_h = [q_nope_h ; q_pe_h]. Both first write the new rows.
"""

import numpy as np

from sparkops.errors import BadInput

from ._checks import expect_shape
from ._convert import numpy_op


def write_rows(q, latent, cache, pos, w_uk, w_uv):
    """Check shapes, write latent into cache[pos:pos+T]; return (p0, cached rows 0..p0+T-1 as float64)."""
    expect_shape("attention", "q", q, (None, None, None), "[T, N, Dn+R]")
    t, heads, qdim = np.shape(q)
    expect_shape("attention", "w_uk", w_uk, (heads, None, None), "[N, Dn, Lkv]")
    _, dn, lkv = np.shape(w_uk)
    expect_shape("attention", "w_uv", w_uv, (heads, None, lkv), "[N, Dv, Lkv]")
    rope = qdim - dn
    if rope < 0:
        raise BadInput(f"attention: q has {qdim} values per head but w_uk says Dn = {dn}; q must be [q_nope ; q_pe]")
    expect_shape("attention", "latent", latent, (t, lkv + rope), "[T, Lkv+R]: [normed c ; k_pe]")
    expect_shape("attention", "cache", cache, (None, lkv + rope), "[Lmax, Lkv+R]")
    expect_shape("attention", "pos", pos, (1,), "a one-element position tensor")
    p0 = int(np.asarray(pos).reshape(-1)[0])
    if p0 < 0 or p0 + t > np.shape(cache)[0]:
        raise BadInput(f"attention: writing {t} rows at position {p0} needs {p0 + t} cache rows, the cache has "
                       f"{np.shape(cache)[0]}; allocate the cache for the full context")
    cache[p0:p0 + t] = latent
    return p0, np.asarray(cache[:p0 + t], np.float64), dn, lkv


def causal_softmax(scores: np.ndarray, p0: int) -> np.ndarray:
    """softmax over s of scores [T, N, S] where query t may see rows s <= p0 + t."""
    t, _, s = scores.shape
    visible = np.arange(s)[None, :] <= (p0 + np.arange(t))[:, None]  # [T, S]
    scores = np.where(visible[:, None, :], scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@numpy_op("attention", like="q")
def attention(q, latent, cache, pos, w_uk, w_uv, scale):
    p0, rows, dn, lkv = write_rows(q, latent, cache, pos, w_uk, w_uv)
    q = np.asarray(q, np.float64)
    c, k_pe = rows[:, :lkv], rows[:, lkv:]  # [S, Lkv], [S, R]
    q_lat = np.einsum("tnd,ndl->tnl", q[..., :dn], np.asarray(w_uk, np.float64))  # w_uk^T q_nope [T, N, Lkv]
    scores = (np.einsum("tnl,sl->tns", q_lat, c) + np.einsum("tnr,sr->tns", q[..., dn:], k_pe)) * scale
    probs = causal_softmax(scores, p0)  # [T, N, S]
    o_lat = np.einsum("tns,sl->tnl", probs, c)  # values are the latent itself [T, N, Lkv]
    return np.einsum("tnl,nvl->tnv", o_lat, np.asarray(w_uv, np.float64))  # [T, N, Dv]


@numpy_op("attention", like="q")
def attention_naive(q, latent, cache, pos, w_uk, w_uv, scale):
    p0, rows, dn, lkv = write_rows(q, latent, cache, pos, w_uk, w_uv)
    q = np.asarray(q, np.float64)
    c, k_pe = rows[:, :lkv], rows[:, lkv:]
    heads = q.shape[1]
    k_nope = np.einsum("ndl,sl->snd", np.asarray(w_uk, np.float64), c)  # [S, N, Dn]
    values = np.einsum("nvl,sl->snv", np.asarray(w_uv, np.float64), c)  # [S, N, Dv]
    keys = np.concatenate([k_nope, np.broadcast_to(k_pe[:, None, :], (len(c), heads, k_pe.shape[1]))], axis=-1)
    probs = causal_softmax(np.einsum("tnd,snd->tns", q, keys) * scale, p0)  # [T, N, S]
    return np.einsum("tns,snv->tnv", probs, values)  # [T, N, Dv]
