"""Keep the carried registries whose every check record still holds: `python3 bench/registry_keep.py --device cuda
REG...`

A fresh machine spends ~320 s making the step's registries by `sparkops swap` (GPU session 24: of a 545 s first call).
A registry's check records are its proof, pinned to each implementation's source hash, the claim, the tolerance
table and the reference lock, not to one machine. So the suite carries the registries a session made
(.kcache/registries.tgz) and, on the next fresh machine, keeps each one whose plan holds on that device class today:
every op runs what it selects, its record unchanged. A registry that does not (a kernel edited since, a plugin not
available there) is deleted with its .base, and the suite makes it again by its swaps. One line per registry says
which, and why.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def verdicts(paths: list[Path], device: str) -> list[tuple[Path, str | None]]:
    """(registry, None where its plan holds on `device`, else the first reason it does not), the catalog loaded once."""
    from sparkops.errors import SparkopsError
    from sparkops.plugins import load_catalog
    from sparkops.registry.file import Registry
    from sparkops.registry.plan import make_plan

    catalog = load_catalog()
    out = []
    for path in paths:
        try:
            plan = make_plan(Registry.load(path), catalog, device)
        except (SparkopsError, OSError) as exc:
            out.append((path, f"{type(exc).__name__}: {exc}"))
            continue
        bad = [(op, e.error) for op, e in plan.entries.items() if e.error]
        out.append((path, None if plan.ok else (f"{bad[0][0]}: {bad[0][1]}" if bad else "the plan cannot run")))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("registries", nargs="*", type=Path)
    args = ap.parse_args(argv)
    kept = 0
    for path, why in verdicts(args.registries, args.device):
        if why is None:
            kept += 1
            print(f"kept {path.name}")
        else:
            path.unlink(missing_ok=True)
            Path(f"{path}.base").unlink(missing_ok=True)
            print(f"dropped {path.name}: {why}")
    print(f"{kept} of {len(args.registries)} carried registries kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
