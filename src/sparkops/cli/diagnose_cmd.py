"""`sparkops diagnose`: bytes and FLOPs per token, the measured ceilings, and which one binds.

    sparkops diagnose --model k3-nano --depth 128                        # measured on this machine
    sparkops diagnose --model FILE.gguf --depth 32768 --device cuda      # a real step on the GPU
    sparkops diagnose --model k3-2.8t --depth 131072 --paper --gpus 8   # on paper, no weights at all
    sparkops diagnose --model FILE.gguf --depth 28672 --prefill-chunk 4096 --device cuda   # one prefill chunk

Measured: bandwidth (a large sum and copy), matmul rate, launch latency (eager; CUDA graph replay on a
GPU), kernels per token (torch.profiler on CUDA, op calls on the CPU), device-busy vs wall time; the
binding ceiling (launch overhead, occupancy, bandwidth/compute, collectives) with the predicted gain
of lifting it. On paper (--paper): the anchors' H200 ceilings, scaled by --gpus (collectives ignored).
Draws the roofline with the points (PNG) and re-renders the ladder plot from the ledger.
With --prefill-chunk C: one prefill chunk of C tokens after each depth instead of a decode step: its time per
op, each FLOP class's achieved rate against the matmul ceiling, and what binds (bench/diagnose_prefill.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..errors import BadInput
from ._common import add_json_arg, add_registry_arg, console, emit_json, err_console, registry_path

NAME = "diagnose"
HELP = "bytes/FLOPs per token, measured bandwidth and launch cost, kernels per token, the binding ceiling"

#: the quant mix a preset is diagnosed at on paper unless --mix says otherwise
PAPER_MIX = {"k3-2.8t": "ud_iq1_s", "k3-nano": "f32"}


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help=HELP, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a GGUF file or a preset name")
    p.add_argument("--depth", required=True, metavar="D[,D...]",
                   help="context depth(s) of the decode step diagnosed; several share one load of the weights")
    p.add_argument("--paper", action="store_true", help="no weights, no device: the config and quant mix only")
    p.add_argument("--mix", help="quant mix on paper (default: the file's, else ud_iq1_s for k3-2.8t, f32 for "
                   "k3-nano, q4_k_m otherwise)")
    p.add_argument("--gpus", type=int, default=1, help="on paper: devices in perfect tensor parallel (default 1)")
    p.add_argument("--prefill-tokens", type=int, default=32768,
                   help="prompt length of the prefill cost (default 32768)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="device class (default: %(default)s)")
    p.add_argument("--dtype", default="auto", help="activation dtype (default: the registry's gate dtype)")
    p.add_argument("--steps", type=int, default=8, help="decode steps profiled (default %(default)s; a prefill "
                   "diagnosis times its one chunk instead)")
    p.add_argument("--prefill-chunk", type=int, metavar="C", help="diagnose one prefill chunk of C new tokens after "
                   "each depth instead of a decode step (measured only; printed, --json-out, a PNG per depth)")
    p.add_argument("--worlds", metavar="N,N,...", help="also measure a sharded decode step on these world sizes "
                   "(e.g. 1,2,4): the collective share of the step and the Amdahl crossover, from measured numbers")
    p.add_argument("--cache-dtype", default="auto", help="the MLA cache's dtype (default auto: the "
                   "activation dtype, or float8_e4m3fn where the registry's attention claims fp8_cache)")
    p.add_argument("--fill-registry", metavar="F", help="prefill the context with this registry and copy its "
                   "state into the diagnosed engine (for registries that prefill slowly)")
    p.add_argument("--out", metavar="DIR", help="where the PNGs go (default: the checkout's bench/)")
    p.add_argument("--json-out", metavar="FILE", help="also write the diagnoses to FILE: what `sparkops bench "
                   "--prediction FILE` records beside the measured outcome of the next change")
    p.add_argument("--record", action="store_true", help="append one ledger row per depth (binding ceiling, "
                   "predicted gain, the profiled figures) and re-render LADDER.md")
    p.add_argument("--bench-dir", metavar="DIR", help="with --record: the scoreboard directory (default: the "
                   "checkout's bench/)")
    add_registry_arg(p)
    add_json_arg(p)


def load_weights(spec: str):
    from ..engine import load_model

    return load_model(spec, progress=True)


def _paper(args):
    from ..bench import diagnose as D
    from ..config import load_preset, preset_names

    path = Path(args.model)
    if path.suffix == ".gguf" or path.exists():
        from ..gguf.reader import read_config

        config = read_config(path)
        mix = args.mix or "q4_k_m"
    elif args.model in preset_names():
        config = load_preset(args.model)
        mix = args.mix or PAPER_MIX.get(args.model, "q4_k_m")
    else:
        raise BadInput(f"--model {args.model}: neither a GGUF file nor a preset ({', '.join(preset_names())})")
    from ..gguf.mix import get_mix

    get_mix(mix)
    return D.on_paper(config, mix, args.depth, prefill_tokens=args.prefill_tokens, gpus=args.gpus)


def run(args) -> int:
    if args.json_out:  # refused before the measurement, not after it
        from ..atomic import check_writable

        check_writable(args.json_out, "--json-out")
    from ..bench import diagnose as D
    from ..bench.ledger import bench_dir
    from ..kvcache import parse_cache_dtype

    from .bench_cmd import parse_depths

    depths = parse_depths(args.depth, "decode")
    if args.fill_registry and not Path(args.fill_registry).exists():
        raise BadInput(f"--fill-registry {args.fill_registry}: no such registry file")
    if args.gpus < 1 or args.steps < 1 or args.prefill_tokens < 1:
        raise BadInput("need --gpus >= 1, --steps >= 1, --prefill-tokens >= 1")
    out = Path(args.out) if args.out else bench_dir()
    if args.prefill_chunk is not None:
        return _prefill(args, depths, out)
    results = []
    if args.paper:
        for depth in depths:
            args.depth = depth
            results.append(_paper(args))
    else:
        if args.gpus != 1:
            raise BadInput("--gpus applies on paper only (add --paper); a measured diagnosis uses one device")
        reg, dtype, weights = _measuring(args)
        for depth in depths:
            d = D.measured(weights, reg, depth, device=args.device, dtype=dtype, steps=args.steps,
                           prefill_tokens=args.prefill_tokens, fill_registry=args.fill_registry,
                           cache_dtype=parse_cache_dtype(args.cache_dtype))
            if args.worlds:
                args.depth = depth
                _collectives(d, args, reg)
            results.append(d)
    drawn = [(d, _draw(d, out)) for d in results]
    from ..bench.provenance import now

    docs = [{**d.as_dict(), "registry": None if args.paper else str(registry_path(args.registry)), "date": now(),
             "pngs": [str(p) for p in pngs]} for d, pngs in drawn]
    if args.json_out:
        import json

        from ..atomic import write_atomic

        write_atomic(args.json_out, json.dumps(docs, indent=1, default=str) + "\n")
    if args.record:
        from ..bench.diagnosis_rows import record
        from ..bench.provenance import command_line, environment

        rows = record(docs, command_line(getattr(args, "_argv", None)), environment(args.device), args.bench_dir)
        if not args.json:
            console.print(f"recorded {len(rows)} diagnosis row(s): {', '.join(r['id'] for r in rows)}")
    if args.json:
        emit_json(docs[0] if len(docs) == 1 else docs)
        return 0
    for d, pngs in drawn:
        _print(d, pngs)
    return 0


def _measuring(args):
    """(registry path, activation dtype, the weights on the device, moved once for every depth) of a measured run."""
    from ..bench.gating import default_dtype
    from ..bench.harness import parse_dtype

    reg = registry_path(args.registry)
    dtype = parse_dtype(args.dtype) or default_dtype(reg, args.device)
    weights = load_weights(args.model)
    if weights.embed.device.type != args.device:
        weights = weights.to(args.device)
    return reg, dtype, weights


def _prefill(args, depths, out: Path) -> int:
    """--prefill-chunk: one measured prefill chunk per depth (bench/diagnose_prefill.py)."""
    if args.prefill_chunk < 1:
        raise BadInput(f"--prefill-chunk must be at least 1 (got {args.prefill_chunk})")
    for flag, given in (("--paper", args.paper), ("--record", args.record), ("--worlds", args.worlds),
                        ("--gpus", args.gpus != 1)):
        if given:
            raise BadInput(f"{flag} does not apply with --prefill-chunk: a prefill chunk is diagnosed measured, on one "
                           f"device, printed and written with --json-out (its ledger rows come from `sparkops bench "
                           f"prefill`); drop {flag}")
    from ..bench import diagnose_prefill as P
    from ..bench.provenance import now
    from ..kvcache import parse_cache_dtype

    reg, dtype, weights = _measuring(args)
    docs = []
    for depth in depths:
        d = P.measured(weights, reg, depth, args.prefill_chunk, device=args.device, dtype=dtype,
                       fill_registry=args.fill_registry, cache_dtype=parse_cache_dtype(args.cache_dtype))
        pngs = _draw_ops(d, out)
        docs.append({**d.as_dict(), "registry": str(reg), "date": now(), "pngs": [str(p) for p in pngs]})
        if not args.json:
            _print_prefill(d, pngs)
    if args.json_out:
        import json

        from ..atomic import write_atomic

        write_atomic(args.json_out, json.dumps(docs, indent=1, default=str) + "\n")
    if args.json:
        emit_json(docs[0] if len(docs) == 1 else docs)
    return 0


def _plots():
    """bench.plots, or None (said once per call) where matplotlib is not installed."""
    try:
        from ..bench import plots
    except ImportError:
        console.print("[yellow]matplotlib is not installed: no PNGs drawn[/] (pip install matplotlib)")
        return None
    return plots


def _draw_ops(d, out: Path) -> list[Path]:
    plots = _plots()
    if plots is None:
        return []
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"diagnose-prefill-{d.model}-{d.mix}-c{d.chunk}-d{d.depth}.png"
    plots.ops_png(d.by_op, path, f"{d.model} ({d.mix}): one prefill chunk of {d.chunk} tokens after {d.depth}, "
                                 f"{d.tok_s:.4g} tok/s on {d.ceilings.device}")
    return [path]


def _warn_above_roofline(fraction: float) -> None:
    """A measurement above 100% of its roofline is impossible: the cost model's floor or the timing is wrong (session
    11's prefill diagnosis printed 120%: every query was charged every earlier cache row). Said in red, never
    silently; the per-op times stand, the roofline share and the binding verdict do not."""
    if fraction > 1.0:
        err_console.print(f"[red]above the roofline ({100 * fraction:.0f}%):[/] no engine beats its ceiling, so the "
                          f"cost model's floor (bench/costs.py) or this timing is wrong; the per-op times stand, the "
                          f"roofline share and the binding ceiling do not")


def _print_prefill(d, pngs) -> None:
    c, v = d.ceilings, d.verdict
    console.print(f"[bold]{d.model}[/] ({d.mix}) prefill: one chunk of {d.chunk} tokens after {d.depth} on {c.device}")
    console.print(f"ceilings: matmul {c.matmul_flops / 1e12:.4g} TFLOP/s ({c.matmul_dtype}), read "
                  f"{c.read_bandwidth / 1e9:.4g} GB/s; the chunk's floor: compute {1e3 * v['time_compute_s']:.3g} ms, "
                  f"bandwidth {1e3 * v['time_bandwidth_s']:.3g} ms ({v['roofline_tok_s']:.4g} tok/s)")
    console.print(f"measured: {d.tok_s:.4g} tok/s ({1e3 * d.wall_s:.4g} ms per chunk, "
                  f"{100 * v['fraction_of_roofline']:.2g}% of the roofline); {d.kernels:.4g} kernels per chunk; busy "
                  f"{1e3 * d.busy_s:.4g} ms ({100 * v['busy_fraction']:.0f}%)")
    _warn_above_roofline(v['fraction_of_roofline'])
    ops = Table(title=f"per op, per chunk ({d.how})")
    for col in ("op", "calls", "ms", "share of busy"):
        ops.add_column(col)
    for op, x in op_rows(d.by_op):
        ops.add_row(op, f"{x['calls']:.3g}", f"{1e3 * x['seconds']:.4g}",
                    f"{100 * x['seconds'] / d.busy_s:.0f}%" if d.busy_s else "")
    console.print(ops)
    print_kernels(d.by_kernel, d.busy_s, "chunk")
    classes = Table(title="FLOPs the cost model counts, by the ops that do them")
    for col in ("class", "ops", "GFLOP", "ms", "TFLOP/s", "of the matmul ceiling"):
        classes.add_column(col)
    for cls, x in v["flop_classes"].items():
        classes.add_row(cls, "/".join(x["ops"]), _g(x["flops"] / 1e9), _g(1e3 * x["seconds"]),
                        _g(x["flops_per_s"] / 1e12), f"{100 * x['share_of_matmul_ceiling']:.2g}%")
    console.print(classes)
    console.print(f"[bold]binding: {v['binding']}[/]; predicted gain of lifting it: {v['predicted_gain']:.3g}x")
    console.print(v["why"])
    for p in pngs:
        console.print(f"wrote {p}")


def _collectives(d, args, reg) -> None:
    """Measure the sharded step on each world size; the collective share and Amdahl crossover join the verdict."""
    from ..parallel.amdahl import collectives_verdict
    from ..parallel.scaling import diagnose_collectives

    try:
        worlds = tuple(sorted({1, *(int(w) for w in args.worlds.split(","))}))
    except ValueError:
        raise BadInput(f"--worlds must be comma-separated integers, got {args.worlds!r}") from None
    if worlds[0] < 1:
        raise BadInput("--worlds must be positive")
    rep = diagnose_collectives(args.model, worlds=worlds, depth=args.depth, steps=args.steps, device=args.device,
                               registry=str(reg), mix=d.mix)
    coll = rep["collectives"]
    v = collectives_verdict(coll)
    d.verdict.update(collectives=v["why"], collective_share=coll["collective_share"], amdahl=coll.get("amdahl"))
    if v["binding"]:
        d.verdict.update(binding="collectives", predicted_gain=v["predicted_gain"], why=v["why"])


def _draw(d, out: Path) -> list[Path]:
    plots = _plots()
    if plots is None:
        return []
    from ..bench import diagnose as D
    from ..bench import ledger as L

    out.mkdir(parents=True, exist_ok=True)
    roof = out / f"diagnose-{d.model}-{d.mix}-d{d.depth}{'-paper' if d.paper else ''}.png"
    plots.roofline_png(D.roofline_points(d), d.ceilings, roof,
                       f"{d.model} ({d.mix}) decode at depth {d.depth} on {d.ceilings.device}")
    drawn = [roof]
    rows = L.read(L.bench_dir() / L.LEDGER)
    if rows and plots.ladder_png(rows, out / "ladder.png"):
        drawn.append(out / "ladder.png")
    return drawn


def print_kernels(by_kernel: dict, busy_s: float, per: str) -> None:
    """The kernels that took the most device time (CUDA), by name: where inside an op the time goes."""
    if not by_kernel:
        return
    t = Table(title=f"the kernels with the most device time, per {per}")
    for col in ("kernel", "launches", "us", "share of busy"):
        t.add_column(col)
    for name, x in by_kernel.items():
        t.add_row(escape(name), f"{x['launches']:.3g}", f"{1e6 * x['seconds']:.4g}",
                  f"{100 * x['seconds'] / busy_s:.0f}%" if busy_s else "")
    console.print(t)


def op_rows(by_op: dict) -> list[tuple[str, dict]]:
    """The per-op table's rows: each op, then (indented) its share by weight type where it has one (linear@Q6_K:
    what a per-type selection acts on)."""
    rows = []
    for op, x in by_op.items():
        rows.append((op, x))
        rows += [(f"  {op}@{qtype}", y) for qtype, y in (x.get("by_type") or {}).items()]
    return rows


def _g(x: float, unit: str = "") -> str:
    return f"{x:.4g}{unit}"


def _print(d, pngs) -> None:
    c, v = d.ceilings, d.verdict
    console.print(f"[bold]{d.model}[/] ({d.mix}) decode at depth {d.depth} on {c.device}"
                  f"{' - ON PAPER' if d.paper else ''}; weights {d.memory_bytes / 2**30:.4g} GiB")
    t = Table(title="per token")
    for col in ("", "decode", f"prefill ({d.prefill.tokens}-token prompt)"):
        t.add_column(col)
    t.add_row("GFLOP", _g(d.decode.flops / 1e9), _g(d.prefill.flops / 1e9))
    for k in sorted(set(d.decode.flops_by_class) | set(d.prefill.flops_by_class)):
        t.add_row(f"  {k}", _g(d.decode.flops_by_class.get(k, 0) / 1e9), _g(d.prefill.flops_by_class.get(k, 0) / 1e9))
    t.add_row("MB moved", _g(d.decode.bytes / 1e6), _g(d.prefill.bytes / 1e6))
    for k in sorted(set(d.decode.bytes_by_class) | set(d.prefill.bytes_by_class)):
        t.add_row(f"  {k}", _g(d.decode.bytes_by_class.get(k, 0) / 1e6), _g(d.prefill.bytes_by_class.get(k, 0) / 1e6))
    t.add_row("FLOP/byte", _g(d.decode.intensity), _g(d.prefill.intensity))
    console.print(t)
    launch = f"{1e6 * c.launch_eager_s:.3g} us eager" if c.launch_eager_s else "n/a"
    if c.launch_graph_s:
        launch += f", {1e6 * c.launch_graph_s:.3g} us in a CUDA graph"
    console.print(f"ceilings: read {c.read_bandwidth / 1e9:.4g} GB/s, copy {c.copy_bandwidth / 1e9:.4g} GB/s, matmul "
                  f"{c.matmul_flops / 1e12:.4g} TFLOP/s ({c.matmul_dtype}), launch {launch}; collectives: "
                  f"{v['collectives']}")
    console.print(f"roofline: {v['roofline_tok_s']:.4g} tok/s ({v['roofline_bound']}-bound: bandwidth floor "
                  f"{1e3 * v['time_bandwidth_s']:.3g} ms, compute floor {1e3 * v['time_compute_s']:.3g} ms)")
    if d.profile is not None:
        p = d.profile
        console.print(f"measured: {1 / p.wall_s:.4g} tok/s ({1e3 * p.wall_s:.3g} ms/token, "
                      f"{100 * v['fraction_of_roofline']:.2f}% of the roofline); {p.kernels} kernels per token; busy "
                      f"{1e3 * p.busy_s:.3g} ms of {1e3 * p.wall_s:.3g} ms ({100 * p.busy_fraction:.0f}%); "
                      f"launch bill eager ~{1e3 * v['launch_eager_s']:.3g} ms")
        _warn_above_roofline(v['fraction_of_roofline'])
        ops = Table(title=f"per op, per token ({p.how})")
        kernels = any("kernels" in x for x in p.by_op.values())
        for col in ("op", "calls") + (("kernels",) if kernels else ()) + ("ms", "share of busy"):
            ops.add_column(col)
        for op, x in op_rows(p.by_op):
            ops.add_row(op, f"{x['calls']:.3g}", *((f"{x.get('kernels', 0):.3g}",) if kernels else ()),
                        f"{1e3 * x['seconds']:.3g}", f"{100 * x['seconds'] / p.busy_s:.0f}%" if p.busy_s else "")
        console.print(ops)
        if kernels:
            glue = p.kernels - sum(x.get("kernels", 0) for x in p.by_op.values())
            console.print(f"kernels outside the ops (the graph's own copies, casts, concatenations): {glue:.3g} per token")
        print_kernels(p.by_kernel, p.busy_s, "token")
    gain = v.get("predicted_gain")
    console.print(f"[bold]binding ceiling: {v['binding']}[/]" + (f"; predicted gain of lifting it: {gain:.3g}x"
                                                                  if gain else ""))
    console.print(v["why"])
    if v.get("graph_why"):
        console.print(f"[bold]graph step: {v['graph_binding']} binds[/]; {v['graph_why']}")
    elif v.get("graph_error"):
        console.print(f"[yellow]graph step not measured:[/] {escape(v['graph_error'])}")
    for what, n in (v.get("passed") or {}).items():
        console.print(f"[yellow]stated policy:[/] {escape(what)}: {n:g} call(s) a token")
    if v.get("warning"):
        console.print(f"[yellow]warning:[/] {v['warning']}")
    for p in pngs:
        console.print(f"wrote {p}")
