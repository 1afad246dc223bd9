"""`sparkops swap OP=IMPL [...]`: prove the implementations on this machine, then select them.

Names are validated first; each implementation that is not the reference is checked by the gate on
the chosen device class; registry.toml is rewritten (atomically, comments kept) only when every
check passed. A failing swap leaves the file byte-for-byte unchanged.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import BadInput, CheckFailed
from ..ops import get_contract
from ..plugins import load_catalog
from ..registry.file import FALLBACKS, Registry
from ._common import add_json_arg, add_registry_arg, console, emit_json, registry_path, warn_failed_plugins

NAME = "swap"
HELP = "check OP=IMPL on this machine and, if it passes, select it in registry.toml"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help=HELP, description=__doc__)
    p.add_argument("pairs", nargs="+", metavar="OP=IMPL", help="e.g. attention=triton_splitk")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="device class to select for (default: cuda for CUDA-only implementations, else cpu)")
    p.add_argument("--fallback", choices=FALLBACKS, default=None, help="set the op's fallback policy too")
    add_registry_arg(p)
    add_json_arg(p)


def parse_pairs(pairs: list[str]) -> list[tuple[str, str]]:
    out = []
    for pair in pairs:
        op, sep, impl = pair.partition("=")
        if not sep or not op or not impl:
            raise BadInput(f"'{pair}' is not OP=IMPL (e.g. attention=triton_splitk)")
        get_contract(op)
        out.append((op, impl))
    return out


def run(args) -> int:
    pairs = parse_pairs(args.pairs)
    catalog = load_catalog()
    warn_failed_plugins(catalog)
    path = registry_path(args.registry)
    registry = Registry.load(path) if Path(path).exists() else Registry.empty(path)
    impls = [catalog.get(op, name) for op, name in pairs]  # unknown names: exit 2 before anything runs
    results = []
    for impl in impls:
        device = args.device or ("cuda" if "cpu" not in impl.devices else "cpu")
        if device == "cpu" and "cpu" not in impl.devices:
            raise BadInput(f"{impl.key} runs only on {'/'.join(impl.devices)}; pass --device cuda")
        if impl.unavailable:
            raise CheckFailed(f"{impl.key} cannot be checked here: {impl.unavailable}")
        if impl.name == get_contract(impl.op).reference:
            results.append((impl, device, None, "the reference: the definition needs no check"))
            continue
        from ..gate.check import prove  # the gate: no implementation is selected unproven

        outcome = prove(impl, device, catalog)
        results.append((impl, device, outcome.record, outcome.summary))
        if not outcome.passed:
            console.print(outcome.report, markup=False)
            raise CheckFailed(f"{impl.key} failed its check on {device}; registry {path} left unchanged")
    for impl, device, record, _ in results:
        registry.set(impl.op, device, impl.name, fallback=args.fallback, check=record)
    registry.save(path)
    if args.json:
        emit_json([{"op": i.op, "impl": i.name, "device": d, "check": s, "record": r} for i, d, r, s in results])
    else:
        for impl, device, _, summary in results:
            console.print(f"[green]selected[/] {impl.key} on {device} in {path}: {summary}")
    return 0
