"""kda, and kda_norm (kda with its output norm, fused) at the 48B shapes: every implementation that passes the gate
on this GPU, side by side.

    pytest bench/test_bench_kda.py --benchmark-only --benchmark-group-by=group

decode: one step (T=1, 32 heads x 128 x 128 float32 state read and written: 4 MiB), a round = a CUDA
        graph of one call per argument set (sets rotated beyond the L2), replayed; the anchor is fla's
        fused_recurrent_kda at 110 us eager and the state-bytes roofline ~1 us.
prefill: T tokens in one call, eager; the anchor is fla's chunk_kda at 4.59 ms per layer for T=32768.
extra_info: us_per_call, GB/s of the bytes the call must move, and the implementation's key.
Skipped with the reason where there is no CUDA device.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device (none on this machine)", allow_module_level=True)

from sparkops.bench import opbench  # noqa: E402
from sparkops_triton._workloads import graph_round, kda_args, kda_norm_args  # noqa: E402

CASES = [("decode", 1), ("prefill", 4096), ("prefill", 32768)]
#: kda_norm is the decode fusion (the engine calls it for one-token calls only)
NORM_CASES = [("decode", 1)]


def _params(op, cases):
    names = opbench.candidates(op, "cuda", opbench.session_catalog())
    return [pytest.param(kind, t, name, id=f"{kind} T={t} [{name}]") for kind, t in cases for name in names]


@pytest.mark.parametrize("kind,t,impl_name", _params("kda", CASES))
def test_bench_kda(benchmark, kind, t, impl_name):
    _bench(benchmark, "kda", kda_args, kind, t, impl_name)


@pytest.mark.parametrize("kind,t,impl_name", _params("kda_norm", NORM_CASES))
def test_bench_kda_norm(benchmark, kind, t, impl_name):
    _bench(benchmark, "kda_norm", kda_norm_args, kind, t, impl_name)


def _bench(benchmark, op, make_args, kind, t, impl_name):
    why = opbench.session_eligibility().why_not(op, impl_name, "cuda")
    if why:
        pytest.skip(why)
    fn = opbench.session_catalog().get(op, impl_name).resolve()
    sets, nbytes = make_args(t, n_sets=None if kind == "decode" else 2)
    round_, calls, mode = graph_round(fn, sets, graph=kind == "decode")
    benchmark.group = f"{op} 48B {kind} T={t}"
    benchmark.pedantic(round_, rounds=20 if kind == "decode" else 5, iterations=1, warmup_rounds=1)
    per_call = benchmark.stats.stats.median / calls
    benchmark.extra_info.update(impl=f"{op}={impl_name}", mode=mode, calls_per_round=calls, bytes_per_call=nbytes,
                                us_per_call=per_call * 1e6, gb_per_s=nbytes / per_call / 1e9)
