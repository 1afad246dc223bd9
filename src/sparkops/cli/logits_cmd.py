"""`sparkops logits`: float32 logits [T, vocab] for given token ids, for outside comparisons."""

from __future__ import annotations

import numpy as np

from ..atomic import write_atomic
from ..engine import build_engine
from ..errors import BadInput
from ._common import console
from .generate_cmd import add_model_args

NAME = "logits"
HELP = "write float32 logits [T, vocab] for token ids (prefill the first K in one forward, decode the rest)"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP)
    add_model_args(p)
    p.add_argument("--tokens", required=True, help="comma-separated token ids, e.g. 1,2,3")
    p.add_argument("--prefill-split", type=int, default=None, metavar="K",
                   help="prefill the first K tokens in one forward, then decode the rest one by one "
                        "(default: all in one prefill)")
    p.add_argument("-o", "--output", required=True, help="output .npy file")


def parse_tokens(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise BadInput(f"--tokens must be comma-separated integers, got {text!r}") from None
    if not ids:
        raise BadInput("--tokens is empty")
    return ids


def run(args) -> int:
    import io

    ids = parse_tokens(args.tokens)
    k = len(ids) if args.prefill_split is None else args.prefill_split
    if not 1 <= k <= len(ids):
        raise BadInput(f"--prefill-split must be in 1..{len(ids)}, got {k}")
    engine = build_engine(args.model, device=args.device, registry=args.registry, max_context=args.max_context,
                          check_finite=args.check_finite)
    rows = [engine.prefill(ids[:k]).cpu()]
    for t in ids[k:]:
        rows.append(engine.decode(t).cpu())
    logits = np.concatenate([r.numpy() for r in rows]).astype(np.float32)
    buf = io.BytesIO()
    np.save(buf, logits)
    write_atomic(args.output, buf.getvalue())
    console.print(f"wrote {args.output}: logits {list(logits.shape)} (prefill {k}, decode {len(ids) - k})")
    return 0
