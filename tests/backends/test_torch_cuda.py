"""The torch plugin on CUDA: every implementation against the NumPy reference, the GPU dequantizers
bit for bit, decode-shaped calls that never synchronise the host, and CUDA-graph capture + replay.

Self-contained (no helpers from other test modules) and fast (a few seconds on an H200). Skipped
with a reason where there is no CUDA device (tests/conftest.py).
"""

from __future__ import annotations

from importlib import import_module

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

import sparkops_numpy
import sparkops_torch
from sparkops.gate import metrics
from sparkops.gate.tolerances import FP8_CACHE, rule_for
from sparkops.gguf.quants import dequantize as ref_dequantize
from sparkops.gguf.quants import random_blocks
from sparkops.kvcache import FP8, to_cache
from sparkops.ops import OP_NAMES, get_contract
from sparkops.qweight import QWeight
from sparkops_torch.dequant import dequantize_raw

pytestmark = pytest.mark.gpu

TYPES = (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.IQ1_S)
#: relative L2: float32 maths / bfloat16 matmul operands / float32 maths over the same fp8 cache values
TOL = {None: 1e-5, "bf16": 1.6e-2, "fp8_cache": 1e-5}
EXACT = {"quantize_act", "sample"}
QDQ = {"rmsnorm_quantize"}  # Q8_0 blocks of a float32 norm: judged by the gate's qdq rule (one step allowed)
CUDA_IMPLS = [(op, name, fn, variant) for op, name, fn, devices, variant, _ in sparkops_torch.IMPLEMENTATIONS
              if "cuda" in devices]


def resolve(spec: str):
    module, _, attr = spec.partition(":")
    return getattr(import_module(module), attr)


def reference(op: str):
    return resolve(next(fn for o, name, fn in sparkops_numpy.IMPLEMENTATIONS if o == op and name == "numpy"))


def variant_of(op: str, name: str) -> str | None:
    return next(v for o, n, _, v in CUDA_IMPLS if (o, n) == (op, name))


def in_variant(op: str, variant: str | None, values: dict) -> dict:
    """`values` (an op's arguments or state) as an implementation claiming `variant` takes them: for fp8_cache, the
    contract's cache params rounded to float8_e4m3fn as the engine rounds a row (the reference reads them too)."""
    if variant != FP8_CACHE:
        return values
    cache = {p.name for p in get_contract(op).params if p.dtype == "cache"}
    return {k: to_cache(v, FP8) if k in cache and isinstance(v, torch.Tensor) else v for k, v in values.items()}


def moved(v, device):
    if isinstance(v, (torch.Tensor, QWeight)):
        return v.to(device)
    return v


def qweight(rng: np.random.Generator, shape: tuple[int, ...], qtype, std=0.05, name="w") -> QWeight:
    """A random weight of any type, synthesised directly in its storage format (fast)."""
    raw = random_blocks(rng, shape, qtype, std)
    if qtype == Q.BF16:  # the reference stores BF16 as uint16 bit patterns; QWeight holds torch.bfloat16
        return QWeight(torch.from_numpy(raw.view(np.int16).copy()).view(torch.bfloat16), qtype, shape, name)
    return QWeight(torch.from_numpy(np.ascontiguousarray(raw)), qtype, shape, name)


def weight_cases(op: str, seed: int):
    """Cases for the weight-reading ops over all seven types, without slow quantizers."""
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    cases = []
    for qtype in TYPES:
        cols = 256
        if op == "embedding":
            ids = torch.randint(0, 41, (9,), generator=g)
            ids[0], ids[-1] = 0, 40
            cases.append(([dict(table=qweight(rng, (41, cols), qtype, 0.5), ids=ids, dtype=torch.float32)], {}))
        elif op == "linear":
            for t in (1, 19):
                cases.append(([dict(x=torch.randn(t, cols, generator=g), weight=qweight(rng, (48, cols), qtype))], {}))
        elif op == "moe_experts":
            e, f, k = 8, 256, 3
            for t in (1, 3, 20):  # decode (per-slot route) and prefill (grouped route)
                ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)])
                cases.append(([dict(x=torch.randn(t, cols, generator=g), weights=torch.rand(t, k, generator=g) + 0.1,
                                    ids=ids, w_gate=qweight(rng, (e, f, cols), qtype, 0.06),
                                    w_up=qweight(rng, (e, f, cols), qtype, 0.06),
                                    w_down=qweight(rng, (e, cols, f), qtype, 0.06),
                                    s_gate=qweight(rng, (f, cols), qtype, 0.06),
                                    s_up=qweight(rng, (f, cols), qtype, 0.06),
                                    s_down=qweight(rng, (cols, f), qtype, 0.06))], {}))
    return cases


def op_cases(op: str, seed: int = 0):
    if op in ("embedding", "linear", "moe_experts"):
        return weight_cases(op, seed)
    return [(c.calls, c.state) for c in get_contract(op).cases(seed)]


def run_calls(fn, op, calls, state, device):
    names = get_contract(op).param_names
    st = {k: v.clone().to(device) for k, v in state.items()}
    trace = []
    for call in calls:
        args = {k: moved(v, device) for k, v in call.items()}
        out = fn(*[st[n] if n in st else args[n] for n in names])
        outs = out if isinstance(out, tuple) else (out,)
        trace.append(([o.detach().cpu().clone() for o in outs], {k: v.detach().cpu().clone() for k, v in st.items()}))
    return trace


def rel_l2(got, ref) -> float:
    got, ref = got.double(), ref.double()
    return float((got - ref).norm() / max(float(ref.norm()), 1e-30))


def assert_close(what, got, ref, tol, exact):
    assert got.shape == ref.shape, f"{what}: shape {list(got.shape)} != {list(ref.shape)}"
    if exact or not ref.is_floating_point():
        assert torch.equal(got.to(ref.dtype), ref), f"{what}: {(got.to(ref.dtype) != ref).sum()} values differ"
        return
    assert torch.isfinite(got).all(), f"{what}: NaN/Inf in the output"
    err = rel_l2(got, ref)
    assert err <= tol, f"{what}: relative L2 error {err:.3g} > {tol:.3g}"


@pytest.mark.parametrize("op,name,fn,variant", CUDA_IMPLS, ids=[f"{o}={n}" for o, n, *_ in CUDA_IMPLS])
def test_cuda_impl_matches_numpy_reference(op, name, fn, variant):
    impl, ref = resolve(fn), reference(op)
    for i, (calls, state) in enumerate(op_cases(op)):
        calls, state = [in_variant(op, variant, c) for c in calls], in_variant(op, variant, state)
        want = run_calls(ref, op, calls, state, "cpu")
        got = run_calls(impl, op, calls, state, "cuda")
        for j, ((w_out, w_state), (g_out, g_state)) in enumerate(zip(want, got)):
            if op in QDQ:
                verdicts = metrics.qdq(f"{op}={name} case {i} call {j}", tuple(g_out), tuple(w_out),
                                       rule_for(op, variant))
                assert all(v.passed for v in verdicts), [v.line() for v in verdicts if not v.passed]
                continue
            for n, (g, w) in enumerate(zip(g_out, w_out)):
                assert_close(f"{op}={name} case {i} call {j} output {n}", g, w, TOL[variant], op in EXACT)
            for k in w_state:
                assert_close(f"{op}={name} case {i} call {j} state {k}", g_state[k], w_state[k], TOL[variant],
                             op in EXACT)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_cuda_dequantize_is_bit_exact(qtype):
    rng = np.random.default_rng(int(qtype))
    w = qweight(rng, (3, 37, 512), qtype, std=0.7)
    want = torch.from_numpy(ref_dequantize(w.raw.view(torch.int16).numpy() if qtype == Q.BF16 else w.raw.numpy(),
                                           qtype, w.shape))
    got = dequantize_raw(w.raw.cuda(), qtype, w.shape[-1])
    assert got.device.type == "cuda" and got.dtype == torch.float32
    assert torch.equal(got.cpu().view(torch.int32), want.view(torch.int32))


# -- decode-shaped calls: no host synchronisation, capturable -------------------------------------

def decode_args(op: str, seed: int = 3, device: str = "cuda", variant: str | None = None):
    """The kwargs of one decode-step call (T = 1) of `op`, on `device` (CUDA for the tests here), as an implementation
    claiming `variant` takes them."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    d, h, hd = 256, 4, 32
    build = {
        "embedding": lambda: dict(table=qweight(rng, (64, d), Q.Q4_K, 0.5), ids=torch.randint(0, 64, (1,), generator=g),
                                  dtype=torch.float32),
        "rmsnorm": lambda: dict(x=r(1, d), weight=r(d), eps=1e-5),
        "add_rmsnorm": lambda: dict(x=r(1, d), residual=r(1, d), weight=r(d), eps=1e-5),
        "linear": lambda: dict(x=r(1, d), weight=qweight(rng, (96, d), Q.IQ1_S)),
        "quantize_act": lambda: dict(x=r(1, d)),
        "rmsnorm_quantize": lambda: dict(x=r(1, d), weight=r(d), eps=1e-5),
        "short_conv": lambda: dict(x=r(1, 128), weight=r(128, 4), state=r(3, 128)),
        "kda": lambda: dict(q=r(1, h, hd), k=r(1, h, hd), v=r(1, h, hd), g=r(1, h, hd), beta=r(1, h),
                            a=-torch.rand(h, generator=g), dt_bias=r(h * hd), state=r(h, hd, hd) * 0.1,
                            scale=hd ** -0.5, l2_eps=1e-6),
        "gated_rmsnorm": lambda: dict(x=r(1, h, hd), gate=r(1, h, hd), weight=r(hd), eps=1e-5),
        "kda_norm": lambda: dict(q=r(1, h, hd), k=r(1, h, hd), v=r(1, h, hd), g=r(1, h, hd), beta=r(1, h),
                                 a=-torch.rand(h, generator=g), dt_bias=r(h * hd), state=r(h, hd, hd) * 0.1,
                                 scale=hd ** -0.5, l2_eps=1e-6, gate=r(1, h, hd), weight=r(hd), eps=1e-5),
        "kda_lowrank_norm": lambda: dict(q=r(1, h, hd), k=r(1, h, hd), v=r(1, h, hd), f=r(1, hd),
                                         f_b=qweight(rng, (h * hd, hd), Q.F16, hd ** -0.5), beta=r(1, h),
                                         a=-torch.rand(h, generator=g), dt_bias=r(h * hd), state=r(h, hd, hd) * 0.1,
                                         scale=hd ** -0.5, l2_eps=1e-6, ga=r(1, hd),
                                         g_b=qweight(rng, (h * hd, hd), Q.F16, 2 * hd ** -0.5), weight=r(hd),
                                         eps=1e-5),
        "short_conv_kda_norm": lambda: dict(x=r(1, 3 * h * hd), conv_weight=r(3 * h * hd, 4), window=r(3, 3 * h * hd),
                                            g=r(1, h, hd), beta=r(1, h), a=-torch.rand(h, generator=g),
                                            dt_bias=r(h * hd), state=r(h, hd, hd) * 0.1, scale=hd ** -0.5,
                                            l2_eps=1e-6, gate=r(1, h, hd), weight=r(hd), eps=1e-5),
        "attention": lambda: dict(q=r(1, 4, 48), latent=r(1, 80), cache=r(32, 80), pos=torch.tensor([7]),
                                  w_uk=r(4, 32, 64) * 0.1, w_uv=r(4, 32, 64) * 0.1, scale=48 ** -0.5),
        "add_rmsnorm_router": lambda: dict(x=r(1, d), residual=r(1, d), weight=r(d), eps=1e-5,
                                           router_weight=r(16, d) * 0.1, bias=r(16) * 0.1, top_k=4, n_group=4,
                                           topk_group=2, scale=2.446, renorm_eps=1e-20),
        "moe_router": lambda: dict(x=r(1, d), weight=r(16, d) * 0.1, bias=r(16) * 0.1, top_k=4, n_group=4,
                                   topk_group=2, scale=2.446, renorm_eps=1e-20),
        "moe_experts": lambda: dict(x=r(1, d), weights=torch.rand(1, 4, generator=g), ids=torch.tensor([[3, 0, 7, 5]]),
                                    w_gate=qweight(rng, (8, 256, d), Q.Q4_K), w_up=qweight(rng, (8, 256, d), Q.Q4_K),
                                    w_down=qweight(rng, (8, d, 256), Q.Q6_K), s_gate=qweight(rng, (64, d), Q.Q8_0),
                                    s_up=qweight(rng, (64, d), Q.Q8_0), s_down=qweight(rng, (d, 64), Q.Q8_0)),
        "linear_add_rmsnorm": lambda: dict(x=r(1, d), weight=qweight(rng, (96, d), Q.Q4_K), residual=r(1, 96) * 3,
                                           norm_weight=r(96), eps=1e-5),
        "moe_experts_add_rmsnorm": lambda: dict(
            x=r(1, d), weights=torch.rand(1, 4, generator=g), ids=torch.tensor([[3, 0, 7, 5]]),
            w_gate=qweight(rng, (8, 256, d), Q.Q4_K), w_up=qweight(rng, (8, 256, d), Q.Q4_K),
            w_down=qweight(rng, (8, d, 256), Q.Q4_K), s_gate=qweight(rng, (256, d), Q.Q4_K),
            s_up=qweight(rng, (256, d), Q.Q4_K), s_down=qweight(rng, (d, 256), Q.Q4_K), residual=r(1, d) * 3,
            norm_weight=r(d), eps=1e-5),
        "swiglu": lambda: dict(gate=r(1, 512), up=r(1, 512)),
        "sample": lambda: dict(logits=r(2, 1000) * 3, temperature=0.8, top_k=50, top_p=0.9, seed=11,
                               step=torch.tensor([4])),
    }[op]()
    return {k: moved(v, device) for k, v in in_variant(op, variant, build).items()}


def call(op, fn, args):
    return fn(*[args[n] for n in get_contract(op).param_names])


def as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


DECODE_IMPLS = [(op, name, fn) for op, name, fn, _ in CUDA_IMPLS if name != "torch_chunked"]


@pytest.mark.parametrize("op,name,fn", DECODE_IMPLS, ids=[f"{o}={n}" for o, n, _ in DECODE_IMPLS])
def test_decode_call_does_not_synchronise(op, name, fn):
    impl, args = resolve(fn), decode_args(op, variant=variant_of(op, name))
    call(op, impl, args)  # warm-up: one-time uploads (the IQ1_S grid) happen here
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        call(op, impl, args)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


@pytest.mark.parametrize("op,name,fn", DECODE_IMPLS, ids=[f"{o}={n}" for o, n, _ in DECODE_IMPLS])
def test_decode_call_captures_and_replays(op, name, fn):
    impl, args = resolve(fn), decode_args(op, variant=variant_of(op, name))
    state_names = [p.name for p in get_contract(op).params if p.kind == "state"]
    start = {k: args[k].clone() for k in state_names}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call(op, impl, args)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = as_tuple(call(op, impl, args))
    graph.replay()
    static_before = [o.clone() for o in static_out]  # what the captured inputs give

    fresh = decode_args(op, seed=9, variant=variant_of(op, name))  # new values into the captured buffers, then replay
    for k, v in args.items():
        if isinstance(v, torch.Tensor) and k not in state_names:
            v.copy_(fresh[k])
    if op == "sample":
        args["step"].fill_(5)
    if op == "attention":
        args["pos"].fill_(12)
    for k in state_names:
        args[k].copy_(start[k])
    graph.replay()
    replayed = [o.clone() for o in static_out]
    replayed_state = {k: args[k].clone() for k in state_names}

    for k in state_names:  # the same step run eagerly
        args[k].copy_(start[k])
    eager = as_tuple(call(op, impl, args))
    for got, want in zip(replayed, eager):  # the same kernels on the same data: equal up to library noise
        assert_close(f"{op}={name} replayed output", got.cpu(), want.cpu(), 1e-6, op in EXACT)
    for k in state_names:
        assert_close(f"{op}={name} replayed state '{k}'", replayed_state[k].cpu(), args[k].cpu(), 1e-6, False)
    assert any(not torch.equal(a, b) for a, b in zip(replayed, static_before)), f"{op}={name}: replay changed nothing"


# -- CUDA-specific paths --------------------------------------------------------------------------

def test_attention_ignores_poisoned_rows_past_the_position():
    """On CUDA all Lmax rows take part; rows at or past pos + T hold NaN here and must not leak."""
    from sparkops_torch.attention import attention

    g = torch.Generator().manual_seed(5)
    n, dn, r, lkv, dv, lmax = 4, 32, 16, 64, 32, 256
    cache = torch.randn(lmax, lkv + r, generator=g)
    cache[40:] = float("nan")
    args = dict(q=torch.randn(3, n, dn + r, generator=g), latent=torch.randn(3, lkv + r, generator=g),
                pos=torch.tensor([37]), w_uk=torch.randn(n, dn, lkv, generator=g) * 0.1,
                w_uv=torch.randn(n, dv, lkv, generator=g) * 0.1, scale=(dn + r) ** -0.5)
    want = reference("attention")(cache=cache.clone(), **args)
    got = attention(cache=cache.cuda(), **{k: moved(v, "cuda") for k, v in args.items()})
    assert torch.isfinite(got).all()
    assert rel_l2(got.cpu(), want) < 1e-5


def test_kda_chunked_at_48b_head_shape():
    """32 heads of 128 over 300 tokens with strong decay: the chunked prefill on CUDA vs the reference."""
    from sparkops_torch.kda import kda, kda_chunked

    g = torch.Generator().manual_seed(8)
    t, h, d = 300, 32, 128
    args = dict(q=torch.randn(t, h, d, generator=g), k=torch.randn(t, h, d, generator=g),
                v=torch.randn(t, h, d, generator=g), g=torch.randn(t, h, d, generator=g) * 4,
                beta=torch.randn(t, h, generator=g), a=-torch.exp(torch.rand(h, generator=g) * 2 - 1),
                dt_bias=torch.randn(h * d, generator=g) * 0.5, scale=d ** -0.5, l2_eps=1e-6)
    state0 = torch.randn(h, d, d, generator=g) * 0.1
    ref_state = state0.clone()
    want = reference("kda")(state=ref_state, **args)
    for fn in (kda, kda_chunked):
        state = state0.cuda()
        got = fn(state=state, **{k: moved(v, "cuda") for k, v in args.items()})
        assert rel_l2(got.cpu(), want) < 1e-5, fn.__name__
        assert rel_l2(state.cpu(), ref_state) < 1e-5, fn.__name__


def test_linear_tiles_a_large_weight_without_keeping_it():
    """A weight bigger than one dequantization tile: tiled on the fly, nothing cached on the GPU."""
    from sparkops_torch import _weights
    from sparkops_torch.linear import linear

    rng = np.random.default_rng(2)
    w = qweight(rng, (4096 + 77, 4608), Q.Q4_K, 0.02)  # 18.9M values > TILE_VALUES
    assert w.shape[0] * w.shape[1] > _weights.TILE_VALUES
    x = torch.randn(2, 4608, generator=torch.Generator().manual_seed(1))
    want = x.double() @ torch.from_numpy(ref_dequantize(w.raw.numpy(), w.qtype, w.shape)).double().t()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    got = linear(x.cuda(), w.to("cuda"))
    assert rel_l2(got.cpu(), want) < 1e-5
    del got
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() - before < 1 << 20  # nothing kept: no dequantized copy, no cache


def test_every_op_has_a_cuda_implementation():
    assert {op for op, *_ in CUDA_IMPLS} == set(OP_NAMES)
