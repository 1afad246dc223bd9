"""Does a registry select what a rung claims it does? `python3 bench/registry_selects.py REG OP=IMPL ...`

A rung of several changes is made by `sparkops swap` of several pairs at once, and the suite's `swap_into` keeps the
base's selection where a pair cannot be proven on the machine (it says so in the swap's log and goes on). A row
timed under that registry would name changes it does not hold. This check exits non-zero, naming each pair the
registry does not select on cuda (`OP@TYPE=IMPL` reads the per-type table), so the suite leaves the rung out.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def missing(registry: dict, pairs: list[str], device: str = "cuda") -> list[str]:
    """The pairs `registry` (a loaded registry file) does not select on `device`, each with what it selects."""
    out = []
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"{pair!r}: expected OP=IMPL or OP@TYPE=IMPL")
        op, impl = pair.split("=", 1)
        op, _, qtype = op.partition("@")
        sel = registry.get("ops", {}).get(op, {}).get(device, {})
        if qtype:
            sel = sel.get("by_type", {}).get(qtype, {})
        if sel.get("impl") != impl:
            out.append(f"{pair} (it selects {sel.get('impl', 'nothing')})")
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    path = Path(argv[0])
    try:
        registry = tomllib.loads(path.read_text())
        gaps = missing(registry, argv[1:])
    except (OSError, tomllib.TOMLDecodeError, ValueError) as e:
        print(f"registry_selects: {path}: {e}", file=sys.stderr)
        return 2
    if gaps:
        print(f"registry_selects: {path} does not select on cuda: {', '.join(gaps)}", file=sys.stderr)
        return 1
    print(f"registry_selects: {path} selects all {len(argv) - 1} on cuda")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
