"""What the Triton backend tests share: the interpreter fixture and checks through the gate's own machinery.

CPU tests run the kernels in Triton's interpreter on fresh copies of the kernel modules
(`sparkops_triton._runtime.interpreted`, entered per test), so they neither depend on nor disturb
the process's TRITON_INTERPRET setting or the compiled kernels a GPU test of the same session uses.

Judging is the gate's (`sparkops.gate.check`): the contract's cases through `prove` (poisoned
outputs, the claim variant's input casting, THE tolerance table), and extra cases (awkward sizes)
through the same trace runner and comparison.
"""

from __future__ import annotations

import contextlib
import random
import sys
from typing import Any, Callable, Iterator

import pytest
import torch

from sparkops.gate import check as gate
from sparkops.ops import Case, get_contract
from sparkops.plugins import Implementation, load_catalog

pytest.importorskip("triton", reason="triton is not installed (pip install sparkops[gpu])")

from sparkops_triton import IMPLEMENTATIONS  # noqa: E402
from sparkops_triton._runtime import interpreted  # noqa: E402


@pytest.fixture
def poisoned():
    """Fresh allocations are NaN / max-int while the test runs: the gate's own poisoning."""
    from sparkops.gate.poison import poisoned as gate_poisoned

    with gate_poisoned():
        yield


def interpreted_fixture(module: str):
    """A fixture yielding the kernel module imported fresh under TRITON_INTERPRET=1, for one test: the
    environment and the compiled modules come back before the next test (a GPU test, say) runs."""

    @pytest.fixture
    def fixture():
        with interpreted(module) as (mod,):
            yield mod

    return fixture


def as_impl(op: str, name: str, fn: Callable[..., Any], device: str) -> Implementation:
    """The registered implementation `op=name`, but calling `fn` (e.g. the interpreted copy) on `device`."""
    for o, n, _, claim, sources in IMPLEMENTATIONS:
        if (o, n) == (op, name):
            return Implementation(op=op, name=name, backend="triton", devices=(device,), fn=fn, claim=claim,
                                  plugin="triton", sources=tuple(sources))
    raise KeyError(f"{op}={name} is not in sparkops_triton.IMPLEMENTATIONS")


def prove_contract(op: str, name: str, fn: Callable[..., Any], device: str = "cpu", seeds=(0,),
                   skip: Callable[[str], bool] | None = None) -> gate.Outcome | list:
    """The gate on the contract's cases (all of them, or those whose name `skip` does not reject)."""
    impl = as_impl(op, name, fn, device)
    catalog = load_catalog()
    if skip is None:
        outcome = gate.prove(impl, device, catalog, seeds=tuple(seeds))
        assert outcome.cases, f"{op}={name}: no case ran"
        assert outcome.passed, outcome.report
        return outcome
    names = [c.name for s in seeds for c in get_contract(op).cases(s) if not skip(c.name)]
    assert names, f"{op}={name}: every case was skipped"
    for case_name in names:
        outcome = gate.prove(impl, device, catalog, case=case_name)
        assert outcome.passed, outcome.report
    return names


def check_case(op: str, name: str, fn: Callable[..., Any], calls: list[dict], state: dict | None = None,
               device: str = "cpu", label: str = "extra") -> None:
    """One extra case (awkward sizes, a particular regime) judged exactly as the gate judges the contract's."""
    contract = get_contract(op)
    impl = as_impl(op, name, fn, device)
    rule, variant, _ = gate.resolve_claim(impl, load_catalog())
    case = Case(f"{label}@0", calls, state or {})
    want = gate.run_trace(load_catalog().reference(op).resolve(), case, contract, variant, "cpu", reference=True)
    assert want.error is None, f"the reference failed: {want.error}"
    got = gate.run_trace(fn, case, contract, variant, device, reference=False)
    result = gate.CaseResult(case.name, len(calls))
    gate._compare(result, got, want, rule, variant, contract)
    problems = [f"call {i}: {v.line()}" for i, v in result.verdicts if not v.passed]
    assert result.error is None and not problems, f"{op}={name} {label}: {result.error or ''}\n  " + \
        "\n  ".join(problems)


def record_perop(name: str, title: str, times: dict[str, Any], calls: int, rows: list[str]) -> None:
    """Timings (`_workloads.Timing` by implementation) of a side-by-side GPU test, printed, and with SPARKOPS_PEROP_DIR
    set written to $SPARKOPS_PEROP_DIR/perop-NAME-bfloat16.json as seconds a token (`calls` calls a token), the record
    from which bench/perop_factor.py gives a rung its forecast."""
    from sparkops.bench.perop import write_record

    print(f"\n{title}:\n  " + "\n  ".join(rows))
    write_record(f"{name}-bfloat16", title, {n: calls * t.us * 1e-6 for n, t in times.items()}, dtype="bfloat16",
                 rows=rows)


# ---- the "last block" implementations (sparkops_triton._arrival) ----

@contextlib.contextmanager
def shuffled_programs(seed: int = 0) -> Iterator[list]:
    """Triton's interpreter runs each launch's programs in a shuffled order (every grid axis permuted) instead
    of program-id order, so the program that arrives last at an arrival counter is not always the one with the
    highest id: a last-block reduction must give the same bits whichever it is.

    Done by shadowing `range` in the interpreter's module for its launch loop only (GridExecutor.__call__,
    `for x in range(grid[0])`, Triton 3.6); yields a list that records each shuffled axis, so a test can
    assert the shuffling took place (a later Triton that loops differently fails loudly, not silently)."""
    from triton.runtime import interpreter

    rng = random.Random(seed)
    launch = interpreter.GridExecutor.__call__.__code__
    shuffled: list = []

    def grid_range(*args):
        order = range(*args)
        if sys._getframe(1).f_code is not launch:
            return order
        order = list(order)
        rng.shuffle(order)
        shuffled.append(order)
        return order

    interpreter.range = grid_range  # a module global shadows the builtin for that module's code
    try:
        yield shuffled
    finally:
        del interpreter.range


_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit: the same dtype, shape and bytes (so -0.0 differs from 0.0 and equal NaNs match)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = _BITS.get(a.dtype)
    return torch.equal(a.view(view), b.view(view)) if view is not None else torch.equal(a, b)


def assert_pool_clean(arrival, device="cpu") -> None:
    """The device's arrival counters exist and are all zero again (every last program reset its slot)."""
    pool = arrival.pool_on(torch.device(device))
    assert pool is not None, "no arrival counter pool: the last-block path did not run"
    busy = torch.nonzero(pool).flatten().tolist()
    assert not busy, f"arrival counters left non-zero after the call: slots {busy[:10]}"


def poison_(outs) -> None:
    """NaN (floats) / -1 (integers) into outputs in place, so a later launch that does not write them shows."""
    for o in outs:
        o.fill_(float("nan") if o.is_floating_point() else -1)


def assert_same_bits_replayed(old: Callable[[int], Any], new: Callable[[int], Any], change: Callable[[int], None],
                              replays: int = 4, counters: bool = True) -> None:
    """CUDA: `new(i)` gives exactly `old(i)`'s bits eagerly, and when both are captured in CUDA graphs (each
    graph calling its function twice, i = 0 and 1: two launches back to back on one counter pool) and replayed
    `replays` times with `change(r)` writing new inputs in place before replay r and the outputs poisoned.
    A last-block counter not reset to zero would leave the next replay's outputs unwritten (NaN) or early.
    counters=False: the kernels use no arrival counters (there is no pool to check)."""
    from sparkops.gate.poison import poisoned

    from sparkops_triton import _arrival

    def assert_counters_clean(what: str, device) -> None:
        if counters:
            pool = _arrival.pool_on(device)
            assert pool is not None and not pool.any().item(), f"{what}: arrival counters left non-zero"

    def outs(v):
        return v if isinstance(v, tuple) else (v,)

    def written(res) -> bool:
        return all(bool(torch.isfinite(x).all() if x.is_floating_point() else (x >= 0).all()) for x in res)

    for i in (0, 1):  # eager (also the warm-up: compiles, creates the counter pool outside the capture)
        with poisoned():  # fresh outputs are NaN / max-int, not a previous call's right answer
            a, b = outs(old(i)), outs(new(i))
        assert written(a) and all(same_bits(x, y) for x, y in zip(a, b)), f"eager call {i}: the outputs differ"
        assert_counters_clean(f"eager call {i}", a[0].device)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # a warm-up on a side stream, as torch's graph docs ask
        old(0), new(0)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graphs, results = [], []
    for fn in (old, new):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            res = [outs(fn(0)), outs(fn(1))]
        graphs.append(g)
        results.append(res)
    for r in range(replays):
        change(r)
        for res in results:
            for o in res:
                poison_(o)
        for g in graphs:
            g.replay()
        torch.cuda.synchronize()
        for i in (0, 1):
            a, b = results[0][i], results[1][i]
            assert written(a), f"replay {r}, call {i}: the two-launch graph left poisoned outputs"
            assert all(same_bits(x, y) for x, y in zip(a, b)), f"replay {r}, call {i}: the outputs differ"
        assert_counters_clean(f"replay {r}", a[0].device)
