"""The comparison harness of the per-op tests: run an implementation and what it claims to equal on the
contract's cases, call by call, and judge outputs and state with the op's row of THE tolerance table
(`sparkops.gate.tolerances`) through the gate's metrics (`sparkops.gate.metrics`): NMSE for floats,
exact for integers (ids, int8 blocks) and for ops whose contract demands it, ids exact up to near-ties
for moe_router and sample (and add_rmsnorm_router's routing, its norm outputs by NMSE), Q8_0 blocks by
what they stand for (qdq) for rmsnorm_quantize. State is
judged after every call: a stateful op that is right once and wrong afterwards is wrong.

Every call runs under the gate's `poisoned()` (fresh torch / NumPy allocations are NaN or max-int),
so an output left partly unwritten fails. Otherwise this runner is deliberately separate from the
gate's `prove` (simpler: CPU only, no input casting), so a mistake in one harness does not hide a
wrong implementation from both.
"""

from __future__ import annotations

import functools
import hashlib
import os
import random
from typing import Any, Callable

import pytest
import torch

from sparkops.gate import metrics
from sparkops.gate.poison import poisoned
from sparkops.gate.tolerances import Rule, rule_for
from sparkops.ops import get_contract
from sparkops.plugins import load_catalog
from sparkops.qweight import QWeight

#: the pinned seed every run checks, plus one fresh seed per run (replay with SPARKOPS_TEST_SEED=N)
PINNED_SEEDS = (0,)


def _fresh_seed() -> int:
    """SPARKOPS_TEST_SEED if set; under pytest-xdist one seed for all the run's workers (they must collect the same
    tests), drawn from the run's id; else drawn from the system's randomness."""
    if os.environ.get("SPARKOPS_TEST_SEED"):
        return int(os.environ["SPARKOPS_TEST_SEED"])
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run:
        return int(hashlib.sha256(run.encode()).hexdigest()[:8], 16) % (2**31 - 2) + 1
    return random.SystemRandom().randrange(1, 2**31 - 1)


FRESH_SEED = _fresh_seed()
SEEDS = (*PINNED_SEEDS, FRESH_SEED)
#: claim variants this runner can judge on the contract's float32 inputs as generated ("bf16" needs
#: the gate's input casting: `sparkops check` proves those)
RUNNABLE_VARIANTS = (None, "fp32", "act_q8")


@functools.lru_cache(maxsize=1)
def catalog():
    return load_catalog()


def cpu_impls(op: str) -> list[str]:
    """Names of the implementations of `op` that are available and run on the CPU, reference first."""
    ref = get_contract(op).reference
    names = [n for n, i in catalog().implementations(op).items() if i.available and "cpu" in i.devices]
    return sorted(names, key=lambda n: (n != ref, n))


@functools.lru_cache(maxsize=None)
def contract_cases(op: str, seed: int):
    """The contract's cases for a seed, generated once per run (quantizing case weights is not free)."""
    return get_contract(op).cases(seed)


def rel_l2(got: torch.Tensor, ref: torch.Tensor) -> float:
    """||got - ref|| / ||ref|| in float64 (absolute when ref is all zeros), for the op-specific tests."""
    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    den = float(torch.linalg.vector_norm(ref))
    return float(torch.linalg.vector_norm(got - ref)) / (den if den > 0 else 1.0)


def qweight_values(w: QWeight) -> torch.Tensor:
    """float64 values of a weight, through the reference dequantizer."""
    return w.dequantize().double()


def _clone(v: Any) -> Any:
    return v.clone() if isinstance(v, torch.Tensor) else v


def run_case(op: str, fn: Callable[..., Any], case) -> list[tuple[tuple, dict[str, torch.Tensor], dict[str, Any]]]:
    """Apply the case's calls in order with fresh copies of its state: per call (outputs as a tuple,
    state copy after the call, the arguments by name).

    Arguments are passed positionally in the contract's order (what the engine does), under
    poisoning. Inputs that are not state must come back unchanged.
    """
    names = get_contract(op).param_names
    state = {k: _clone(v) for k, v in case.state.items()}
    trace = []
    for i, call in enumerate(case.calls):
        args = {k: _clone(v) for k, v in call.items()}
        before = {k: v.clone() for k, v in args.items() if isinstance(v, torch.Tensor)}
        with poisoned():
            out = fn(*[state[n] if n in state else args[n] for n in names])
        for k, v in before.items():
            assert torch.equal(v, args[k]), f"{case.name} call {i}: the implementation modified its input '{k}'"
        outs = out if isinstance(out, tuple) else (out,)
        trace.append((outs, {k: v.clone() for k, v in state.items()}, {**args, **state}))
    return trace


def judge(what: str, got: tuple, ref: tuple, inputs: dict[str, Any], rule: Rule) -> list[metrics.Verdict]:
    """The gate's verdicts for one call's outputs under `rule`."""
    if rule.metric == "router":  # (weights, ids)
        return metrics.router(what, got, ref, inputs, rule)
    if rule.metric == "sample":  # one ids tensor
        return metrics.sample(what, got[0], ref[0], inputs, rule)
    if rule.metric == "qdq":  # (q, d) Q8_0 blocks
        return metrics.qdq(what, got, ref, rule)
    if rule.metric == "norm_router":  # (normed, summed, weights, ids)
        return metrics.norm_router(what, got, ref, inputs, rule, exact_dtype=True)
    if len(got) != len(ref):
        return [metrics.Verdict(what, "structure", float("inf"), 0.0, False,
                                f"{len(got)} outputs, the reference gives {len(ref)}")]
    return [tensor_verdict(f"{what}[{i}]" if len(ref) > 1 else what, g, r, rule, exact_dtype=True)
            for i, (g, r) in enumerate(zip(got, ref))]  # the contract names each output's dtype


def tensor_verdict(what: str, got: Any, ref: torch.Tensor, rule: Rule, exact_dtype: bool = False) -> metrics.Verdict:
    exact = rule.metric == "exact" or not ref.is_floating_point()
    bad = metrics.structure(what, got, ref, exact_dtype=exact_dtype or exact)
    if bad:
        return bad
    return metrics.exact(what, got, ref) if exact else metrics.nmse(what, got, ref, rule.limit)


def check_against_reference(op: str, impl_name: str, seed: int, cat=None) -> None:
    """Fail with every disagreement between `impl_name` and the reference (and, for a bit-identity claim,
    every byte that differs from the implementation it claims to equal) on all the contract's cases.
    `cat` is the plugin catalog (default: the installed plugins)."""
    cat = cat or catalog()
    impl = cat.get(op, impl_name)
    if impl.claim.variant not in RUNNABLE_VARIANTS:
        pytest.skip(f"{op}={impl_name} claims variant '{impl.claim.variant}': proved by `sparkops check`, "
                    f"which casts the inputs for it")
    rule = rule_for(op, impl.claim.variant)
    ref_fn = cat.reference(op).resolve()
    twin = cat.get(op, impl.claim.to).resolve() if impl.claim.kind == "bit_identical" else None
    cases = contract_cases(op, seed)
    assert cases, f"{op}: the contract generated no cases for seed {seed}"
    failed: list[str] = []
    for case in cases:
        want = run_case(op, ref_fn, case)
        got = run_case(op, impl.resolve(), case)
        same = run_case(op, twin, case) if twin else None
        for i, ((ref_out, ref_state, inputs), (out, state, _)) in enumerate(zip(want, got)):
            where = f"{case.name} call {i}"
            verdicts = judge(f"{where} output", out, ref_out, inputs, rule)
            verdicts += [tensor_verdict(f"{where} state '{k}'", state[k], ref_state[k], rule) for k in ref_state]
            if same:
                verdicts += [metrics.same_bytes(f"{where} output[{j}]", g, o, impl.claim.to)
                             for j, (g, o) in enumerate(zip(out, same[i][0]))]
                verdicts += [metrics.same_bytes(f"{where} state '{k}'", state[k], same[i][1][k], impl.claim.to)
                             for k in state]
            failed += [v.line() for v in verdicts if not v.passed]
            failed += [f"{where}: reference output[{j}] holds NaN/Inf on finite inputs" for j, o in enumerate(ref_out)
                       if o.is_floating_point() and not torch.isfinite(o).all()]
    assert not failed, (f"{op}={impl_name} ({impl.claim}; rule {rule}), seed {seed} "
                        f"(replay: SPARKOPS_TEST_SEED={seed}):\n  " + "\n  ".join(failed))
