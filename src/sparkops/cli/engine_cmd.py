"""`sparkops engine [KEY=on|off ...]`: how the engine composes the ops, the registry's [engine] table.

With no argument, lists every option with its value in the registry and what it does; KEY=on / KEY=off
sets one (the file is rewritten atomically, comments kept). The options change the graph, not an op, so
a registry that sets one is a new candidate: judge it with `sparkops check --model`, time it against the
old one with `sparkops bench ... --vs`.

    sparkops engine                                   # show
    sparkops engine fuse_projections=on --registry fast.toml
    sparkops engine fuse_projections=on fuse_short_conv=on --registry fast.toml
"""

from __future__ import annotations

import argparse

from rich.table import Table

from ..errors import BadInput
from ..registry.file import ENGINE_KEYS, Registry
from ._common import add_json_arg, add_registry_arg, console, emit_json, registry_path

NAME = "engine"
HELP = "show or set the registry's [engine] options (e.g. fuse_projections=on)"

_BOOL = {"on": True, "true": True, "1": True, "yes": True, "off": False, "false": False, "0": False, "no": False}


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help=HELP, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("settings", nargs="*", metavar="KEY=on|off", help="options to set")
    add_registry_arg(p)
    add_json_arg(p)


def _parse(setting: str) -> tuple[str, object]:
    key, sep, value = setting.partition("=")
    if not sep or key not in ENGINE_KEYS:
        raise BadInput(f"'{setting}': give KEY=on|off with KEY one of: {', '.join(ENGINE_KEYS)}")
    kind = ENGINE_KEYS[key][0]
    if kind is bool:
        if value.lower() not in _BOOL:
            raise BadInput(f"'{setting}': {key} is on or off")
        return key, _BOOL[value.lower()]
    raise BadInput(f"{key}: options of type {kind.__name__} cannot be set here yet")  # pragma: no cover


def run(args) -> int:
    path = registry_path(args.registry)
    reg = Registry.load(path)
    changes = [_parse(s) for s in args.settings]  # every setting checked before anything is written
    reg.set_engines(dict(changes))
    if changes:
        reg.save()
    opts = reg.engine_options()
    if args.json:
        emit_json({"registry": str(path), "engine": opts, "changed": [k for k, _ in changes]})
        return 0
    table = Table(title=f"[engine] of {path}")
    for col in ("option", "value", "what it does"):
        table.add_column(col)
    for key, (_, default, what) in ENGINE_KEYS.items():
        value = opts[key]
        shown = ("on" if value else "off") if isinstance(value, bool) else str(value)
        table.add_row(key, shown + ("" if value != default else " (default)"), what)
    console.print(table)
    if changes:
        console.print(f"wrote {path}: a new candidate - judge it with `sparkops check --model MODEL --registry {path}`")
    return 0
