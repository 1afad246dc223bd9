"""`sparkops plugins`: every plugin found, where it came from, what it registered, and whether it loaded."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from ..plugins import load_catalog
from ._common import add_json_arg, console, emit_json

NAME = "plugins"
HELP = "list plugins: name, version, origin, implementations, load status or error"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP)
    add_json_arg(p)


def run(args) -> int:
    catalog = load_catalog()
    if args.json:
        emit_json([{
            "name": i.name, "module": i.module, "distribution": i.distribution, "version": i.version,
            "status": i.status, "error": i.error, "rejected": i.rejected,
            "implementations": [impl.key for impl in i.implementations],
        } for i in catalog.plugins])
        return 0
    table = Table(title="sparkops plugins (entry-point group 'sparkops')")
    for col in ("plugin", "version", "from", "implementations", "status"):
        table.add_column(col)
    for i in catalog.plugins:
        avail = sum(impl.available for impl in i.implementations)
        impls = f"{len(i.implementations)} ({avail} available here)" if i.implementations else "none"
        status = "[green]ok[/]" if i.status == "ok" else "[red]FAILED[/]"
        if i.rejected:
            status += f" [yellow]({len(i.rejected)} rejected)[/]"
        table.add_row(i.name, i.version, f"{i.module} ({i.distribution})", impls, status)
    console.print(table)
    for i in catalog.plugins:
        if i.error:
            console.print(f"\n[red]plugin '{escape(i.name)}' ({escape(i.module)}) failed:[/]\n{escape(i.error.rstrip())}")
        for why in i.rejected:
            console.print(f"[yellow]rejected:[/] {escape(why)}")
        unavailable = {impl.unavailable for impl in i.implementations if impl.unavailable}
        for why in sorted(unavailable):
            console.print(f"[dim]{escape(i.name)}: unavailable here: {escape(why)}[/]")
    return 0
