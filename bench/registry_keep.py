"""Keep the carried registries whose every check record still holds: `python3 bench/registry_keep.py --device cuda
[--mend] REG...`

A fresh machine spends ~320 s making the step's registries by `sparkops swap` (GPU session 24: of a 545 s first call).
A registry's check records are its proof, pinned to each implementation's source hash, the claim, the tolerance
table and the reference lock, not to one machine. So the suite carries the registries a session made
(.kcache/registries.tgz) and, on the next fresh machine, keeps each one whose plan holds on that device class today:
every op runs what it selects (none by its fallback to the reference), its record unchanged. A registry that does
not (a kernel edited since, a plugin not available there) is deleted with its .base, and the suite makes it again by
its swaps. One line per registry says which, and why.

--mend: a registry whose only problem is records that no longer hold (the implementation's source, claim, tolerance
row or reference lock changed since, or no record), every implementation it selects able to run here, is mended in
place of being dropped: each such implementation is proven again ONCE (per op and name, however many registries
select it) and its new record written into every registry selecting it, plain ([ops.OP.DEVICE]) and per type
([ops.OP.DEVICE.by_type.TYPE]) alike, exactly as `sparkops swap OP=IMPL` / `OP@TYPE=IMPL --registry FILE` writes it
(the same prove(), Registry.set / set_type with the record, the fallback kept, an atomic save); then its plan is made
again and must hold. So a kernel edited since costs its own proof, not the swaps of the whole chain of registries
(~200-330 s of GPU time). And since a re-proof is the proof a swap makes, nothing unproven is ever kept: a failed
proof is never written (the registries selecting it are dropped, naming it and its summary), and a registry with any
other problem (an implementation unavailable here, an unknown one, an unreadable file) is dropped unproven, as
without --mend. Each proof prints one line (the implementation, its summary, seconds); a mended registry is said so,
with the selections re-proven, and counts as kept in the last line.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple


class Stale(NamedTuple):
    """A selection whose only problem is its check record: [ops.OP.DEVICE] (qtype None) or its by_type.QTYPE table."""

    op: str
    qtype: str | None
    impl: Any  # the sparkops Implementation it selects

    @property
    def label(self) -> str:
        """As `sparkops swap` spells it: 'short_conv=triton', 'linear@Q6_K=cupy_float'."""
        return f"{self.op}@{self.qtype}={self.impl.name}" if self.qtype else self.impl.key


class Proof(NamedTuple):
    """What one re-proof found: the verdict, the record a swap would write, the gate's one-line summary."""

    passed: bool
    record: dict[str, Any] | None
    summary: str


def verdict(path: Path, catalog: Any, device: str) -> str | None:
    """None where the registry's plan holds on `device` with every op running what it selects, else the first reason
    it does not. A selection that cannot run here but whose fallback policy is "reference" leaves a plan that runs,
    the op on the NumPy reference: the registry it was made as is not what would run, so it is not kept either."""
    from sparkops.errors import SparkopsError
    from sparkops.registry.file import Registry
    from sparkops.registry.plan import make_plan

    try:
        plan = make_plan(Registry.load(path), catalog, device)
    except (SparkopsError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    bad = [(op, e.error) for op, e in plan.entries.items() if e.error]
    if not plan.ok:
        return f"{bad[0][0]}: {bad[0][1]}" if bad else "the plan cannot run"
    fell = [(op, e.reason) for op, e in plan.entries.items() if e.fallback_taken and e.selected is not None]
    return f"{fell[0][0]}: {fell[0][1]}" if fell else None


def verdicts(paths: list[Path], device: str, catalog: Any = None) -> list[tuple[Path, str | None]]:
    """(registry, None where its plan holds on `device`, else the first reason it does not), the catalog loaded once
    (here, unless one is passed)."""
    from sparkops.plugins import load_catalog

    catalog = load_catalog() if catalog is None else catalog
    return [(path, verdict(path, catalog, device)) for path in paths]


def stale_selections(path: Path, catalog: Any, device: str) -> list[Stale]:
    """The registry's selections whose only problem is a check record that no longer holds on `device`.

    Empty where the registry has any other problem: its plan, made with the records left unverified, must hold (every
    selection known and able to run here), so that the records are all that a re-proof has to mend. An unreadable
    file is such a problem too (its verdict already names it; it is dropped with that reason)."""
    from sparkops.errors import SparkopsError
    from sparkops.gate.records import record_problem
    from sparkops.registry.file import Registry
    from sparkops.registry.plan import make_plan

    try:
        registry = Registry.load(path)
        plan = make_plan(registry, catalog, device, verify_checks=False)
    except (SparkopsError, OSError):
        return []
    if not plan.ok:
        return []
    stale = []
    for op, entry in plan.entries.items():
        sel = registry.selection(op, device)
        if sel is not None and entry.runs is not None and not entry.fallback_taken \
                and record_problem(entry.runs, sel.check, device, catalog):
            stale.append(Stale(op, None, entry.runs))
        types = registry.type_selections(op, device)
        stale += [Stale(op, qtype, impl) for qtype, impl in entry.by_type.items()
                  if record_problem(impl, types[qtype].check, device, catalog)]
    return stale


def prove_each(stale: list[Stale], catalog: Any, device: str) -> dict[str, Proof]:
    """{implementation key: its Proof}, one proof per distinct implementation (op, name) in `stale`, by the gate's
    prove() as `sparkops swap` calls it, a line each. A proof that cannot run (the gate raises) is a failed one."""
    from sparkops.errors import SparkopsError
    from sparkops.gate import check

    proofs: dict[str, Proof] = {}
    for impl in {s.impl.key: s.impl for s in stale}.values():
        started = time.monotonic()
        try:
            outcome = check.prove(impl, device, catalog)
            proofs[impl.key] = Proof(outcome.passed, outcome.record, outcome.summary)
        except SparkopsError as exc:
            proofs[impl.key] = Proof(False, None, f"the proof could not run: {type(exc).__name__}: {exc}")
        print(f"proof {impl.key} ({time.monotonic() - started:.1f} s): {proofs[impl.key].summary}", flush=True)
    return proofs


def mend(path: Path, stale: list[Stale], proofs: dict[str, Proof], catalog: Any, device: str) -> str | None:
    """Write each stale selection's new record into the registry at `path` as `sparkops swap` does (plain selections,
    then types; the fallback as the file has it; one atomic save), then None where its plan holds, else why not.
    Where any of its implementations failed its proof, nothing is written: why is that failure."""
    from sparkops.errors import SparkopsError
    from sparkops.registry.file import Registry

    failed = [f"{key} failed its re-proof ({proofs[key].summary})"
              for key in dict.fromkeys(s.impl.key for s in stale) if not proofs[key].passed]
    if failed:
        return "; ".join(failed)
    try:
        registry = Registry.load(path)
        for s in sorted(stale, key=lambda s: s.qtype is not None):
            record = proofs[s.impl.key].record
            if s.qtype:
                registry.set_type(s.op, device, s.qtype, s.impl.name, check=record)
            else:
                registry.set(s.op, device, s.impl.name, check=record)
        registry.save(path)
    except (SparkopsError, OSError) as exc:
        return f"its new records could not be written: {type(exc).__name__}: {exc}"
    return verdict(path, catalog, device)


def mended_verdicts(paths: list[Path], device: str) -> list[tuple[Path, str | None, list[str]]]:
    """(registry, None where it is kept else why it is dropped, the selections re-proven for it): verdicts(), with
    every registry whose only problems are stale records mended, each implementation proven once for all of them."""
    from sparkops.plugins import load_catalog

    catalog = load_catalog()
    first = verdicts(paths, device, catalog)
    stale = {path: stale_selections(path, catalog, device) for path, why in first if why is not None}
    proofs = prove_each([s for selections in stale.values() for s in selections], catalog, device)
    out = []
    for path, why in first:
        todo = stale.get(path, [])
        if why is None or not todo:
            out.append((path, why, []))
        else:
            out.append((path, mend(path, todo, proofs, catalog, device), [s.label for s in todo]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--mend", action="store_true",
                    help="re-prove (once per implementation) each selection whose only problem is a stale check "
                         "record, write the record as `sparkops swap` would, and keep the registries that then hold")
    ap.add_argument("registries", nargs="*", type=Path)
    args = ap.parse_args(argv)
    if args.mend:
        results = mended_verdicts(args.registries, args.device)
    else:
        results = [(path, why, []) for path, why in verdicts(args.registries, args.device)]
    kept = 0
    for path, why, reproven in results:
        if why is None:
            kept += 1
            print(f"mended {path.name}: {', '.join(reproven)} re-proven" if reproven else f"kept {path.name}")
        else:
            path.unlink(missing_ok=True)
            Path(f"{path}.base").unlink(missing_ok=True)
            print(f"dropped {path.name}: {why}")
    print(f"{kept} of {len(args.registries)} carried registries kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
