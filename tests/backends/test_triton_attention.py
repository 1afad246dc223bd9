"""attention=triton (one program per head), attention=triton_splitk (flash-decoding over the context) and
attention=triton_fp32 (the split-K / flash kernels on float32 operands with tf32x3 dots, claiming float32):
the gate on the contract's cases and on awkward splits in Triton's interpreter (CPU); on a GPU, the same
on CUDA, the decode step at L=131072 (48B: 32 heads, 576-wide bf16 latent) against 4.04 TB/s of cache
read (goal >= 70%, counting the shared latent once), and the prefill path timed.

The interpreter computes every tl.dot in NumPy float32 whatever its input_precision, so on CPU the
float32 claim of triton_fp32 checks the plumbing (float32 operands everywhere, the sliced score products,
the head groups), not tf32x3's accuracy on tensor cores: that is the GPU tests' job."""

import pytest
import torch

from tests.backends.triton_support import IMPLEMENTATIONS, check_case, interpreted_fixture, prove_contract

OP = "attention"
per_head = interpreted_fixture("attention")
splitk = interpreted_fixture("attention_splitk")
#: the implementations of attention_splitk.py: name -> function
SPLITK = {"triton_splitk": "attention_splitk", "triton_fp32": "attention_splitk_fp32"}


def mla_calls(n, dn, r, lkv, dv, lmax, steps, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    w_uk = torch.randn(n, dn, lkv, generator=g) * lkv ** -0.5
    w_uv = torch.randn(n, dv, lkv, generator=g) * lkv ** -0.5
    calls, pos = [], 0
    for t in steps:
        calls.append(dict(q=torch.randn(t, n, dn + r, generator=g).to(dtype),
                          latent=torch.randn(t, lkv + r, generator=g).to(dtype), pos=torch.tensor([pos]),
                          w_uk=w_uk, w_uv=w_uv, scale=(dn + r) ** -0.5))
        pos += t
    return calls, {"cache": torch.randn(lmax, lkv + r, generator=g).to(dtype)}


def test_claims():
    """The claims the module docstrings state: tf32 / 16-bit products claim "bf16", tf32x3 ones float32."""
    claims = {name: claim.variant for op, name, _, claim, _ in IMPLEMENTATIONS if op == OP}
    assert claims == {"triton": "bf16", "triton_splitk": "bf16", "triton_fp32": None}


def test_per_head_contract_cases_in_interpreter(per_head):
    prove_contract(OP, "triton", per_head.attention)


@pytest.mark.parametrize("name", list(SPLITK))
def test_splitk_contract_cases_in_interpreter(splitk, name):
    """For triton_fp32 the rule is float32's (NMSE <= 1e-10): only the plumbing, as the module docstring says."""
    prove_contract(OP, name, getattr(splitk, SPLITK[name]))


@pytest.mark.parametrize("name", list(SPLITK))
def test_splitk_more_splits_than_rows_in_interpreter(splitk, name):
    """4 split programs (the interpreter's stand-in SM count) over 1..3 rows: most splits are empty."""
    calls, state = mla_calls(3, 16, 8, 32, 16, 12, (1, 1, 1), 21)
    check_case(OP, name, getattr(splitk, SPLITK[name]), calls, state, label="short_context")


@pytest.mark.parametrize("name", list(SPLITK))
def test_splitk_uneven_chunks_in_interpreter(splitk, name):
    """A decode after 70 rows: 71 rows over 4 splits of 32-row blocks, the last split ragged; an odd head count."""
    calls, state = mla_calls(5, 16, 16, 48, 24, 80, (70, 1), 22)
    check_case(OP, name, getattr(splitk, SPLITK[name]), calls, state, label="ragged_splits")


@pytest.mark.parametrize("name,module,fn", [("triton", "per_head", "attention"),
                                            ("triton_splitk", "splitk", "attention_splitk"),
                                            ("triton_fp32", "splitk", "attention_splitk_fp32")])
def test_prefill_continues_a_history_in_interpreter(request, name, module, fn):
    """Prefills after cached rows (pos > 0), one softmax over history and new rows: 90 rows after 20 (a long
    call: the history projected to naive form, 20 rows in a ragged block), then 30 after 110 (a short call:
    the history in absorbed form), then a decode step."""
    calls, state = mla_calls(2, 32, 16, 64, 32, 150, (20, 90, 30, 1), 23)
    check_case(OP, name, getattr(request.getfixturevalue(module), fn), calls, state, label="prefill_after_history")


def test_fp32_slices_and_head_groups_in_interpreter(splitk):
    """triton_fp32's own launch shapes on ragged sizes: 17 heads = two groups of 16 in decode (the second
    holding one head); the score products in slices, the last one partly masked (Dn 48 -> 2 slices of 32 in
    flash, Lkv 96 -> 2 of 64 in the history and the split kernel, R 24 -> one of 32 or 64)."""
    calls, state = mla_calls(17, 48, 24, 96, 16, 40, (6, 12, 1, 1), 24)
    check_case(OP, "triton_fp32", splitk.attention_splitk_fp32, calls, state, label="fp32_slices")


def test_fp32_keeps_float32_operands_with_a_16bit_cache(splitk):
    """With a bf16 cache holding bf16-exact values, triton_fp32 computes exactly what it does with the same
    values in a float32 cache (cache rows widen exactly; queries, q_lat, probabilities, k/v projections stay
    float32), in decode, prefill and prefill after a history. triton_splitk, which takes the cache's dtype
    for its operands, does not: the check can tell."""
    calls, state = mla_calls(3, 32, 16, 64, 32, 40, (12, 20, 1), 25)
    for call in calls:
        call["latent"] = call["latent"].to(torch.bfloat16).float()  # bf16-exact, so the bf16 cache stores it as is
    cache = state["cache"].to(torch.bfloat16).float()

    def run(fn, cache):
        outs = [fn(**{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in call.items()}, cache=cache)
                for call in calls]
        return outs, cache

    for name, same in (("triton_fp32", True), ("triton_splitk", False)):
        fn = getattr(splitk, SPLITK[name])
        want, want_cache = run(fn, cache.clone())
        got, got_cache = run(fn, cache.to(torch.bfloat16))
        assert torch.equal(got_cache.float(), want_cache)
        assert all(torch.equal(g, w) for g, w in zip(got, want)) == same, name


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["triton", *SPLITK])
def test_gpu_contract_cases(name):
    from sparkops_triton import attention, attention_splitk

    fn = attention.attention if name == "triton" else getattr(attention_splitk, SPLITK[name])
    prove_contract(OP, name, fn, "cuda", seeds=(0, 1))


@pytest.mark.gpu
def test_gpu_48b_decode_at_131072():
    from sparkops_triton._workloads import attention_args, time_calls
    from sparkops_triton.attention import attention
    from sparkops_triton.attention_splitk import attention_splitk, attention_splitk_fp32

    # the reference materialises [T, N, S] float64 scores: 600 rows keep it to ~100 MB
    calls, state = mla_calls(32, 128, 64, 512, 128, 700, (600, 1, 1), 31, dtype=torch.bfloat16)
    for name, fn in (("triton", attention), ("triton_splitk", attention_splitk)):
        check_case(OP, name, fn, calls, state, device="cuda", label="48b_prefill600_then_decode")
    # triton_fp32 claims float32: judged on float32 inputs (its tf32x3 dots on the tensor cores, for real)
    calls, state = mla_calls(32, 128, 64, 512, 128, 700, (600, 1, 1), 31)
    check_case(OP, "triton_fp32", attention_splitk_fp32, calls, state, device="cuda",
               label="48b_prefill600_then_decode")
    for act in (torch.bfloat16, torch.float32):
        sets, nbytes = attention_args(1, 131072, act=act)
        named = (("triton_splitk", attention_splitk), ("triton", attention)) if act == torch.bfloat16 else \
            (("triton_fp32", attention_splitk_fp32),)
        for name, fn in named:
            t = time_calls(fn, sets, nbytes, replays=10 if name == "triton_splitk" else 3)
            print(f"\nattention={name} decode L=131072 N=32 {str(act).replace('torch.', '')} cache: {t}"
                  + ("   goal: >= 70% of 4.04 TB/s" if name == "triton_splitk" else ""))
            assert t.mode == "graph", "the decode step must be capturable in a CUDA graph"


@pytest.mark.gpu
def test_gpu_48b_prefill_after_history():
    """The 48B's shape (32 heads, Dn 128, R 64, Lkv 512, Dv 128): 256 rows after 300 take the naive-form history
    on tensor cores, 40 after 556 the absorbed one, then a decode step (bf16 for the claims of "bf16", float32
    for triton_fp32's)."""
    from sparkops_triton.attention import attention
    from sparkops_triton.attention_splitk import attention_splitk, attention_splitk_fp32

    calls, state = mla_calls(32, 128, 64, 512, 128, 640, (300, 256, 40, 1), 32, dtype=torch.bfloat16)
    for name, fn in (("triton", attention), ("triton_splitk", attention_splitk)):
        check_case(OP, name, fn, calls, state, device="cuda", label="48b_prefill_after_history")
    calls, state = mla_calls(32, 128, 64, 512, 128, 640, (300, 256, 40, 1), 32)
    check_case(OP, "triton_fp32", attention_splitk_fp32, calls, state, device="cuda",
               label="48b_prefill_after_history")


@pytest.mark.gpu
def test_gpu_48b_prefill_timing():
    from sparkops_triton._workloads import attention_args, time_calls
    from sparkops_triton.attention_splitk import attention_splitk, attention_splitk_fp32

    for name, fn, act in (("triton_splitk", attention_splitk, torch.bfloat16),
                          ("triton_fp32", attention_splitk_fp32, torch.float32)):
        for t, ctx in ((4096, 0), (32768, 0), (1024, 8192), (4096, 28672)):  # the last: a fill's chunk at depth
            sets, nbytes = attention_args(t, ctx, n_sets=1, act=act)
            timing = time_calls(fn, sets, nbytes, graph=False, replays=3)
            flops = 2 * 32 * (192 + 128) * (t * t / 2 + t * ctx)
            print(f"\nattention={name} prefill T={t} after {ctx} ({str(act).replace('torch.', '')}): "
                  f"{timing.us / 1e3:.2f} ms, {flops / (timing.us * 1e-6) / 1e12:.0f} TFLOP/s "
                  f"(torch SDPA at T=32768: 21.2 ms)")
    # the fill chunk at depth with the history in the absorbed form, as before session 5 (bf16 only: its float32
    # twin took ~8 s per layer at 57k rows), for the before -> after of the naive-form history
    import sparkops_triton.attention_prefill as ap

    sets, nbytes = attention_args(4096, 28672, n_sets=1, act=torch.bfloat16)
    naive_min_t = ap.NAIVE_HISTORY_MIN_T
    try:
        ap.NAIVE_HISTORY_MIN_T = 1 << 30
        timing = time_calls(attention_splitk, sets, nbytes, graph=False, replays=1)
    finally:
        ap.NAIVE_HISTORY_MIN_T = naive_min_t
    print(f"\nattention=triton_splitk prefill T=4096 after 28672 (bfloat16), history in absorbed form: "
          f"{timing.us / 1e3:.2f} ms")
