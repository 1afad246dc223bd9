"""The ledger's `none` rows that gained at every depth they timed, and whether a step registry holds their change.

The bench's tiers guard the frontier against noise: six pairs cannot tell a +0.5% change from chance, so such a rung
is `none` and never moves the step. But a forecast, gated change that gained at every depth is still a gain. GPU
session 22 timed four such rungs (+0.2 to +1.3% each) and then all four together over the same base: 1.035 and
1.038, a win. Three older ones (sessions 9, 18, 19) had sat in the ledger unused the whole time. `sparkops ledger
nones --registry STEP` lists the nones beside the step, so that the next rung can take them together:

* a change is a bench run's rows (one command, one date: a row a depth), with the pairs its arms differed in
  (`differs`: {op: [A, B]}, "[engine]" for the options); rows from before arms recorded that are left out, counted;
* it gained if B beat A at every depth in every pair (six of six), or in the median where a row kept no pairs;
* the step holds it when the step registry selects every B-side implementation and sets every option as B did; it
  lacks what the step still runs as the A side had it (swapping it in is the change); it conflicts where the step
  has moved an op to a third form (two forms of one op cannot both be selected: a combined form must be written).

The product of the ratios of the candidates (gaining, not held, no conflict, each change counted once) is printed as
what it is: a naive estimate (the gains of different kernels add roughly; of one kernel, they do not), not a forecast
a row can carry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..registry.file import Registry
from .registry_diff import ENGINE

#: how an arm's recorded implementation may be annotated ("numpy (fallback)": it ran the reference)
_NOTE = " ("


@dataclass
class NoneChange:
    """One bench run whose rows are all `none`: its ratios by depth, what it set, whether a step holds it."""

    ids: list[str]
    change: str
    command: str
    ratios: dict[int, float]               # depth -> B/A, the median of the pairs
    pairs: dict[int, list[float]]          # depth -> every pair's B/A (empty where the row kept none)
    sets: dict[str, tuple[str, str]]       # op (or op@TYPE) -> (the A arm's implementation, the B arm's)
    options: dict[str, bool]               # [engine] option -> the B arm's value, for the options that differed
    missing: list[str] = field(default_factory=list)    # what the step lacks, as OP=IMPL / engine KEY=on|off
    conflicts: list[str] = field(default_factory=list)  # OP=IMPL where the step has moved the op to a third form

    @property
    def gained(self) -> bool:
        """B beat A at every depth in every pair (six of six: the sign test's clearest answer), or, for a row that
        kept no pairs, in its median."""
        return bool(self.ratios) and all(min(self.pairs.get(d) or [r]) > 1.0 for d, r in self.ratios.items())

    @property
    def held(self) -> bool:
        return not self.missing and not self.conflicts


def _impl(label: str) -> str:
    """An arm's implementation without its annotation ("numpy (fallback)" -> "numpy")."""
    return label.split(_NOTE, 1)[0].strip()


def _selections(op: str, label: str) -> dict[str, str]:
    """{op or op@TYPE: implementation} an arm's label spells: "IMPL" (registry_diff), or "IMPL; TYPE: IMPL; ..." (the
    arms' recorded selections of an op with per-type ones, e.g. "triton_lastblock; Q6_K: cupy_float")."""
    base, *types = (x.strip() for x in label.split(";"))
    out = {op: _impl(base)}
    for t in types:
        qtype, _, impl = t.partition(":")
        if impl:
            out[f"{op}@{qtype.strip()}"] = _impl(impl)
    return out


def _sets(differs: dict[str, list[str]]) -> dict[str, tuple[str, str]]:
    """{op or op@TYPE: (A's implementation, B's)} for what differs between the arms (not the [engine] table); an
    op@TYPE that A did not select on its own starts from A's implementation of the op."""
    out: dict[str, tuple[str, str]] = {}
    for op, (a, b) in differs.items():
        if op == ENGINE:
            continue
        sa, sb = _selections(op, a), _selections(op, b)
        out.update({k: (sa.get(k, sa[op]), v) for k, v in sb.items() if sa.get(k) != v})
    return out


def _options(text: str) -> dict[str, bool]:
    """The [engine] options an arm's `differs` entry spells: "k=v, ..." (registry_diff) or "k1, k2" (the options on,
    as the arms' recorded selections list them); "(defaults)" or "" for none."""
    out: dict[str, bool] = {}
    for item in (x.strip() for x in text.split(",")):
        if not item or item.startswith("("):
            continue
        key, _, value = item.partition("=")
        key = key.split(_NOTE, 1)[0].strip()  # "side_stream (20 of 20 KDA layers)": what the arm did with it
        out[key] = value.strip().lower() not in ("false", "off", "0") if value else True
    return out


def _engine_change(pair: list[str]) -> dict[str, bool]:
    """{option: B's value} for the options that differ between the arms' `[engine]` entries."""
    a, b = _options(pair[0]), _options(pair[1])
    return {k: b.get(k, False) for k in sorted(set(a) | set(b)) if a.get(k, False) != b.get(k, False)}


def none_changes(rows: list[dict[str, Any]], phase: str = "decode") -> tuple[list[NoneChange], int]:
    """The bench runs of `phase` whose every row is a `none` measurement (not retracted), and how many such rows
    carry no `differs` (recorded before the arms were) and so cannot be judged."""
    from .ledger import retractions

    gone = retractions(rows)
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("kind") == "measurement" and r["id"] not in gone and r.get("phase") == phase:
            runs.setdefault((r.get("command", ""), r.get("date", "")), []).append(r)
    out, unjudged = [], 0
    for (command, _), run in runs.items():
        if any(r.get("tier") != "none" for r in run):
            continue
        differs = run[0].get("differs")
        if not differs:
            unjudged += len(run)
            continue
        sets = _sets(differs)
        options = _engine_change(differs[ENGINE]) if ENGINE in differs else {}
        ratios = {int(r.get("depth", 0)): float(r["ratio"]) for r in run if r.get("ratio") is not None}
        pairs = {int(r.get("depth", 0)): [float(x) for x in r.get("pair_ratios") or []] for r in run}
        out.append(NoneChange([r["id"] for r in run], str(run[0].get("change", "")), command, ratios, pairs, sets,
                              options))
    return out, unjudged


def judge(changes: list[NoneChange], step: str | Path, device: str = "cuda") -> list[NoneChange]:
    """Fill each change's `missing` and `conflicts` against the step registry."""
    reg = Registry.load(step)
    engine = reg.engine_options()
    for c in changes:
        c.missing, c.conflicts = [], []
        for op, (base, impl) in sorted(c.sets.items()):
            name, _, qtype = op.partition("@")
            sel = reg.type_selections(name, device).get(qtype) if qtype else None
            sel = sel or reg.selection(name, device)  # a type without its own selection runs the op's
            have = sel.impl if sel is not None else "(none)"
            if have == impl:
                continue
            if have == base:  # the step still runs what the change replaced: swapping it in is the change
                c.missing.append(f"{op}={impl}")
            else:  # the step has moved the op to a third form: the two cannot both be selected
                c.conflicts.append(f"{op}={impl} (from {base}; the step: {have})")
        for key, value in sorted(c.options.items()):
            if bool(engine.get(key, False)) != value:
                c.missing.append(f"engine {key}={'on' if value else 'off'}")
    return changes


def candidates(changes: list[NoneChange]) -> list[NoneChange]:
    """The gaining changes a step could take together: not held, no conflicting selection, and each counted once -
    a change whose lacks are all lacks of another one (the same pairs timed again, or a subset of a larger change)
    gives way to it (the larger, then the later)."""
    todo = [c for c in changes if c.gained and not c.held and not c.conflicts]
    keep = []
    for c in todo:
        mine = set(c.missing)
        covered = any(o is not c and mine <= set(o.missing) and (mine < set(o.missing) or o.ids[0] > c.ids[0])
                      for o in todo)
        if not covered:
            keep.append(c)
    return keep


def estimate(changes: list[NoneChange]) -> dict[int, float]:
    """The product, depth by depth, of the ratios of the candidates (a naive estimate: see the module docstring),
    over the depths every one of them timed."""
    todo = candidates(changes)
    depths = set.intersection(*(set(c.ratios) for c in todo)) if todo else set()
    out = {}
    for d in sorted(depths):
        p = 1.0
        for c in todo:
            p *= c.ratios[d]
        out[d] = p
    return out
