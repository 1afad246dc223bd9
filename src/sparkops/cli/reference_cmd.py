"""`sparkops reference verify | update --reason "..." | show`: the pinned reference (reference.lock).

verify  recomputes every pin on this machine (reference sources, the tolerance table, the model's
        weights and golden logits) and compares; exit 1 on any difference, saying what differs.
update  recomputes and rewrites the lock, keeping the reason; the only writer. It refuses to pin a
        looser threshold. Changing the pins invalidates every check record (re-run `sparkops swap`).
show    prints the pins, the digest check records are made against, and the history.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape

from ..errors import BadInput, CheckFailed
from ._common import add_json_arg, console, emit_json

NAME = "reference"
HELP = "verify, update (with --reason) or show reference.lock, the pinned reference"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help=HELP, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    for name, help_ in (("verify", "recompute every pin and compare"),
                        ("update", "recompute and rewrite the lock (needs --reason)"),
                        ("show", "print the pins, the digest and the history")):
        a = actions.add_parser(name, help=help_, description=help_)
        a.add_argument("--lock", metavar="FILE", help="the lock file (default: the checkout's reference.lock)")
        if name == "update":
            a.add_argument("--reason", required=True, help="why the reference changes (kept in the lock)")
        if name in ("verify", "update"):
            a.add_argument("--no-model", action="store_true",
                           help="leave out the model pins (fast; reference sources and thresholds only)")
        add_json_arg(a)


def run(args) -> int:
    from ..gate import lockref

    if not getattr(args, "action", None):
        raise BadInput("give an action: `sparkops reference verify`, `update --reason \"...\"` or `show`")
    path = Path(args.lock) if args.lock else lockref.lock_path()
    if args.action == "verify":
        rep = lockref.verify(path, with_model=not args.no_model)
        if args.json:
            emit_json({"lock": str(path), "ok": rep.ok, "problems": rep.problems, "notes": rep.notes,
                       "checked": rep.checked})
        else:
            for c in rep.checked:
                console.print(f"checked: {c}", markup=False)
            for n in rep.notes:
                console.print(f"[yellow]note:[/] {escape(n)}")
            for p in rep.problems:
                console.print(f"[red]differs:[/] {escape(p)}")
        if not rep.ok:
            raise CheckFailed(f"{path} does not hold on this machine ({len(rep.problems)} difference(s)); if the "
                              f"change is intended, run `sparkops reference update --reason \"...\"`")
        if not args.json:
            console.print(f"[green]{escape(str(path))} verified[/]")
        return 0
    if args.action == "update":
        written, changes, notes = lockref.update(args.reason, path, with_model=not args.no_model)
        if args.json:
            emit_json({"lock": str(path), "written": written, "changes": changes, "notes": notes,
                       "digest": lockref.reference_digest(path)})
            return 0
        for n in notes:
            console.print(f"[yellow]note:[/] {escape(n)}")
        if not written:
            console.print(f"{path}: nothing changed; left as it is", markup=False)
        else:
            console.print(f"[green]wrote[/] {escape(str(path))}: {escape(', '.join(changes))}")
            console.print("every check record made against the previous lock is now stale; re-prove the "
                          "selections with `sparkops swap OP=IMPL` or `sparkops check --all --write`")
        return 0
    pins = lockref.load(path)
    if pins is None:
        raise BadInput(f"{path} does not exist; create it with `sparkops reference update --reason \"...\"`")
    digest = lockref.digest_of(pins)
    if args.json:
        emit_json({"lock": str(path), "digest": digest, "pins": pins})
        return 0
    console.print(f"{path}: digest {digest}", markup=False)
    ref = pins.get("reference", {})
    console.print(f"numpy {ref.get('numpy')}; references: " +
                  ", ".join(f"{op}={e['impl']}" for op, e in (ref.get('ops') or {}).items()), markup=False)
    model = pins.get("model")
    if model:
        console.print(f"model {model['preset']} (weights {model['weights_digest'][:16]}...), depths {model['depths']}, "
                      f"{len(model['positions'])} golden positions", markup=False)
    else:
        console.print("no model pins", markup=False)
    for h in pins.get("history", []):
        console.print(f"  {h['date']}: {h['reason']} ({', '.join(h.get('changed', []))})", markup=False)
    return 0
