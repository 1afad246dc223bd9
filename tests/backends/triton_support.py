"""What the Triton backend tests share: the interpreter fixture and checks through the gate's own machinery.

CPU tests run the kernels in Triton's interpreter on fresh copies of the kernel modules
(`sparkops_triton._runtime.interpreted`, entered per test), so they neither depend on nor disturb
the process's TRITON_INTERPRET setting or the compiled kernels a GPU test of the same session uses.

Judging is the gate's (`sparkops.gate.check`): the contract's cases through `prove` (poisoned
outputs, the claim variant's input casting, THE tolerance table), and extra cases (awkward sizes)
through the same trace runner and comparison.
"""

from __future__ import annotations

from typing import Any, Callable

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
