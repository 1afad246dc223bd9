"""What every CLI command shares: the console, JSON output, loading the catalog and the registry."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from ..paths import default_registry

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def registry_path(arg: str | None) -> Path:
    return Path(arg) if arg else default_registry()


def add_registry_arg(p) -> None:
    p.add_argument("--registry", metavar="FILE", help="registry file (default: ./registry.toml, else the checkout's)")


def add_device_arg(p, default: str | None = "cpu") -> None:
    p.add_argument("--device", choices=("cpu", "cuda"), default=default, help="device class (default: %(default)s)")


def add_json_arg(p) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def warn_failed_plugins(catalog) -> None:
    """Say on stderr which plugins failed to load, so no command hides it."""
    for info in catalog.plugins:
        if info.status != "ok":
            last = (info.error or "").strip().splitlines()[-1:] or ["?"]
            err_console.print(f"[yellow]warning:[/] plugin '{info.name}' failed to load: {last[0]} "
                              f"(`sparkops plugins` shows the traceback)")
        for why in info.rejected:
            err_console.print(f"[yellow]warning:[/] rejected: {why}")
