"""The op-level gate: prove an implementation's claim on this machine, case by case, and record it.

    outcome = prove(impl, "cuda", catalog)       # what `sparkops check` and `sparkops swap` call
    outcome.passed, outcome.record, outcome.summary, outcome.report

For every case of the op's contract (pinned seeds + fresh ones), call by call:
  1. the NumPy reference runs on the CPU (cached per session: several implementations share it);
  2. the implementation runs on the device under test with its own copies of the inputs, under
     poisoning (fresh allocations are NaN / max-int), so an output it does not fully write fails;
  3. every output and every state tensor is compared after every call, with the op's row of the
     tolerance table (a tolerance claim) - and, for a bit-identity claim, byte for byte with the
     claimed-equal implementation run on the same inputs, as well as with the reference;
  4. inputs it may only read must come back unchanged; returned buffers are poisoned after use,
     so a reused output buffer that is not rewritten is caught on the next call.
Zero cases run is a failure. So is a proof of nothing of its own: an implementation with a stated
policy (a one-token kernel that hands other calls to other code) must take at least one call itself,
or the cases proved only what it hands on to (GPU session 27 found the one-token Q4_K GEMVs and experts
proven that way: every case had more tokens or another type). The record says what was run where, how
many calls its own code took, and the worst metric per case family.
"""

from __future__ import annotations

import contextlib
import math
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..errors import BadInput, CheckFailed, UnknownName
from ..ops import Case, OpContract, get_contract
from ..plugins.implementation import Implementation
from ..qweight import QWeight
from . import metrics
from .cases import cases_for, default_seeds, family, find_case, place, split_name
from .metrics import Verdict
from .poison import poisoned, spoil
from .records import device_info, library_versions, now, source_files, source_hash
from .tolerances import Rule, rule_for, variant_name

#: failing cases spelled out in a report (the rest are counted)
REPORT_LIMIT = 8


# -- traces: what one implementation did over one case ---------------------------------------------------
@dataclass
class Trace:
    outputs: list[tuple[Any, ...]] = field(default_factory=list)  # per call, CPU copies
    states: list[dict[str, torch.Tensor]] = field(default_factory=list)  # per call, CPU copies after it
    inputs: list[dict[str, Any]] = field(default_factory=list)  # per call, the arguments by name
    mutated: list[list[tuple[str, str]]] = field(default_factory=list)  # per call, (read-only input it changed, how)
    handed_on: list[str | None] = field(default_factory=list)  # per call, what its stated policy handed it to
    error: str | None = None  # the exception that stopped it (and at which call)


def run_trace(fn: Callable[..., Any], case: Case, contract: OpContract, variant: str, device: str, *,
              reference: bool, keep_inputs: bool = True,
              policy: Callable[..., str | None] | None = None) -> Trace:
    """Call `fn` on the case's calls in order, with one copy of the state shared by all of them.

    `keep_inputs` keeps each call's arguments in the trace (the router and sample metrics read them). `policy`
    (Implementation.resolve_policy) is asked of each call's own arguments, before the call, where it goes."""
    placed = place(case, contract, variant, device, reference=reference)
    state_names = set(placed.state)
    trace = Trace()
    for i, (args, kw) in enumerate(zip(placed.calls, placed.kwargs)):
        pristine = {} if reference else {n: snap for n, v in kw.items()
                                          if n not in state_names and (snap := _snapshot(v)) is not None}
        try:
            if policy is not None:
                trace.handed_on.append(policy(*args))
            with (contextlib.nullcontext() if reference else poisoned()):
                out = fn(*args)
                if device == "cuda":
                    torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - an implementation that raises fails the case, with why
            tb = traceback.extract_tb(exc.__traceback__)
            where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
            trace.error = f"call {i + 1}/{len(placed.calls)} raised {type(exc).__name__}{where}: {exc}"
            break
        outs = out if isinstance(out, tuple) else (out,)
        trace.outputs.append(tuple(o.detach().cpu().clone() if isinstance(o, torch.Tensor) else o for o in outs))
        trace.states.append({k: v.detach().cpu().clone() for k, v in placed.state.items()})
        trace.inputs.append(kw if keep_inputs else {})
        trace.mutated.append([(n, _change(before, kw[n])) for n, before in pristine.items()
                              if not _unchanged(before, kw[n])])
        if not reference:
            spoil(outs, [v for v in args if isinstance(v, torch.Tensor)] +
                  [v.raw for v in args if isinstance(v, QWeight)])
    return trace


def _snapshot(v: Any) -> torch.Tensor | None:
    if isinstance(v, torch.Tensor):
        return v.detach().clone()
    if isinstance(v, QWeight):
        return v.raw.detach().clone()
    return None


def _unchanged(before: torch.Tensor, now_: Any) -> bool:
    """True when the input holds exactly the bytes it held before the call."""
    after = now_.raw if isinstance(now_, QWeight) else now_
    if not isinstance(after, torch.Tensor) or before.shape != after.shape or before.dtype != after.dtype:
        return False
    b = before.contiguous().reshape(-1)
    a = after.detach().contiguous().reshape(-1)
    return bool(torch.equal(b.view(torch.uint8), a.view(torch.uint8))) if b.numel() else True


def _change(before: torch.Tensor, now_: Any) -> str:
    """Where a read-only input changed: the first element, what it was and what it became."""
    after = now_.raw if isinstance(now_, QWeight) else now_
    if not isinstance(after, torch.Tensor) or before.shape != after.shape or before.dtype != after.dtype:
        return "it was replaced by a different object"
    b, a = before.detach().cpu().reshape(-1), after.detach().cpu().reshape(-1)
    differ = torch.nonzero(b.view(torch.uint8).reshape(b.numel(), -1) != a.view(torch.uint8).reshape(a.numel(), -1))
    i = int(differ[0, 0])
    where = "[" + ", ".join(map(str, torch.unravel_index(torch.tensor(i), tuple(before.shape)))) + "]" \
        if before.dim() else "[]"
    return f"{int((b != a).sum())} value(s) changed; first at {where}: expected {b[i].item()!r} (unchanged), " \
           f"got {a[i].item()!r}"


# -- results --------------------------------------------------------------------------------------------
@dataclass
class CaseResult:
    name: str
    calls: int
    verdicts: list[tuple[int, Verdict]] = field(default_factory=list)  # (call index, verdict)
    error: str | None = None
    handed_on: list[str | None] = field(default_factory=list)  # per call run, its stated policy's word (None: its own)

    @property
    def passed(self) -> bool:
        return self.error is None and all(v.passed for _, v in self.verdicts)

    def worst(self) -> tuple[int, Verdict] | None:
        return max(self.verdicts, key=lambda cv: _severity(cv[1]), default=None)


def _severity(v: Verdict) -> tuple[bool, float]:
    ratio = v.value / v.limit if v.limit > 0 else (v.value if v.value else 0.0)
    return (not v.passed, ratio)


@dataclass
class Outcome:
    """What `prove` found: the verdict, the record for registry.toml, a one-line summary and a report."""

    impl: Implementation
    device: str
    rule: Rule
    seeds: tuple[int, ...]
    results: list[CaseResult]
    passed: bool
    record: dict[str, Any]
    summary: str
    report: str

    @property
    def cases(self) -> int:
        return len(self.results)

    @property
    def failures(self) -> list[CaseResult]:
        return [r for r in self.results if not r.passed]


#: reference traces are a pure function of (op, variant, case): kept for the process, newest last
_REFERENCE_TRACES: OrderedDict[tuple[str, str, str], Trace] = OrderedDict()
_REFERENCE_KEEP = 64


class Session:
    """One gate run: its seeds (pinned + fresh, shared by every implementation checked in it).

    Reference traces are computed once per process per (op, variant, case) - several
    implementations, and several swaps, share them; a fresh seed's cases are new every session.
    """

    def __init__(self, seeds: tuple[int, ...] | None = None, fresh: int = 1):
        self.seeds = tuple(seeds) if seeds else default_seeds(fresh)

    def reference(self, ref: Implementation, case: Case, contract: OpContract, variant: str, rule: Rule) -> Trace:
        key = (f"{contract.name}={ref.name}", variant, case.name)
        if key in _REFERENCE_TRACES:
            _REFERENCE_TRACES.move_to_end(key)
        else:
            _REFERENCE_TRACES[key] = run_trace(ref.resolve(), case, contract, variant, "cpu", reference=True,
                                               keep_inputs=rule.metric in ("router", "sample", "norm_router"))
            while len(_REFERENCE_TRACES) > _REFERENCE_KEEP:
                _REFERENCE_TRACES.popitem(last=False)
        return _REFERENCE_TRACES[key]


# -- the gate -------------------------------------------------------------------------------------------
def resolve_claim(impl: Implementation, catalog: Any) -> tuple[Rule, str, Implementation | None]:
    """(the tolerance row that applies, its variant, the bit-identity target or None).

    A bit-identity claim inherits the tolerance claim of the implementation it names (following a
    chain of bit-identity claims), because being identical to something proves nothing unless that
    something is right: both are judged against the reference too.
    """
    target = None
    current, seen = impl, [impl.name]
    while current.claim.kind == "bit_identical":
        try:
            nxt = catalog.get(impl.op, current.claim.to)
        except UnknownName as exc:
            raise CheckFailed(f"{current.key} claims to be bit-identical to '{current.claim.to}', which does "
                              f"not exist: {exc}") from None
        if nxt.name in seen:
            raise BadInput(f"{impl.key}: bit-identity claims form a cycle ({' -> '.join(seen + [nxt.name])}); "
                           f"one of them must claim a tolerance against the reference")
        target = target or nxt
        seen.append(nxt.name)
        current = nxt
    if current.claim.kind != "tolerance":
        raise BadInput(f"{current.key}: unknown claim kind '{current.claim.kind}'")
    variant = variant_name(current.claim.variant)
    return rule_for(impl.op, variant), variant, target


def prove(impl: Implementation, device: str, catalog: Any, *, session: Session | None = None,
          seeds: tuple[int, ...] | None = None, case: str | None = None) -> Outcome:
    """Run the gate for `impl` on `device`; never raises for a wrong implementation (it fails)."""
    contract = get_contract(impl.op)
    _require_runnable(impl, device)
    rule, variant, target = resolve_claim(impl, catalog)
    if target is not None:
        _require_runnable(target, device, what=f"{impl.key} claims bit-identity to {target.key}, which")
    session = session or Session(seeds)
    if case is not None:
        split_name(case)
        cases = [find_case(impl.op, case)]
        seeds_used = (split_name(case)[1],)
    else:
        seeds_used = session.seeds
        cases = cases_for(impl.op, seeds_used)
    run_on = device if device in impl.devices else "cpu"  # a CPU implementation on a CUDA run: host round trip
    ref = catalog.reference(impl.op)
    fn = impl.resolve()
    policy = impl.resolve_policy()
    results = []
    for c in cases:
        want = session.reference(ref, c, contract, variant, rule)
        result = CaseResult(c.name, len(c.calls))
        if want.error:
            result.error = f"the reference itself failed on this case: {want.error}"
            results.append(result)
            continue
        got = run_trace(fn, c, contract, variant, run_on, reference=False, keep_inputs=False, policy=policy)
        result.handed_on = got.handed_on
        _compare(result, got, want, rule, variant, contract)
        if target is not None and got.error is None:
            t_on = device if device in target.devices else "cpu"
            other = run_trace(target.resolve(), c, contract, variant, t_on, reference=False, keep_inputs=False)
            _compare_bytes(result, got, other, target)
        results.append(result)
    return _outcome(impl, device, rule, variant, target, seeds_used, results, case, policy is not None)


def _require_runnable(impl: Implementation, device: str, what: str | None = None) -> None:
    who = what or impl.key
    if impl.unavailable:
        raise CheckFailed(f"{who} cannot run here: {impl.unavailable}")
    if device == "cuda" and not torch.cuda.is_available():
        raise BadInput(f"{who}: --device cuda was asked for, but this machine has no CUDA device; "
                       f"check on a GPU machine or use --device cpu")
    if device == "cpu" and "cpu" not in impl.devices:
        raise BadInput(f"{who} runs only on {'/'.join(impl.devices)}; pass --device cuda")


def _compare(result: CaseResult, got: Trace, want: Trace, rule: Rule, variant: str, contract: OpContract) -> None:
    if got.error:
        result.error = got.error
        return
    exact_dtype = variant == "fp32"
    for i, (g_out, r_out) in enumerate(zip(got.outputs, want.outputs)):
        if len(g_out) != len(r_out):
            result.verdicts.append((i, Verdict("output", "structure", math.inf, 0.0, False,
                                               f"{len(g_out)} output(s), the reference gives {len(r_out)}")))
            continue
        label = "output" if len(r_out) == 1 else "outputs"
        if rule.metric == "router":
            result.verdicts += [(i, v) for v in metrics.router(label, g_out, r_out, want.inputs[i], rule)]
        elif rule.metric == "sample":
            result.verdicts += [(i, v) for v in metrics.sample("output", g_out[0], r_out[0], want.inputs[i], rule)]
        elif rule.metric == "qdq":
            result.verdicts += [(i, v) for v in metrics.qdq("outputs", g_out, r_out, rule)]
        elif rule.metric == "norm_router":
            result.verdicts += [(i, v) for v in metrics.norm_router("outputs", g_out, r_out, want.inputs[i], rule,
                                                                    exact_dtype=exact_dtype)]
        else:
            for j, (g, r) in enumerate(zip(g_out, r_out)):
                what = "output" if len(r_out) == 1 else f"output {j}"
                result.verdicts.append((i, _judge(what, g, r, rule, exact_dtype)))
        for name, r_state in want.states[i].items():
            result.verdicts.append((i, _judge(f"state '{name}'", got.states[i][name], r_state, rule, False)))
        for name, how in got.mutated[i]:
            result.verdicts.append((i, Verdict(f"input '{name}'", "unchanged", 1.0, 0.0, False,
                                               f"the implementation wrote to an input it may only read: {how}")))


def _judge(what: str, got: Any, ref: torch.Tensor, rule: Rule, exact_dtype: bool) -> Verdict:
    exact = rule.metric == "exact" or not ref.is_floating_point()
    bad = metrics.structure(what, got, ref, exact_dtype=exact_dtype or exact)
    if bad:
        return bad
    return metrics.exact(what, got, ref) if exact else metrics.nmse(what, got, ref, rule.limit)


def _compare_bytes(result: CaseResult, got: Trace, other: Trace, target: Implementation) -> None:
    if other.error:
        result.verdicts.append((0, Verdict("bit-identity", "bytes", math.inf, 0.0, False,
                                           f"{target.key} failed on this case: {other.error}")))
        return
    for i, (g_out, o_out) in enumerate(zip(got.outputs, other.outputs)):
        for j, (g, o) in enumerate(zip(g_out, o_out)):
            what = "output" if len(g_out) == 1 else f"output {j}"
            result.verdicts.append((i, metrics.same_bytes(f"{what} vs {target.name}", g, o, target.name)))
        for name, o_state in other.states[i].items():
            result.verdicts.append((i, metrics.same_bytes(f"state '{name}' vs {target.name}", got.states[i][name],
                                                          o_state, target.name)))


# -- the record and the words -----------------------------------------------------------------------------
def _own_calls(results: list[CaseResult]) -> tuple[int, int]:
    """(calls its own code took, calls its stated policy was asked of) over the cases run."""
    asked = [w for r in results for w in r.handed_on]
    return sum(w is None for w in asked), len(asked)


def _outcome(impl: Implementation, device: str, rule: Rule, variant: str, target: Implementation | None,
             seeds: tuple[int, ...], results: list[CaseResult], case: str | None, has_policy: bool) -> Outcome:
    from .cases import cases_digest
    from .lockref import reference_digest

    own, asked = _own_calls(results)
    nothing_own = has_policy and bool(results) and asked > 0 and own == 0 and case is None
    passed = bool(results) and all(r.passed for r in results) and not nothing_own
    worst_per_family: dict[str, tuple[str, Verdict]] = {}
    for r in results:
        w = r.worst()
        if w is None:
            continue
        fam = family(r.name)
        if fam not in worst_per_family or _severity(w[1]) > _severity(worst_per_family[fam][1]):
            worst_per_family[fam] = (r.name, w[1])
    overall = max(worst_per_family.values(), key=lambda nv: _severity(nv[1]), default=None)
    record: dict[str, Any] = {
        "op": impl.op, "impl": impl.name, "backend": impl.backend, "plugin": impl.plugin,
        "claim": str(impl.claim), "variant": variant, "rule": str(rule),
        "source_hash": source_hash(impl), "source_files": [n for n, _ in source_files(impl)],
        **device_info(device),
        "versions": library_versions(),
        "cases": len(results), "calls": sum(r.calls for r in results), "seeds": list(seeds),
        "metric": overall[1].metric if overall else rule.metric,
        "worst_value": _finite(overall[1].value) if overall else 0.0,
        "worst_limit": overall[1].limit if overall else rule.limit,
        "worst_case": overall[0] if overall else "",
        "date": now(), "passed": passed, "reference_digest": reference_digest() or "",
        "cases_digest": cases_digest(impl.op),
        "worst": {fam: f"{metrics.show(v.metric, v.value)} / {metrics._fmt(v.limit)} ({name}, {v.what})"
                  for fam, (name, v) in sorted(worst_per_family.items())},
    }
    if has_policy:
        record["own_calls"] = own  # of record["calls"]: the rest went where its stated policy sends them
    if device not in impl.devices:
        record["runs_on"] = "cpu (host round trip)"
    if target is not None:
        record["bit_identical_to"] = target.name
        record["target_source_hash"] = source_hash(target)
    if case is not None:
        record["passed"] = False  # a replay of one case proves nothing about the others: never a record
        record["replay_of"] = case
    summary = _summary(impl, device, rule, results, overall, passed, seeds, (own, asked) if has_policy else None)
    report = _report(impl, device, rule, target, seeds, results, passed, summary, nothing_own)
    return Outcome(impl, device, rule, tuple(seeds), results, passed, record, summary, report)


def _finite(v: float) -> float:
    return v if math.isfinite(v) else 1e308


def _summary(impl, device, rule, results, overall, passed, seeds, own: tuple[int, int] | None = None) -> str:
    if not results:
        return f"{impl.key} on {device}: 0 cases run - a check of nothing is a failure"
    verdict = "PASS" if passed else "FAIL"
    seeds_s = ", ".join(map(str, seeds))
    worst = ""
    if overall is not None:
        name, v = overall
        worst = f", worst {metrics.show(v.metric, v.value)} vs {metrics._fmt(v.limit)} ({name} {v.what})"
    bad = sum(not r.passed for r in results)
    fails = f", {bad} failing" if bad else ""
    mine = ""
    if own is not None:
        mine = f", {own[0]} of {own[1]} calls by its own code" if own[0] else \
            f", none of its {own[1]} calls by its own code (each went where its stated policy sends it)"
    return f"{impl.key} on {device}: {len(results)} cases (seeds {seeds_s}){fails}{mine}{worst}: {verdict}"


def _report(impl, device, rule, target, seeds, results, passed, summary, nothing_own: bool = False) -> str:
    lines = [summary, f"  claim: {impl.claim}; rule: {rule}" + (f"; bytes equal to {target.key}" if target else "")]
    if not results:
        lines.append("  the contract produced no cases (or --case matched none): nothing was proven")
    if nothing_own:
        said = next(w for r in results for w in r.handed_on if w)
        lines.append(f"  its stated policy ({impl.policy_name}) handed every call on, e.g. to {said}: the cases proved "
                     f"what it hands on to, not its own code. Add a case its code takes to the op's cases "
                     f"(src/sparkops/ops/{impl.op}.py)")
    failures = [r for r in results if not r.passed]
    for r in failures[:REPORT_LIMIT]:
        lines.append(f"  case {r.name} ({r.calls} call(s)):")
        if r.error:
            lines.append(f"    {r.error}")
        for i, v in r.verdicts:
            if not v.passed:
                lines.append(f"    call {i + 1}: {v.line()}")
        lines.append(f"    replay: sparkops check {impl.key} --case {r.name} --device {device}")
    if len(failures) > REPORT_LIMIT:
        lines.append(f"  ... and {len(failures) - REPORT_LIMIT} more failing case(s)")
    return "\n".join(lines)
