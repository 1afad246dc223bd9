"""attention: the MLA core over the latent cache (NoPE; absorbed decode form, naive prefill form)."""

import torch

from ._cases import gen, name, randn
from ._contract import Case, Param, make_contract


def attention(q, latent, cache, pos, w_uk, w_uv, scale):
    """Multi-head latent attention without positional encoding (spec 4).

    First the T new latent rows are written into the cache: cache[pos + t] = latent[t]. Each row is
    [c ; k_pe]: the kv_a-normed latent c (Lkv values) then the shared k_pe (R values). Then, for
    query t at absolute position p = pos + t and head h, over cached rows s = 0..p (causal):

        q_h = [q_nope ; q_pe] = q[t, h]              (q_nope: first Dn values, q_pe: last R)
        score[s] = (q_nope . (w_uk[h] c_s) + q_pe . k_pe_s) * scale
        o[t, h] = w_uv[h] (sum_s softmax(score)[s] * c_s)

    which equals the naive form with k_nope_h = w_uk[h] c and v_h = w_uv[h] c. The scale is
    1/sqrt(Dn + R) (not 1/sqrt(Lkv + R)); softmax in float32 at least. `pos` is a device tensor so a
    captured decode step reads the position from memory. Output has q's dtype.

    The cache (and so `latent`, which the engine has already put in the cache's dtype) is in the activation dtype or,
    asked for, in float8_e4m3fn (sparkops/kvcache.py: the engine rounds the rows, the op copies them); the maths
    above is over the values the cache holds.
    """


def cases(seed: int) -> list[Case]:
    gn = gen(seed)
    out = []
    # (heads N, Dn, R, Lkv, Dv, max length, token counts per call); (50, 70, 1): a long call after a history,
    # which fast paths may take differently from a short one (attention_prefill's naive-form history)
    for n, dn, r, lkv, dv, lmax, steps in [(2, 16, 8, 32, 16, 24, (1, 1, 1)), (3, 32, 16, 64, 32, 96, (41, 1, 1)),
                                           (4, 16, 8, 32, 16, 80, (7, 33, 1)), (32, 128, 64, 512, 128, 8, (1, 1)),
                                           (2, 16, 8, 32, 16, 160, (50, 70, 1))]:
        w_uk = randn(gn, n, dn, lkv, std=lkv ** -0.5)
        w_uv = randn(gn, n, dv, lkv, std=lkv ** -0.5)
        cache = randn(gn, lmax, lkv + r)  # stale rows beyond pos: an impl that reads them is wrong
        calls, pos = [], 0
        for t in steps:
            calls.append(dict(q=randn(gn, t, n, dn + r), latent=randn(gn, t, lkv + r), pos=torch.tensor([pos]),
                              w_uk=w_uk, w_uv=w_uv, scale=(dn + r) ** -0.5))
            pos += t
        out.append(Case(name(f"N{n}_L{lkv}+{r}_steps{'-'.join(map(str, steps))}", seed), calls,
                        state={"cache": cache}, note="cache rows past pos hold garbage on purpose"))
    return out


CONTRACT = make_contract(
    attention,
    summary="MLA (NoPE) over the latent cache; writes the new rows then attends causally",
    params=(
        Param("q", "tensor", "[T, N, Dn+R]", "activation", "queries per head: [q_nope ; q_pe]"),
        Param("latent", "tensor", "[T, Lkv+R]", "cache", "new cache rows [normed c ; k_pe], in the cache's dtype"),
        Param("cache", "state", "[Lmax, Lkv+R]", "cache", "the latent cache; rows pos..pos+T-1 written"),
        Param("pos", "tensor", "[1]", "int64", "absolute position of the first new token"),
        Param("w_uk", "tensor", "[N, Dn, Lkv]", "float32", "per-head key up-projection (attn_k_b)"),
        Param("w_uv", "tensor", "[N, Dv, Lkv]", "float32", "per-head value up-projection (attn_v_b)"),
        Param("scale", "scalar", "", "float", "softmax scale, (Dn+R)^-0.5"),
    ),
    returns="[T, N, Dv], dtype of q",
    cases=cases,
)
