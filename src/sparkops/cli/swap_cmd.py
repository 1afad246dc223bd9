"""`sparkops swap OP=IMPL [...]`: prove the implementations on this machine, then select them.

Names are validated first; each implementation that is not the reference is checked by the gate on
the chosen device class; registry.toml is rewritten (atomically, comments kept) only when every
check passed. A failing swap leaves the file byte-for-byte unchanged.

`OP@TYPE=IMPL` selects IMPL for the op's calls whose weight has that GGUF type only (ops that allow it:
registry.file.TYPED_OPS), e.g. `linear@Q6_K=cupy_float`: the same proof, written to
[ops.OP.DEVICE.by_type.TYPE]. `OP@TYPE=-` removes that type's selection.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import BadInput, CheckFailed, RegistryError
from ..ops import get_contract
from ..plugins import load_catalog
from ..registry.file import FALLBACKS, TYPE_NAMES, TYPED_OPS, Registry
from ._common import add_json_arg, add_registry_arg, console, emit_json, registry_path, warn_failed_plugins

NAME = "swap"
HELP = "check OP=IMPL on this machine and, if it passes, select it in registry.toml"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help=HELP, description=__doc__)
    p.add_argument("pairs", nargs="+", metavar="OP=IMPL", help="e.g. attention=triton_splitk; OP@TYPE=IMPL for one "
                   "GGUF weight type (linear@Q6_K=cupy_float), OP@TYPE=- to remove it")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="device class to select for (default: cuda for CUDA-only implementations, else cpu)")
    p.add_argument("--fallback", choices=FALLBACKS, default=None, help="set the op's fallback policy too")
    add_registry_arg(p)
    add_json_arg(p)


def parse_pairs(pairs: list[str]) -> list[tuple[str, str, str | None]]:
    """(op, implementation or "-", GGUF type name or None) per OP=IMPL / OP@TYPE=IMPL."""
    out = []
    for pair in pairs:
        target, sep, impl = pair.partition("=")
        op, at, qtype = target.partition("@")
        if not sep or not op or not impl or (at and not qtype):
            raise BadInput(f"'{pair}' is not OP=IMPL or OP@TYPE=IMPL (e.g. attention=triton_splitk, "
                           f"linear@Q6_K=cupy_float)")
        get_contract(op)
        if at:
            if op not in TYPED_OPS:
                raise BadInput(f"'{pair}': {op} cannot be chosen per weight type; the ops that can: "
                               f"{', '.join(TYPED_OPS)}")
            if qtype not in TYPE_NAMES:
                raise BadInput(f"'{pair}': unknown GGUF type '{qtype}'; use one of {', '.join(TYPE_NAMES)}")
        elif impl == "-":
            raise BadInput(f"'{pair}': '-' removes a per-type selection (OP@TYPE=-); an op always has an "
                           f"implementation")
        out.append((op, impl, qtype or None))
    return out


def run(args) -> int:
    pairs = parse_pairs(args.pairs)
    catalog = load_catalog()
    warn_failed_plugins(catalog)
    path = registry_path(args.registry)
    registry = Registry.load(path) if Path(path).exists() else Registry.empty(path)
    removals = [(op, qtype) for op, name, qtype in pairs if name == "-"]
    if removals and not args.device:
        raise BadInput("removing a per-type selection needs --device cpu|cuda (the table it lives in)")
    if args.fallback and all(qtype for _, _, qtype in pairs):
        raise BadInput("--fallback sets the op's policy (OP=IMPL); a per-type selection has none: it runs, or the "
                       "plan refuses")
    # unknown names: exit 2 before anything runs
    impls = [(catalog.get(op, name), qtype) for op, name, qtype in pairs if name != "-"]
    results = []
    for impl, qtype in impls:
        device = args.device or ("cuda" if "cpu" not in impl.devices else "cpu")
        if qtype and device not in impl.devices:
            raise BadInput(f"{impl.key} runs only on {'/'.join(impl.devices)}: a per-type selection runs natively "
                           f"on its device class (no host round trip)")
        if qtype and registry.selection(impl.op, device) is None and \
                not any(i.op == impl.op and t is None for i, t in impls):  # refused before any proof runs
            raise BadInput(f"[ops.{impl.op}.{device}] has no implementation yet in {path}; select one for every type "
                           f"first (sparkops swap {impl.op}=IMPL --device {device}), then {impl.op}@{qtype}=IMPL")
        if device == "cpu" and "cpu" not in impl.devices:
            raise BadInput(f"{impl.key} runs only on {'/'.join(impl.devices)}; pass --device cuda")
        if impl.unavailable:
            raise CheckFailed(f"{impl.key} cannot be checked here: {impl.unavailable}")
        if impl.name == get_contract(impl.op).reference:
            results.append((impl, qtype, device, None, "the reference: the definition needs no check"))
            continue
        from ..gate.check import prove  # the gate: no implementation is selected unproven

        outcome = prove(impl, device, catalog)
        results.append((impl, qtype, device, outcome.record, outcome.summary))
        if not outcome.passed:
            console.print(outcome.report, markup=False)
            raise CheckFailed(f"{impl.key} failed its check on {device}; registry {path} left unchanged")
    try:
        for impl, qtype, device, record, _ in sorted(results, key=lambda r: r[1] is not None):  # ops, then types
            if qtype:
                registry.set_type(impl.op, device, qtype, impl.name, check=record)
            else:
                registry.set(impl.op, device, impl.name, fallback=args.fallback, check=record)
        for op, qtype in removals:
            registry.set_type(op, args.device, qtype, None)
    except RegistryError as exc:
        raise BadInput(f"{exc}; registry {path} left unchanged") from None
    registry.save(path)
    if args.json:
        emit_json([{"op": i.op, "type": t, "impl": i.name, "device": d, "check": s, "record": r}
                   for i, t, d, r, s in results] + [{"op": op, "type": t, "impl": None, "device": args.device}
                                                  for op, t in removals])
    else:
        for impl, qtype, device, _, summary in results:
            what = f"{impl.key} for {qtype} weights" if qtype else impl.key
            console.print(f"[green]selected[/] {what} on {device} in {path}: {summary}")
        for op, qtype in removals:
            console.print(f"removed {op}@{qtype} on {args.device} in {path}: {qtype} weights run the op's selection")
    return 0
