"""`sparkops ledger`: the scoreboard's record (bench/ledger.jsonl, frontier.toml, LADDER.md).

    sparkops ledger show [--json]                 # every row: id, date, kind, workload, before -> after, tier
    sparkops ledger render                        # re-render LADDER.md and the plots from the ledger
    sparkops ledger retract ROW --why "..."       # a new row retracting ROW; the frontier falls back if ROW set it
    sparkops ledger import OTHER.jsonl            # append another box's rows this ledger lacks (and apply them)
    sparkops ledger sync                          # frontier entries to the best steady standing figure (an entry
                                                  # an unsteady figure set is lowered, logged in [[lowered]])
    sparkops ledger check                         # frontier vs ledger, and raise-only vs the last commit
    sparkops ledger provenance [ROW] [--json]     # which commit's sources each row ran: its code digest matched
                                                  # against this checkout's history ("+dirty" rows from a GPU box)
    sparkops ledger opbench RUN.json [--read-gbs G]  # a per-op benchmark run (pytest bench/ --benchmark-json)
                                                     # into the ledger: side by side, targets met or missed
    sparkops ledger perop perop-X.json [perop-Y.json ...] [--command TEXT] [--device-name NAME] [--ran-commit SHA]
                                                  # a GPU test's side-by-side record (what a rung's forecast
                                                  # reads) into the ledger: one row, the command defaulting
                                                  # to the record's own test
    sparkops ledger nones --registry STEP.toml [--device cuda] [--json]
                                                  # the `none` changes that gained at every depth, and
                                                  # whether STEP holds each (sub-threshold gains add: time
                                                  # the ones it lacks together)
"""

from __future__ import annotations

import argparse

from rich.table import Table

from ..errors import BadInput, CheckFailed
from ._common import add_json_arg, console, emit_json

NAME = "ledger"
HELP = "show, render, retract, import, sync or check the scoreboard's ledger and frontier"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help=HELP, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("show", "render", "retract", "import", "sync", "check", "opbench", "perop",
                                            "provenance", "nones"))
    p.add_argument("target", nargs="?", help="retract: the row id (or a unique prefix); import: the other ledger "
                   "file; opbench: the pytest-benchmark JSON file; perop: the perop-*.json record; provenance: a row "
                   "id prefix (default: every row)")
    p.add_argument("more", nargs="*", metavar="RECORD",
                   help="perop: further records, all checked before any is recorded (one render for all)")
    p.add_argument("--depth", type=int, default=400, help="provenance: how many commits back to search (default 400)")
    p.add_argument("--read-gbs", type=float, help="opbench: the read ceiling in GB/s (default 4040, the H200's)")
    p.add_argument("--targets", metavar="FILE", help="opbench: the targets (default: bench/targets.toml)")
    p.add_argument("--command", dest="run_command", metavar="TEXT",
                   help="opbench, perop: the command that made the JSON file, for the record")
    p.add_argument("--device-name", metavar="NAME",
                   help="perop: the GPU the record was measured on (default: this machine's)")
    p.add_argument("--ran-commit", metavar="SHA",
                   help="perop: the commit whose code wrote the record, when it is recorded on another machine")
    p.add_argument("--why", help="retract: what was wrong with the measurement (kept in the ledger)")
    p.add_argument("--registry", metavar="FILE", help="nones: the step registry the changes are judged against")
    p.add_argument("--device", default="cuda", help="nones: the device class of the selections (default cuda)")
    p.add_argument("--phase", default="decode", choices=("decode", "prefill"),
                   help="nones: the rows of which phase (default decode)")
    p.add_argument("--bench-dir", metavar="DIR", help="the scoreboard directory (default: the checkout's bench/)")
    add_json_arg(p)


def run(args) -> int:
    from ..bench import ledger as L
    from ..bench import record as R
    from ..bench.provenance import command_line

    d = L.bench_dir(args.bench_dir)
    if args.action in ("retract", "import", "opbench", "perop") and not args.target:
        what = {"retract": "row id", "import": "ledger file", "opbench": "benchmark JSON file",
                "perop": "perop-*.json record"}[args.action]
        raise BadInput(f"ledger {args.action} needs a {what}")
    if args.more and args.action != "perop":
        raise BadInput(f"ledger {args.action} takes one {'target' if args.target else 'argument'}; got also "
                       f"{' '.join(args.more)}")
    if args.action == "perop":
        from ..bench.perop import perop_row

        d.mkdir(parents=True, exist_ok=True)
        rows = [perop_row(f, command=args.run_command or "", device_name=args.device_name or "",
                          ran_commit=args.ran_commit or "") for f in (args.target, *args.more)]  # all checked first
        for row in rows:
            L.append(d / L.LEDGER, row)
            times = ", ".join(f"{n} {t:.1f}" for n, t in sorted(row["per_token_us"].items(), key=lambda kv: kv[1]))
            console.print(f"recorded {row['record']} as row {row['id']}: {row['title']}: {times} us a token")
        R.render_all(d)
        return 0
    if args.action == "opbench":
        from ..bench.opledger import load_targets, opbench_row

        d.mkdir(parents=True, exist_ok=True)
        row = opbench_row(args.target, targets=load_targets(args.targets), read_gbs=args.read_gbs,
                          command=args.run_command or "")
        L.append(d / L.LEDGER, row)
        R.render_all(d)
        counts = {v: sum(t["verdict"] == v for t in row["targets"]) for v in ("met", "missed", "not measured")}
        console.print(f"recorded {len(row['entries'])} case(s) as row {row['id']}; targets: "
                      + ", ".join(f"{n} {v}" for v, n in counts.items()))
        return 0
    if args.action == "show":
        rows = L.read(d / L.LEDGER)
        if args.json:
            emit_json(rows)
            return 0
        gone = L.retractions(rows)
        t = Table(title=str(d / L.LEDGER))
        for col in ("id", "date", "kind", "workload", "before -> after", "tier"):
            t.add_column(col)
        for r in rows:
            if r["kind"] == "retraction":
                t.add_row(r["id"], r["date"][:16], "retraction", str(r.get("key")), f"retracts {r['retracts']}",
                          r["why"])
            elif r["kind"] == "peer":
                t.add_row(r["id"], r["date"][:16], f"peer {r['peer']}", r["key"],
                          f"{r['peer_value']:.4g} (peer) vs {r['value']:.4g}", "")
            elif r["kind"] == "refusal":
                t.add_row(r["id"], r["date"][:16], "refusal", f"{r['phase']} {r.get('registry')}",
                          f"KL {r.get('worst_kl')}, top-1 {r.get('worst_top1')}", "refused by the gate")
            elif r["kind"] == "diagnosis":
                gain = r.get("predicted_gain")
                t.add_row(r["id"], r["date"][:16], "diagnosis", f"{r['model']['name']} d={r['depth']}",
                          f"{r.get('binding')}" + (f" x{gain:.3g} predicted" if gain else ""), "")
            elif r["kind"] == "perop":
                t.add_row(r["id"], r["date"][:16], "perop", r["title"],
                          ", ".join(f"{n} {v:.4g}" for n, v in r["per_token_us"].items()) + " us a token",
                          f"fastest {r['fastest']}")
            elif r["kind"] == "opbench":
                verdicts = [t_["verdict"] for t_ in r["targets"]]
                t.add_row(r["id"], r["date"][:16], "opbench", ",".join(r.get("devices") or []),
                          f"{len(r['entries'])} cases", f"{verdicts.count('met')} met, {verdicts.count('missed')} missed")
            else:
                tier = f"retracted (was {r.get('tier')})" if r["id"] in gone else str(r.get("tier"))
                before = "—" if r.get("before") is None else f"{r['before']:.4g}"
                t.add_row(r["id"], r["date"][:16], "measurement", r["key"], f"{before} -> {r['after']:.4g}", tier)
        console.print(t)
        return 0
    if args.action == "provenance":
        return _provenance(d, args)
    if args.action == "nones":
        return _nones(d, args)
    if args.action == "render":
        R.render_all(d)
        console.print(f"rendered {d / L.LADDER}")
        return 0
    if args.action == "retract":
        if not args.why:
            raise BadInput("ledger retract needs --why \"...\": say what was wrong with the measurement")
        row, lowered = R.retract(d, args.target, args.why,
                                 command_line(["ledger", "retract", args.target, "--why", args.why]))
        console.print(f"row {row['retracts']} retracted by {row['id']}: {row['why']}")
        if lowered:
            console.print(f"frontier {lowered['key']}: {lowered['from']:g} -> {lowered['to']:g} "
                          f"(logged in [[lowered]])", markup=False)
        return 0
    if args.action == "import":
        added = R.import_rows(d, args.target)
        console.print(f"imported {len(added)} row(s) from {args.target} into {d / L.LEDGER}")
        return 0
    if args.action == "sync":
        raised, lowered = R.sync(d)
        for x in lowered:
            console.print(f"frontier {x['key']}: {x['from']:g} -> {x['to']:g} (logged in [[lowered]]): {x['why']}",
                          markup=False)
        console.print(f"raised {len(raised)} frontier entr{'y' if len(raised) == 1 else 'ies'}" +
                      (f": {', '.join(raised)}" if raised else ""))
        return 0
    problems = R.consistency_problems(d) + _against_head(d / L.FRONTIER)
    if args.json:
        emit_json({"ok": not problems, "problems": problems})
    for p in problems:
        console.print(f"[red]problem:[/] {p}")
    if problems:
        raise CheckFailed(f"{len(problems)} problem(s) with the scoreboard in {d}")
    console.print(f"[green]ok[/]: {d / L.FRONTIER} agrees with the ledger and no commit lowered it by hand")
    return 0


def _provenance(d, args) -> int:
    """The table of `ledger provenance`: per row, what it says ran and which commit's sources have its digest."""
    from collections import Counter

    from ..bench import ledger as L
    from ..bench.sources import checkout_of, row_sources

    if args.depth < 1:
        raise BadInput(f"ledger provenance: --depth {args.depth} searches no commit; give 1 or more (default 400)")
    rows = L.read(d / L.LEDGER)
    if args.target:
        rows = [r for r in rows if r["id"].startswith(args.target)]
        if not rows:
            raise BadInput(f"ledger provenance: no row id starts with {args.target!r}; `sparkops ledger show` lists them")
    root = checkout_of(d)
    if root is None:
        raise BadInput(f"ledger provenance: {d} is not inside a git checkout (or git is missing); run it in the "
                       "checkout whose history the rows' code came from")
    with console.status(f"matching code digests against the last {args.depth} commits of {root} ..."):
        found = row_sources(rows, root, args.depth)
    if args.json:
        emit_json(found)
        return 0
    t = Table(title=f"which sources each row ran ({d / L.LEDGER})")
    for col in ("id", "kind", "recorded commit", "code digest", "sources of commit", "verdict"):
        t.add_column(col)
    for f in found:
        rec = f"{str(f['commit'])[:10]}{'+dirty' if f['dirty'] else ''}"
        style = "red" if f["verdict"].startswith("in no commit") else ""
        t.add_row(f["id"], f["kind"], rec, f["code_digest"][:12] or "—", f["sources_commit"][:10] or "—",
                  f"[{style}]{f['verdict']}[/]" if style else f["verdict"])
    console.print(t)
    counts = Counter(f["verdict"] for f in found)
    console.print("; ".join(f"{n} {v}" for v, n in counts.most_common()))
    return 0


def _nones(d, args) -> int:
    """The table of `ledger nones`: the none changes, their ratios by depth, and what the step lacks of each."""
    from ..bench import ledger as L
    from ..bench.nones import candidates, estimate, judge, none_changes

    if not args.registry:
        raise BadInput("ledger nones needs --registry STEP.toml: the step registry to judge the changes against")
    changes, unjudged = none_changes(L.read(d / L.LEDGER), args.phase)
    judge(changes, args.registry, args.device)
    gain = estimate(changes)
    if args.json:
        chosen = {id(c) for c in candidates(changes)}
        emit_json({"changes": [dict(ids=c.ids, change=c.change, ratios=c.ratios, gained=c.gained, held=c.held,
                                    missing=c.missing, conflicts=c.conflicts, candidate=id(c) in chosen,
                                    command=c.command) for c in changes],
                   "unjudged_rows": unjudged, "estimate": gain})
        return 0
    t = Table(title=f"none changes against {args.registry} ({d / L.LEDGER})")
    for col in ("rows", "change", "ratio by depth", "gained", "the step"):
        t.add_column(col)
    order = sorted(changes, key=lambda c: (c.held, not c.gained, bool(c.conflicts), -min(c.ratios.values(), default=0)))
    for c in order:
        ratios = ", ".join(f"d={k}: {v:.3f}" for k, v in sorted(c.ratios.items()))
        step = "holds it" if c.held else "; ".join(
            [f"lacks {m}" for m in c.missing] + [f"conflicts: {x}" for x in c.conflicts])
        t.add_row(c.ids[0] + (f" +{len(c.ids) - 1}" if len(c.ids) > 1 else ""), c.change[:90], ratios,
                  "yes" if c.gained else "no", step)
    console.print(t)
    todo = [c for c in changes if c.gained and not c.held]
    chosen = candidates(changes)
    console.print(f"{len(todo)} gaining none change(s) the step does not hold; {len(chosen)} to take together (no "
                  f"conflicting selection, each counted once): " + "; ".join(", ".join(c.missing) for c in chosen))
    console.print(f"{unjudged} none row(s) predate the arms' recorded differences and are not judged")
    if gain:
        console.print("their ratios multiplied (a naive estimate, not a forecast): "
                      + ", ".join(f"d={k}: x{v:.3f}" for k, v in gain.items()))
    return 0


def _against_head(path) -> list[str]:
    """Raise-only over the file's git history and the working tree (nothing to check without git)."""
    from ..bench.frontier import history_problems
    from ..paths import repo_root

    try:
        rel = path.resolve().relative_to(repo_root())
    except ValueError:
        return []
    return history_problems(repo_root(), rel.as_posix(), path.read_text() if path.exists() else "") or []
