"""Measuring what honest implementations score, so the tolerance table's limits come from numbers.

    python -m sparkops.gate.calibrate [--seeds 8] [--device cpu|cuda] [--ops linear,kda]

For every op it runs the gate's comparison (the same cases, placement and metrics as `sparkops
check`, over the pinned seeds and N fresh ones) on:
  * every available implementation in the catalog, under its own claim's variant;
  * emulations of the other variants where the catalog has none on this device: each float32
    implementation fed bfloat16 activations ("bf16": what a bf16 kernel computing in float32
    internally achieves at best), the torch plugin's bf16-operand functions called directly, and
    a float32 implementation whose activations were first rounded through Q8_0 blocks ("act_q8").
It prints the worst value per (op, variant) next to the table's limit and the margin between them.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Callable

import torch

from ..ops import OP_NAMES, get_contract
from ..plugins import load_catalog
from ..plugins.implementation import Implementation, tolerance
from .cases import PINNED_SEEDS, fresh_seed
from .check import Session, prove
from .tolerances import OP_RULES


def _q8_roundtrip(x: torch.Tensor) -> torch.Tensor:
    """x rounded through Q8_0 blocks of 32 (what an act_q8 kernel multiplies), same dtype."""
    from sparkops_numpy.quantize_act import quantize_act  # the reference quantizer

    t, d = x.shape
    q, scale = quantize_act(x.float().cpu())
    back = q.float().reshape(t, d // 32, 32) * scale.reshape(t, d // 32, 1)
    return back.reshape(t, d).to(x.device, x.dtype)


def _act_q8(op: str, fn: Callable[..., Any]) -> Callable[..., Any] | None:
    if op == "linear":
        def linear(x, weight):
            return fn(_q8_roundtrip(x), weight)
        return linear
    if op == "moe_experts":
        def moe_experts(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
            # quantizing x only: the hidden (SwiGLU) operand is quantized by the kernel too, which this
            # emulation leaves out, so real act_q8 kernels land up to ~2x higher
            return fn(_q8_roundtrip(x), weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)
        return moe_experts
    if op == "linear_add_rmsnorm":
        def linear_add_rmsnorm(x, weight, residual, norm_weight, eps):
            return fn(_q8_roundtrip(x), weight, residual, norm_weight, eps)
        return linear_add_rmsnorm
    if op == "moe_experts_add_rmsnorm":
        def moe_experts_add_rmsnorm(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, residual,
                                    norm_weight, eps):
            # as moe_experts: x alone quantized (the kernels quantize the hidden operand too)
            return fn(_q8_roundtrip(x), weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, residual,
                      norm_weight, eps)
        return moe_experts_add_rmsnorm
    return None


def candidates(catalog: Any, op: str, device: str) -> list[Implementation]:
    out = []
    for name, impl in sorted(catalog.implementations(op).items()):
        if name == get_contract(op).reference or impl.unavailable or impl.claim.kind != "tolerance":
            continue
        if device == "cpu" and "cpu" not in impl.devices:
            continue
        out.append(impl)
    emulated = []
    for impl in out:
        if impl.claim.variant is None:
            rows = OP_RULES.get(op, {})
            if "bf16" in rows:
                emulated.append(dataclasses.replace(impl, name=f"{impl.name}[bf16-in]", claim=tolerance("bf16"),
                                                    _resolved=None))
            wrapped = _act_q8(op, impl.resolve()) if "act_q8" in rows else None
            if wrapped is not None:
                emulated.append(dataclasses.replace(impl, name=f"{impl.name}[q8-act]", fn=wrapped, sources=(),
                                                    claim=tolerance("act_q8"), _resolved=None))
    if device == "cpu":  # the torch plugin's bf16-operand paths run on CPU too when called directly
        for name, impl in catalog.implementations(op).items():
            if impl.claim.variant == "bf16" and impl.unavailable and impl.backend == "torch":
                emulated.append(dataclasses.replace(impl, name=f"{name}[on-cpu]", devices=("cpu", "cuda"),
                                                    unavailable=None, _resolved=None))
    return out + emulated


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=6, help="fresh seeds on top of the pinned ones")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--ops", default=",".join(OP_NAMES))
    args = ap.parse_args(argv)
    catalog = load_catalog()
    session = Session((*PINNED_SEEDS, *(fresh_seed() for _ in range(args.seeds))))
    print(f"seeds {session.seeds}")
    for op in args.ops.split(","):
        for impl in candidates(catalog, op, args.device):
            try:
                out = prove(impl, args.device, catalog, session=session)
            except Exception as exc:  # noqa: BLE001 - a measurement tool reports and goes on
                print(f"{op:14s} {impl.name:28s} error: {exc}")
                continue
            r = out.record
            margin = r["worst_limit"] / r["worst_value"] if r["worst_value"] else float("inf")
            print(f"{op:14s} {impl.name:28s} {r['variant']:7s} worst {r['metric']} {r['worst_value']:.3g} "
                  f"limit {r['worst_limit']:.3g} margin x{margin:.3g} {'PASS' if out.passed else 'FAIL'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
