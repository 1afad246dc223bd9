"""`sparkops convert HF_DIR -o FILE.gguf`: a Hugging Face Kimi-Linear checkpoint as a kimi-linear GGUF.

Reads config.json and *.safetensors (the checkpoint's own names or transformers' native ones),
writes tensor by tensor (atomically). The default mix keeps the checkpoint's precision.
"""

from __future__ import annotations

from rich.table import Table

from ..gguf.mix import MIXES
from ._common import add_json_arg, console, emit_json

NAME = "convert"
HELP = "convert a Hugging Face Kimi-Linear checkpoint folder to a GGUF file"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help=HELP, description=__doc__)
    p.add_argument("hf_dir", metavar="HF_DIR", help="folder with config.json and *.safetensors")
    p.add_argument("-o", "--output", required=True, metavar="FILE.gguf", help="the file to write")
    p.add_argument("--quant", default=None,
                   help=f"quant mix: {', '.join(MIXES)} (default: the checkpoint's own precision)")
    p.add_argument("--tokenizer", choices=("auto", "bpe", "none"), default="auto",
                   help="auto: tokenizer.json if present, else none; bpe: sparkops' byte-level BPE")
    p.add_argument("--name", default=None, help="model name in the file (default: the folder name)")
    add_json_arg(p)


def run(args) -> int:
    from ..convert import convert_hf

    summary = convert_hf(args.hf_dir, args.output, mix=args.quant, tokenizer=args.tokenizer, name=args.name,
                         progress=not args.json)
    if args.json:
        emit_json(summary)
        return 0
    t = Table(title=f"convert {summary['model']} ({summary['mix']})")
    t.add_column("what")
    t.add_column("value")
    t.add_row("file", summary["path"])
    t.add_row("size", f"{summary['bytes']:,} bytes ({summary['bytes'] / 2**30:.3f} GiB)")
    t.add_row("tensors", str(summary["tensors"]))
    t.add_row("parameters", f"{summary['params']:,}")
    t.add_row("tokenizer", summary["tokenizer"])
    t.add_row("time", f"{summary['seconds']:.1f} s")
    console.print(t)
    for f in summary["fallbacks"]:
        console.print(f"[yellow]fallback:[/] {f}")
    if summary["unused_checkpoint_tensors"]:
        console.print(f"[yellow]{len(summary['unused_checkpoint_tensors'])} checkpoint tensor(s) not used:[/] "
                      f"{', '.join(summary['unused_checkpoint_tensors'][:8])}")
    return 0
