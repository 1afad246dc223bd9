"""`sparkops generate`: stream text from a model, then report prefill and decode tokens/s."""

from __future__ import annotations

import sys

from ..engine import build_engine
from ._common import add_registry_arg, console, err_console

NAME = "generate"
HELP = "generate text (default: the tiny k3-nano model, synthesized on first use, on the CPU)"


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP)
    add_model_args(p)
    p.add_argument("--prompt", default="The quick brown fox", help="prompt text (default: %(default)r)")
    p.add_argument("-n", type=int, default=32, help="tokens to generate (default: %(default)s)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (0 = off)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass (1.0 = off)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--graph", action="store_true",
                   help="CUDA: capture the decode step once as a CUDA graph and replay it per token")


def add_model_args(p) -> None:
    p.add_argument("--model", default="k3-nano", help="a GGUF file or a preset name (default: %(default)s)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="device class (default: %(default)s)")
    p.add_argument("--max-context", type=int, default=None, help="cache size in tokens (default: min(4096, model))")
    p.add_argument("--check-finite", action="store_true", help="stop at the first op that returns NaN/Inf")
    add_registry_arg(p)


def run(args) -> int:
    from ..errors import BadInput
    from ..tokenizer import load_tokenizer

    if args.n < 1:
        raise BadInput("-n must be at least 1")
    if args.graph and args.device != "cuda":
        raise BadInput("--graph captures a CUDA graph: it needs --device cuda")
    if args.temperature < 0 or not 0 < args.top_p <= 1 or args.top_k < 0:
        raise BadInput("need --temperature >= 0, 0 < --top-p <= 1, --top-k >= 0")
    engine = build_engine(args.model, device=args.device, registry=args.registry, max_context=args.max_context,
                          check_finite=args.check_finite, progress=True)
    tok = load_tokenizer(engine.model)
    prompt = tok.encode(args.prompt)
    out: list[int] = []
    shown = ""
    console.print(f"[dim]{args.model} on {args.device}, {len(prompt)} prompt tokens[/]")
    sys.stdout.write(args.prompt)
    sys.stdout.flush()

    def on_token(tid: int) -> None:
        nonlocal shown
        out.append(tid)
        text = tok.decode(out)
        if text.startswith(shown):  # print only what is new (a multi-byte character may arrive in pieces)
            sys.stdout.write(text[len(shown):])
            sys.stdout.flush()
            shown = text

    stats = engine.generate(prompt, args.n, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                            seed=args.seed, on_token=on_token, graph=args.graph)
    sys.stdout.write("\n")
    taken, passed = engine.ops.taken(), engine.ops.passed()
    console.print(f"prefill: {stats.prompt_tokens} tokens at {stats.prefill_tok_s:.1f} tok/s; "
                  f"decode: {stats.generated_tokens} tokens at {stats.decode_tok_s:.1f} tok/s")
    if taken:
        err_console.print(f"[yellow]fallbacks / host round trips taken:[/] {taken}")
    for what, n in passed.items():  # a captured step counts its calls once, at capture
        err_console.print(f"[yellow]stated policy:[/] {what}: {n} call(s)")
    return 0
