"""`sparkops synth`: write a deterministic random-weight model (any preset, any quant mix) as a GGUF.

`--plan` writes nothing: it prints the file size by tensor class and the bytes one decode step
reads (spec/anchors.md section 3), computed from the shapes and types alone (works for k3-2.8t).
"""

from __future__ import annotations

from rich.table import Table

from ..config import load_preset, preset_names
from ..errors import BadInput
from ..gguf.mix import MIXES, bytes_per_token, quant_mix_bytes
from ._common import add_json_arg, console, emit_json

NAME = "synth"
HELP = "write a random-weight model of a preset as a GGUF file (deterministic: same seed, same bytes)"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help=HELP, description=__doc__)
    p.add_argument("--preset", required=True, help=f"model preset ({', '.join(preset_names())})")
    p.add_argument("--quant", default="q4_k_m", help=f"quant mix: {', '.join(MIXES)} (default: %(default)s)")
    p.add_argument("-o", "--output", metavar="FILE.gguf", help="the file to write (atomically)")
    p.add_argument("--seed", type=int, default=0, help="weights seed (default: %(default)s)")
    p.add_argument("--method", choices=("auto", "honest", "direct"), default="auto",
                   help="honest: quantize float weights; direct: draw quantized blocks (fast); "
                        "auto: honest below 2e8 parameters (default)")
    p.add_argument("--tokenizer", choices=("bpe", "none"), default="bpe",
                   help="byte-level BPE (k3-nano's, padded to the vocab) or none (default: %(default)s)")
    p.add_argument("--plan", action="store_true", help="write nothing; print sizes and bytes per token")
    p.add_argument("--context", type=int, default=0, help="context for --plan's bytes per token (default: 0)")
    add_json_arg(p)


def run(args) -> int:
    if args.plan:
        return _plan(args)
    if not args.output:
        raise BadInput("synth needs -o FILE.gguf (or --plan to only print sizes)")
    from ..synth import synth_gguf

    summary = synth_gguf(args.output, args.preset, args.quant, seed=args.seed, method=args.method,
                         tokenizer=args.tokenizer, progress=not args.json)
    if args.json:
        emit_json(summary)
        return 0
    t = Table(title=f"synth {summary['preset']} ({summary['mix']}, seed {summary['seed']}, {summary['method']})")
    t.add_column("what")
    t.add_column("value")
    t.add_row("file", summary["path"])
    t.add_row("size", f"{summary['bytes']:,} bytes ({summary['bytes'] / 2**30:.3f} GiB)")
    t.add_row("tensors", ", ".join(f"{k} {v}" for k, v in sorted(summary["types"].items())))
    t.add_row("parameters", f"{summary['params']:,}")
    t.add_row("tokenizer", summary["tokenizer"])
    t.add_row("time", f"{summary['seconds']:.1f} s")
    console.print(t)
    if summary["fallbacks"]:
        console.print(f"[yellow]{len(summary['fallbacks'])} tensor(s) did not fit the mix's block size "
                      f"(recorded in the file as sparkops.quant_fallbacks):[/]")
        for f in summary["fallbacks"]:
            console.print(f"  {f}")
    return 0


def _plan(args) -> int:
    config = load_preset(args.preset)
    sizes = quant_mix_bytes(config, args.quant)
    bpt = bytes_per_token(config, args.quant, args.context)
    params = config.param_counts()
    if args.json:
        emit_json({"preset": config.name, "params": params, "file": sizes, "bytes_per_token": bpt})
        return 0
    t = Table(title=f"{config.name} at {sizes['mix']}: {params['total'] / 1e9:,.2f} B parameters "
                    f"({params['active_per_token'] / 1e9:,.2f} B active), file {sizes['total_gib']:.2f} GiB")
    for col in ("class", "parameters", "file GiB", "read per token (MB)"):
        t.add_column(col, justify="right" if col != "class" else "left")
    for cls, b in sizes["classes"].items():
        t.add_row(cls, f"{params.get(cls, 0):,}", f"{b / 2**30:.3f}", f"{bpt['weights_by_class'][cls] / 1e6:.1f}")
    console.print(t)
    console.print(f"decode bytes per token at context {args.context}: weights {bpt['weights'] / 1e9:.3f} GB + "
                  f"MLA cache {bpt['mla_cache'] / 1e9:.3f} GB + KDA state {bpt['kda_state'] / 1e9:.3f} GB + "
                  f"conv state {bpt['kda_conv_state'] / 1e9:.4f} GB = {bpt['total'] / 1e9:.3f} GB")
    if sizes["fallbacks"]:
        console.print(f"[yellow]{len(sizes['fallbacks'])} fallback(s)[/], e.g. {sizes['fallbacks'][0]}")
    return 0
