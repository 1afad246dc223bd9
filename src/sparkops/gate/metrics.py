"""Comparing what an implementation returned with what the reference returned, one tensor at a time.

Every comparison gives a `Verdict`: the metric's value, the limit, whether it passed, and for
people a pointer to the worst element (index, expected, got). Values are compared in float64 on the
CPU. Structure is checked first (a tuple of the right length, the reference's shape, a floating
dtype where the reference is floating and the exact integer dtype where it is not): a wrong
structure is a failure with its own message, never an exception.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..sampling_rng import uniform
from .tolerances import Rule


@dataclass
class Verdict:
    what: str  # "output 0", "state 'cache'", ...
    metric: str
    value: float
    limit: float
    passed: bool
    detail: str = ""  # the worst element: where, expected, got

    def line(self) -> str:
        verdict = "ok" if self.passed else "FAIL"
        return f"{self.what}: {show(self.metric, self.value)} (limit {_fmt(self.limit)}) {verdict}" + \
            (f"; {self.detail}" if self.detail else "")


#: metrics whose value is a count (of differing values, tokens, inputs), not a ratio
COUNTS = ("exact", "bytes", "unchanged", "structure", "steps", "scales")


def show(metric: str, value: float) -> str:
    """`metric value` for people: counts as integers, ratios to 3 significant digits."""
    if metric in COUNTS and math.isfinite(value):
        return f"{metric} {int(value)}"
    return f"{metric} {_fmt(value)}"


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if math.isinf(v) or math.isnan(v) or v >= 1e300:
        return "inf" if v > 0 else str(v)
    return f"{v:.3g}"


def _index(flat: int, shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, np.unravel_index(flat, shape))) + "]" if shape else "[]"


def structure(what: str, got: Any, ref: torch.Tensor, *, exact_dtype: bool) -> Verdict | None:
    """A failing verdict when `got` cannot be compared with `ref` at all, else None."""
    if not isinstance(got, torch.Tensor):
        return Verdict(what, "structure", math.inf, 0.0, False, f"expected a torch.Tensor, got {type(got).__name__}")
    if tuple(got.shape) != tuple(ref.shape):
        return Verdict(what, "structure", math.inf, 0.0, False,
                       f"shape {list(got.shape)}, the reference gives {list(ref.shape)}")
    if ref.is_floating_point() != got.is_floating_point() or (exact_dtype and got.dtype != ref.dtype) or \
            (not ref.is_floating_point() and got.dtype != ref.dtype):
        return Verdict(what, "structure", math.inf, 0.0, False,
                       f"dtype {got.dtype}, the reference gives {ref.dtype}")
    return None


def nmse(what: str, got: torch.Tensor, ref: torch.Tensor, limit: float) -> Verdict:
    """sum((got-ref)^2)/sum(ref^2) in float64; NaN/Inf where the reference is finite fails (poison left)."""
    g = got.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    bad = ~torch.isfinite(g) & torch.isfinite(r)
    if bool(bad.any()):
        i = int(torch.nonzero(bad.reshape(-1))[0])
        n = int(bad.sum())
        return Verdict(what, "nmse", math.inf, limit, False,
                       f"{n} of {r.numel()} values are NaN/Inf (never written? the poison is NaN); first at "
                       f"{_index(i, tuple(r.shape))}: expected {float(r.reshape(-1)[i]):.9g}, "
                       f"got {float(g.reshape(-1)[i])}")
    finite = torch.isfinite(r)
    diff = torch.where(finite, g - r, torch.zeros_like(r))
    den = float((torch.where(finite, r, torch.zeros_like(r)) ** 2).sum())
    num = float((diff ** 2).sum())
    value = num / den if den > 0 else num
    if value == 0.0:
        return Verdict(what, "nmse", 0.0, limit, True)
    i = int(diff.abs().reshape(-1).argmax())
    detail = (f"worst at {_index(i, tuple(r.shape))}: expected {float(r.reshape(-1)[i]):.9g}, "
              f"got {float(g.reshape(-1)[i]):.9g}")
    return Verdict(what, "nmse", value, limit, value <= limit, detail)


def exact(what: str, got: torch.Tensor, ref: torch.Tensor) -> Verdict:
    """Every value equal (NaN never equals anything, so a poisoned value fails)."""
    g = got.detach().cpu()
    eq = g == ref if g.dtype == ref.dtype else g.to(torch.float64) == ref.to(torch.float64)
    n = int((~eq).sum())
    if n == 0:
        return Verdict(what, "exact", 0.0, 0.0, True)
    i = int(torch.nonzero(~eq.reshape(-1))[0])
    return Verdict(what, "exact", float(n), 0.0, False,
                   f"{n} of {ref.numel()} values differ; first at {_index(i, tuple(ref.shape))}: "
                   f"expected {ref.reshape(-1)[i].item()!r}, got {g.reshape(-1)[i].item()!r}")


def same_bytes(what: str, got: torch.Tensor, other: torch.Tensor, other_name: str) -> Verdict:
    """Byte-for-byte equality (the bit-identity claim): same dtype, same shape, same bits."""
    g, o = got.detach().cpu().contiguous(), other.detach().cpu().contiguous()
    if g.dtype != o.dtype or g.shape != o.shape:
        return Verdict(what, "bytes", math.inf, 0.0, False,
                       f"{g.dtype} {list(g.shape)} vs {other_name}'s {o.dtype} {list(o.shape)}")
    gb = g.reshape(-1).view(torch.uint8).reshape(g.numel(), -1) if g.numel() else g.reshape(0, 1)
    ob = o.reshape(-1).view(torch.uint8).reshape(o.numel(), -1) if o.numel() else o.reshape(0, 1)
    differ = (gb != ob).any(dim=1)
    n = int(differ.sum())
    if n == 0:
        return Verdict(what, "bytes", 0.0, 0.0, True)
    i = int(torch.nonzero(differ)[0])
    return Verdict(what, "bytes", float(n), 0.0, False,
                   f"{n} of {g.numel()} values differ in their bits from {other_name}; first at "
                   f"{_index(i, tuple(g.shape))}: {other_name} gives {o.reshape(-1)[i].item()!r}, "
                   f"got {g.reshape(-1)[i].item()!r}")


# -- quantized activations (q, d) ----------------------------------------------------------------------
#: the spacing of float16 subnormals (2^-24): the smallest step a float16 scale can take
F16_TINY = 2.0 ** -24


def qdq(what: str, got: Any, ref: tuple[torch.Tensor, torch.Tensor], rule: Rule) -> list[Verdict]:
    """Q8_0 blocks (q int8 [T, D], d float32 [T, D/32]) judged as what they stand for (see tolerances):

    steps   q values more than one step from the reference's, q = -128 (outside Q8_0's symmetric
            range), or a non-zero q in a block whose reference scale is 0: must be none;
    scales  scales that are not float16 values, that are more than `tie` (relative; one float16
            step) from the reference's, or non-zero where the reference's is 0: must be none;
    qdq     NMSE of the dequantized values q * d against the reference's, at most `limit`.
    A NaN scale (a poisoned, unwritten one) counts as a wrong scale and makes the NMSE infinite.
    """
    if not isinstance(got, tuple) or len(got) != 2:
        return [Verdict(what, "structure", math.inf, 0.0, False, "expected (q, d)")]
    out = [v for v in (structure(f"{what} q", got[0], ref[0], exact_dtype=True),
                       structure(f"{what} d", got[1], ref[1], exact_dtype=True)) if v]
    if out:
        return out
    q_got, q_ref = got[0].detach().cpu().to(torch.int64), ref[0].to(torch.int64)
    d_got, d_ref = got[1].detach().cpu().to(torch.float64), ref[1].to(torch.float64)
    t, width = q_ref.shape
    blocks = (t, width // 32, 32)
    zero = (d_ref == 0)  # [T, D/32]: all-zero blocks, which must come back exactly zero
    zero_q = zero[..., None].expand(blocks).reshape(t, width)

    step = (q_got - q_ref).abs()
    bad_q = (step > 1) | (q_got == -128) | (zero_q & (q_got != 0))
    f16 = d_got.to(torch.float16).to(torch.float64) == d_got  # False for NaN
    near = (d_got - d_ref).abs() <= torch.maximum(rule.tie * d_ref.abs(), torch.full_like(d_ref, F16_TINY))
    bad_d = ~f16 | ~near | (zero & (d_got != 0))
    verdicts = [_count(f"{what} q", "steps", bad_q, q_got, q_ref, "more than one step from the reference"),
                _count(f"{what} d", "scales", bad_d, got[1].detach().cpu(), ref[1],
                       f"not a float16 value within {rule.tie:g} (relative) of the reference")]
    values = (q_got.to(torch.float64).reshape(blocks) * d_got[..., None]).reshape(t, width)  # [T, D]
    wanted = (q_ref.to(torch.float64).reshape(blocks) * d_ref[..., None]).reshape(t, width)
    v = nmse(f"{what} q*d", values, wanted, rule.limit)
    verdicts.append(Verdict(v.what, "qdq", v.value, v.limit, v.passed, v.detail))
    return verdicts


def _count(what: str, metric: str, bad: torch.Tensor, got: torch.Tensor, ref: torch.Tensor, why: str) -> Verdict:
    n = int(bad.sum())
    if n == 0:
        return Verdict(what, metric, 0.0, 0.0, True)
    i = int(torch.nonzero(bad.reshape(-1))[0])
    return Verdict(what, metric, float(n), 0.0, False,
                   f"{n} of {bad.numel()} values {why}; first at {_index(i, tuple(bad.shape))}: "
                   f"expected {ref.reshape(-1)[i].item()!r}, got {got.reshape(-1)[i].item()!r}")


# -- moe_router ------------------------------------------------------------------------------------
def router(what: str, got: Any, ref: tuple[torch.Tensor, torch.Tensor], inputs: dict[str, Any],
           rule: Rule) -> list[Verdict]:
    """ids exact up to near-ties of the reference's selection scores; weights by nmse (see tolerances)."""
    if not isinstance(got, tuple) or len(got) != 2:
        return [Verdict(what, "structure", math.inf, 0.0, False, "expected (weights, ids)")]
    out = [v for v in (structure(f"{what} weights", got[0], ref[0], exact_dtype=False),
                       structure(f"{what} ids", got[1], ref[1], exact_dtype=True)) if v]
    if out:
        return out
    w_got, ids_got = got[0].detach().cpu().double(), got[1].detach().cpu()
    w_ref, ids_ref = ref[0].double(), ref[1]
    x = inputs["x"].double()
    scores = torch.sigmoid(x @ inputs["weight"].double().T)  # s [T, E]
    chooser = _grouped(scores + inputs["bias"].double(), int(inputs["n_group"]), int(inputs["topk_group"]))
    n_exp = scores.shape[1]
    expected = w_ref.clone()
    excused, problems = 0, []
    for t in range(ids_ref.shape[0]):
        g_ids, r_ids = ids_got[t], ids_ref[t]
        if torch.equal(g_ids, r_ids):
            continue
        bad = ""
        if bool(((g_ids < 0) | (g_ids >= n_exp)).any()):
            bad = f"ids {g_ids.tolist()} outside [0, {n_exp})"
        elif len(set(g_ids.tolist())) != len(g_ids):
            bad = f"ids {g_ids.tolist()} repeat an expert"
        else:
            for j in range(len(r_ids)):
                a, b = float(chooser[t, g_ids[j]]), float(chooser[t, r_ids[j]])
                if int(g_ids[j]) != int(r_ids[j]) and abs(a - b) > rule.tie * max(1.0, abs(b)):
                    bad = (f"slot {j}: expected expert {int(r_ids[j])} (selection score {b:.9g}), got "
                           f"{int(g_ids[j])} (score {a:.9g}); not a tie")
                    break
        if bad:
            problems.append(f"token {t}: {bad}")
            continue
        excused += 1  # a near-tie: judge the weights the candidate's own choice implies
        chosen = scores[t, g_ids]
        expected[t] = chosen / (chosen.sum() + float(inputs["renorm_eps"])) * float(inputs["scale"])
    ids_verdict = Verdict(f"{what} ids", "exact", float(len(problems)), 0.0, not problems,
                          "; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""))
    if excused and not problems:
        ids_verdict.detail = f"{excused} token(s) differ only at near-ties (excused)"
    return [ids_verdict, nmse(f"{what} weights", w_got, expected, rule.limit)]


def _grouped(chooser: torch.Tensor, n_group: int, topk_group: int) -> torch.Tensor:
    """The selection scores with the groups the reference drops set to 0 (as the contract says)."""
    if n_group <= 1:
        return chooser
    t, e = chooser.shape
    best2 = chooser.view(t, n_group, e // n_group).topk(min(2, e // n_group), dim=-1).values.sum(-1)  # [T, G]
    order = torch.from_numpy(np.argsort(-best2.numpy(), axis=-1, kind="stable")[:, :topk_group])
    keep = torch.zeros(t, n_group, dtype=torch.bool)
    keep.scatter_(1, order, True)
    return torch.where(keep.repeat_interleave(e // n_group, dim=1), chooser, torch.zeros_like(chooser))


# -- add_rmsnorm_router ----------------------------------------------------------------------------------
def norm_router(what: str, got: Any, ref: tuple[torch.Tensor, ...], inputs: dict[str, Any], rule: Rule, *,
                exact_dtype: bool = False) -> list[Verdict]:
    """(normed, summed, weights, ids): normed and summed by nmse (`rule.norm`); the routing by the router metric as the
    routing of the normed row the candidate returned (the contract's router reads the norm's output; its rounding to
    the candidate's activation dtype - bfloat16 under a bf16 claim, float32 in the reference - is the norm's error,
    judged by the first verdict, not the router's)."""
    if not isinstance(got, tuple) or len(got) != 4:
        return [Verdict(what, "structure", math.inf, 0.0, False, "expected (normed, summed, weights, ids)")]
    out = []
    for j, label in ((0, "normed"), (1, "summed")):
        bad = structure(f"{what} {label}", got[j], ref[j], exact_dtype=exact_dtype)
        out.append(bad or nmse(f"{what} {label}", got[j], ref[j], rule.norm))
    if not all(v.passed for v in out):
        return out  # a wrong or unwritten normed row: its routing means nothing
    from sparkops_numpy.moe_router import moe_router as reference_router  # the op's definition

    x = got[0].detach().to("cpu", torch.float64)  # [T, D]: the router's input, as the candidate made it
    routed = {"x": x, "weight": inputs["router_weight"], "bias": inputs["bias"], "n_group": inputs["n_group"],
              "topk_group": inputs["topk_group"], "scale": inputs["scale"], "renorm_eps": inputs["renorm_eps"]}
    want = reference_router(x, inputs["router_weight"], inputs["bias"], int(inputs["top_k"]), int(inputs["n_group"]),
                            int(inputs["topk_group"]), float(inputs["scale"]), float(inputs["renorm_eps"]))
    return out + router(f"{what} routing", tuple(got[2:]), tuple(want), routed, rule)


# -- sample ----------------------------------------------------------------------------------------
def sample(what: str, got: Any, ref: torch.Tensor, inputs: dict[str, Any], rule: Rule) -> list[Verdict]:
    """ids exact up to near-ties of the reference's perturbed scores among tokens that may survive."""
    bad = structure(what, got, ref, exact_dtype=True)
    if bad:
        return [bad]
    g = got.detach().cpu()
    if torch.equal(g, ref):
        return [Verdict(what, "exact", 0.0, 0.0, True)]
    logits = inputs["logits"].double().numpy()
    temp, top_k, top_p = float(inputs["temperature"]), int(inputs["top_k"]), float(inputs["top_p"])
    rows, vocab = logits.shape
    if temp == 0:
        score = logits
    else:
        z = logits / temp
        u = uniform(int(inputs["seed"]), int(inputs["step"].reshape(-1)[0]), rows, vocab)
        score = z - np.log(-np.log(u))
    problems, excused = [], 0
    for b in range(rows):
        c, r = int(g[b]), int(ref[b])
        if c == r:
            continue
        if not 0 <= c < vocab:
            problems.append(f"row {b}: id {c} outside [0, {vocab})")
            continue
        gap = abs(score[b, c] - score[b, r])
        near = gap <= rule.tie * max(1.0, abs(score[b, r]))
        if near and (temp == 0 or _may_survive(logits[b] / temp, c, top_k, top_p, rule.tie)):
            excused += 1
            continue
        problems.append(f"row {b}: expected token {r} (score {score[b, r]:.9g}), got {c} "
                        f"(score {score[b, c]:.9g}); not a tie")
    detail = "; ".join(problems[:3]) or f"{excused} row(s) differ only at near-ties (excused)"
    return [Verdict(what, "exact", float(len(problems)), 0.0, not problems, detail)]


def _may_survive(z: np.ndarray, c: int, top_k: int, top_p: float, tie: float) -> bool:
    """Could token c survive top-k then top-p on z if scores within `tie` were ordered differently?"""
    margin = tie * max(1.0, abs(float(z[c])))
    ranked = np.sort(z)[::-1]
    if 0 < top_k < len(z) and z[c] < ranked[top_k - 1] - margin:
        return False
    if top_p < 1.0:
        pool = ranked[:top_k] if 0 < top_k < len(z) else ranked
        p = np.exp(pool - pool[0])
        p /= p.sum()
        better = p[pool > z[c] + margin].sum()  # mass of the tokens surely ranked above c
        if better >= top_p + tie:
            return False
    return True


# -- logits (the model-level gate) -----------------------------------------------------------------
def kl_and_top1(ref: torch.Tensor, cand: torch.Tensor, tie: float) -> tuple[np.ndarray, np.ndarray]:
    """Per row of logits [P, V]: KL(softmax(ref) || softmax(cand)) in float64, and top-1 agreement.

    A row disagrees on top-1 unless the candidate's argmax is the reference's, or the reference's
    logit for the candidate's argmax is within `tie` (relative) of its best. NaN/Inf in a candidate
    row gives KL = inf and a disagreement.
    """
    r = ref.detach().to("cpu", torch.float64)
    c = cand.detach().to("cpu", torch.float64)
    if r.shape != c.shape:
        raise ValueError(f"logits of shape {list(c.shape)} cannot be compared with the reference's {list(r.shape)}")
    lr = torch.log_softmax(r, dim=-1)
    finite = torch.isfinite(c).all(dim=-1)
    lc = torch.log_softmax(torch.where(torch.isfinite(c), c, torch.zeros_like(c)), dim=-1)
    kl = (lr.exp() * (lr - lc)).sum(dim=-1).clamp_min(0.0)
    kl = torch.where(finite, kl, torch.full_like(kl, math.inf))
    best_r = r.argmax(dim=-1)
    best_c = torch.where(torch.isfinite(c), c, torch.full_like(c, -math.inf)).argmax(dim=-1)
    top_r = r.gather(1, best_r[:, None])[:, 0]
    their = r.gather(1, best_c[:, None])[:, 0]
    agree = (best_c == best_r) | ((top_r - their) <= tie * top_r.abs().clamp_min(1.0))
    agree &= finite
    return kl.numpy(), agree.numpy()
