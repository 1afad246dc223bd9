"""The `sparkops` command. Each subcommand is one module here with NAME, HELP, add_parser() and run().

Exit codes: 0 ok, 1 a check or run failed, 2 bad usage or bad input.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

from rich.markup import escape

from .. import __version__
from ..errors import SparkopsError
from ._common import err_console

#: subcommand modules, in the order `sparkops --help` lists them
COMMANDS = [
    "plugins_cmd",
    "ops_cmd",
    "plan_cmd",
    "engine_cmd",
    "swap_cmd",
    "check_cmd",
    "reference_cmd",
    "generate_cmd",
    "logits_cmd",
    "synth_cmd",
    "convert_cmd",
    "bench_cmd", "diagnose_cmd", "ledger_cmd",
    "parallel_cmd",
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # bad usage exits 2 with the usage line, like argparse, but ours
        self.print_usage(sys.stderr)
        err_console.print(f"[red]error:[/] {escape(message)}")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sparkops", description="sparkops: a Kimi-Linear inference engine whose every op "
                     "implementation is proven against the NumPy reference before it runs.")
    parser.add_argument("--version", action="version", version=f"sparkops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    modules = {}
    for name in COMMANDS:
        module = import_module(f"{__name__}.{name}")
        module.add_parser(sub)
        modules[module.NAME] = module
    parser.set_defaults(_modules=modules)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args._argv = list(argv) if argv is not None else sys.argv[1:]  # the command as given, for the ledger's rows
    if not args.command:
        parser.print_help()
        return 2
    try:
        return int(args._modules[args.command].run(args) or 0)
    except SparkopsError as exc:
        err_console.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
        return exc.exit_code
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
