"""attention (MLA) at the 48B shapes: every implementation that passes the gate on this GPU, side by side.

    pytest bench/test_bench_attention.py --benchmark-only --benchmark-group-by=group

decode: one token after L cached rows (32 heads, 576-wide bf16 latent rows), a round = a CUDA graph of
        one call per argument set, replayed. Bytes = the cache rows once (all heads share the latent:
        counted once) + w_uk, w_uv + q, out; the anchor is plain torch at 215 us (703 GB/s) for
        L=131072 and 4.04 TB/s the ceiling.
prefill: T new tokens after L cached rows (L=0: a prompt; L>0: a chunk of a context fill), eager; the anchor is
        torch SDPA at 21.2 ms for T=32768, L=0.
float32: the same with q, latent rows and cache in float32, what a float32 registry runs (the 48B model gate
        refuses bf16 attention): the workload of attention=triton_fp32 (tf32x3). Groups end in "float32".
extra_info: us_per_call, GB/s, and the implementation's key; for prefill also TFLOP/s, counted as the anchor
counts it (spec/anchors.md: causal attention, 4 T^2 H D / 2 with D = Dn + R = 192 per head; torch SDPA reached
622 TFLOP/s at T=32768), and its share of the ~790 TFLOP/s bf16 ceiling. Skipped with the reason without CUDA.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device (none on this machine)", allow_module_level=True)

from sparkops.bench import opbench  # noqa: E402
from sparkops_triton._workloads import attention_args, graph_round  # noqa: E402

BF16, F32 = torch.bfloat16, torch.float32
HEADS, QK_DIM = 32, 192  # Kimi-Linear-48B's MLA heads and q/k head width (Dn + R)
MATMUL_CEILING = 790e12  # the measured bf16 ceiling (spec/anchors.md)


def prefill_flops(t: int, ctx: int) -> float:
    """The causal prefill's work as anchors.md counts it: 4 * T * (rows each token sees, on average) * H * D / 2."""
    rows = ctx + (t + 1) / 2  # token i of T sees ctx + i + 1 rows
    return 2.0 * t * rows * HEADS * QK_DIM * 2
# ("prefill", 4096, 28672): a chunk of a context fill, 4096 new tokens after 28672 cached rows - the history path
# (new queries against the cache), which L=0 never runs; session 4's float32 fill of 131072 tokens slowed to ~60 s
# per chunk at 57k cached rows, far below what the L=0 figures predict
CASES = [("decode", 1, 4096, BF16), ("decode", 1, 32768, BF16), ("decode", 1, 131072, BF16),
         ("prefill", 4096, 0, BF16), ("prefill", 32768, 0, BF16), ("prefill", 4096, 28672, BF16),
         ("decode", 1, 32768, F32), ("prefill", 4096, 0, F32), ("prefill", 32768, 0, F32),
         ("prefill", 4096, 28672, F32)]


def _params():
    names = opbench.candidates("attention", "cuda", opbench.session_catalog())
    return [pytest.param(kind, t, ctx, act, name,
                         id=f"{kind} T={t} L={ctx}{' float32' if act == F32 else ''} [{name}]")
            for kind, t, ctx, act in CASES for name in names]


@pytest.mark.parametrize("kind,t,ctx,act,impl_name", _params())
def test_bench_attention(benchmark, kind, t, ctx, act, impl_name):
    why = opbench.session_eligibility().why_not("attention", impl_name, "cuda")
    if why:
        pytest.skip(why)
    impl = opbench.session_catalog().get("attention", impl_name)
    if impl.backend == "cupy" and kind == "prefill" and t > 4096:
        pytest.skip(f"{impl.key}: its several-token path runs one (head, token) per block on CUDA cores, O(T^2): "
                    f"minutes per call at T={t} (timed at T=4096; prefill belongs to the flash kernels)")
    fn = impl.resolve()
    sets, nbytes = attention_args(t, ctx, n_sets=None if kind == "decode" else 1, act=act)
    round_, calls, mode = graph_round(fn, sets, graph=kind == "decode")
    benchmark.group = f"attention 48B {kind} T={t} L={ctx}" + (" float32" if act == F32 else "")
    benchmark.pedantic(round_, rounds=10 if kind == "decode" else 3, iterations=1, warmup_rounds=1)
    per_call = benchmark.stats.stats.median / calls
    benchmark.extra_info.update(impl=f"attention={impl_name}", mode=mode, calls_per_round=calls,
                                bytes_per_call=nbytes, us_per_call=per_call * 1e6, gb_per_s=nbytes / per_call / 1e9)
    if kind == "prefill":
        tflops = prefill_flops(t, ctx) / per_call / 1e12
        benchmark.extra_info.update(tflops=tflops, fraction_of_matmul_ceiling=tflops * 1e12 / MATMUL_CEILING)
