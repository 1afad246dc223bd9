"""`sparkops ops [OP]`: every named op and every implementation of it."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from ..ops import CONTRACTS, get_contract
from ..plugins import load_catalog
from ._common import add_json_arg, console, emit_json, warn_failed_plugins

NAME = "ops"
HELP = "list every op and its implementations (backend, devices, claim, available?)"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP)
    p.add_argument("op", nargs="?", help="show one op's contract (meaning, parameters) too")
    add_json_arg(p)


def run(args) -> int:
    catalog = load_catalog()
    warn_failed_plugins(catalog)
    names = [get_contract(args.op).name] if args.op else list(CONTRACTS)
    if args.json:
        emit_json({op: {
            "summary": CONTRACTS[op].summary, "signature": str(CONTRACTS[op].signature),
            "reference": CONTRACTS[op].reference,
            "implementations": [{
                "name": i.name, "backend": i.backend, "devices": list(i.devices), "claim": str(i.claim),
                "plugin": i.plugin, "available": i.available, "unavailable": i.unavailable, "where": i.where(),
            } for i in catalog.implementations(op).values()],
        } for op in names})
        return 0
    if args.op:
        console.print(CONTRACTS[args.op].describe(), markup=False)
        console.print()
    table = Table(title="ops and their implementations")
    for col in ("op", "implementation", "backend", "devices", "claim", "available", "where"):
        table.add_column(col)
    for op in names:
        impls = catalog.implementations(op)
        if not impls:
            table.add_row(op, "[red](none)[/]", "", "", "", "", "")
        for n, (name, i) in enumerate(sorted(impls.items(), key=lambda kv: (kv[0] != CONTRACTS[op].reference, kv[0]))):
            ref = " (reference)" if name == CONTRACTS[op].reference else ""
            # escaped: a reason names its fix, and "pip install sparkops[gpu]" is not rich markup
            avail = "[green]yes[/]" if i.available else f"[yellow]no[/]: {escape(str(i.unavailable))}"
            table.add_row(op if n == 0 else "", name + ref, i.backend, ",".join(i.devices), str(i.claim), avail,
                          i.where())
    console.print(table)
    return 0
