"""`sparkops bench decode|prefill`: the scoreboard's interleaved A/B harness.

    sparkops bench decode  --model M --depth 0,4096,32768 --tokens 64 [--registry A] [--vs B] [--repeats 7]
    sparkops bench prefill --model M --tokens 32768 [--depth 0] [--chunk 2048] [--registry A] [--vs B]
    ... --peer llama.cpp=/path/to/llama-bench [--peer-args "-fa 1 -ub 2048"]   # the pinned peer, interleaved

The model gate runs first on every registry (same weights, device, dtype); if it fails nothing is
timed, printed or recorded (exit 1). A and B alternate ABAB... in this one process over one weights
object; warm-up rounds are excluded; medians and per-pair ratios are reported. Decode is timed at the
given depths only after the harness has proven the caches hold exactly that many tokens. A prefill figure
stands only if each arm's result does not depend on its chunk: the prompt is prefilled again in chunks of a
size the gate ran and the logits (its last position and 8 decode steps after) must agree by the gate's rule,
else nothing is recorded (exit 1). Every figure
is recorded in bench/ledger.jsonl, offered to the raise-only bench/frontier.toml, and LADDER.md is
re-rendered (--no-record to only print).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from ..errors import BadInput
from ._common import add_json_arg, console, emit_json, err_console, registry_path

NAME = "bench"
HELP = "time decode or prefill, A vs B interleaved, gated first; record to the ledger and the raise-only frontier"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help=HELP, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("phase", choices=("decode", "prefill"), help="what to time")
    p.add_argument("--model", required=True, help="a GGUF file or a preset name (k3-nano is synthesized on first use)")
    p.add_argument("--depth", default=None, metavar="D[,D...]",
                   help="decode: context depth(s) to time at (required); prefill: tokens cached before the prompt "
                        "(default 0)")
    p.add_argument("--tokens", type=int, required=True, metavar="N",
                   help="decode: steps timed per round; prefill: the prompt length")
    p.add_argument("--registry", metavar="A", help="registry of the baseline arm (default: ./registry.toml)")
    p.add_argument("--vs", metavar="B", help="registry of the candidate arm, timed ABAB against A")
    p.add_argument("--repeats", type=int, default=7, help="timed rounds per arm (default %(default)s)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds per arm first (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random prompt and decode tokens")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="device class (default: %(default)s)")
    p.add_argument("--dtype", default="auto", help="activation dtype: auto (the gate's: bfloat16 for a bf16 "
                   "registry, else float32), float32, bfloat16, float16")
    p.add_argument("--chunk", type=int, default=None, help="prefill in chunks of this many tokens (default: the timed "
                   "prefill in one forward; the untimed fills to a depth in chunks of 2048)")
    p.add_argument("--gate-depths", metavar="D,D,...", help="depths the model gate checks (default: the preset's "
                   "or reference.lock's)")
    p.add_argument("--gate-golden", metavar="FILE", help="judge the gate against this proven registry instead of the "
                   "float64 reference (for models too large for NumPy)")
    p.add_argument("--peer", metavar="llama.cpp=PATH", help="run your llama-bench at the same depths, interleaved")
    p.add_argument("--peer-args", metavar="ARGS", help='extra llama-bench arguments, e.g. "-fa 1 -ub 2048 -ngl 99"')
    p.add_argument("--graph", metavar="A|B|A,B", help="decode these arms through one captured CUDA graph per "
                   "step (teacher-forced like the eager arm); e.g. --registry R --vs R --graph B times graph vs eager")
    p.add_argument("--cache-dtype", default="auto", help="the MLA cache's dtype: auto (the activation dtype, or "
                   "float8_e4m3fn where the registry's attention claims fp8_cache), float32 or bfloat16 (half the cache "
                   "bytes read per token; the gate then judges by the bf16 rule), float8_e4m3fn (a quarter; an "
                   "attention proven on fp8 caches, judged by the fp8_cache rule, its figures their own frontier "
                   "workload); per arm as A=float32,B=bfloat16 to time the cache dtype itself")
    p.add_argument("--fill-registry", metavar="F", help="prefill the context to each depth once with this registry "
                   "(gated like the arms) and give every arm a copy of that state, instead of each arm prefilling "
                   "it: for a baseline too slow to prefill 131072 tokens itself")
    p.add_argument("--change", metavar="TEXT", help="what changed, for the ledger (default: the registries)")
    p.add_argument("--prediction", metavar="DIAG.json", action="append", help="the baseline's diagnosis "
                   "(decode: `sparkops diagnose --registry A --json-out DIAG.json` at the same depths; repeat it for depths "
                   "diagnosed in separate files; prefill: `diagnose --prefill-chunk N` with N the bench's --chunk, its "
                   "chunks at the diagnosed depths standing for the prompt's); each row records its binding ceiling and "
                   "predicted gain beside the measured ratio")
    p.add_argument("--expect", metavar="OP=FACTOR[,...]", help="with --prediction: what the change does per op "
                   "(its speed-up, e.g. attention=1.66 from a per-op benchmark; OP@DEPTH=FACTOR for one depth; "
                   "OP@TYPE=FACTOR for the calls on one weight type, e.g. linear@Q6_K=2.4); the "
                   "row also records the step's gain this implies on the diagnosed per-op times")
    p.add_argument("--forecast", metavar="FORECAST.json", help="a forecast of the change from the baseline's "
                   "step timeline (bench/probes/critical_path.py TIMELINE --json with the change's what-ifs), kept in "
                   "the row of the timeline's depth beside the measured ratio; like --prediction, never a figure")
    p.add_argument("--changes", metavar="OP[,OP]", help="the ops (or 'engine') B's registry changes from A's: "
                   "bench refuses to run when the registries differ in anything else, or not in these")
    p.add_argument("--reuse-gate", action="store_true", help="reuse a passing model-gate verdict made on this "
                   "machine for exactly the same inputs (model file, registry and golden bytes, gate depths, dtypes, "
                   "device, torch and the code of sparkops and of every implementation run); the row records it. "
                   "Without it every arm is gated afresh")
    p.add_argument("--no-record", action="store_true", help="print only; write nothing under bench/")
    p.add_argument("--bench-dir", metavar="DIR", help="the scoreboard directory (default: the checkout's bench/)")
    add_json_arg(p)


def parse_depths(text: str | None, phase: str) -> tuple[int, ...]:
    if text is None:
        if phase == "decode":
            raise BadInput("bench decode needs --depth D[,D...]: the context depth is always explicit "
                           "(e.g. --depth 0,4096,32768,131072)")
        return (0,)
    try:
        depths = tuple(int(x) for x in text.replace(",", " ").split())
    except ValueError:
        raise BadInput(f"--depth '{text}': give integers, e.g. --depth 0,4096,32768") from None
    if not depths or any(d < 0 for d in depths):
        raise BadInput(f"--depth '{text}': depths must be >= 0")
    return depths


#: the fewest ABAB pairs whose sign test can reach p < 0.05 (all 6 agreeing: p = 2/64)
MIN_PAIRS_FOR_A_TIER = 6


def _record_refusal(req, weights, refused, command, args) -> None:
    """A refused gate or chunk proof goes on record (a ledger row without any figure), then the refusal stands."""
    from ..bench import provenance
    from ..bench.harness import model_info
    from ..bench.record import record_refusal, refusal_row

    row = record_refusal(refusal_row(req, model_info(weights, args.model), provenance.environment(req.device), refused,
                                     command, args.change), args.bench_dir)
    err_console.print(f"recorded the refusal as ledger row {row['id']} (no figure)")


def parse_cache_dtype(text: str | None):
    """'auto' -> None; 'bfloat16' -> one dtype for every arm; 'A=float32,B=bfloat16' -> per arm (kvcache.py's names:
    float8_e4m3fn too)."""
    from .. import kvcache

    if not text or "=" not in text:
        return kvcache.parse_cache_dtype(text, "--cache-dtype")
    out = {}
    for part in text.replace(" ", "").split(","):
        label, _, name = part.partition("=")
        if label.upper() not in ("A", "B") or not name:
            raise BadInput(f"--cache-dtype '{text}': give one dtype, or arms and dtypes like A=float32,B=bfloat16")
        out[label.upper()] = kvcache.parse_cache_dtype(name, "--cache-dtype")
    return out


def parse_graph(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    labels = tuple(sorted({x.strip().upper() for x in text.replace(",", " ").split()}))
    bad = [x for x in labels if x not in ("A", "B")]
    if bad:
        raise BadInput(f"--graph '{text}': name arms A and/or B, e.g. --graph B")
    return labels


def load_weights(spec: str):
    """The model to time (tests replace this to avoid synthesizing files)."""
    from ..engine import load_model

    return load_model(spec, progress=True)


def gguf_path(spec: str, weights) -> Path | None:
    """The GGUF file the weights came from (the peer must run the same file), or None."""
    p = Path(str(weights.metadata.get("path") or ""))
    if p.suffix == ".gguf" and p.exists():
        return p
    p = Path(spec)
    return p if p.suffix == ".gguf" and p.exists() else None


def run(args) -> int:
    from ..bench.chunking import ChunkDependence
    from ..bench.gating import GateRefused
    from ..bench import peer as peer_mod
    from ..bench.harness import BenchRequest, parse_dtype, run_bench
    from ..bench.provenance import command_line
    from ..gate.model_gate import parse_depths as gate_depths

    depths = parse_depths(args.depth, args.phase)
    regs = [("A", registry_path(args.registry))] + ([("B", Path(args.vs))] if args.vs else [])
    for label, path in regs + ([("fill", Path(args.fill_registry))] if args.fill_registry else []):
        if not Path(path).exists():
            raise BadInput(f"registry {label}: {path}: no such file")
    spec = peer_mod.parse_peer_arg(args.peer, args.peer_args) if args.peer else None
    predictions = None
    forecast = None
    if getattr(args, "forecast", None):
        from ..bench import prediction

        forecast = prediction.load_forecast(args.forecast)  # read and checked before any weight is loaded
    if args.expect and not args.prediction:
        raise BadInput("--expect needs --prediction DIAG.json: the per-op times it applies to come from the "
                       "baseline's diagnosis")
    if args.prediction:
        from ..bench import prediction

        # read and checked before any weight is loaded
        if args.phase == "prefill":  # a prefill diagnosis (diagnose --prefill-chunk) of the baseline's chunks
            predictions = prediction.load_prefill(args.prediction, depths, args.chunk, args.expect)
        else:
            predictions = prediction.load(args.prediction, depths, args.expect)
            prediction.check_step_times(predictions, "graph" if "A" in parse_graph(args.graph) else "eager")
    weights = load_weights(args.model)
    req = BenchRequest(phase=args.phase, depths=depths, tokens=args.tokens, registries=regs, repeats=args.repeats,
                       warmup=args.warmup, seed=args.seed, device=args.device, dtype=parse_dtype(args.dtype),
                       chunk=args.chunk, gate_depths=gate_depths(args.gate_depths),
                       gate_golden=Path(args.gate_golden) if args.gate_golden else None, peer=spec,
                       peer_gguf=gguf_path(args.model, weights) if spec else None,
                       graph=parse_graph(args.graph),
                       fill_registry=Path(args.fill_registry) if args.fill_registry else None,
                       cache_dtype=parse_cache_dtype(args.cache_dtype), reuse_gates=args.reuse_gate)
    if len(regs) == 2:
        from ..bench import registry_diff as rd

        diff = rd.differences(regs[0][1], regs[1][1], "cuda" if args.device.startswith("cuda") else "cpu")
        if args.changes:
            rd.expect_changes(diff, args.changes, regs[0][1], regs[1][1])
        err_console.print(f"B differs from A in: {rd.describe(diff)}")
    elif args.changes:
        raise BadInput("--changes needs two arms (--registry A --vs B)")
    if args.reuse_gate and gguf_path(args.model, weights) is None:
        err_console.print("--reuse-gate: these weights do not come from a GGUF file, so nothing pins what a kept "
                          "verdict judged; every gate runs")
    command = command_line(canonical_argv(args))
    try:
        bench_run = run_bench(req, weights, command=command, source=args.model)
    except (GateRefused, ChunkDependence) as refused:
        if not args.no_record:
            _record_refusal(req, weights, refused, command, args)
        raise
    rows = []
    if not args.no_record:
        from ..bench.record import record_run

        rows = record_run(bench_run, args.bench_dir, args.change, predictions=predictions, forecast=forecast)
    if args.json:
        emit_json({"model": bench_run.model, "env": bench_run.env, "ceilings": bench_run.ceilings.as_dict(),
                   "gates": {k: g.as_dict() for k, g in bench_run.gates.items()},
                   "points": [_point_json(p) for p in bench_run.points], "rows": [r["id"] for r in rows]})
        return 0
    _print(bench_run, rows)
    return 0


#: (option, attribute) in the order the canonical command spells them
_OPTIONS = (("--model", "model"), ("--depth", "depth"), ("--tokens", "tokens"), ("--registry", "registry"),
            ("--vs", "vs"), ("--repeats", "repeats"), ("--warmup", "warmup"), ("--seed", "seed"),
            ("--device", "device"), ("--dtype", "dtype"), ("--cache-dtype", "cache_dtype"), ("--chunk", "chunk"),
            ("--gate-depths", "gate_depths"),
            ("--gate-golden", "gate_golden"), ("--graph", "graph"), ("--fill-registry", "fill_registry"),
            ("--peer", "peer"), ("--peer-args", "peer_args"), ("--prediction", "prediction"), ("--expect", "expect"),
            ("--forecast", "forecast"), ("--changes", "changes"))


def canonical_argv(args) -> list[str]:
    """The run's command with every setting spelled out (defaults included), so it can be rerun as is."""
    argv = [NAME, args.phase]
    for opt, attr in _OPTIONS:
        v = getattr(args, attr, None)
        for one in (v if isinstance(v, list) else [] if v is None else [v]):  # a repeatable option, each time
            argv += [opt, str(one)]
    if getattr(args, "reuse_gate", False):
        argv.append("--reuse-gate")
    return argv


def _point_json(p) -> dict:
    return {"phase": p.phase, "depth": p.depth, "tokens": p.tokens, "order": p.order, "warmup_order": p.warmup_order,
            "ratios": p.ratios, "tier": p.tier, "peer_rates": p.peer_rates,
            "arms": {k: {"registry": a.registry, "mode": a.mode, "dtype": a.dtype, "rates": a.rates, "median": a.median,
                         "roofline": a.roofline, "proof": a.proof,
                         **({"chunking": a.chunking} if a.chunking else {})} for k, a in p.arms.items()}}


def _print(run, rows) -> None:
    from ..bench.chunking import ChunkProof
    from ..bench.record import how_run

    env = run.env
    console.print(f"[bold]{run.model['name']}[/] ({run.model['mix']}) on {env['device_name']}; clocks: "
                  f"{_clocks(env['clocks'])}; torch {env['versions'].get('torch')}; commit "
                  f"{str(env.get('commit'))[:10]}{'+dirty' if env.get('dirty') else ''}")
    for label, g in run.gates.items():
        reused = g.details.get("reused")
        console.print(f"gate {label}: {g.summary}" + (f" (reused: gated at {reused['gated_at']} on the same inputs, "
                                                      f"--reuse-gate)" if reused else ""))
    c = run.ceilings
    console.print(f"ceilings measured here: read {c.read_bandwidth / 1e9:.4g} GB/s, matmul "
                  f"{c.matmul_flops / 1e12:.4g} TFLOP/s ({c.matmul_dtype})" + (f"; {c.note}" if c.note else ""))
    by_point = {}
    for r in rows:
        if r["kind"] == "measurement":
            by_point[(r["depth"], r["tokens"])] = r
    table = Table(title=f"{run.request.phase}: medians of {run.request.repeats} rounds, ABAB, warm-up excluded")
    for col in ("point", "arm", "registry", "tok/s", "IQR", "roofline", "B/A: median (min..max)", "tier",
                "frontier"):
        table.add_column(col)
    for p in run.points:
        row = by_point.get((p.depth, p.tokens), {})
        for label, a in p.arms.items():
            s = a.spread
            ratios = p.ratios
            point = f"d={p.depth}+{p.tokens}" if p.phase == "decode" else \
                f"T={p.tokens}" + (f"@d={p.depth}" if p.depth else "")
            table.add_row(point if label == "A" else "", label,
                          how_run(a.registry, a.mode), f"{a.median:.4g}",
                          f"{s.lo:.4g}..{s.hi:.4g}", f"{100 * a.roofline.get('fraction', 0):.2f}%",
                          (f"{sorted(ratios)[len(ratios) // 2]:.3f} ({min(ratios):.3f}..{max(ratios):.3f})"
                           if ratios and label == "B" else ""),
                          (p.tier or row.get("tier", "")) if label == ("B" if "B" in p.arms else "A") else "",
                          str((row.get("frontier") or {}).get(label, "not recorded")))
        if p.peer_rates:
            med = sorted(p.peer_rates)[len(p.peer_rates) // 2]
            table.add_row("", "peer", run.request.peer.name, f"{med:.4g}", "", "", "", "", "")
    console.print(table)
    console.print("d=D+N: N decode steps timed from a verified context of D tokens; tok/s: median of the rounds; "
                  "roofline: share of the measured ceiling")
    for p in run.points:
        for label, a in p.arms.items():
            if a.chunking:
                console.print(f"{label}: {ChunkProof(**a.chunking).line()}")
    for line in passed_lines(run.points):
        console.print(line)
    pairs = run.request.repeats
    if len(run.request.registries) == 2 and pairs < MIN_PAIRS_FOR_A_TIER:
        console.print(f"[yellow]note:[/] {pairs} pairs can never pass the sign test (p < 0.05 needs at least "
                      f"{MIN_PAIRS_FOR_A_TIER} pairs agreeing): the tier is 'none' whatever the ratio; use --repeats "
                      f"{MIN_PAIRS_FOR_A_TIER} or more")
    if any(v == "unsteady" for r in rows for v in (r.get("frontier") or {}).values()):
        from ..bench.record import FRONTIER_MAX_SPREAD

        console.print(f"[yellow]note:[/] unsteady: the figure's rounds spread (IQR over median) beyond "
                      f"{100 * FRONTIER_MAX_SPREAD:.0f}%, so it is recorded but moves no frontier; quiet the "
                      f"machine or raise --repeats")
    if rows:
        console.print(f"recorded {len(rows)} ledger row(s): {', '.join(r['id'] for r in rows)}")


def passed_lines(points) -> list[str]:
    """The calls each arm's implementations handed on by their stated policies (ArmFigures.passed), once per arm and
    hand-off: what was timed includes them, so a person reading the figure must see them."""
    seen: dict[tuple[str, str], list[str]] = {}
    for p in points:
        unit = "a step" if p.phase == "decode" else "a timed prefill"
        for label, a in p.arms.items():
            for what, n in a.passed.items():
                seen.setdefault((label, f"{what}: {n:g} call(s) {unit}"), []).append(p.where)
    return [f"[yellow]stated policy:[/] {label}: {what} (at {', '.join(where)})"
            for (label, what), where in seen.items()]


def _clocks(c: dict) -> str:
    if c.get("query") != "nvidia-smi":
        return c.get("query", "unknown")
    return f"SM {c.get('clocks.sm')} / max {c.get('clocks.max.sm')}, mem {c.get('clocks.mem')}, {c.get('power.draw')}"
