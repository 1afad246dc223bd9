"""attention: every implementation against the reference; the absorbed form against the naive form and
against an independent torch MLA over the full sequence; the cache discipline (rows written, stale rows
never read, decode continues a prefill); the classic bugs of spec 7 (scale, q/k sub-vector order)."""

import pytest
import torch

from sparkops.errors import BadInput
from sparkops_numpy.attention import attention, attention_naive

from ._check import check_against_reference, rel_l2

OP = "attention"


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


def make_mla(seed, n=3, dn=16, r=8, lkv=32, dv=12, lmax=40, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, std=1.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dtype)

    return dict(w_uk=rnd(n, dn, lkv, std=lkv ** -0.5), w_uv=rnd(n, dv, lkv, std=lkv ** -0.5),
                scale=(dn + r) ** -0.5), rnd(lmax, lkv + r), rnd


def torch_mla(q, rows, w_uk, w_uv, scale, p0, k_pe_first=False):
    """Naive MLA (spec 4 steps 3-5) written with torch: k_h = [w_uk[h] c ; k_pe], v_h = w_uv[h] c,
    causal softmax attention of queries at positions p0.. over rows 0..p0+T-1. (`k_pe_first` builds
    the buggy key order [k_pe ; k_nope], for showing that a test can tell.)"""
    lkv = w_uk.shape[-1]
    c, k_pe = rows[:, :lkv], rows[:, lkv:]
    n = q.shape[1]
    parts = [torch.einsum("hdl,sl->hsd", w_uk, c), k_pe.expand(n, -1, -1)]
    keys = torch.cat(parts[::-1] if k_pe_first else parts, dim=-1)  # [N, S, Dn+R]
    vals = torch.einsum("hvl,sl->hsv", w_uv, c)  # [N, S, Dv]
    t, s = q.shape[0], rows.shape[0]
    mask = torch.arange(s)[None, :] <= (p0 + torch.arange(t))[:, None]  # [T, S]
    scores = torch.einsum("thd,hsd->hts", q, keys) * scale
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.einsum("hts,hsv->thv", probs, vals)


@pytest.mark.parametrize("fn", [attention, attention_naive], ids=["absorbed", "naive"])
@pytest.mark.parametrize("p0,t", [(0, 1), (0, 17), (5, 1), (9, 13)])
def test_reference_forms_match_independent_torch_mla(fn, p0, t):
    w, cache, rnd = make_mla(20 + p0 + t)
    q, latent = rnd(t, 3, 24), rnd(t, 40)
    stale = cache.clone()
    out = fn(q=q, latent=latent, cache=cache, pos=torch.tensor([p0]), **w)
    assert out.shape == (t, 3, 12) and out.dtype == torch.float64
    assert torch.equal(cache[p0:p0 + t], latent)  # the new rows are written
    assert torch.equal(cache[:p0], stale[:p0]) and torch.equal(cache[p0 + t:], stale[p0 + t:])  # nothing else
    want = torch_mla(q, cache[:p0 + t], w["w_uk"], w["w_uv"], w["scale"], p0)
    assert rel_l2(out, want) < 1e-12


def test_absorbed_form_equals_naive_form():
    w, cache, rnd = make_mla(4, n=4, dn=32, r=16, lkv=64, dv=32, lmax=90)
    q, latent = rnd(50, 4, 48), rnd(50, 80)
    a = attention(q=q, latent=latent, cache=cache.clone(), pos=torch.tensor([30]), **w)
    b = attention_naive(q=q, latent=latent, cache=cache.clone(), pos=torch.tensor([30]), **w)
    assert rel_l2(a, b) < 1e-12


def in_cache_dtype(impl: str, *rows: torch.Tensor) -> list[torch.Tensor]:
    """Cache rows (the cache, new latent rows) as implementation `impl` takes them: rounded to float8_e4m3fn as the
    engine rounds them (kvcache.to_cache) where it claims fp8_cache, else as they are."""
    from sparkops.gate.check import resolve_claim
    from sparkops.gate.tolerances import FP8_CACHE
    from sparkops.kvcache import FP8, to_cache

    from ._check import catalog

    fp8 = resolve_claim(catalog().get(OP, impl), catalog())[1] == FP8_CACHE
    return [to_cache(t, FP8) if fp8 else t for t in rows]


def test_rows_past_the_position_are_never_read(impl, impl_fn):
    """Garbage in cache rows beyond pos+T (a preallocated cache) must not change the output."""
    w, cache, rnd = make_mla(5, dtype=torch.float32)
    q, latent = rnd(4, 3, 24), rnd(4, 40)
    other = cache.clone()
    other[10:] = rnd(30, 40, std=50.0)
    cache, other, latent = in_cache_dtype(impl, cache, other, latent)
    a = impl_fn(q, latent, cache, torch.tensor([6]), w["w_uk"], w["w_uv"], w["scale"])
    b = impl_fn(q, latent, other, torch.tensor([6]), w["w_uk"], w["w_uv"], w["scale"])
    assert torch.equal(a, b)


def test_decode_steps_continue_a_prefill(impl, impl_fn):
    """Prefill 9 tokens then decode 3 one at a time through the same cache = one 12-token prefill."""
    w, cache, rnd = make_mla(6, dtype=torch.float32)
    q, latent = rnd(12, 3, 24), rnd(12, 40)
    cache, latent = in_cache_dtype(impl, cache, latent)
    whole = impl_fn(q, latent, cache.clone(), torch.tensor([0]), w["w_uk"], w["w_uv"], w["scale"])
    steps = [impl_fn(q[:9], latent[:9], cache, torch.tensor([0]), w["w_uk"], w["w_uv"], w["scale"])]
    for p in range(9, 12):
        steps.append(impl_fn(q[p:p + 1], latent[p:p + 1], cache, torch.tensor([p]), w["w_uk"], w["w_uv"], w["scale"]))
    assert rel_l2(torch.cat(steps), whole) < 1e-5
    assert torch.equal(cache[:12].float(), latent.float())


def test_scale_is_the_one_passed_and_qk_order_is_nope_then_pe(impl, impl_fn):
    """The score scale is 1/sqrt(Dn+R) as passed, not 1/sqrt(Lkv+R); q and k both put nope first (spec 7 bug 10).
    The wrong variants are computed too, to show this data tells them apart."""
    w, cache, rnd = make_mla(7, dtype=torch.float32)
    q, latent = rnd(6, 3, 24, std=3.0), rnd(6, 40, std=2.0)
    cache, latent = in_cache_dtype(impl, cache, latent)
    out = impl_fn(q, latent, cache, torch.tensor([4]), w["w_uk"], w["w_uv"], w["scale"])
    rows, args = cache[:10].double(), (w["w_uk"].double(), w["w_uv"].double())
    right = torch_mla(q.double(), rows, *args, w["scale"], 4)
    assert rel_l2(out, right) < 1e-5
    wrong_scale = torch_mla(q.double(), rows, *args, (32 + 8) ** -0.5, 4)  # 1/sqrt(Lkv + R)
    wrong_order = torch_mla(q.double(), rows, *args, w["scale"], 4, k_pe_first=True)
    assert rel_l2(wrong_scale, right) > 1e-2
    assert rel_l2(wrong_order, right) > 1e-2


def test_no_positional_encoding(impl, impl_fn):
    """NoPE (spec 7 bug 1): attention is blind to where a past row sits, so permuting the cached rows
    before pos leaves the output unchanged; any rotary encoding would change it."""
    w, cache, rnd = make_mla(10, dtype=torch.float32)
    q, latent = rnd(1, 3, 24, std=2.0), rnd(1, 40)
    perm = torch.randperm(20, generator=torch.Generator().manual_seed(0))
    shuffled = cache.clone()
    shuffled[:20] = cache[perm]
    cache, shuffled, latent = in_cache_dtype(impl, cache, shuffled, latent)
    a = impl_fn(q, latent, cache, torch.tensor([20]), w["w_uk"], w["w_uv"], w["scale"])
    b = impl_fn(q, latent, shuffled, torch.tensor([20]), w["w_uk"], w["w_uv"], w["scale"])
    assert rel_l2(a, b) < 1e-5


def test_output_has_q_dtype():
    w, cache, rnd = make_mla(8, dtype=torch.float32)
    out = attention(rnd(2, 3, 24).to(torch.bfloat16), rnd(2, 40), cache, torch.tensor([0]), w["w_uk"], w["w_uv"],
                    w["scale"])
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()


def test_overflowing_the_cache_is_a_named_error():
    w, cache, rnd = make_mla(9)
    with pytest.raises(BadInput, match="cache"):
        attention(rnd(3, 3, 24), rnd(3, 40), cache, torch.tensor([38]), **w)
    with pytest.raises(BadInput, match="latent"):
        attention(rnd(3, 3, 24), rnd(3, 41), cache, torch.tensor([0]), **w)
