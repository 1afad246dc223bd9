"""THE tolerance table: for every op and claim variant, the metric the gate applies and its threshold.

This is the only place thresholds live. `sparkops check` / `sparkops swap` read the op rows, the
model-level gate reads MODEL_RULES, and reference.lock pins a copy of both: a test fails when a
threshold here is looser than its pin, and `sparkops reference update` refuses to pin a looser one.
Thresholds can be tightened (then re-pinned with `reference update`), never loosened.

Metrics (all computed in float64 against the NumPy reference on the same inputs):
  nmse    sum((got - ref)^2) / sum(ref^2) over a whole output or state tensor (ggml's test-backend-ops
          metric); any NaN/Inf where the reference is finite fails outright (a poisoned, unwritten value).
  exact   every value equal (integers, and ops whose contract demands bit-exact float32 arithmetic).
  router  moe_router: ids exact, except where the reference's selection scores of the two experts
          that differ are within `tie` (relative) of each other - then either choice is right; the
          weights are compared by nmse (`limit`), against the reference where the ids agree and
          against the weights the candidate's own choice implies where a tie was excused.
  norm_router  add_rmsnorm_router (a norm, then a router on its output): normed and summed by nmse (`norm`: the
          add_rmsnorm row's limit), the routing by the router metric (`limit`, `tie`: the moe_router row's) judged as
          the routing of the normed row the candidate returned - the router's input in the fused op is its own
          output, which the first two verdicts already hold to the reference.
  sample  sample: ids exact, except where the reference's perturbed scores of the two tokens are
          within `tie` (relative) and the candidate's token could have survived top-k / top-p.
  qdq     Q8_0 blocks (q int8, d float32 holding float16 values), judged as what they stand for: every
          q within one step of the reference's, every scale a float16 value within `tie` (relative:
          one float16 step) of the reference's, all-zero blocks exactly zero, and the NMSE of the
          dequantized values q * d at most `limit`. For ops that quantize a float32 result they
          compute (rmsnorm_quantize): one ulp in the result may move a value across a rounding
          boundary, or a block maximum across a float16 rounding boundary of its scale.

Variants (a claim's `tolerance(variant)`): "fp32" (also spelled None) for float32 arithmetic,
"bf16" for bfloat16 activations (the gate casts the contract's activation inputs to bfloat16 and the
reference sees the same values), "act_q8" for implementations that quantize activations to Q8_0
blocks before integer dot products (linear, moe_experts), "fp8_cache" for attention over an MLA cache in
float8_e4m3fn with bfloat16 activations (the gate casts the contract's cache inputs to fp8 by
sparkops/kvcache.py's rounding, the activations to bfloat16, and the reference sees the same values).

How the numbers were chosen (measured with `python -m sparkops.gate.calibrate`, which runs the
catalog's implementations and bf16 / Q8_0-activation emulations over pinned and fresh seeds; the
worst NMSE seen is quoted next to each row). A float32 result rounded once sits near NMSE 1e-15;
float32 accumulation over K terms adds ~K * 1e-15. Each limit sits one to three decades above the
worst measurement (so a fresh seed never fails an honest implementation) and decades below what
the classic bugs produce: a missing scale factor, an off-by-one row or a doubled reduce all land at
NMSE >= 1e-2; a last-bit difference is not a tolerance matter at all but a bit-identity one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..errors import BadInput

VARIANTS = ("fp32", "bf16", "act_q8", "fp8_cache")
METRICS = ("exact", "nmse", "router", "sample", "qdq", "norm_router")


@dataclass(frozen=True)
class Rule:
    """How one op's outputs and state are judged under one claim variant."""

    metric: str  # one of METRICS
    limit: float = 0.0  # nmse / router weights: the largest NMSE allowed (0 for exact)
    tie: float = 0.0  # router / sample: relative gap under which two candidates count as tied
    why: str = ""  # the measurement or reasoning behind the numbers (pinned as a comment)
    norm: float = 0.0  # norm_router: the largest NMSE of the normed and summed outputs

    def __str__(self) -> str:
        if self.metric == "exact":
            return "exact"
        if self.metric == "nmse":
            return f"nmse <= {self.limit:g}"
        if self.metric == "qdq":
            return f"qdq: q within one step, d within {self.tie:g} (relative), nmse of q*d <= {self.limit:g}"
        if self.metric == "norm_router":
            return (f"norm_router: normed and summed nmse <= {self.norm:g}; routing of its normed: ids exact (ties "
                    f"within {self.tie:g} excused), weights nmse <= {self.limit:g}")
        extra = f", weights nmse <= {self.limit:g}" if self.metric == "router" else ""
        return f"{self.metric}: ids exact (ties within {self.tie:g} excused){extra}"

    def pinned(self) -> dict[str, Any]:
        """The numbers reference.lock pins (`norm` only where the metric has it: the other rows' pins stay as they
        were)."""
        return {k: v for k, v in asdict(self).items() if k != "why" and (k != "norm" or self.metric == "norm_router")}


@dataclass(frozen=True)
class ModelRule:
    """The model-level verdict for a registry whose loosest claim is this variant (per checked depth)."""

    kl_max: float  # the largest KL(ref || cand) allowed at any one position
    kl_mean_max: float  # the largest mean KL over a depth's positions
    top1_min: float  # the smallest fraction of a depth's positions whose argmax agrees
    tie: float  # a top-1 disagreement is excused where the reference's best two logits are this close
    why: str = ""

    def __str__(self) -> str:
        return f"KL <= {self.kl_max:g} (mean <= {self.kl_mean_max:g}), top-1 >= {self.top1_min:g}"

    def pinned(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "why"}


def _nmse(limit: float, why: str) -> Rule:
    return Rule("nmse", limit, why=why)


_EXACT = Rule("exact", why="the contract demands bit-exact results")


def _norm_router(norm: Rule, router: Rule, why: str) -> Rule:
    """add_rmsnorm_router's row: add_rmsnorm's NMSE limit for normed and summed, moe_router's limit and tie for the
    routing (the fused op's numbers are its parts', never looser)."""
    return Rule("norm_router", router.limit, tie=router.tie, norm=norm.limit, why=why)


_BF16 = ("bfloat16 keeps 8 bits: rounding the output alone gives ~4e-6; worst of 30+ seeds {}; "
         "the limit leaves >10x")

#: the rows the fused add_rmsnorm_router takes its numbers from
_ADD_RMSNORM: dict[str, Rule] = {
    "fp32": _nmse(1e-11, "as rmsnorm, plus one float32 add; measured worst 1.3e-14"),
    "bf16": _nmse(1e-4, _BF16.format("4e-6")),
}
_MOE_ROUTER: dict[str, Rule] = {
    "fp32": Rule("router", 1e-10, tie=1e-5, why="float32 logits and sigmoid over D <= 256: scores agree "
                                                  "to ~1e-7 relative, so only gaps under 1e-5 may swap; "
                                                  "weights measured worst 2.6e-14"),
    "bf16": Rule("router", 1e-10, tie=1e-5, why="the router computes in float32 whatever the activation "
                                                  "dtype (spec 7); the reference sees the same bf16 x"),
}

#: per op, per variant. A variant missing from an op's row cannot be claimed for that op.
#: Measured (CPU, `python -m sparkops.gate.calibrate`): "fp32" with the torch plugin's float32 ops, "bf16"
#: with float32 ops fed bfloat16 activations and with the torch plugin's bf16-operand matmuls run on
#: CPU, "act_q8" with activations rounded through the reference Q8_0 quantizer before a float32 op.
OP_RULES: dict[str, dict[str, Rule]] = {
    "embedding": {
        "fp32": _nmse(1e-12, "dequantized rows are exact in float32 (d*q - m up to one rounding); measured 0"),
        "bf16": _nmse(1e-4, _BF16.format("3e-6")),
    },
    "rmsnorm": {
        "fp32": _nmse(1e-11, "one reduction of <= 2304 squares; measured worst 8e-15"),
        "bf16": _nmse(1e-4, _BF16.format("4e-6")),
    },
    "add_rmsnorm": _ADD_RMSNORM,
    "linear": {
        "fp32": _nmse(1e-10, "float32 dot products over K <= 512; measured worst 1.8e-13 (a TF32 matmul lands "
                             "near 1e-7 and must claim bf16)"),
        "bf16": _nmse(5e-4, "bfloat16 operands, float32 accumulation: worst of 38 seeds 4.3e-5"),
        "act_q8": _nmse(5e-3, "Q8_0 activations: error ~ block max / 127, NMSE ~3e-5 on average, but the "
                              "1-row 5-output cases are F(5,5)-tailed: worst of 38 seeds 8.5e-4 (emulated on "
                              "CPU); the CuPy dp4a kernel on an H200 3.2e-4"),
    },
    "linear_add_rmsnorm": {
        "fp32": _nmse(1e-10, "linear's row for both outputs: the norm adds one float32 reduction (~1e-14), and the "
                             "residual's spread (3x the projection's in the cases) only shrinks the projection's share "
                             "of the error; measured worst 2.7e-14 (torch, 8 seeds)"),
        "bf16": _nmse(5e-4, "linear's row: bfloat16 operands in the projection, then the sum and normed row rounded "
                            "to bfloat16 (~4e-6); measured worst 1.2e-5 (torch fed bf16, 8 seeds)"),
        "act_q8": _nmse(5e-3, "linear's row: Q8_0 activations' error passes into the sum diluted by the residual; "
                              "measured worst 4.6e-5 (emulated on CPU, 8 seeds)"),
    },
    "quantize_act": {"fp32": _EXACT},
    "rmsnorm_quantize": {
        "fp32": Rule("qdq", 1e-4, tie=2.0 ** -10,
                     why="a float32 norm sits ~1 ulp from the rounded float64 one. torch vs the reference, 20 "
                         "seeds (628k values): no q off by one, 1 scale one float16 step off (5.8e-4 relative; "
                         "2^-10 is one step at the bottom of a binade), worst q*d NMSE 2.3e-10; one q step in "
                         "the one-block case alone would give ~1e-5. Truncating q instead of rounding: 4.4e-4"),
    },
    "short_conv": {
        "fp32": _nmse(1e-11, "W <= 4 taps then SiLU; measured worst 1e-14"),
        "bf16": _nmse(1e-4, _BF16.format("7e-6")),
    },
    "kda": {
        "fp32": _nmse(1e-9, "recurrent / chunked gated delta rule over up to 131 steps with decay logits up to "
                            "hundreds (chunk inverses amplify rounding); measured worst 8e-14"),
        "bf16": _nmse(1e-3, "bf16 q/k/v/g into a float32 state: worst of 10 seeds 6e-6 with float32 maths; "
                            "chunked kernels multiply bf16 tiles inside a chunk, ~10x more"),
    },
    "gated_rmsnorm": {
        "fp32": _nmse(1e-11, "per-head norm and a sigmoid; measured worst 8e-15"),
        "bf16": _nmse(1e-4, _BF16.format("4e-6")),
    },
    "kda_norm": {
        "fp32": _nmse(1e-9, "kda's row (the norm divides by the row's own scale, so relative errors pass through): "
                            "measured worst 8.7e-14 (torch, 6 seeds)"),
        "bf16": _nmse(1e-3, "kda's row: bf16 q/k/v/g/gate into float32 maths, the core output unrounded before the "
                            "norm (rounded to bf16 there, as the unfused chain does, adds ~4e-6); measured worst "
                            "5.0e-6 (torch fed bf16, 6 seeds)"),
    },
    "kda_lowrank_norm": {
        "fp32": _nmse(1e-9, "kda_norm's row, with the two up-projections in float32 dots of P <= 128 terms ahead of "
                            "it: measured worst 4.4e-13 (torch, 6 seeds)"),
        "bf16": _nmse(1e-3, "kda_norm's row: bf16 codes into float32 up-projections and maths, nothing rounded "
                            "between; measured worst 1.5e-4 (torch fed bf16 codes and q/k/v, 6 seeds: a rounded "
                            "code moves the decay logits through P terms, over 130 steps)"),
    },
    "short_conv_kda_norm": {
        "fp32": _nmse(1e-9, "kda_norm's row: the conv's W <= 4 taps and SiLU (1e-14) ahead of the recurrence; measured "
                            "worst 9.6e-14 (torch, 6 seeds)"),
        "bf16": _nmse(1e-3, "kda_norm's row: the conv's output rounded to bf16 as the unfused chain hands it over (the "
                            "reference, fed float32, rounds it to float32) into float32 maths, over 130 steps; measured "
                            "worst 9.0e-5 (torch fed bf16, 6 seeds)"),
    },
    "attention": {
        "fp32": _nmse(1e-10, "absorbed or naive MLA, float32 softmax over <= 96 rows; measured worst 9e-14"),
        "bf16": _nmse(1e-3, "bf16 queries, latents, cache and score/value matmuls: worst of 20 seeds 6.4e-5"),
        "fp8_cache": _nmse(1e-3, "bf16 queries, the latents and cache in float8_e4m3fn (the reference attends the same "
                                 "fp8 values, so the row is bf16's: the cache's rounding is judged by the model gate); "
                                 "measured worst of 20 seeds 5.6e-6 (torch_fp8cache, float32 "
                                 "arithmetic, its output rounded to bf16), 5.0e-5 (the same on bf16 operands)"),
    },
    "moe_router": _MOE_ROUTER,
    "add_rmsnorm_router": {
        "fp32": _norm_router(_ADD_RMSNORM["fp32"], _MOE_ROUTER["fp32"],
                             "add_rmsnorm's and moe_router's rows, the routing judged on the normed row returned; "
                             "measured (torch, 6 seeds) normed/summed worst 1.3e-14, routing weights worst "
                             "2.4e-14"),
        "bf16": _norm_router(_ADD_RMSNORM["bf16"], _MOE_ROUTER["bf16"],
                             "add_rmsnorm's and moe_router's rows: the normed row rounded to bf16 is the router's input "
                             "(the reference's is rounded to float32), so the routing is judged on the candidate's own "
                             "normed row; measured (torch fed bf16, 6 seeds) normed/summed worst 4.8e-6, routing "
                             "weights worst 5.0e-14"),
    },
    "moe_experts": {
        "fp32": _nmse(1e-10, "three chained float32 GEMVs per expert; measured worst 1.1e-13"),
        "bf16": _nmse(1e-3, "bfloat16 operands in three chained GEMVs: measured worst 3.2e-5"),
        "act_q8": _nmse(1e-2, "two quantized operands per expert (x, then the heavy-tailed SwiGLU output, "
                              "whose block maxima dwarf its typical values): the CuPy dp4a kernel on an H200 "
                              "measured 2.1e-3; quantizing x alone 1.1e-4"),
    },
    "moe_experts_add_rmsnorm": {
        "fp32": _nmse(1e-10, "moe_experts' row for both outputs: the norm adds one float32 reduction (~1e-14), and the "
                             "residual's spread (3x the experts' output in the cases) only shrinks the experts' share "
                             "of the error; measured worst 4.8e-14 (torch, 8 seeds)"),
        "bf16": _nmse(1e-3, "moe_experts' row: bfloat16 operands in the experts, then the sum and normed row rounded "
                            "to bfloat16 (~4e-6); measured worst 5.1e-6 (torch fed bf16, 8 seeds)"),
        "act_q8": _nmse(1e-2, "moe_experts' row: the experts' Q8 roundings pass into the sum diluted by the residual; "
                              "measured worst 2.9e-5 (x quantized alone, emulated on CPU, 8 seeds)"),
    },
    "swiglu": {
        "fp32": _nmse(1e-11, "elementwise; measured worst 6e-15"),
        "bf16": _nmse(1e-4, _BF16.format("4e-6")),
    },
    "sample": {
        "fp32": Rule("sample", tie=1e-5, why="float32 logits / temperature plus the shared Gumbel noise: "
                                              "perturbed scores agree to ~1e-6 relative"),
    },
}

#: the model-level gate (KL and top-1 agreement of the logits at every checked position), measured on
#: k3-nano at depths 1, 63, 64, 65, 129 (+3 decoded tokens each) against the float64 reference registry
MODEL_RULES: dict[str, ModelRule] = {
    "fp32": ModelRule(kl_max=1e-6, kl_mean_max=1e-7, top1_min=1.0, tie=1e-4,
                      why="the torch plugin's float32 ops: worst position KL 3.8e-12, mean 1.4e-12, top-1 1.0"),
    "act_q8": ModelRule(kl_max=2.0, kl_mean_max=0.1, top1_min=0.8, tie=1e-2,
                        why="as bf16: Q8_0 activations perturb as much as bf16 rounding (per-op NMSE ~1e-4)"),
    "bf16": ModelRule(kl_max=2.0, kl_mean_max=0.1, top1_min=0.8, tie=1e-2,
                      why="float32 ops on bfloat16 activations and cache: worst position KL 0.40, worst depth mean "
                          "0.021, top-1 0.924. k3-nano's random weights make its logits sensitive; tighten these "
                          "with a trained model's measurements"),
    "fp8_cache": ModelRule(kl_max=2.0, kl_mean_max=0.1, top1_min=0.8, tie=1e-2,
                           why="bf16 activations and the MLA cache in float8_e4m3fn (torch_fp8cache, k3-nano, the "
                               "default depths): worst position KL 9.3e-4, worst depth mean 5.6e-4, top-1 0.985; the "
                               "same with a bf16 cache 6.8e-4, 2.8e-4, 0.992, and with float32 activations 8.6e-4, "
                               "top-1 1.0. The bf16 row's limits, until a trained model's measurements tighten both"),
}

#: how loose each variant is, for the model gate: a registry is judged by its loosest claim
LOOSENESS = {"fp32": 0, "act_q8": 1, "bf16": 2, "fp8_cache": 3}
#: the variant of an implementation proven on an MLA cache in float8_e4m3fn (sparkops/kvcache.py), with bf16
#: activations; a registry whose attention claims it runs with that cache
FP8_CACHE = "fp8_cache"
#: the variants whose implementations are fed bfloat16 activations
BF16_ACTIVATIONS = ("bf16", FP8_CACHE)


def activation_dtype(variant: str | None) -> torch.dtype:
    """The activation dtype a claim variant is checked (and a registry judged by it is run) with."""
    return torch.bfloat16 if variant_name(variant) in BF16_ACTIVATIONS else torch.float32


def variant_name(variant: str | None) -> str:
    """The table's spelling of a claim variant (None means float32)."""
    return variant or "fp32"


def rule_for(op: str, variant: str | None) -> Rule:
    """The row for `op` under `variant`, or a clear error naming the variants the op has."""
    rows = OP_RULES.get(op)
    if rows is None:
        raise BadInput(f"the tolerance table has no row for op '{op}'; add one to sparkops/gate/tolerances.py")
    v = variant_name(variant)
    if v not in rows:
        raise BadInput(f"op '{op}' has no tolerance row for variant '{v}'; its rows are: {', '.join(rows)}. "
                       f"Claim one of those, or add a row (with its measurement) to sparkops/gate/tolerances.py")
    return rows[v]


def router_tie(variant: str | None) -> float:
    """The routing tie a whole registry judged by `variant` excuses (the model gate's pinned routing, the checks of its
    routing): moe_router's row for the activations it runs (an fp8_cache registry runs bf16 ones)."""
    v = variant_name(variant)
    return rule_for("moe_router", "bf16" if v == FP8_CACHE else v).tie


def model_rule_for(variant: str | None) -> ModelRule:
    v = variant_name(variant)
    if v not in MODEL_RULES:
        raise BadInput(f"no model-level rule for variant '{v}'; rules exist for: {', '.join(MODEL_RULES)}")
    return MODEL_RULES[v]


def loosest(variants: list[str | None]) -> str:
    """The loosest of several claim variants (what a whole registry is judged by)."""
    names = [variant_name(v) for v in variants] or ["fp32"]
    return max(names, key=lambda v: LOOSENESS.get(v, len(LOOSENESS)))


def pinned_table() -> dict[str, Any]:
    """The table as reference.lock pins it (no prose)."""
    return {
        "ops": {op: {v: r.pinned() for v, r in rows.items()} for op, rows in OP_RULES.items()},
        "model": {v: r.pinned() for v, r in MODEL_RULES.items()},
    }


def loosenings(pinned: dict[str, Any]) -> list[str]:
    """Where the table is looser than `pinned` (a table from reference.lock); empty when it is not.

    A looser op row: a larger limit or tie, or a metric other than the pinned one unless it became
    exact. A looser model row: a larger kl_max, kl_mean_max or tie, or a smaller top1_min. Rows that are new
    (not pinned) are not loosenings; rows that disappeared are tightenings (nothing can claim them).
    """
    problems = []
    for op, rows in (pinned.get("ops") or {}).items():
        for variant, old in rows.items():
            new = OP_RULES.get(op, {}).get(variant)
            if new is None:
                continue
            where = f"{op} ({variant})"
            if new.metric != old.get("metric"):
                if new.metric != "exact":
                    problems.append(f"{where}: metric changed from {old.get('metric')} to {new.metric}")
                continue
            for key in ("limit", "tie", "norm"):
                if getattr(new, key) > float(old.get(key, 0.0)):
                    problems.append(f"{where}: {key} {getattr(new, key):g} is looser than the pinned {old.get(key):g}")
    for variant, old in (pinned.get("model") or {}).items():
        new = MODEL_RULES.get(variant)
        if new is None:
            continue
        for key in ("kl_max", "kl_mean_max", "tie"):
            if getattr(new, key) > float(old.get(key, 0.0)):
                problems.append(f"model ({variant}): {key} {getattr(new, key):g} is looser than the pinned "
                                f"{old.get(key, 0.0):g}")
        if new.top1_min < float(old["top1_min"]):
            problems.append(f"model ({variant}): top1_min {new.top1_min:g} is looser than the pinned "
                            f"{old['top1_min']:g}")
    return problems
