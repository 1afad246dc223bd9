"""The torch plugin on CPU, complementing tests/ops (which checks every registered implementation on
the contracts' cases): the paths the contract cases do not reach (bfloat16 activations, both KDA
forms at every chunk size and under extreme decay, both attention forms, the dequantization tiles and
the CPU cache, both MoE routes), exactness of the sampling RNG and the Q8_0 quantizer, and the
errors bad input gets. CUDA-only behaviour (no host sync, graph capture) is in test_torch_cuda.py.
"""

from __future__ import annotations

import gc
from importlib import import_module

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

import sparkops_numpy
import sparkops_torch
from sparkops import sampling_rng
from sparkops.errors import BadInput
from sparkops.gguf.quants import random_blocks
from sparkops.ops import OP_NAMES
from sparkops.qweight import QWeight
from sparkops_torch import _weights
from sparkops_torch import attention as attention_mod
from sparkops_torch import kda as kda_mod
from sparkops_torch import moe_experts as moe_mod
from sparkops_torch import sample as sample_mod
from sparkops_torch.add_rmsnorm import add_rmsnorm
from sparkops_torch.gated_rmsnorm import gated_rmsnorm
from sparkops_torch.linear import linear
from sparkops_torch.quantize_act import quantize_act
from sparkops_torch.rmsnorm import rmsnorm
from sparkops_torch.short_conv import short_conv
from sparkops_torch.swiglu import swiglu


def reference(op: str, name: str = "numpy"):
    spec = next(fn for o, n, fn in sparkops_numpy.IMPLEMENTATIONS if o == op and n == name)
    module, _, attr = spec.partition(":")
    return getattr(import_module(module), attr)


def rel_l2(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm())


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(g, *shape, std=1.0):
    return torch.randn(*shape, generator=g) * std


def qweight(seed: int, shape, qtype, std=0.05) -> QWeight:
    raw = random_blocks(np.random.default_rng(seed), shape, qtype, std)
    return QWeight(torch.from_numpy(np.ascontiguousarray(raw)), qtype, shape, f"w{seed}")


# -- registration ---------------------------------------------------------------------------------

def test_every_op_is_registered_on_both_devices():
    names = {(op, name): (devices, variant) for op, name, _, devices, variant, _ in sparkops_torch.IMPLEMENTATIONS}
    for op in OP_NAMES:
        assert names[(op, "torch")] == (("cpu", "cuda"), None), op
    assert ("kda", "torch_chunked") in names and ("kda", "torch_recurrent") in names
    assert all(variant == "bf16" for (op, name), (_, variant) in names.items() if name.endswith("_bf16"))


def test_declared_sources_exist():
    from pathlib import Path

    root = Path(sparkops_torch.__file__).parent
    for *_, sources in sparkops_torch.IMPLEMENTATIONS:
        for src in sources:
            assert (root / src).is_file(), src


# -- bfloat16 activations: the "torch" implementations keep float32 inside and return bf16 ---------

def bf16_case(seed):
    g = gen(seed)
    return g, (lambda *s, std=1.0: randn(g, *s, std=std).to(torch.bfloat16))


@pytest.mark.parametrize("op", ["rmsnorm", "add_rmsnorm", "swiglu", "gated_rmsnorm", "short_conv", "linear"])
def test_bfloat16_activations(op):
    g, r = bf16_case(len(op))
    w = randn(g, 96)
    args = {
        "rmsnorm": lambda: dict(x=r(5, 96, std=3.0), weight=w, eps=1e-5),
        "add_rmsnorm": lambda: dict(x=r(5, 96), residual=r(5, 96, std=3.0), weight=w, eps=1e-5),
        "swiglu": lambda: dict(gate=r(5, 96, std=3.0), up=r(5, 96)),
        "gated_rmsnorm": lambda: dict(x=r(5, 3, 96), gate=r(5, 3, 96), weight=w, eps=1e-5),
        "short_conv": lambda: dict(x=r(5, 96), weight=randn(g, 96, 4), state=randn(g, 3, 96)),
        "linear": lambda: dict(x=r(5, 256), weight=qweight(7, (33, 256), Q.Q4_K)),
    }[op]()
    impl = {"rmsnorm": rmsnorm, "add_rmsnorm": add_rmsnorm, "swiglu": swiglu, "gated_rmsnorm": gated_rmsnorm,
            "short_conv": short_conv, "linear": linear}[op]
    ref_args = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in args.items()}
    got, want = impl(**args), reference(op)(**ref_args)
    for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert a.dtype == torch.bfloat16
        assert rel_l2(a, b) < 8e-3  # one bf16 rounding of the output (2^-9 relative) and no more
    if op == "short_conv":
        assert rel_l2(args["state"], ref_args["state"]) == 0.0  # the window holds the raw inputs exactly


# -- kda --------------------------------------------------------------------------------------------

def kda_args(seed, t, h, d, gate_std=1.0, log_a=(-1.0, 1.0)):
    g = gen(seed)
    lo, hi = log_a
    return dict(q=randn(g, t, h, d), k=randn(g, t, h, d), v=randn(g, t, h, d), g=randn(g, t, h, d, std=gate_std),
                beta=randn(g, t, h, std=2.0), a=-torch.exp(torch.rand(h, generator=g) * (hi - lo) + lo),
                dt_bias=randn(g, h * d, std=0.5), scale=d ** -0.5, l2_eps=1e-6), randn(g, h, d, d, std=0.3)


@pytest.mark.parametrize("t,chunk", [(1, 64), (5, 4), (37, 8), (64, 64), (70, 16), (130, 64), (45, 1), (200, 32)])
def test_kda_chunked_matches_the_reference_at_any_chunk_size(t, chunk):
    args, state0 = kda_args(t + chunk, t, 2, 16)
    ref_state, state = state0.double(), state0.clone()
    want = reference("kda")(**args, state=ref_state)
    got = kda_mod.kda_chunked(**args, state=state, chunk_size=chunk)
    assert rel_l2(got, want) < 1e-6
    assert rel_l2(state, ref_state) < 1e-6


def test_kda_chunked_keeps_float32_accuracy_under_extreme_decay():
    """|G| reaches hundreds inside a chunk. Decay exponents taken as differences of cumulative sums lose
    ~|G| * 6e-8 and measured 2.4e-5 here; summed from the per-token decays they stay near 1e-7."""
    args, state0 = kda_args(7, 130, 2, 16, gate_std=6.0, log_a=(2.0, 2.5))
    ref_state, state = state0.double(), state0.clone()
    want = reference("kda")(**args, state=ref_state)
    got = kda_mod.kda_chunked(**args, state=state, chunk_size=64)
    assert torch.isfinite(got).all()
    assert rel_l2(got, want) < 1e-6
    assert rel_l2(state, ref_state) < 1e-6


def test_kda_dispatch_picks_the_recurrence_for_decode_and_chunks_for_prefill(monkeypatch):
    used = []
    monkeypatch.setattr(kda_mod, "kda_recurrent", lambda *a, **k: used.append("recurrent"))
    monkeypatch.setattr(kda_mod, "kda_chunked", lambda *a, **k: used.append(("chunked", k.get("chunk_size"))))
    for t in (1, kda_mod.RECURRENT_MAX_T, kda_mod.RECURRENT_MAX_T + 1):
        args, state = kda_args(1, t, 1, 8)
        kda_mod.kda(**args, state=state)
    assert used == ["recurrent", "recurrent", ("chunked", kda_mod.CPU_CHUNK)]


def test_kda_prefill_then_decode_continues_the_state():
    args, state0 = kda_args(3, 50, 2, 32)
    whole_state, split_state = state0.clone(), state0.clone()
    whole = kda_mod.kda(**args, state=whole_state)
    first = {k: (v[:41] if isinstance(v, torch.Tensor) and v.shape[0] == 50 else v) for k, v in args.items()}
    rest = {k: (v[41:] if isinstance(v, torch.Tensor) and v.shape[0] == 50 else v) for k, v in args.items()}
    parts = [kda_mod.kda(**first, state=split_state)]
    for i in range(9):  # decode, one token at a time
        parts.append(kda_mod.kda(**{k: (v[i:i + 1] if isinstance(v, torch.Tensor) and v.shape[0] == 9 else v)
                                    for k, v in rest.items()}, state=split_state))
    assert rel_l2(torch.cat(parts), whole) < 1e-6
    assert rel_l2(split_state, whole_state) < 1e-6


def test_kda_chunk_size_must_be_a_power_of_two():
    args, state = kda_args(1, 10, 1, 8)
    with pytest.raises(BadInput, match="power of two"):
        kda_mod.kda_chunked(**args, state=state, chunk_size=24)


def test_kda_bad_state_shape_is_refused():
    args, state = kda_args(1, 3, 2, 8)
    with pytest.raises(BadInput, match="state"):
        kda_mod.kda(**args, state=state[:1])


# -- attention --------------------------------------------------------------------------------------

def attention_case(seed, n=3, dn=32, r=16, lkv=64, dv=32, lmax=160):
    g = gen(seed)
    return dict(w_uk=randn(g, n, dn, lkv, std=lkv ** -0.5), w_uv=randn(g, n, dv, lkv, std=lkv ** -0.5),
                scale=(dn + r) ** -0.5), randn(g, lmax, lkv + r), g, (n, dn + r, lkv + r)


@pytest.mark.parametrize("absorbed_max,budget", [(10 ** 6, 1 << 26), (0, 1 << 26), (10 ** 6, 500), (0, 500)],
                         ids=["absorbed", "naive", "absorbed-tiled", "naive-tiled"])
def test_attention_forms_and_tiles_match_the_reference(monkeypatch, absorbed_max, budget):
    monkeypatch.setattr(attention_mod, "ABSORBED_MAX_T", absorbed_max)
    monkeypatch.setattr(attention_mod, "SCORE_BUDGET", budget)
    fixed, cache0, g, (n, dq, row) = attention_case(4)
    cache, ref_cache, pos = cache0.clone(), cache0.clone().double(), 0
    for t in (45, 1, 17, 1):
        q, latent = randn(g, t, n, dq), randn(g, t, row)
        got = attention_mod.attention(q, latent, cache, torch.tensor([pos]), **fixed)
        want = reference("attention")(q, latent, ref_cache, torch.tensor([pos]), **fixed)
        assert rel_l2(got, want) < 1e-5
        assert torch.equal(cache[:pos + t], ref_cache[:pos + t].float())
        pos += t
    assert torch.equal(cache[pos:], cache0[pos:])  # rows past the position are left alone


def test_attention_never_reads_rows_past_the_position():
    fixed, cache, g, (n, dq, row) = attention_case(5)
    cache[30:] = float("nan")
    got = attention_mod.attention(randn(g, 4, n, dq), randn(g, 4, row), cache, torch.tensor([26]), **fixed)
    assert torch.isfinite(got).all()


def test_attention_refuses_a_position_past_the_cache():
    fixed, cache, g, (n, dq, row) = attention_case(6, lmax=20)
    with pytest.raises(BadInput, match="cache"):
        attention_mod.attention(randn(g, 3, n, dq), randn(g, 3, row), cache, torch.tensor([18]), **fixed)


# -- linear: tiles and the CPU cache ----------------------------------------------------------------

@pytest.mark.parametrize("qtype", [Q.F16, Q.BF16, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.IQ1_S], ids=lambda t: t.name)
def test_linear_tiled_equals_whole(monkeypatch, qtype):
    w = qweight(int(qtype), (70, 512), qtype) if qtype != Q.BF16 else QWeight(
        randn(gen(1), 70, 512, std=0.05).to(torch.bfloat16), qtype, (70, 512))
    x = randn(gen(2), 3, 512)
    want = reference("linear")(x, w)
    monkeypatch.setenv("SPARKOPS_TORCH_CPU_CACHE_MB", "0")  # the on-the-fly path
    monkeypatch.setattr(_weights, "TILE_VALUES", 512 * 16)  # 16 rows per tile, a ragged last tile
    tiled = linear(x, w)
    monkeypatch.setattr(_weights, "TILE_VALUES", 1 << 24)
    whole = linear(x, w)
    assert rel_l2(tiled, want) < 1e-5 and rel_l2(whole, want) < 1e-5
    assert rel_l2(tiled, whole) < 1e-6


def test_cpu_cache_serves_hits_and_never_stale_values(monkeypatch):
    monkeypatch.setenv("SPARKOPS_TORCH_CPU_CACHE_MB", "64")
    _weights.CPU_CACHE.clear()
    w = qweight(11, (40, 256), Q.Q8_0)
    first = _weights.dense(w)
    assert _weights.dense(w) is first  # a hit
    w.raw[0, 2] ^= 1  # flip a bit of the first block's quants in place: the version counter moves
    again = _weights.dense(w)
    assert again is not first and not torch.equal(again, first)
    assert _weights.CPU_CACHE.bytes == again.numel() * 4
    del w, first, again
    gc.collect()
    assert _weights.CPU_CACHE.bytes == 0 and not _weights.CPU_CACHE.entries  # dies with its weight


def test_cpu_cache_respects_its_budget(monkeypatch):
    monkeypatch.setenv("SPARKOPS_TORCH_CPU_CACHE_MB", "1")  # weights over 256 KiB of float32 are never kept
    _weights.CPU_CACHE.clear()
    big, small = qweight(12, (300, 256), Q.Q4_K), qweight(13, (100, 256), Q.Q4_K)
    assert not _weights.cacheable(big) and _weights.cacheable(small)
    _weights.dense(big)
    _weights.dense(small)
    assert list(_weights.CPU_CACHE.entries) == [id(small.raw)]
    keep = [qweight(20 + i, (200, 256), Q.Q4_K) for i in range(8)]  # 200 KiB each: the LRU evicts
    for w in keep:
        _weights.dense(w)
    assert _weights.CPU_CACHE.bytes <= 1 << 20
    _weights.CPU_CACHE.clear()


# -- moe_experts: both routes, only the chosen experts read ----------------------------------------

def moe_case(seed, t, qtype=Q.Q4_K, e=8, f=256, d=256, k=3):
    g = gen(seed)
    ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)])
    ids[0, 1] = ids[0, 0]  # a token that lists one expert twice: both count
    return dict(x=randn(g, t, d), weights=torch.rand(t, k, generator=g) + 0.1, ids=ids,
                w_gate=qweight(seed + 1, (e, f, d), qtype, 0.06), w_up=qweight(seed + 2, (e, f, d), qtype, 0.06),
                w_down=qweight(seed + 3, (e, d, f), qtype, 0.06), s_gate=qweight(seed + 4, (f, d), qtype, 0.06),
                s_up=qweight(seed + 5, (f, d), qtype, 0.06), s_down=qweight(seed + 6, (d, f), qtype, 0.06))


@pytest.mark.parametrize("route", ["_by_slot", "_by_expert"])
def test_moe_routes_match_the_reference(route, monkeypatch):
    args = moe_case(31, 5)
    want = reference("moe_experts")(**args)
    monkeypatch.setattr(moe_mod, "SLOT_MAX_T", 10 ** 6)
    if route == "_by_slot":  # the CUDA decode route, forced on the CPU
        monkeypatch.setattr(moe_mod, "_by_expert", moe_mod._by_slot)
    got = moe_mod.moe_experts(**args)
    assert rel_l2(got, want) < 1e-5


def test_moe_reads_only_the_chosen_experts(monkeypatch):
    monkeypatch.setenv("SPARKOPS_TORCH_CPU_CACHE_MB", "0")  # no whole-stack dequantization either
    args = moe_case(41, 3, qtype=Q.Q8_0, k=2)
    chosen = set(args["ids"].flatten().tolist())
    for name in ("w_gate", "w_up", "w_down"):
        raw = args[name].raw
        for e in set(range(raw.shape[0])) - chosen:
            raw[e].view(-1, 34)[:, 0:2] = torch.tensor([0x00, 0x7E], dtype=torch.uint8)  # fp16 scale = NaN
    want_args = dict(args)
    got = moe_mod.moe_experts(**args)
    assert torch.isfinite(got).all()
    assert rel_l2(got, reference("moe_experts")(**want_args)) < 1e-5


def test_moe_without_a_shared_expert():
    args = moe_case(51, 2)
    args.update(s_gate=None, s_up=None, s_down=None)
    assert rel_l2(moe_mod.moe_experts(**args), reference("moe_experts")(**args)) < 1e-5
    with pytest.raises(BadInput, match="shared"):
        moe_mod.moe_experts(**{**args, "s_up": args["w_up"][0]})


# -- moe_router ----------------------------------------------------------------------------------

def test_router_ties_go_to_the_lower_id():
    from sparkops_torch.moe_router import moe_router

    weight = torch.zeros(12, 8)
    weight[[2, 5, 9]] = 1.0  # three experts with identical scores
    x = torch.ones(1, 8)
    weights, ids = moe_router(x, weight, torch.zeros(12), top_k=2, n_group=1, topk_group=1, scale=1.0,
                              renorm_eps=1e-20)
    assert ids.tolist() == [[2, 5]]
    assert torch.allclose(weights, torch.tensor([[0.5, 0.5]]))


# -- sample ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed,step", [(0, 0), (7, 1), (123456789, 2 ** 32 - 1), (2 ** 32 + 5, 2 ** 40 + 3)])
def test_rng_equals_the_reference_bit_for_bit(seed, step):
    got = sample_mod.uniform(seed, torch.tensor([step]), 3, 5000)
    want = torch.from_numpy(sampling_rng.uniform(seed, step, 3, 5000))
    assert torch.equal(got, want)
    assert 0.0 < float(got.min()) and float(got.max()) < 1.0


@pytest.mark.parametrize("temp,top_k,top_p", [(0.0, 0, 1.0), (1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.5),
                                               (0.9, 40, 0.9), (2.0, 1, 1.0)])
def test_sample_equals_the_reference(temp, top_k, top_p):
    g = gen(int(temp * 10) + top_k)
    logits = randn(g, 4, 3000, std=3.0)
    logits[1, 10:20] = logits[1, 10:20].max()  # ties: ranked by the lower id
    for step in (0, 3, 11):
        got = sample_mod.sample(logits, temp, top_k, top_p, 99, torch.tensor([step]))
        want = reference("sample")(logits, temp, top_k, top_p, 99, torch.tensor([step]))
        assert torch.equal(got, want), (step, got, want)


def test_sample_draws_differ_by_step():
    logits = torch.zeros(1, 50000)  # flat: every draw is pure noise
    draws = {int(sample_mod.sample(logits, 1.0, 0, 1.0, 5, torch.tensor([s]))) for s in range(20)}
    assert len(draws) > 15


# -- quantize_act: exact, including halves -----------------------------------------------------------

def test_quantize_act_rounds_halves_away_from_zero_exactly():
    x = torch.zeros(2, 64)
    x[0, :32] = torch.arange(-16, 16, dtype=torch.float32) + 0.5  # amax 16.5: values near k + 0.5 after scaling
    x[0, 0] = 127.0  # d = 1 exactly: x * (1/d) = x, so the halves are exact halves
    x[1, :32] = torch.linspace(-3, 3, 32)
    x[1, 32:] = 1e-30  # tiny, not zero
    q, d = quantize_act(x)
    want_q, want_d = reference("quantize_act")(x)
    assert torch.equal(q, want_q) and torch.equal(d, want_d)
    assert q[0, 1].item() == -15 and q[0, 31].item() == 16  # -14.5 -> -15, 15.5 -> 16 (half away from zero)
    assert torch.equal(q[0, 32:], torch.zeros(32, dtype=torch.int8)) and d[0, 1].item() == 0.0


def test_quantize_act_random_rows_bit_identical():
    x = randn(gen(8), 6, 2304, std=4.0)
    q, d = quantize_act(x)
    want_q, want_d = reference("quantize_act")(x)
    assert torch.equal(q, want_q) and torch.equal(d, want_d)


# -- embedding -------------------------------------------------------------------------------------

def test_embedding_reads_only_the_requested_rows_and_refuses_bad_ids(monkeypatch):
    from sparkops_torch.embedding import embedding

    monkeypatch.setenv("SPARKOPS_TORCH_CPU_CACHE_MB", "0")  # the on-the-fly path the 48B table takes

    table = qweight(61, (50, 256), Q.Q6_K, std=0.5)
    ids = torch.tensor([0, 49, 7, 7])
    want = reference("embedding")(table, ids, torch.float32)
    poisoned = QWeight(table.raw.clone(), table.qtype, table.shape, "poisoned")
    for row in set(range(50)) - set(ids.tolist()):
        poisoned.raw[row, 208:210] = torch.tensor([0x00, 0x7E], dtype=torch.uint8)  # Q6_K's d = NaN
    got = embedding(poisoned, ids, torch.bfloat16)
    assert got.dtype == torch.bfloat16 and torch.isfinite(got.float()).all()
    assert rel_l2(got, want) < 4e-3
    with pytest.raises(BadInput, match="outside the table"):
        embedding(table, torch.tensor([3, 50]), torch.float32)


def test_attention_prefill_over_a_long_cache_stays_absorbed(monkeypatch):
    """Past EXPAND_BUDGET the naive form would expand K and V for every cached row; it must not be used."""
    monkeypatch.setattr(attention_mod, "ABSORBED_MAX_T", 0)
    monkeypatch.setattr(attention_mod, "EXPAND_BUDGET", 1000)
    monkeypatch.setattr(attention_mod, "_naive", lambda *a: pytest.fail("the naive form expanded a long cache"))
    fixed, cache, g, (n, dq, row) = attention_case(7)
    q, latent = randn(g, 20, n, dq), randn(g, 20, row)
    got = attention_mod.attention(q, latent, cache.clone(), torch.tensor([3]), **fixed)
    want = reference("attention")(q, latent, cache.clone().double(), torch.tensor([3]), **fixed)
    assert rel_l2(got, want) < 1e-5


def test_cpu_cache_takes_weights_made_in_inference_mode(monkeypatch):
    monkeypatch.setenv("SPARKOPS_TORCH_CPU_CACHE_MB", "64")
    with torch.inference_mode():
        w = QWeight(qweight(71, (8, 256), Q.Q8_0).raw.clone(), Q.Q8_0, (8, 256))
        x = randn(gen(3), 2, 256)
        assert rel_l2(linear(x, w), reference("linear")(x, w)) < 1e-5
        assert _weights.dense(w) is _weights.dense(w)
    _weights.CPU_CACHE.clear()
