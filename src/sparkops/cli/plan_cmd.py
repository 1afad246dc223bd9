"""`sparkops plan`: for every op, what will run on a device class, why, and why not the others."""

from __future__ import annotations

from rich.table import Table

from ..plugins import load_catalog
from ..registry.file import ENGINE_KEYS, Registry
from ..registry.plan import make_plan
from ._common import add_device_arg, add_json_arg, add_registry_arg, console, emit_json, registry_path, \
    warn_failed_plugins

NAME = "plan"
HELP = "show what each op will run on a device class, why, and why each other candidate is not selected"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP)
    add_device_arg(p)
    add_registry_arg(p)
    add_json_arg(p)


def run(args) -> int:
    catalog = load_catalog()
    warn_failed_plugins(catalog)
    registry = Registry.load(registry_path(args.registry))
    plan = make_plan(registry, catalog, args.device)
    if args.json:
        emit_json({"device": plan.device, "registry": plan.registry, "ok": plan.ok, "engine": plan.engine, "ops": {
            op: {"selected": e.selected, "runs": e.runs.key if e.runs else None,
                 "by_type": {t: i.key for t, i in e.by_type.items()}, "reason": e.reason,
                 "fallback_taken": e.fallback_taken, "round_trip": e.round_trip, "check": e.check,
                 "error": e.error, "others": dict(e.others),
                 "policies": {i.key: i.policy_name for i in _running(e) if i.policy is not None}}
            for op, e in plan.entries.items()}})
        return 0 if plan.ok else 1
    table = Table(title=f"plan for {plan.device} from {plan.registry}")
    for col in ("op", "runs", "why", "check", "other candidates"):
        table.add_column(col)
    for op, e in plan.entries.items():
        runs = f"[red]NOTHING[/]" if e.runs is None else e.describe_runs()
        if e.fallback_taken:
            runs = f"[yellow]{runs}[/]"
        why = e.error and f"[red]{e.error}[/]" or e.reason
        others = "\n".join(f"{n}: {w}" for n, w in e.others) or "-"
        table.add_row(op, runs, why, e.check, others)
    console.print(table)
    console.print(f"engine: {', '.join(plan.engine_on) or 'no [engine] option set'} (`sparkops engine` shows them all)",
                  markup=False)  # "[engine]" is text, not a style
    for key in plan.engine_on:
        console.print(f"  {key}: {ENGINE_KEYS[key][2]}" if key in ENGINE_KEYS else f"  {key}")
    stated = [i for e in plan.entries.values() for i in _running(e) if i.policy is not None]
    if stated:
        console.print("[yellow]stated policies[/] (some calls run other code; bench, diagnose and generate count "
                      "and show them): " + ", ".join(f"{i.key} ({i.policy_name})" for i in stated))
    if plan.fallbacks:
        console.print(f"[yellow]fallbacks taken:[/] {', '.join(plan.fallbacks)}")
    if plan.round_trips:
        console.print(f"[yellow]host round trips per call:[/] {', '.join(plan.round_trips)}")
    if not plan.ok:
        console.print("[red]this plan cannot run[/]; see the errors above")
        return 1
    return 0


def _running(entry) -> list:
    """The implementations a plan entry runs: its selection and its per-type ones."""
    return ([entry.runs] if entry.runs is not None else []) + list(entry.by_type.values())

