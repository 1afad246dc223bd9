"""Probe: the IQ1_S mix's one-token weight kernels, every candidate implementation side by side at the 48B's shapes.
A lead for issue #10's IQ1_S row (>= 1000 tok/s at 131072), not a ledger row (bench/GPU-PROBES.md keeps what it
showed).

Why. At 131072 the Q4_K step runs 490.9 tok/s and the IQ1_S step 317.4 (H200, session 43), though IQ1_S carries a third
of Q4_K's weight bytes: every IQ1_S weight kernel of the step is older than the Q4_K ones the ladder tuned. Its linears
go to the registry's default linear, triton_lastblock (the step's by-type entries name Q4_K and Q6_K only; sessions
50-51 first read the Q4_K entry's policy target, cupy_float, for it, until a diagnosis showed the Triton GEMV), its
experts to triton_prefetch (session 25's fix, chosen as the kernel that read the blocks at all, never timed against
another). Registered implementations that might serve IQ1_S faster exist and have never been timed on it
in the step's shapes: cupy_dp4a (Q8 activations and __dp4a over the IQ1_S grid), the Triton GEMVs, and (session 50)
cupy_rowwarp_pdl_q8_iq1s for both ops, the Q4_K step's Q8 row-copy form over the IQ1_S grid. Each is a registry swap
away from a rung (`linear@IQ1_S`, `moe_experts@IQ1_S` by_type entries) if it is faster; if none is, the IQ1_S row needs
new kernels, and this says how far each op is from its bytes.

What it times, for each of the step's IQ1_S one-token weight kernels (shapes from the 48B preset, calls a token from
its layer lists; bf16 activations as the step's):
  kda_qkv     KDA merged q|k|v          [3P x D]          a KDA layer
  o_proj      KDA and MLA o_proj        [D x P]           every attention layer
  mla_q_kva   MLA q with kv_a merged    [N(Dn+R)+L+R x D] an MLA layer
  dense_gu    layer 1's gate|up merged  [2F x D]          once
  dense_down  layer 1's down            [D x F]           once
  experts     routed top-8 + shared     moe_experts       an MoE layer
with the harness the per-op records use (sparkops_cupy._workloads.time_op: a CUDA graph of 64 calls over rotated
argument sets, CUDA events, median of the replays). Every timed output (the first set's) is judged against the NumPy
reference on the same values by the implementation's own claim (the gate's tolerance table; the bf16 row where that is
looser, as the activations are bf16): a fast figure from a wrong kernel is reported as wrong and fails the probe.

The forecast: per op, the step's implementation now (`--now`) against the fastest one that met its claim, times its
calls a token; summed, through Amdahl on the IQ1_S step's last figure (`--base-tok-s`). The project's forecasts from
per-op records held to ~0.01 for ops that run alone on the critical path (sessions 12-22) and broke both ways where
kernels overlap (sessions 23, 33): a lead's size, not a rung.

    python3 bench/probes/iq1s_ops.py --out probe.json [--only NAME ...] [--impl OP=NAME ...]
    python3 bench/probes/iq1s_ops.py --factor probe.json linear cupy_rowwarp_pdl_q8_iq1s [--above 1]   # linear@IQ1_S=3.5
    python3 bench/probes/iq1s_ops.py --best probe.json linear IMPL [IMPL ...] [--above 1]   # IMPL linear@IQ1_S=F
    (either with --over NAME: the factor over NAME, the form an earlier rung put in the step, not the probe's "now")
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from dataclasses import asdict, dataclass

#: the implementations timed by default: the step's own (the first of each op) and the registered ones that serve an
#: IQ1_S weight with their own kernels (the row-warp Q4_K GEMVs pass it to cupy_float by their stated policy)
IMPLS = {"linear": ("triton_lastblock", "cupy_float", "cupy_dp4a", "cupy_rowwarp_pdl_q8_iq1s",
                    "cupy_rowwarp_pdl_q8_iq1s_short", "cupy_rowwarp_pdl_q8_iq1s_sg",
                    "cupy_rowwarp_pdl_q8_iq1s_sg_short", "cupy_rowwarp_pdl_q8_iq1s_sg_mixed",
                    "cupy_rowwarp_pdl_q8_iq1s_t2", "cupy_rowwarp_pdl_q8_iq1s_t2_rows16",
                    "triton", "triton_prefetch", "triton_pdl"),
         "moe_experts": ("triton_prefetch", "cupy_dp4a", "cupy_rowwarp_pdl_q8_iq1s", "cupy_rowwarp_pdl_q8h_iq1s",
                         "cupy_rowwarp_pdl_q8h_iq1s_sg", "cupy_rowwarp_pdl_q8h_iq1s_staged",
                         "cupy_rowwarp_pdl_q8h_iq1s_staged_pair", "cupy_rowwarp_pdl_q8h_iq1s_staged_flat",
                         "cupy_rowwarp_pdl_q8h_iq1s_t2", "triton", "triton_flat", "triton_lastblock")}
#: what the IQ1_S step runs (s55's registry with moe_experts@IQ1_S=triton_prefetch, bench/gpu_suite.sh's
#: frontier131k), read from that registry (`now_from_registry`; tests/bench/test_iq1s_ops_probe.py checks it against
#: the carried one): the linear op's default, triton_lastblock, takes IQ1_S, since the step's by-type entries name only
#: Q4_K and Q6_K. Sessions 50-51 had cupy_float here (the Q4_K entry's policy target) until session 51's diagnosis
#: showed the Triton GEMV kernel taking the IQ1_S calls; `--registry` reads it from the step's own file instead.
NOW = {"linear": "triton_lastblock", "moe_experts": "triton_prefetch"}
#: the IQ1_S step's figure at 131072 that the forecast starts from (H200, session 43, rungs57's frontier131k)
BASE_TOK_S = 317.4


@dataclass(frozen=True)
class Kernel:
    """One of the step's IQ1_S one-token weight kernels: its op, weight shape ([OUT, IN]; experts: none) and calls a
    decode token."""

    name: str
    op: str
    out_f: int
    in_f: int
    calls: int
    what: str


def kernels(cfg) -> list[Kernel]:
    """The 48B step's IQ1_S one-token weight kernels, as the engine calls them (fuse_projections merges q|k|v, MLA's q
    with kv_a, the dense gate with up); the low-rank gates and beta are F16 and the lm_head Q6_K in the mix."""
    d, p = cfg.hidden_size, cfg.kda_heads * cfg.kda_head_dim
    kda, mla = len(cfg.kda_layers), len(cfg.full_attn_layers)
    q_kva = cfg.mla_heads * (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim) + cfg.kv_lora_rank + cfg.qk_rope_head_dim
    moe = cfg.num_layers - cfg.first_k_dense
    return [Kernel("kda_qkv", "linear", 3 * p, d, kda, "KDA merged q|k|v"),
            Kernel("o_proj", "linear", d, cfg.mla_heads * cfg.v_head_dim, kda + mla, "KDA and MLA o_proj"),
            Kernel("mla_q_kva", "linear", q_kva, d, mla, "MLA q with kv_a merged"),
            Kernel("dense_gu", "linear", 2 * cfg.intermediate_size, d, cfg.first_k_dense, "dense gate|up merged"),
            Kernel("dense_down", "linear", d, cfg.intermediate_size, cfg.first_k_dense, "dense down"),
            Kernel("experts", "moe_experts", 0, 0, moe, "routed top-8 + shared expert")]


def now_from_registry(registry: dict, device: str = "cuda") -> dict[str, str]:
    """What a registry (a loaded registry file) runs for IQ1_S weights on device, per op of IMPLS: the op's IQ1_S
    by-type entry, else its default. ValueError naming the op the registry does not select on device."""
    out = {}
    for op in IMPLS:
        sel = registry.get("ops", {}).get(op, {}).get(device, {})
        impl = sel.get("by_type", {}).get("IQ1_S", {}).get("impl") or sel.get("impl")
        if not impl:
            raise ValueError(f"the registry selects no {op} on {device}")
        out[op] = impl
    return out


def forecast(rows: dict, kinds: list[Kernel], now: dict[str, str], base_tok_s: float) -> dict:
    """Per kernel: the step's implementation now against the fastest that met its claim, µs a token saved (calls x
    difference); the sum through Amdahl on base_tok_s. rows: {kernel: {impl: {"us": .., "ok": ..}}}."""
    per, saved = {}, 0.0
    for k in kinds:
        timed = rows.get(k.name, {})
        mine = timed.get(now[k.op])
        proven = {n: r for n, r in timed.items() if r.get("ok")}
        if mine is None or not mine.get("ok") or not proven:
            per[k.name] = {"left_out": f"the step's {now[k.op]} was not timed or missed its claim" if proven
                           else "no implementation met its claim"}
            continue
        best = min(proven, key=lambda n: proven[n]["us"])
        gain = k.calls * (mine["us"] - proven[best]["us"])
        saved += gain
        per[k.name] = {"now": now[k.op], "now_us": mine["us"], "best": best, "best_us": proven[best]["us"],
                       "calls": k.calls, "us_a_token_saved": gain}
    step_us = 1e6 / base_tok_s
    if saved >= step_us:
        raise ValueError(f"the per-op savings ({saved:.0f} us a token) exceed the step itself ({step_us:.0f} us at "
                         f"{base_tok_s} tok/s): the base figure and the per-op times cannot be of one machine")
    return {"per_kernel": per, "us_a_token_saved": saved, "base_tok_s": base_tok_s,
            "forecast_tok_s": 1e6 / (step_us - saved)}


def factor(results: dict, op: str, impl: str, over: str | None = None) -> float:
    """The per-op speed-up a rung's --expect takes for `op` on IQ1_S weights when `impl` replaces the step's (or
    `over`, the form an earlier rung put in the step after the probe ran): the replaced implementation's time over
    impl's, each kernel of the op weighted by its calls a token. Both must have met their claims on every kernel of
    the op that was timed, or there is no factor (ValueError, saying which)."""
    base = over or results["now"][op]
    now_us = new_us = 0.0
    kinds = [k for k in results["kernels"].values() if k["op"] == op]
    if not kinds:
        raise ValueError(f"the probe timed no {op} kernel")
    for k in kinds:
        rows = results["timed"][k["name"]]
        for name in (base, impl):
            r = rows.get(name, {})
            if not r.get("ok"):
                why = r.get("left_out") or r.get("error") or ("missed its claim" if "ok" in r else "was not timed")
                raise ValueError(f"{k['name']}: {name} {why}")
        now_us += k["calls"] * rows[base]["us"]
        new_us += k["calls"] * rows[impl]["us"]
    return now_us / new_us


def best(results: dict, op: str, impls: list[str], over: str | None = None) -> tuple[str, float]:
    """Of impls, the one with the largest `factor` for op (over the step's implementation, or `over`; the first
    named on a tie), and that factor; a candidate without a factor (it or the replaced implementation missed a claim,
    or was not timed) is passed over, and so is `over` itself. ValueError naming each candidate's reason where none
    has one."""
    got, why = {}, []
    for name in impls:
        if name == over:
            continue
        try:
            got[name] = factor(results, op, name, over)
        except (ValueError, KeyError) as exc:
            why.append(f"{name}: {exc}")
    if not got:
        raise ValueError("; ".join(why) or "no candidate named")
    name = max(got, key=lambda n: got[n])  # max keeps the first of equal ones
    return name, got[name]


def _read_results(path: str) -> dict | None:
    """The probe's JSON, or None after saying why it cannot be read."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        print(f"iq1s_ops probe: cannot read the probe's JSON {path}: {exc}", file=sys.stderr)
        return None


def _above(argv: list[str], fixed: int, usage: str, more: bool = False) -> tuple[list[str], float | None] | None:
    """argv's leading arguments (`fixed` of them, or at least that many with `more`) and the number of a trailing
    --above X; None after saying why not."""
    above = None
    if len(argv) >= 2 and argv[-2] == "--above":
        try:
            above = float(argv[-1])
        except ValueError:
            print(f"iq1s_ops probe: --above takes a number (got '{argv[-1]}')", file=sys.stderr)
            return None
        argv = argv[:-2]
    if len(argv) < fixed or (len(argv) > fixed and not more) or any(a.startswith("--") for a in argv):
        print(f"iq1s_ops probe: {usage}", file=sys.stderr)
        return None
    return argv, above


def _over(argv: list[str]) -> tuple[list[str], str | None] | None:
    """argv without an `--over NAME` pair, and NAME; None after saying why not."""
    if "--over" not in argv:
        return argv, None
    i = argv.index("--over")
    if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
        print("iq1s_ops probe: --over takes the implementation the step runs now (got nothing)", file=sys.stderr)
        return None
    return argv[:i] + argv[i + 2:], argv[i + 1]


def _best_main(argv: list[str]) -> int:
    """--best PROBE.json OP IMPL [IMPL ...] [--over NAME] [--above X]: "IMPL OP@IQ1_S=FACTOR" for the fastest
    candidate per op."""
    taken = _over(argv)
    if taken is None:
        return 2
    argv, over = taken
    parsed = _above(argv, 3, "--best takes PROBE.json OP IMPL [IMPL ...] [--over NAME] [--above X]", more=True)
    if parsed is None:
        return 2
    (path, op, *impls), above = parsed
    results = _read_results(path)
    if results is None:
        return 2
    try:
        name, got = best(results, op, impls, over)
    except ValueError as exc:
        print(f"iq1s_ops probe: no factor for any of {op}={', '.join(impls)}: {exc}", file=sys.stderr)
        return 1
    if above is not None and got <= above:
        print(f"iq1s_ops probe: the fastest, {op}={name}, is x{got:.3f} per op, not above x{above:g}", file=sys.stderr)
        return 1
    print(f"{name} {op}@IQ1_S={got:.4f}")
    return 0


def parse(argv: list[str] | None, names: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="iq1s_ops.py", description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--only", action="append", metavar="NAME", help=f"time this kernel alone ({', '.join(names)})")
    ap.add_argument("--impl", action="append", metavar="OP=NAME", default=[],
                    help="time this implementation too (linear=... or moe_experts=...)")
    ap.add_argument("--without", action="append", metavar="OP=NAME", default=[],
                    help="leave this implementation out (one whose GPU tests failed on this machine)")
    ap.add_argument("--registry", metavar="FILE",
                    help="the step's registry: what it runs for IQ1_S is the forecast's 'now' (default: NOW)")
    ap.add_argument("--replays", type=int, default=15, help="graph replays a figure (the median is kept)")
    ap.add_argument("--base-tok-s", type=float, default=BASE_TOK_S,
                    help=f"the IQ1_S step's tok/s the forecast starts from (default {BASE_TOK_S}: H200, 131072)")
    args = ap.parse_args(argv)
    unknown = [n for n in args.only or () if n not in names]
    if unknown:
        ap.exit(2, f"iq1s_ops probe: no kernel named {', '.join(map(repr, unknown))}; the names are "
                   f"{', '.join(names)}\n")
    for flag, specs in (("--impl", args.impl), ("--without", args.without)):
        for spec in specs:
            op, _, name = spec.partition("=")
            if op not in IMPLS or not name:
                ap.exit(2, f"iq1s_ops probe: {flag} takes OP=NAME with OP one of {', '.join(IMPLS)} (got '{spec}')\n")
    if args.replays < 3:
        ap.exit(2, "iq1s_ops probe: --replays must be at least 3 (a median of fewer says little)\n")
    if args.base_tok_s <= 0:
        ap.exit(2, f"iq1s_ops probe: --base-tok-s must be positive (got {args.base_tok_s})\n")
    return args


def _workload(k: Kernel, cfg):
    import torch
    from gguf import GGMLQuantizationType as Q
    from sparkops_cupy._workloads import linear_workload, moe_workload

    if k.op == "moe_experts":
        return moe_workload(cfg, Q.IQ1_S, torch.bfloat16)
    return linear_workload(Q.IQ1_S, k.out_f, k.in_f, k.what, dtype=torch.bfloat16)


def _on_cpu(v):
    import torch

    from sparkops.qweight import QWeight

    if isinstance(v, QWeight):
        return v.to("cpu")
    if isinstance(v, torch.Tensor):
        return v.float().cpu() if v.is_floating_point() else v.cpu()
    return v


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--best"]:
        return _best_main(argv[1:])
    if argv[:1] == ["--factor"]:  # --factor PROBE.json OP IMPL [--over NAME] [--above X]: OP@IQ1_S=FACTOR
        taken = _over(argv[1:])
        if taken is None:
            return 2
        parsed = _above(taken[0], 3, "--factor takes PROBE.json OP IMPL [--over NAME] [--above X]")
        if parsed is None:
            return 2
        (path, op, impl), above = parsed
        results = _read_results(path)
        if results is None:
            return 2
        try:
            got = factor(results, op, impl, taken[1])
        except (ValueError, KeyError) as exc:
            print(f"iq1s_ops probe: no factor for {op}={impl}: {exc}", file=sys.stderr)
            return 1
        if above is not None and got <= above:  # a rung the per-op figures already say loses: not worth a device
            print(f"iq1s_ops probe: {op}={impl} is x{got:.3f} per op, not above x{above:g}", file=sys.stderr)
            return 1
        print(f"{op}@IQ1_S={got:.4f}")
        return 0
    from sparkops.config import load_preset

    cfg = load_preset("kimi-linear-48b-a3b")
    kinds = kernels(cfg)
    args = parse(argv, [k.name for k in kinds])
    from sparkops.plugins import load_catalog

    catalog = load_catalog()
    now = dict(NOW)
    if args.registry:
        try:
            with open(args.registry, "rb") as f:
                now = now_from_registry(tomllib.load(f))
        except (OSError, tomllib.TOMLDecodeError, ValueError) as exc:
            print(f"iq1s_ops probe: --registry {args.registry}: {exc}", file=sys.stderr)
            return 2
    impls = {op: [now[op]] + [n for n in names if n != now[op]] for op, names in IMPLS.items()}
    for spec in args.impl:
        op, _, name = spec.partition("=")
        if name not in catalog.implementations(op):
            print(f"iq1s_ops probe: --impl {spec}: no implementation of {op} is named '{name}'; the names are "
                  f"{', '.join(sorted(catalog.implementations(op)))}", file=sys.stderr)
            return 2
        if name not in impls[op]:
            impls[op].append(name)
    for spec in args.without:
        op, _, name = spec.partition("=")
        if name == now[op]:
            print(f"iq1s_ops probe: --without {spec}: that is the step's own implementation, every factor's base",
                  file=sys.stderr)
            return 2
        if name in impls[op]:
            impls[op].remove(name)
            print(f"iq1s_ops probe: {op}={name} left out (--without)", flush=True)
    import torch

    if not torch.cuda.is_available():
        print("iq1s_ops probe: needs a CUDA device", file=sys.stderr)
        return 2
    from sparkops.gate.check import resolve_claim
    from sparkops.gate.metrics import nmse
    from sparkops.gate.tolerances import OP_RULES
    from sparkops_cupy._workloads import _positional, describe, time_op
    dev = torch.device("cuda", torch.cuda.current_device())
    results = {"device": torch.cuda.get_device_name(dev), "now": now, "kernels": {}, "timed": {}}
    failed = []
    for k in kinds:
        if args.only and k.name not in args.only:
            continue
        sets, nbytes = _workload(k, cfg).build(dev, 0)
        first = _positional(k.op, sets[0])
        ref = _first(catalog.get(k.op, "numpy").resolve()(*[_on_cpu(a) for a in first]))
        results["kernels"][k.name] = asdict(k) | {"mb": nbytes / 1e6, "sets": len(sets)}
        rows = results["timed"][k.name] = {}
        for name in impls[k.op]:
            impl = catalog.get(k.op, name)
            if impl.unavailable:
                rows[name] = {"left_out": impl.unavailable}
                print(f"{k.name:10s} {name:28s} left out: {impl.unavailable}", flush=True)
                continue
            fn = impl.resolve()
            policy = impl.resolve_policy()
            passes = policy(*first) if policy else None
            rule, variant, _ = resolve_claim(impl, catalog)
            limit = max(rule.limit, OP_RULES[k.op]["bf16"].limit)
            try:
                got = _first(fn(*first))
                t = time_op(k.op, fn, sets, nbytes, replays=args.replays)
            except Exception as exc:  # noqa: BLE001 - one implementation's failure is a finding, not the probe's end
                rows[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
                print(f"{k.name:10s} {name:28s} failed: {rows[name]['error']}", flush=True)
                failed.append(f"{k.name}/{name}")
                continue
            verdict = nmse(f"{k.name} output", got, ref, limit)  # the gate's metric, in float64
            err, ok = verdict.value, verdict.passed
            rows[name] = {"us": t.seconds * 1e6, "of_4_04": t.fraction, "spread": t.spread, "mode": t.mode,
                          "nmse": err, "limit": limit, "claim": variant, "ok": ok, "passes": passes}
            print(f"{k.name:10s} {name:28s} {describe(t)}  nmse {err:.1e} / {limit:g} "
                  f"{'ok' if ok else 'MISSES ITS CLAIM'}" + (f"  (passes: {passes})" if passes else ""), flush=True)
            if not ok:
                failed.append(f"{k.name}/{name}")
        del sets
        torch.cuda.empty_cache()
    try:
        results["forecast"] = forecast(results["timed"], [k for k in kinds if k.name in results["timed"]], now,
                                       args.base_tok_s)
    except ValueError as exc:  # the figures are still written: the forecast is the part that cannot stand
        results["forecast"] = {"error": str(exc), "per_kernel": {}}
        print(f"forecast: none: {exc}")
        failed.append("forecast")
    for name, f in results["forecast"]["per_kernel"].items():
        if "left_out" in f:
            print(f"forecast {name}: left out ({f['left_out']})")
        else:
            print(f"forecast {name}: {f['now']} {f['now_us']:.2f} us -> {f['best']} {f['best_us']:.2f} us, "
                  f"{f['calls']} calls a token: {f['us_a_token_saved']:.1f} us a token")
    fc = results["forecast"]
    if "error" not in fc:
        print(f"forecast: {fc['us_a_token_saved']:.0f} us a token saved: {fc['base_tok_s']} -> "
              f"{fc['forecast_tok_s']:.1f} tok/s (Amdahl on the per-op figures)")
    results["failed"] = failed
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
