"""Every registered Triton implementation run by Triton's interpreter on its op's smallest contract case (seed 0), in
float32 and bfloat16, once or twice (`--copies`: fresh copies of the kernel modules, the second where a rewrite
kept from the first would run), printed as one JSON object: implementation ->
the SHA-256 of every output and state byte. tests/test_interpreter_speed.py runs it with and without
tests/interpreter_speed.py's patches: the patches may take time away, never a bit.

    python3 -m tests.interpreter_bits [--plain] [--copies N]    (--plain: Triton's interpreter as it comes)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

import torch


def _size(case) -> int:
    """Elements the case's tensors hold (the smallest case is the cheapest to interpret)."""
    from sparkops.qweight import QWeight

    total = 0
    for values in [*case.calls, case.state]:
        for v in values.values():
            total += v.numel() if isinstance(v, torch.Tensor) else v.raw.numel() if isinstance(v, QWeight) else 0
    return total


def _digest(trace) -> str:
    """SHA-256 of the outputs and states' bytes, in call order (NaNs as their bits), or the error that stopped it."""
    if trace.error:
        return "error: " + trace.error
    h = hashlib.sha256()
    for outs, states in zip(trace.outputs, trace.states):
        for o in [*outs, *(states[k] for k in sorted(states))]:
            if isinstance(o, torch.Tensor):
                h.update(f"{o.dtype}{tuple(o.shape)}".encode())
                h.update(o.contiguous().view(torch.uint8).numpy().tobytes() if o.numel() else b"")
            else:
                h.update(repr(o).encode())
    return h.hexdigest()


def digests(copies: int) -> dict[str, str]:
    import importlib

    from sparkops.gate.cases import cases_for
    from sparkops.gate.check import run_trace
    from sparkops.ops import get_contract
    from sparkops_triton import IMPLEMENTATIONS
    from sparkops_triton._runtime import interpreted

    out: dict[str, str] = {}
    modules = sorted({target.split(":")[0].rsplit(".", 1)[1] for _, _, target, _, _ in IMPLEMENTATIONS})
    for copy in range(1, copies + 1):  # a later fresh copy: the same functions rewritten again (or their rewrite kept)
        with interpreted(*modules):
            for op, name, target, _, _ in IMPLEMENTATIONS:
                mod, fn = target.split(":")
                kernel = getattr(importlib.import_module(mod), fn)
                case = min(cases_for(op, (0,)), key=_size)
                for variant in ("float32", "bf16"):
                    torch.manual_seed(0)  # any draw an implementation makes is the same in every run
                    trace = run_trace(kernel, case, get_contract(op), variant, "cpu", reference=False,
                                      keep_inputs=False)
                    out[f"{op}={name} {case.name} {variant} copy{copy}"] = _digest(trace)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plain", action="store_true", help="Triton's interpreter without tests/interpreter_speed")
    parser.add_argument("--copies", type=int, default=2, help="fresh copies of the kernel modules to run (default 2)")
    args = parser.parse_args(argv)
    if args.copies < 1:
        parser.error(f"--copies {args.copies}: give 1 or more (each a fresh copy of the kernel modules run)")
    installed = False
    if not args.plain:
        from tests.interpreter_speed import install

        installed = install()
    json.dump({"installed": installed, "digests": digests(args.copies)}, sys.stdout, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
