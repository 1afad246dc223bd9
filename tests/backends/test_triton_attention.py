"""attention=triton (one program per head) and attention=triton_splitk (flash-decoding over the context):
the gate on the contract's cases and on awkward splits in Triton's interpreter (CPU); on a GPU, the same
on CUDA, the decode step at L=131072 (48B: 32 heads, 576-wide bf16 latent) against 4.04 TB/s of cache
read (goal >= 70%, counting the shared latent once), and the prefill path timed."""

import pytest
import torch

from tests.backends.triton_support import check_case, interpreted_fixture, prove_contract

OP = "attention"
per_head = interpreted_fixture("attention")
splitk = interpreted_fixture("attention_splitk")


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


def test_per_head_contract_cases_in_interpreter(per_head):
    prove_contract(OP, "triton", per_head.attention)


def test_splitk_contract_cases_in_interpreter(splitk):
    prove_contract(OP, "triton_splitk", splitk.attention_splitk)


def test_splitk_more_splits_than_rows_in_interpreter(splitk):
    """4 split programs (the interpreter's stand-in SM count) over 1..3 rows: most splits are empty."""
    calls, state = mla_calls(3, 16, 8, 32, 16, 12, (1, 1, 1), 21)
    check_case(OP, "triton_splitk", splitk.attention_splitk, calls, state, label="short_context")


def test_splitk_uneven_chunks_in_interpreter(splitk):
    """A decode after 70 rows: 71 rows over 4 splits of 32-row blocks, the last split ragged; an odd head count."""
    calls, state = mla_calls(5, 16, 16, 48, 24, 80, (70, 1), 22)
    check_case(OP, "triton_splitk", splitk.attention_splitk, calls, state, label="ragged_splits")


def test_prefill_continues_a_history_in_interpreter(per_head):
    """A prefill after cached rows (pos > 0): history in absorbed form + new rows in naive form, one softmax."""
    calls, state = mla_calls(2, 32, 16, 64, 32, 120, (20, 90, 1), 23)
    check_case(OP, "triton", per_head.attention, calls, state, label="prefill_after_history")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["triton", "triton_splitk"])
def test_gpu_contract_cases(name):
    from sparkops_triton.attention import attention
    from sparkops_triton.attention_splitk import attention_splitk

    prove_contract(OP, name, attention if name == "triton" else attention_splitk, "cuda", seeds=(0, 1))


@pytest.mark.gpu
def test_gpu_48b_decode_at_131072():
    from sparkops_triton._workloads import attention_args, time_calls
    from sparkops_triton.attention import attention
    from sparkops_triton.attention_splitk import attention_splitk

    # the reference materialises [T, N, S] float64 scores: 600 rows keep it to ~100 MB
    calls, state = mla_calls(32, 128, 64, 512, 128, 700, (600, 1, 1), 31, dtype=torch.bfloat16)
    for name, fn in (("triton", attention), ("triton_splitk", attention_splitk)):
        check_case(OP, name, fn, calls, state, device="cuda", label="48b_prefill600_then_decode")
    sets, nbytes = attention_args(1, 131072)
    for name, fn in (("triton_splitk", attention_splitk), ("triton", attention)):
        t = time_calls(fn, sets, nbytes, replays=10 if name == "triton_splitk" else 3)
        print(f"\nattention={name} decode L=131072 N=32 bf16 cache: {t}"
              + ("   goal: >= 70% of 4.04 TB/s" if name == "triton_splitk" else ""))
        assert t.mode == "graph", "the decode step must be capturable in a CUDA graph"


@pytest.mark.gpu
def test_gpu_48b_prefill_timing():
    from sparkops_triton._workloads import attention_args, time_calls
    from sparkops_triton.attention_splitk import attention_splitk

    for t, ctx in ((4096, 0), (32768, 0), (1024, 8192)):
        sets, nbytes = attention_args(t, ctx, n_sets=1)
        timing = time_calls(attention_splitk, sets, nbytes, graph=False, replays=3)
        flops = 2 * 32 * (192 + 128) * (t * t / 2 + t * ctx)
        print(f"\nattention prefill T={t} after {ctx}: {timing.us / 1e3:.2f} ms, "
              f"{flops / (timing.us * 1e-6) / 1e12:.0f} TFLOP/s (torch SDPA at T=32768: 21.2 ms)")
