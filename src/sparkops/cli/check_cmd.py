"""`sparkops check`: prove implementations on this machine (the gate), or a whole model under a registry.

    sparkops check OP=IMPL [OP=IMPL ...] [--device cpu|cuda]   # op level: pinned + fresh seeds
    sparkops check OP=IMPL --case T5_D96@1234                   # replay one case (its seed is in its name)
    sparkops check --all [--device cuda] [--write]              # every implementation that can run here
    sparkops check --model k3-nano [--registry R] [--depths 1,63,64,65,129]   # model level

Op level: exit 0 when every implementation passes, 1 when one fails (the report says which case,
the worst element, expected vs got, and how to replay it). With --write, a passing implementation
that the registry currently selects for that device gets its check record refreshed there.
Model level: KL(ref || cand) and top-1 agreement per depth; the verdict is the worst depth's.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..errors import BadInput, CheckFailed, SparkopsError
from ..gate.metrics import show
from ..ops import OP_NAMES, get_contract
from ..plugins import load_catalog
from ..registry.file import Registry
from ._common import add_json_arg, add_registry_arg, console, emit_json, registry_path, warn_failed_plugins

NAME = "check"
HELP = "prove OP=IMPL (or --all) against the reference on this machine, or a model under a registry (--model)"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help=HELP, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pairs", nargs="*", metavar="OP=IMPL", help="implementations to check, e.g. rmsnorm=torch")
    p.add_argument("--all", action="store_true", help="check every implementation that can run on the device")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="device class (default: cpu; cuda for a CUDA-only implementation)")
    p.add_argument("--case", metavar="NAME", help="replay one case by the name a report gave (e.g. T5_D96@1234)")
    p.add_argument("--seed", type=int, action="append", default=[], metavar="N",
                   help="check this seed's cases as well (repeatable); pinned and fresh seeds always run")
    p.add_argument("--write", action="store_true",
                   help="refresh the check record of each passing implementation the registry selects")
    p.add_argument("--model", metavar="MODEL", help="model-level gate: a preset name or a GGUF file")
    p.add_argument("--depths", metavar="D,D,...", help="model gate: checked depths (default: the preset's)")
    p.add_argument("--decode-steps", type=int, default=None, metavar="N",
                   help="model gate: tokens decoded after each prefill (default 3)")
    p.add_argument("--golden-registry", metavar="FILE",
                   help="model gate: judge against this (proven) registry instead of the float64 reference "
                        "(for models too large for NumPy)")
    p.add_argument("--captured", action="store_true",
                   help="model gate: decode through the step generation replays (a CUDA graph on CUDA)")
    p.add_argument("--dtype", default="auto", help="model gate: activation dtype (default auto: bfloat16 when a "
                   "selection claims bf16, else float32; float32 keeps the residual stream in float32 under bf16 ops)")
    p.add_argument("--cache-dtype", default="auto", help="model gate: the MLA cache's dtype (default auto: the "
                   "activation dtype, or float8_e4m3fn where the registry's attention claims fp8_cache); a 16-bit "
                   "cache is judged by the bf16 rule, an fp8 one by the fp8_cache rule")
    p.add_argument("--free-routing", action="store_true",
                   help="model gate: let the candidate's routers choose freely instead of pinning expert choices to "
                        "the golden run's (where a near tie flips, the model's sensitivity then dominates the KL)")
    p.add_argument("--bisect", metavar="BASE",
                   help="model gate: try each op where --registry differs from the BASE registry alone on top of "
                        "BASE, and name the ones that fail")
    p.add_argument("--json-out", metavar="FILE", help="also write the machine-readable result to FILE")
    add_registry_arg(p)
    add_json_arg(p)


def _save_json(args, data) -> None:
    if args.json_out:
        import json

        from ..atomic import write_atomic

        write_atomic(args.json_out, json.dumps(data, indent=2, default=str) + "\n")


def run(args) -> int:
    if args.json_out:  # refused before the work, not after it
        from ..atomic import check_writable

        check_writable(args.json_out, "--json-out")
    if args.model:
        if args.pairs or args.all or args.case:
            raise BadInput("--model checks a whole registry; do not combine it with OP=IMPL, --all or --case")
        return _run_model(args)
    if args.depths or args.golden_registry or args.decode_steps is not None or args.bisect or args.dtype != "auto" \
            or args.cache_dtype != "auto" or args.free_routing:
        raise BadInput("--depths, --decode-steps, --golden-registry, --dtype, --cache-dtype, --free-routing and --bisect "
                       "belong to the model gate; add --model MODEL")
    if bool(args.pairs) == bool(args.all):
        raise BadInput("give OP=IMPL pairs or --all (not both, not neither), e.g. `sparkops check rmsnorm=torch`")
    if args.case and (args.all or len(args.pairs) != 1):
        raise BadInput("--case replays one case of one implementation: `sparkops check OP=IMPL --case NAME`")
    return _run_ops(args)


def _targets(args, catalog) -> tuple[list, list[tuple[str, str]]]:
    """(implementations to check with their device, skipped (key, why))."""
    from .swap_cmd import parse_pairs

    skipped = []
    if args.pairs:
        pairs = parse_pairs(args.pairs)
        if any(name == "-" for _, name, _ in pairs):
            raise BadInput("'-' removes a per-type selection in `sparkops swap`; `check` checks implementations")
        impls = [catalog.get(op, name) for op, name, _ in pairs]  # OP@TYPE=IMPL: the same proof as OP=IMPL
    else:
        impls = []
        device = args.device or "cpu"
        for op in OP_NAMES:
            for name, impl in sorted(catalog.implementations(op).items()):
                if name == get_contract(op).reference:
                    continue
                if impl.unavailable:
                    skipped.append((impl.key, f"unavailable: {impl.unavailable}"))
                elif device not in impl.devices:
                    why = f"runs only on {'/'.join(impl.devices)}; check it with --device {impl.devices[0]}"
                    if device == "cuda":
                        why += " (on a CUDA run it would make a host round trip per call)"
                    skipped.append((impl.key, why))
                else:
                    impls.append(impl)
    out = []
    for impl in impls:
        device = args.device or ("cuda" if "cpu" not in impl.devices else "cpu")
        if impl.name == get_contract(impl.op).reference:
            skipped.append((impl.key, "the reference: the definition needs no check"))
            continue
        out.append((impl, device))
    return out, skipped


def _run_ops(args) -> int:
    from ..gate.cases import PINNED_SEEDS, fresh_seed
    from ..gate.check import Session, prove

    catalog = load_catalog()
    warn_failed_plugins(catalog)
    targets, skipped = _targets(args, catalog)
    if not targets and not skipped:
        raise CheckFailed("nothing to check: no implementation matched")
    session = Session((*PINNED_SEEDS, *args.seed, fresh_seed()))
    outcomes, errors = [], []
    for impl, device in targets:
        try:
            outcomes.append(prove(impl, device, catalog, session=session, case=args.case))
        except SparkopsError as exc:  # one implementation that cannot be checked does not stop the others
            if len(targets) == 1:
                raise
            errors.append((impl.key, str(exc)))
    written = _write_records(args, outcomes) if args.write else []
    results = [{"op": o.impl.op, "impl": o.impl.name, "device": o.device, "passed": o.passed, "cases": o.cases,
                "summary": o.summary, "failures": [f.name for f in o.failures], "report": o.report,
                "record": o.record} for o in outcomes]
    data = {"seeds": list(session.seeds), "skipped": dict(skipped), "errors": dict(errors), "written": written,
            "results": results}
    _save_json(args, data)
    if args.json:
        emit_json(data)
    else:
        _print_table(outcomes, skipped, session.seeds)
        for key, why in errors:
            console.print(f"[red]could not check[/] {escape(key)}: {escape(why)}")
        for o in outcomes:
            if not o.passed:
                console.print(o.report, markup=False)
        for line in written:
            console.print(f"[green]record written[/] {escape(line)}")
    failed = [o.impl.key for o in outcomes if not o.passed] + [key for key, _ in errors]
    if failed:
        raise CheckFailed(f"{len(failed)} of {len(targets)} implementation(s) failed the gate: {', '.join(failed)}")
    if not outcomes:
        raise CheckFailed("0 implementations checked: a check of nothing is a failure (see the skipped list)")
    return 0


def _print_table(outcomes, skipped, seeds) -> None:
    table = Table(title=f"gate (seeds {', '.join(map(str, seeds))})")
    for col in ("op", "implementation", "device", "claim", "cases", "worst metric", "limit", "worst case", "verdict"):
        table.add_column(col)
    for o in outcomes:
        r = o.record
        verdict = "[green]PASS[/]" if o.passed else "[red]FAIL[/]"
        if "replay_of" in r:
            verdict += " (replay)"
        table.add_row(o.impl.op, escape(o.impl.name), o.device, escape(str(o.impl.claim)), str(o.cases),
                      show(r["metric"], r["worst_value"]), f"{r['worst_limit']:.3g}", escape(r["worst_case"]),
                      verdict)
    console.print(table)
    for key, why in skipped:
        console.print(f"[yellow]skipped[/] {escape(key)}: {escape(why)}")


def _write_records(args, outcomes) -> list[str]:
    """Refresh the records of passing implementations the registry currently selects (atomically, once)."""
    path = registry_path(args.registry)
    if not Path(path).exists():
        raise BadInput(f"--write: {path} does not exist; select implementations with `sparkops swap` first")
    registry = Registry.load(path)
    written = []
    for o in outcomes:
        sel = registry.selection(o.impl.op, o.device)
        if o.passed and sel is not None and sel.impl == o.impl.name and "replay_of" not in o.record:
            registry.set(o.impl.op, o.device, o.impl.name, check=o.record)
            written.append(f"{o.impl.key} on {o.device} in {path}")
    if written:
        registry.save(path)
    return written


def _dtype(args, attr: str = "dtype"):
    from ..bench.harness import parse_dtype
    from ..kvcache import parse_cache_dtype

    parse = parse_cache_dtype if attr == "cache_dtype" else parse_dtype
    return parse(getattr(args, attr), "--" + attr.replace("_", "-"))


def _run_bisect(args, registry, golden, device, steps) -> int:
    from ..gate.bisect import bisect_registry
    from ..gate.model_gate import parse_depths

    if args.captured:
        raise BadInput("--bisect runs the eager model gate; drop --captured")
    if not Path(args.bisect).exists():
        raise BadInput(f"--bisect {args.bisect}: no such registry file (the base each selection is tried on)")
    base = Registry.load(args.bisect)
    trials = bisect_registry(args.model, registry, base, device=device, golden=golden,
                             depths=parse_depths(args.depths), decode_steps=steps, dtype=_dtype(args),
                             cache_dtype=_dtype(args, "cache_dtype"), free_routing=args.free_routing)
    if not trials:
        raise BadInput(f"{registry.path} selects nothing different from {base.path} on {device}: nothing to bisect")
    data = [{"op": t.op, "impl": t.impl, "base_impl": t.base_impl, "passed": t.passed, **t.outcome.as_json()}
            for t in trials]
    _save_json(args, data)
    if args.json:
        emit_json(data)
    else:
        table = Table(title=escape(f"bisect: each op of {registry.path} alone on top of {base.path} ({device})"))
        for col in ("op", "candidate", "base", "worst depth", "KL max", "top-1", "verdict"):
            table.add_column(col)
        for t in trials:
            w = t.outcome.worst
            table.add_row(t.op, escape(t.impl), escape(str(t.base_impl)), str(w.depth) if w else "-",
                          f"{w.kl_max:.3g}" if w else "-", f"{w.top1:.3f}" if w else "-",
                          "[green]ok[/]" if t.passed else "[red]FAIL[/]" + (f" ({escape(t.outcome.error)})"
                                                                            if t.outcome.error else ""))
        console.print(table)
    bad = [f"{t.op}={t.impl}" for t in trials if not t.passed]
    if bad:
        raise CheckFailed(f"{len(bad)} of {len(trials)} selection(s) fail the model gate alone: {', '.join(bad)}")
    console.print("every differing selection passes alone: if the whole registry fails, two or more interact")
    return 0


def _run_model(args) -> int:
    from ..gate.model_gate import DECODE_STEPS, model_check, parse_depths

    device = args.device or "cpu"
    path = registry_path(args.registry)
    registry = Registry.load(path)
    golden = Registry.load(args.golden_registry) if args.golden_registry else None
    steps = DECODE_STEPS if args.decode_steps is None else args.decode_steps
    if steps < 0:
        raise BadInput("--decode-steps must be 0 or more")
    if args.bisect:
        return _run_bisect(args, registry, golden, device, steps)
    outcome = model_check(args.model, registry, device=device, depths=parse_depths(args.depths),
                          decode_steps=steps, golden=golden, captured=args.captured, dtype=_dtype(args),
                          cache_dtype=_dtype(args, "cache_dtype"), free_routing=args.free_routing)
    _save_json(args, outcome.as_json())
    if args.json:
        emit_json(outcome.as_json())
    else:
        table = Table(title=escape(f"model gate: {outcome.model} under {outcome.registry} on {device} "
                                   f"({outcome.variant}: {outcome.rule})"))
        for col in ("depth", "positions", "KL max", "KL mean", "top-1", "verdict"):
            table.add_column(col)
        worst = outcome.worst
        for r in outcome.depths:
            mark = "[green]ok[/]" if r.passed else "[red]FAIL[/]"
            if worst is not None and r.depth == worst.depth:
                mark += " (worst)"
            table.add_row(str(r.depth), str(r.positions), f"{r.kl_max:.3g}", f"{r.kl_mean:.3g}", f"{r.top1:.3f}", mark)
        console.print(table)
        for b in outcome.bit_identity:
            mark = "[green]ok[/]" if b.passed else "[red]FAIL[/]"
            console.print(f"bit-identity {b.op}={b.impl} vs {b.target}: {escape(b.detail)} {mark}")
        if outcome.error:
            console.print(f"[red]the candidate failed to run:[/] {escape(outcome.error)}")
        for p in outcome.lock_problems:
            console.print(f"[red]golden run disagrees with reference.lock:[/] {escape(p)} "
                          f"(run `sparkops reference verify`)")
        if "[engine]" in outcome.selections:
            console.print(f"engine: {outcome.selections['[engine]']} (the registry's [engine] options)", markup=False)
        if outcome.routing is not None:
            console.print(outcome.routing.line(), markup=False)
        for u in outcome.unproven:
            console.print(f"[yellow]note:[/] {escape(u)}")
        console.print(outcome.summary, markup=False)
    if not outcome.passed:
        raise CheckFailed(f"the model gate failed: {outcome.summary}")
    return 0
