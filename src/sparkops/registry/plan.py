"""The plan: for every op on a device class, what will run, why, and why each other candidate won't.

Nothing is picked silently. A selection that cannot run here follows its op's fallback policy:
`reference` runs the NumPy reference instead (the plan and the run's counters show it) and `error`
refuses. A CPU implementation used on a CUDA run costs a host round trip per call; that is allowed,
shown, and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CheckFailed, RegistryError, Unavailable
from ..ops import OP_NAMES, get_contract
from ..plugins.implementation import DEVICES, Implementation
from ..plugins.manager import Catalog
from .file import Registry, Selection


@dataclass
class PlanEntry:
    op: str
    device: str
    selected: str | None  # the name registry.toml selects (None: no entry)
    runs: Implementation | None  # what will actually run (None: nothing can)
    reason: str  # why `runs` runs
    fallback_taken: bool = False
    round_trip: bool = False  # a CPU implementation on a CUDA run
    check: str = "n/a"  # the state of the check record ("ok", "the reference needs none", or the problem)
    error: str | None = None  # why nothing can run
    others: list[tuple[str, str]] = field(default_factory=list)  # (name, why not selected)
    by_type: dict[str, Implementation] = field(default_factory=dict)  # GGUF type name -> what runs for it

    @property
    def all_runs(self) -> list[Implementation]:
        """Every implementation this op runs: the selection for all types, then each type's own."""
        return ([self.runs] if self.runs is not None else []) + list(self.by_type.values())

    def describe_runs(self) -> str:
        """What runs, as a person reads it: 'triton_lastblock' or 'triton_lastblock; Q6_K: cupy_float'."""
        main = self.runs.name + (" (fallback)" if self.fallback_taken else "") if self.runs else "NOTHING"
        return "; ".join([main] + [f"{t}: {i.name}" for t, i in self.by_type.items()])


@dataclass
class Plan:
    device: str
    registry: str
    entries: dict[str, PlanEntry]
    engine: dict[str, object] = field(default_factory=dict)  # the registry's [engine] options (file.ENGINE_KEYS)

    @property
    def ok(self) -> bool:
        return all(e.error is None for e in self.entries.values())

    def require(self) -> None:
        """Raise, naming every op that cannot run and what to do, unless the whole plan can run."""
        errors = [e for e in self.entries.values() if e.error]
        if not errors:
            return
        lines = [f"  {e.op}: {e.error}" for e in errors]
        cls = CheckFailed if all("check" in e.error for e in errors) else Unavailable
        raise cls(f"the registry {self.registry} cannot run on {self.device}:\n" + "\n".join(lines))

    @property
    def engine_on(self) -> list[str]:
        """The [engine] options that are set (they change the graph, not an op)."""
        return [k for k, v in self.engine.items() if v]

    @property
    def fallbacks(self) -> list[str]:
        return [op for op, e in self.entries.items() if e.fallback_taken]

    @property
    def round_trips(self) -> list[str]:
        return [op for op, e in self.entries.items() if e.round_trip]


def make_plan(registry: Registry, catalog: Catalog, device: str, *, verify_checks: bool = True) -> Plan:
    if device not in DEVICES:
        raise RegistryError(f"unknown device class '{device}'; use one of {list(DEVICES)}")
    entries = {op: _plan_op(registry, catalog, op, device, verify_checks) for op in OP_NAMES}
    return Plan(device=device, registry=str(registry.path), entries=entries, engine=registry.engine_options())


def _plan_op(registry: Registry, catalog: Catalog, op: str, device: str, verify_checks: bool) -> PlanEntry:
    impls = catalog.implementations(op)
    ref_name = get_contract(op).reference
    sel = registry.selection(op, device)
    if sel is not None and sel.impl not in impls:
        valid = ", ".join(sorted(impls)) or "(none registered)"
        at = f"{registry.path}:{sel.line}" if sel.line else str(registry.path)
        raise RegistryError(f"{at}: [ops.{op}.{device}] selects unknown implementation '{sel.impl}' of "
                            f"'{op}'; its implementations are: {valid}")
    entry = PlanEntry(op=op, device=device, selected=sel.impl if sel else None, runs=None, reason="")
    if sel is None:
        problem, fallback = f"registry.toml has no [ops.{op}.{device}] entry", "reference"
    else:
        impl = impls[sel.impl]
        problem, fallback = _cannot_run(impl, device), sel.fallback
        if problem is None and verify_checks:
            check_problem = _check_problem(impl, sel, device, catalog)
            entry.check = check_problem or "ok"
            if check_problem:
                entry.error = (f"{impl.key} has no valid check record on {device} ({check_problem}); "
                               f"run `sparkops swap {impl.key} --device {device}` to prove it")
                problem = None
                entry.runs = None
        if problem is None and entry.error is None:
            entry.runs = impl
            entry.round_trip = device == "cuda" and "cuda" not in impl.devices
            entry.reason = f"selected in registry.toml (line {sel.line})" if sel.line else "selected in registry.toml"
            if entry.round_trip:
                entry.reason += "; CPU-only, so every call makes a host round trip"
    if problem is not None:
        ref = impls.get(ref_name)
        if fallback == "reference" and ref is not None and _cannot_run(ref, device) is None:
            entry.runs, entry.fallback_taken = ref, True
            entry.round_trip = device == "cuda" and "cuda" not in ref.devices
            entry.reason = f"FALLBACK to the reference: {problem} (policy: reference)"
            entry.check = "the reference needs none"
        else:
            entry.error = f"{problem} (fallback policy: {fallback})"
            if fallback == "reference":
                entry.error += f"; and the reference '{ref_name}' cannot run either"
    if entry.runs is not None and entry.runs.name == ref_name and not entry.fallback_taken:
        entry.check = "the reference needs none"
    _plan_types(registry, catalog, entry, impls, verify_checks)
    typed = {i.name for i in entry.by_type.values()}
    for name, impl in sorted(impls.items()):
        if (entry.runs is not None and name == entry.runs.name) or name in typed:  # shown under "runs"
            continue
        why = "not selected" if name != entry.selected else "selected, but cannot run"
        blocker = _cannot_run(impl, device)
        if blocker:
            why += f"; {blocker}"
        entry.others.append((name, why))
    return entry


def _plan_types(registry: Registry, catalog: Catalog, entry: PlanEntry, impls: dict[str, Implementation],
                verify_checks: bool) -> None:
    """The op's per-type selections ([ops.OP.DEVICE.by_type.TYPE]). Policy: a type's implementation has no
    fallback; one that cannot run here, or is unproven, makes the plan refuse (naming the table to fix), since
    running the op's other implementation in its place would be a silent substitution."""
    op, device = entry.op, entry.device
    problems = []
    for qtype, sel in registry.type_selections(op, device).items():
        where = f"[ops.{op}.{device}.by_type.{qtype}]"
        impl = impls.get(sel.impl)
        if impl is None:
            at = f"{registry.path}:{sel.line}" if sel.line else str(registry.path)
            raise RegistryError(f"{at}: {where} selects unknown implementation '{sel.impl}' of '{op}'; its "
                                f"implementations are: {', '.join(sorted(impls))}")
        problem = _cannot_run(impl, device)
        if problem is None and device not in impl.devices:
            problem = (f"{impl.key} runs only on {'/'.join(impl.devices)}, and a type's implementation runs "
                       f"natively (no host round trip)")
        if problem is None and verify_checks and impl.name != get_contract(op).reference:
            check_problem = _check_problem(impl, sel, device, catalog)
            if check_problem:
                problem = (f"{impl.key} has no valid check record on {device} ({check_problem}); run "
                           f"`sparkops swap {op}@{qtype}={impl.name} --device {device}` to prove it")
        if problem is not None:
            problems.append(f"{where}: {problem} (remove it with `sparkops swap {op}@{qtype}=- --device {device}`)")
            continue
        entry.by_type[qtype] = impl
        entry.reason += f"; {qtype} weights: {impl.name} ({where})"
    if problems:
        entry.error = "; ".join(([entry.error] if entry.error else []) + problems)
        entry.runs = None
        entry.by_type = {}


def _cannot_run(impl: Implementation, device: str) -> str | None:
    if impl.unavailable:
        return f"{impl.key} is unavailable here: {impl.unavailable}"
    if device == "cpu" and "cpu" not in impl.devices:
        return f"{impl.key} runs only on {'/'.join(impl.devices)}"
    return None


def _check_problem(impl: Implementation, sel: Selection, device: str, catalog: Catalog) -> str | None:
    """Why the selection's check record does not let it run, or None (the gate's rules)."""
    from ..gate.records import record_problem

    return record_problem(impl, sel.check, device, catalog)
