"""Refuse a SUITE_TIMED that names a rung the ledger says did not win.

SUITE_TIMED tells bench/gpu_suite.sh which rungs earlier sessions timed as wins: their registries become the step
now, and later rungs are made over them. GPU session 27's second call named a rung that had lost in the call before
(decode-s27-exp-split, 0.937), so the next rung was made and timed over the losing registry: a true row that answered
no question, and ~100 s of device time. This check reads the ledgers (the checkout's and the machine's own, which
holds the rows of earlier calls on that machine) before anything runs.

    python3 bench/timed_check.py --timed "$SUITE_TIMED" --ledger bench/ledger.jsonl [--ledger MORE] NAME=REGISTRY...

For each NAME=REGISTRY (the suite's NOW_RUNGS, the registry a rung times as its B arm) that SUITE_TIMED names, the
newest pair that timed REGISTRY (by file name) as its B arm over the rung's base (the registry of the next rung in
NOW_RUNGS' order that SUITE_TIMED names, when there is one), retracted pairs left aside, must include a win. A name
with no such row passes, said on stderr (a rung timed in a call not imported yet). Exit 1, naming the rows, when one
did not win.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _rows(paths: list[str]) -> list[dict]:
    rows = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise SystemExit(f"timed_check: {path}:{n} is not a ledger row ({exc}); restore the file (git, or "
                                 f"the machine's bench.tgz) before the call") from None
    return rows


def _arm(row: dict, label: str) -> str | None:
    """The file name of a row's arm `label` ("A", "B"), None when the row has no such arm. A rung's rows are pairs with
    its registry as B; a one-arm row times a registry against the frontier, which says nothing of the rung."""
    for fig in row.get("figures") or []:
        if fig.get("label") == label:
            return Path(str(fig.get("registry", "")).split(" ")[0]).name
    return None


def _bases(timed: list[str], pairs: dict[str, str]) -> dict[str, str]:
    """Each timed rung's base: the registry of the next rung after it in `pairs` (NOW_RUNGS' order, newest first) that
    SUITE_TIMED names, the step the suite makes it over (now_reg). A rung with no timed rung after it has none here."""
    names, chosen = list(pairs), set(timed)
    bases = {}
    for i, name in enumerate(names):
        older = next((n for n in names[i + 1:] if n in chosen), None)
        if older is not None:
            bases[name] = Path(pairs[older]).name
    return bases


def problems(timed: list[str], pairs: dict[str, str], rows: list[dict]) -> tuple[list[str], list[str]]:
    """(refusals, notes): a refusal for each timed rung whose newest rows on its registry hold no win. Only pairs
    whose A arm is the rung's base (_bases) answer the rung's question: session 39 timed rungs52's registry against
    rungs50's (what one of its two swaps gave alone), a true pair about another question."""
    refusals, notes = [], []
    bases = _bases(timed, pairs)
    # a retracted pair answered no question about its rung (session 32: the stack timed over session 23's step, the
    # x16 step's registry missing on that machine): its win does not count, its retraction says why
    retracted = {r.get("retracts") for r in rows if r.get("kind") == "retraction"}
    for name in timed:
        if name not in pairs:
            continue
        reg = Path(pairs[name]).name
        mine = [r for r in rows if r.get("tier") and r.get("id") not in retracted and _arm(r, "A")
                and _arm(r, "B") == reg and _arm(r, "A") == bases.get(name, _arm(r, "A"))]
        if not mine:
            over = f" over {bases[name]}" if name in bases else ""
            notes.append(f"{name}: no pair timed {reg} as its B arm{over} in the ledgers read (timed in a call not "
                         f"imported yet?)")
            continue
        newest = max(r.get("date", "") for r in mine)
        last = [r for r in mine if r.get("date", "") == newest]
        if not any(r["tier"] == "win" for r in last):
            shown = ", ".join(f"{r.get('id')} {r.get('ratio', 0):.3f} {r['tier']}" for r in last)
            refusals.append(f"SUITE_TIMED names {name}, but its newest rows on {reg} did not win ({shown}); "
                            f"SUITE_TIMED lists winners only: take {name} out of it")
    return refusals, notes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timed", default="", help="SUITE_TIMED as the suite got it")
    ap.add_argument("--ledger", action="append", default=[], help="a ledger.jsonl to read (missing files are skipped)")
    ap.add_argument("pairs", nargs="*", help="NAME=REGISTRY: a rung and the registry it times")
    args = ap.parse_args(argv)
    pairs = {}
    for pair in args.pairs:
        name, sep, reg = pair.partition("=")
        if not sep or not name or not reg:
            ap.error(f"'{pair}': expected NAME=REGISTRY")
        pairs[name] = reg
    refusals, notes = problems(args.timed.split(), pairs, _rows(args.ledger))
    for n in notes:
        print(f"timed_check: {n}", file=sys.stderr)
    for r in refusals:
        print(r, file=sys.stderr)
    return 1 if refusals else 0


if __name__ == "__main__":
    raise SystemExit(main())
