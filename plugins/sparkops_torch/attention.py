"""attention in torch: MLA (NoPE) over the latent cache; absorbed form for decode, naive for prefill.

Writing the cache: rows pos..pos+T-1 get the new latent rows through `index_copy_` with a device
index (pos + arange(T)), so `pos` is never read on the host. Which rows are attended:
  * CPU: pos is host memory, so reading it costs nothing; only rows [0, pos+T) are touched.
  * CUDA: the shapes must not depend on pos (graph capture), so all Lmax rows take part; the causal
    mask s <= pos + t is built by comparing aranges with the device tensor pos, and rows at or past
    pos+T are zeroed before use so that whatever a preallocated cache holds there (even NaN) cannot
    leak through a 0 * NaN.
Forms (equal in real arithmetic, spec 4):
  * absorbed (T <= ABSORBED_MAX_T, or a cache too long to expand): q_nope is pulled into latent
    space (w_uk^T q_nope), scores are taken against the cached rows [c ; k_pe] directly, values
    are the latent itself, then w_uv.
  * naive (prefill): k_nope = w_uk c and v = w_uv c are expanded once per call and
    scaled_dot_product_attention runs per query tile with a boolean mask; no [T, L] score matrix
    is materialised beyond one tile, and nothing is float64.
Softmax is float32 (in SDPA too, since its inputs are float32). `attention_bf16` runs the matmuls
on bfloat16 operands (float32 accumulation, float32 softmax), claimed under the "bf16" row.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sparkops.errors import BadInput
from sparkops.kvcache import FP8

from ._common import require

#: the absorbed (decode) form up to this many new tokens; the naive form above
ABSORBED_MAX_T = 64
#: upper bound on the values of the score tile [tile, N, L] (or SDPA's mask / scores) built at once
SCORE_BUDGET = 1 << 26
#: the naive form expands K and V for every cached row; past this many values (4 GiB of float32,
#: e.g. 32 heads at ~100k rows) prefill stays in the absorbed form, which expands nothing
EXPAND_BUDGET = 1 << 30


def attention(q, latent, cache, pos, w_uk, w_uv, scale):
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, torch.float32)


def attention_bf16(q, latent, cache, pos, w_uk, w_uv, scale):
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, torch.bfloat16)


def attention_fp8cache(q, latent, cache, pos, w_uk, w_uv, scale):
    """torch_fp8cache: the float32 form over a float8_e4m3fn cache (the "fp8_cache" claim), the new rows copied in as
    bytes (they arrive rounded, sparkops/kvcache.py) and the cache read back exactly as float32."""
    require(cache.dtype == FP8 and latent.dtype == FP8,
            f"attention=torch_fp8cache: the cache and latent must be float8_e4m3fn, got {cache.dtype} and "
            f"{latent.dtype}; run with --cache-dtype float8_e4m3fn, or select attention=torch for another cache")
    return _attention(q, latent, cache, pos, w_uk, w_uv, scale, torch.float32, fp8=True)


def _attention(q, latent, cache, pos, w_uk, w_uv, scale, compute, fp8: bool = False):
    t, n, dq = q.shape
    lmax, row = cache.shape
    lkv = w_uk.shape[-1]
    r = row - lkv
    dn = dq - r
    require(w_uk.dim() == 3 and w_uk.shape[:2] == (n, dn) and r > 0,
            f"attention: w_uk must be [N={n}, Dn, Lkv] with Dn + (cache row {row} - Lkv) = q's {dq}, got "
            f"{list(w_uk.shape)}")
    require(w_uv.dim() == 3 and w_uv.shape[0] == n and w_uv.shape[2] == lkv,
            f"attention: w_uv must be [N={n}, Dv, Lkv={lkv}], got {list(w_uv.shape)}")
    require(tuple(latent.shape) == (t, row), f"attention: latent must be [T={t}, {row}], got {list(latent.shape)}")
    require(fp8 or cache.dtype != FP8, "attention: a float8_e4m3fn cache is read by the implementations proven on it "
            "(claim fp8_cache); select attention=torch_fp8cache")
    dev = cache.device
    start = pos.reshape(-1)[:1].to(device=dev, dtype=torch.int64)  # [1], stays on the device
    if dev.type == "cpu":
        p0 = int(start[0])
        if p0 < 0 or p0 + t > lmax:
            raise BadInput(f"attention: writing {t} rows at position {p0} does not fit the cache of {lmax} "
                           f"rows; the prompt plus generated tokens exceed the context (allocate a longer "
                           f"cache or shorten the prompt)")
    rows_at = start + torch.arange(t, device=dev)
    if fp8:  # index_copy_ has no float8 kernel on the CPU: the same bytes through uint8 views
        cache.view(torch.uint8).index_copy_(0, rows_at, latent.contiguous().view(torch.uint8))
    else:
        cache.index_copy_(0, rows_at, latent.to(cache.dtype))
    if dev.type == "cpu":
        keys = cache[:p0 + t].to(torch.float32)  # [L, Lkv+R]: exactly the rows written so far
    else:
        rows = torch.arange(lmax, device=dev)
        keys = torch.where((rows < start + t).unsqueeze(-1), cache.to(torch.float32), 0.0)  # [Lmax, Lkv+R]
    length = keys.shape[0]
    query_pos = start + torch.arange(t, device=dev)  # [T] absolute positions
    allowed_all = torch.arange(length, device=dev).unsqueeze(0) <= query_pos.unsqueeze(1)  # [T, L]
    expanded = n * length * (dq + w_uv.shape[1])  # values of the naive form's K and V
    form = _absorbed if t <= ABSORBED_MAX_T or expanded > EXPAND_BUDGET else _naive
    out = form(q, keys, allowed_all, w_uk, w_uv, scale, compute, dn, lkv)
    return out.to(q.dtype)  # [T, N, Dv]


def _tiles(t: int, per_query: int) -> tuple[range, int]:
    """Query tiles whose score block [tile, per_query] stays within SCORE_BUDGET (cut by shape only)."""
    step = max(1, SCORE_BUDGET // max(1, per_query))
    return range(0, t, step), step


def _absorbed(q, keys, allowed_all, w_uk, w_uv, scale, compute, dn, lkv):
    t, n, _ = q.shape
    length = keys.shape[0]
    q32 = q.to(torch.float32)
    q_lat = torch.einsum("tnd,ndl->tnl", q32[..., :dn].to(compute), w_uk.to(compute)).float()  # [T, N, Lkv]
    query = torch.cat([q_lat, q32[..., dn:]], dim=-1).to(compute)  # [T, N, Lkv+R]
    keys_c = keys.to(compute)
    latent = keys_c[:, :lkv]  # [L, Lkv] the values, in latent space
    w_uv_c = w_uv.to(compute)
    out = torch.empty(t, n, w_uv.shape[1], dtype=torch.float32, device=q.device)
    starts, step = _tiles(t, n * length)
    for t0 in starts:
        t1 = min(t, t0 + step)
        scores = (query[t0:t1].reshape(-1, query.shape[-1]) @ keys_c.t()).float().reshape(t1 - t0, n, length)
        scores = (scores * scale).masked_fill(~allowed_all[t0:t1].unsqueeze(1), float("-inf"))
        probs = torch.softmax(scores, dim=-1)  # [t, N, L] float32
        mixed = (probs.to(compute).reshape(-1, length) @ latent).reshape(t1 - t0, n, lkv)  # [t, N, Lkv]
        out[t0:t1] = torch.einsum("tnl,nvl->tnv", mixed, w_uv_c).float()
    return out


def _naive(q, keys, allowed_all, w_uk, w_uv, scale, compute, dn, lkv):
    t, n, dq = q.shape
    length = keys.shape[0]
    keys_c = keys.to(compute)
    c = keys_c[:, :lkv]  # [L, Lkv]
    k_nope = torch.einsum("sl,ndl->nsd", c, w_uk.to(compute))  # [N, L, Dn]
    k_pe = keys_c[:, lkv:].unsqueeze(0).expand(n, length, dq - dn)  # [N, L, R] shared by the heads
    k_full = torch.cat([k_nope, k_pe], dim=-1)  # [N, L, Dn+R]
    values = torch.einsum("sl,nvl->nsv", c, w_uv.to(compute))  # [N, L, Dv]
    query = q.to(compute).transpose(0, 1)  # [N, T, Dn+R]
    out = torch.empty(n, t, w_uv.shape[1], dtype=compute, device=q.device)
    starts, step = _tiles(t, n * length)
    for t0 in starts:
        t1 = min(t, t0 + step)
        out[:, t0:t1] = F.scaled_dot_product_attention(query[:, t0:t1], k_full, values,
                                                       attn_mask=allowed_all[t0:t1], scale=scale)
    return out.transpose(0, 1).float()
