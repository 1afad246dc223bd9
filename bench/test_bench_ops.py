"""Every op x every implementation that passes the gate here, at the presets' real shapes.

    pytest bench/test_bench_ops.py --benchmark-only [--benchmark-group-by=group]

Cases come from running a synthesized model of each preset's real dimensions once (prefill and one
decode step) through a recording Ops: each op's arguments the first time a shape signature appears
(sparkops.bench.opbench). k3-nano everywhere; the 48B's shapes only on CUDA (its arguments hold
gigabytes). An implementation is timed only if it is the reference, has a valid check record, or
passes the op gate now (skipped with the reason otherwise). On CUDA each round cycles through copies of
the arguments that together exceed the L2 and then synchronizes; extra_info says how many calls a
round makes, the per-call time and the bytes the arguments hold.
"""

from __future__ import annotations

import functools

import pytest
import torch

from sparkops.bench import opbench

DEVICE = opbench.bench_device()


@functools.cache
def calls_of(preset: str) -> tuple:
    sp = next(p for p in opbench.PRESETS if p.preset == preset)
    return tuple(opbench.capture(sp, DEVICE))


def _params():
    out = []
    for sp in opbench.PRESETS:
        if sp.cuda_only and DEVICE != "cuda":
            continue
        for call in calls_of(sp.preset):
            for name in opbench.candidates(call.op, DEVICE, opbench.session_catalog()):
                out.append(pytest.param(sp.preset, call.id, name, id=f"{sp.preset}: {call.id} [{name}]"))
    return out


@pytest.mark.parametrize("preset,call_id,impl_name", _params())
def test_bench_op(benchmark, preset, call_id, impl_name):
    call = next(c for c in calls_of(preset) if c.id == call_id)
    why = opbench.session_eligibility().why_not(call.op, impl_name, DEVICE)
    if why:
        pytest.skip(why)
    impl = opbench.session_catalog().get(call.op, impl_name)
    placed = opbench.place(call, DEVICE)
    sets = opbench.rotation(placed, DEVICE)
    round_ = opbench.runner(impl.resolve(), sets, DEVICE)
    round_()  # warm-up: compilation, autotuning, first-touch
    benchmark.group = f"{preset}: {call.id}"
    benchmark.extra_info.update(impl=impl.key, backend=impl.backend, device=DEVICE, calls_per_round=len(sets),
                                bytes_per_call=call.nbytes)
    benchmark.pedantic(round_, rounds=20 if DEVICE == "cuda" else 5, iterations=1, warmup_rounds=1)
    median = benchmark.stats.stats.median / len(sets)
    benchmark.extra_info.update(us_per_call=median * 1e6, gb_per_s=call.nbytes / median / 1e9 if median else None)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
