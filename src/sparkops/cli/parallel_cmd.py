"""`sparkops parallel plan | check | logits | scaling | bench`: one model over N ranks (tensor + expert parallel).

plan     how the model splits over --world ranks: each rank's heads, experts and FFN columns, the
         weight bytes it holds (sharded / replicated); no weights needed. Bad splits are named.
check    the model gate for the sharded run: N ranks against one process on the same weights
         (KL and top-1 at several depths, the worst reported); exit 1 if refused. --late-reduce
         moves a reduce point past the residual add - a deliberate bug the gate must refuse.
logits   write float32 logits [T, vocab] computed by N ranks (prefill K, decode the rest).
scaling  decode step time and collective time on each of --worlds, the collective share of the
         step and Amdahl's fit with its crossover (where adding ranks stops paying).
bench    gate, then time prefill of --prefill tokens and decode at --depth on N ranks (GPUs: NCCL,
         weights drawn on each device with --source ondevice); --record appends to the ledger,
         beside the seed's figures.

    sparkops parallel check --world 2                       # k3-nano over 2 gloo processes
    sparkops parallel scaling --worlds 1,2,4 --depth 64
    sparkops parallel plan --model k3-2.8t --mix ud_iq1_s --world 8
    sparkops parallel bench --model k3-2.8t --source ondevice --mix ud_iq1_s --world 8 --device cuda \\
        --prefill 32768 --depth 131072 --record
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..errors import BadInput, CheckFailed
from ._common import add_json_arg, add_registry_arg, console, emit_json

NAME = "parallel"
HELP = "tensor + expert parallel: plan a split, gate it against one process, time it over N ranks"

ACTIONS = ("plan", "check", "logits", "scaling", "bench")


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help=HELP, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    helps = {"plan": "how the model splits over the ranks, and the bytes per rank",
             "check": "the model gate: N ranks vs one process",
             "logits": "write logits computed by N ranks",
             "scaling": "collective share and Amdahl crossover over several world sizes",
             "bench": "gate, then time prefill and decode at depth on N ranks (optionally record)"}
    for name in ACTIONS:
        a = actions.add_parser(name, help=helps[name], description=helps[name])
        a.add_argument("--model", default="k3-nano", help="a preset or a GGUF file (default: %(default)s)")
        a.add_argument("--mix", default=None, help="quant mix for synthesized weights (default: f32; "
                       "plan: ud_iq1_s for k3-2.8t)")
        if name != "plan":
            a.add_argument("--source", choices=("synth", "ondevice", "gguf", "preset"), default=None,
                           help="where each rank's shard comes from (default: gguf for a file, synth for a small "
                                "preset, ondevice for a large one: each rank draws its shard on its device, no file)")
            a.add_argument("--seed", type=int, default=0, help="weight seed of synthesized models")
            a.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cpu: gloo; cuda: NCCL, one GPU "
                           "per rank (default: %(default)s)")
            a.add_argument("--dtype", default="float32", help="activation dtype (default: %(default)s)")
            a.add_argument("--dispatch", choices=("compact", "masked"), default="compact",
                           help="expert dispatch (default: %(default)s; masked keeps static shapes)")
            a.add_argument("--chunk", type=int, default=None, help="prefill in chunks of this many tokens (bench: "
                           "the timed prefill and the fill, default 2048; others: one forward)")
            add_registry_arg(a)
        if name in ("plan", "check", "logits", "bench"):
            a.add_argument("--world", type=int, required=name != "plan", default=None,
                           help="ranks (processes; one GPU each on cuda)")
        if name == "check":
            a.add_argument("--depths", default="1,63,65", help="prefill depths checked (default: %(default)s)")
            a.add_argument("--late-reduce", default="", help="DELIBERATE BUG: reduce points (attn, ffn) moved past "
                           "the residual add; the gate must refuse it")
        if name == "logits":
            a.add_argument("--tokens", required=True, help="comma-separated token ids")
            a.add_argument("--prefill-split", type=int, default=None, metavar="K",
                           help="prefill the first K tokens, decode the rest (default: all in one prefill)")
            a.add_argument("-o", "--output", required=True, help="output .npy file")
        if name == "scaling":
            a.add_argument("--worlds", default="1,2", help="world sizes measured, 1 included (default: %(default)s)")
        if name in ("scaling", "bench"):
            a.add_argument("--depth", type=int, default=0 if name == "scaling" else None,
                           help="decode context depth" + (" (default: %(default)s)" if name == "scaling" else ""))
            a.add_argument("--steps", type=int, default=4 if name == "scaling" else 8, help="decode steps per round")
            a.add_argument("--rounds", type=int, default=3, help="timed rounds (median reported)")
        if name == "bench":
            a.add_argument("--prefill", type=int, default=0, help="prompt length of the prefill figure (0: none)")
            a.add_argument("--fill", choices=("prefill", "synthetic"), default="prefill",
                           help="how the decode context is filled (default: %(default)s; synthetic is labelled)")
            a.add_argument("--record", action="store_true", help="append the gated figures to the ledger")
            a.add_argument("--bench-dir", default=None, help="scoreboard directory (default: the checkout's bench/)")
        add_json_arg(a)


def _pool_spec(args, world: int, max_context: int):
    from ..parallel.graph import Placement
    from ..parallel.launch import ModelSource, PoolSpec, too_large_to_synth_whole

    path = Path(args.model)
    kind = args.source or ("gguf" if path.suffix == ".gguf" or path.exists() else
                           "ondevice" if too_large_to_synth_whole(args.model) else "synth")
    if kind == "gguf" and not path.exists():
        raise BadInput(f"--model {args.model}: no such GGUF file")
    late = frozenset(x.strip() for x in getattr(args, "late_reduce", "").split(",") if x.strip())
    return PoolSpec(world=world, source=ModelSource(kind, args.model, args.mix or "f32", args.seed),
                    device=args.device, registry=args.registry, dtype=args.dtype, max_context=max_context,
                    placement=Placement(late=late, dispatch=args.dispatch), prefill_chunk=args.chunk)


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise BadInput(f"{what} '{text}': give comma-separated integers") from None
    if not out:
        raise BadInput(f"{what} is empty")
    return out


def run(args) -> int:
    if not getattr(args, "action", None):
        raise BadInput(f"give an action: `sparkops parallel {' | '.join(ACTIONS)}` (see --help)")
    return {"plan": _plan, "check": _check, "logits": _logits, "scaling": _scaling, "bench": _bench}[args.action](args)


# -- plan ---------------------------------------------------------------------------------------------
def _plan(args) -> int:
    from ..config import load_preset, preset_names
    from ..parallel.sharding import ShardPlan, column_blocks_of_mix, rank_bytes

    world = args.world or 8
    path = Path(args.model)
    if path.suffix == ".gguf" or path.exists():
        from ..gguf.reader import read_config

        config = read_config(path)
        mix = args.mix or "q4_k_m"
    elif args.model in preset_names():
        config = load_preset(args.model)
        mix = args.mix or ("ud_iq1_s" if args.model == "k3-2.8t" else "f32")
    else:
        raise BadInput(f"--model {args.model}: neither a GGUF file nor a preset ({', '.join(preset_names())})")
    blocks = column_blocks_of_mix(config, mix)
    plans = [ShardPlan.build(config, world, r, blocks).as_dict() for r in range(world)]
    sizes = rank_bytes(config, mix, world)
    if args.json:
        emit_json({"model": config.name, "mix": mix, "world": world, "ranks": [
            {**p, "bytes": b} for p, b in zip(plans, sizes)]})
        return 0
    t = Table(title=f"{config.name} ({mix}) over {world} ranks")
    for col in ("rank", "KDA heads", "MLA heads", "experts", "dense cols", "shared cols", "sharded", "replicated",
                "total"):
        t.add_column(col)
    for p, b in zip(plans, sizes):
        t.add_row(str(p["rank"]), *(f"{p[k][0]}..{p[k][1]}" for k in ("kda_heads", "mla_heads", "experts", "dense",
                                                                         "shared")),
                  *(_size(b[k]) for k in ("sharded", "replicated", "total")))
    console.print(t)
    console.print("each rank also holds the whole MLA latent cache (every head reads it) and its own heads' KDA "
                  "state; the activations are replicated")
    return 0


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


# -- check --------------------------------------------------------------------------------------------
def _check(args) -> int:
    from ..parallel.check import sharded_check

    depths = _ints(args.depths, "--depths")
    if min(depths) < 1:
        raise BadInput("--depths: every depth must be at least 1")
    spec = _pool_spec(args, args.world, max(depths) + 8)
    out = sharded_check(spec, depths)
    if args.json:
        emit_json(out.as_dict())
    else:
        console.print(escape(out.summary))
        for d in out.depths:
            console.print(f"  depth {d.depth:>6}: {d.positions} positions, KL max {d.kl_max:.3g}, mean "
                          f"{d.kl_mean:.3g}, top-1 {d.top1:.3f} {'ok' if d.passed else 'FAIL'}")
    if not out.passed:
        raise CheckFailed(f"the sharded run was refused: {out.summary}")
    return 0


# -- logits -------------------------------------------------------------------------------------------
def _logits(args) -> int:
    import io

    import numpy as np

    from ..atomic import write_atomic
    from ..parallel.launch import ShardedPool
    from .logits_cmd import parse_tokens

    ids = parse_tokens(args.tokens)
    k = len(ids) if args.prefill_split is None else args.prefill_split
    if not 1 <= k <= len(ids):
        raise BadInput(f"--prefill-split must be in 1..{len(ids)}, got {k}")
    with ShardedPool(_pool_spec(args, args.world, len(ids) + 1)) as pool:
        rows = [pool.prefill(ids[:k]).numpy()] + [pool.decode(t).numpy() for t in ids[k:]]
    logits = np.concatenate(rows).astype(np.float32)
    buf = io.BytesIO()
    np.save(buf, logits)
    write_atomic(args.output, buf.getvalue())
    if args.json:
        emit_json({"output": args.output, "shape": list(logits.shape), "world": args.world})
    else:
        console.print(f"wrote {escape(args.output)}: logits {list(logits.shape)} from {args.world} ranks "
                      f"(prefill {k}, decode {len(ids) - k})")
    return 0


# -- scaling ------------------------------------------------------------------------------------------
def _scaling(args) -> int:
    from ..parallel.scaling import measure_scaling

    worlds = _ints(args.worlds, "--worlds")
    spec = _pool_spec(args, max(worlds), args.depth + args.steps + 1)
    rep = measure_scaling(spec, worlds, depth=args.depth, steps=args.steps, rounds=args.rounds, seed=args.seed,
                          chunk=args.chunk)
    if args.json:
        emit_json({k: v for k, v in rep.items() if k != "points"})
        return 0
    t = Table(title=f"{rep['model']} decode at depth {rep['depth']} ({rep['backend']} on {rep['device']})")
    for col in ("world", "ms / step", "ms in collectives", "collective share", "reduces / step"):
        t.add_column(col)
    for n, w in sorted(rep["worlds"].items()):
        t.add_row(str(n), f"{1e3 * w['step_s']:.3g}", f"{1e3 * w['collective_s']:.3g}",
                  f"{100 * w['collective_share']:.0f}%", str(sum(w["reduces_per_step"].values())))
    console.print(t)
    c = rep["collectives"]
    if "amdahl" in c:
        a = c["amdahl"]
        console.print("model speedup: " + ", ".join(f"N={n}: {v:.3g}x" for n, v in a["speedup"].items()))
        console.print(escape(c["why"]))
    else:
        console.print("no Amdahl fit: include world 1 and a larger world in --worlds")
    return 0


# -- bench --------------------------------------------------------------------------------------------
def _bench(args) -> int:
    from ..bench.provenance import command_line
    from ..parallel import runbench

    if args.depth is None and not args.prefill:
        raise BadInput("give --depth (decode at that context) and/or --prefill (prompt length)")
    depth = -1 if args.depth is None else args.depth
    spec = _pool_spec(args, args.world, max(args.prefill, depth + args.steps) + 1)
    result = runbench.run(spec, prefill=args.prefill, depth=depth, steps=args.steps, rounds=args.rounds,
                          chunk=args.chunk or runbench.CHUNK, fill=args.fill, seed=args.seed)
    rows = []
    if args.record and not result.get("refused"):
        rows = runbench.record(result, command_line(getattr(args, "_argv", None)), args.bench_dir)
    elif args.record:  # the refusal is on record too (no figure, the frontier untouched)
        rows = [runbench.record_refusal(result, command_line(getattr(args, "_argv", None)), args.bench_dir)]
    if args.json:
        emit_json({**result, "recorded": [r["id"] for r in rows]})
    else:
        _print_bench(result, rows)
    if result.get("refused"):
        raise CheckFailed(f"not timed: {result['refused']}")
    return 0


def _print_bench(result, rows) -> None:
    from ..parallel.runbench import SEED_FIGURES

    for name, g in result["gates"].items():
        ok = g.get("passed")
        console.print(f"gate {name}: {'PASS' if ok else 'FAIL'} {escape(str(g.get('summary') or g.get('what')))}")
    s = result.get("summary") or {}
    spec = result["spec"]
    for phase in ("prefill", "decode"):
        if phase not in s:
            continue
        p = s[phase]
        where = f"{p['tokens']}-token prompt" if phase == "prefill" else f"depth {p['depth']} ({p['fill']} fill)"
        console.print(f"[bold]{phase}[/] {where} on {spec['world']} x {spec['device']}: {p['tok_s']:.4g} tok/s; "
                      f"collectives {100 * p['collective_share']:.1f}% of the time")
        key = (phase, p["depth"] if phase == "decode" else p["tokens"])
        for who, v in SEED_FIGURES.get(key, {}).items():
            console.print(f"    beside the seed's {who}: {v:g} tok/s ({p['tok_s'] / v:.3g}x)")
    for r in rows:
        if r["kind"] == "refusal":
            console.print(f"recorded the refusal as {r['id']} (no figure)")
        else:
            console.print(f"recorded {r['id']} ({r['key']}): frontier {r['frontier']}")
