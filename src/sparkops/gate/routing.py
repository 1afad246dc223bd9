"""Routing pinned to the golden run: the model gate judges expert choices as decisions, the rest as numbers.

Why. A MoE router makes discrete choices: top-8 of 256 experts per token and layer. Two correct float32
kernels that differ in their last bits move the router's scores by ~1e-7, and where two experts' scores
tie that closely the choice flips. One flip changes that token's hidden state by O(1), the KDA state carries
it to every later position, and after thousands of positions the logits of two equally correct registries
disagree wholesale. On the random 48B at depth 4096 every float32 kernel that is not bit-identical to the
golden one (rmsnorm included) failed the model gate that way, KL 0.1-0.4 (bench/gpu-runs/2026-11-29-session3):
the gate was measuring the model's chaos, not the kernels.

What. The golden run records each MoE layer's chosen experts at every position (a tape). The candidate
run replays it: its own router runs, and
  - its choice must be a top-k of its own scores (recomputed here, in float32 or better, from the input it
    was given), ties within the router's op tolerance excused. A router that picks experts its scores do
    not rank top-k (a bug in top-k, grouping or the selection bias) is refused here, whatever the golden
    chose;
  - where its choice equals the golden's (as a set), its own ids and weights go on: its weights are judged
    through the logits;
  - where it differs (a flip), the golden's experts are used, weighted by the formula of the op's contract
    applied to the candidate's own scores. The flip is counted and its margin reported: how far, in
    selection score, the golden's k-th choice sat below the candidate's.
So the logits compare numbers with numbers, and a kernel's numeric error cannot hide behind, nor be
blamed for, a cascade of near-tie flips. `--free-routing` runs the candidate unpinned (the old behaviour).

Where it cannot pin. The captured CUDA-graph step replays one recorded launch sequence; the golden's
choices at each step cannot be fed to it, so `--captured` runs with free routing (on k3-nano, few steps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch


@dataclass
class RoutingReport:
    """What the pinned candidate's routers did, over every MoE layer and position checked."""

    decisions: int = 0  # token x layer routing decisions
    flips: int = 0  # decisions whose expert set differed from the golden's (replaced by it)
    inconsistent: int = 0  # decisions that are not a top-k of the candidate's own scores (refused)
    max_flip_margin: float = 0.0  # largest selection-score gap of a flip: candidate's k-th vs the golden's k-th
    worst_inconsistency: float = 0.0  # largest score by which an unchosen expert beat a chosen one
    pinned: bool = True
    why_free: str = ""

    @property
    def passed(self) -> bool:
        return self.inconsistent == 0

    def line(self) -> str:
        if not self.pinned:
            return f"routing: free ({self.why_free})"
        share = self.flips / self.decisions if self.decisions else 0.0
        text = (f"routing pinned to the golden run: {self.flips} of {self.decisions} decisions flipped "
                f"({share:.3%}), largest flip margin {self.max_flip_margin:.3g} in selection score")
        if self.inconsistent:
            text += (f"; {self.inconsistent} decision(s) are not a top-k of the router's own scores (an unchosen "
                     f"expert scored up to {self.worst_inconsistency:.3g} above a chosen one): FAIL")
        return text

    def as_json(self) -> dict[str, Any]:
        return {"pinned": self.pinned, "why_free": self.why_free, "decisions": self.decisions, "flips": self.flips,
                "inconsistent": self.inconsistent, "max_flip_margin": self.max_flip_margin,
                "worst_inconsistency": self.worst_inconsistency, "passed": self.passed}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RoutingReport":
        """The report as_json wrote (its derived 'passed' recomputed, never trusted)."""
        return cls(**{k: v for k, v in d.items() if k != "passed"})


def selection_scores(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, n_group: int,
                     topk_group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, s') of the moe_router contract: sigmoid scores [T, E] and the group-masked selection scores [T, E],
    in float64 when x is float64, else float32."""
    dt = torch.float64 if x.dtype == torch.float64 else torch.float32
    s = torch.sigmoid(x.to(dt) @ weight.to(dt).T)  # [T, E]
    sel = s + bias.to(dt)
    if n_group > 1:
        t, e = sel.shape
        grouped = sel.view(t, n_group, e // n_group)
        group_score = grouped.topk(2, dim=-1).values.sum(-1)  # [T, G]
        keep = torch.zeros_like(group_score, dtype=torch.bool)
        keep.scatter_(1, torch.sort(group_score, dim=-1, descending=True, stable=True).indices[:, :topk_group], True)
        sel = torch.where(keep[:, :, None], grouped, torch.zeros_like(grouped)).view(t, e)
    return s, sel


class RoutingPin:
    """Records (golden) or replays (candidate) each MoE layer's expert choices, per depth's sequence.

    The engine routes once per MoE layer per forward (moe_router, or add_rmsnorm_router under fuse_router_norm),
    layers in order, so the k-th call of a forward is MoE layer k % n_moe, and each layer sees the sequence's
    positions in order whatever the prefill chunking: the tape is indexed by (layer, position), never by call.
    """

    def __init__(self, n_moe: int, tie: float):
        if n_moe < 1:
            raise ValueError("a routing pin needs a model with MoE layers")
        self.n_moe = n_moe
        self.tie = tie  # the router op's tie tolerance (relative)
        self.tape: dict[int, list[list[torch.Tensor]]] = {}
        self.report = RoutingReport()
        self._depth: int | None = None
        self._replay = False
        self._calls = 0
        self._pos = [0] * n_moe
        self._stats: list[torch.Tensor] = []

    # -- the run ---------------------------------------------------------------------------------------
    def start(self, depth: int, *, replay: bool) -> None:
        """A fresh sequence for `depth` (after engine.reset()): record it, or replay the golden's."""
        if replay and depth not in self.tape:
            raise KeyError(f"no golden routing was recorded for depth {depth}")
        self._depth, self._replay, self._calls, self._pos = depth, replay, 0, [0] * self.n_moe
        if not replay:
            self.tape[depth] = [[] for _ in range(self.n_moe)]

    def wrap(self, router: Callable[..., Any]) -> Callable[..., Any]:
        def moe_router(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
            w, ids = router(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps)  # [T, K], [T, K]
            return self._decided(x, weight, bias, n_group, topk_group, scale, renorm_eps, w, ids)

        return moe_router

    def wrap_fused(self, fused: Callable[..., Any]) -> Callable[..., Any]:
        """The same for add_rmsnorm_router (`[engine] fuse_router_norm`): a MoE layer's routing decision there, judged
        and pinned on the normed row the op returned (the router's input), counted as that layer's call."""
        def add_rmsnorm_router(x, residual, weight, eps, router_weight, bias, top_k, n_group, topk_group, scale,
                               renorm_eps):
            normed, summed, w, ids = fused(x, residual, weight, eps, router_weight, bias, top_k, n_group, topk_group,
                                           scale, renorm_eps)  # [T, D], [T, D], [T, K], [T, K]
            w, ids = self._decided(normed, router_weight, bias, n_group, topk_group, scale, renorm_eps, w, ids)
            return normed, summed, w, ids

        return add_rmsnorm_router

    def _decided(self, x, weight, bias, n_group, topk_group, scale, renorm_eps, w, ids):
        """One MoE layer's routing decision (x [T, D] the router's input): recorded, or replayed against the
        golden's."""
        if self._depth is None:
            return w, ids
        layer = self._calls % self.n_moe
        self._calls += 1
        t = x.shape[0]
        if not self._replay:
            self.tape[self._depth][layer].append(ids.detach().to("cpu", torch.int64))
            return w, ids
        p = self._pos[layer]
        self._pos[layer] = p + t
        golden = self._golden(layer)[p:p + t].to(ids.device)  # [T, K]
        return self._pinned(x, weight, bias, n_group, topk_group, scale, renorm_eps, w, ids, golden)

    def _golden(self, layer: int) -> torch.Tensor:
        rows = self.tape[self._depth][layer]
        if len(rows) > 1:
            rows[:] = [torch.cat(rows)]
        return rows[0]

    def _pinned(self, x, weight, bias, n_group, topk_group, scale, renorm_eps, w, ids, golden):
        if golden.shape != ids.shape:
            raise RuntimeError(f"routing pin: the golden run chose {list(golden.shape)} experts here, the candidate "
                               f"{list(ids.shape)}; the two runs did not process the same positions")
        s, sel = selection_scores(x, weight, bias, n_group, topk_group)  # [T, E] each
        ids = ids.to(torch.int64)
        chosen_min = sel.gather(1, ids).min(dim=1).values  # [T]
        others_max = sel.scatter(1, ids, float("-inf")).max(dim=1).values  # [T]
        excess = others_max - chosen_min  # > 0: an unchosen expert outscored a chosen one
        # the router rule's tie, relative to the scores' size (sigmoid-scale: at least 1, so that scores near 0
        # - a masked group's - are not held to an absolute zero)
        tol = self.tie * torch.maximum(torch.maximum(chosen_min.abs(), others_max.abs()), torch.ones_like(excess))
        bad = excess > tol
        flips = (torch.sort(ids, dim=1).values != torch.sort(golden, dim=1).values).any(dim=1)  # [T]
        margin = torch.where(flips, chosen_min - sel.gather(1, golden).min(dim=1).values, torch.zeros_like(chosen_min))
        self._stats.append(torch.stack([flips.sum().to(margin.dtype), bad.sum().to(margin.dtype),
                                        margin.max(), torch.where(bad, excess, torch.zeros_like(excess)).max(),
                                        torch.tensor(float(ids.shape[0]), dtype=margin.dtype, device=margin.device)]))
        wg = s.gather(1, golden)
        wg = wg / (wg.sum(dim=1, keepdim=True) + renorm_eps) * scale
        out_ids = torch.where(flips[:, None], golden, ids)
        out_w = torch.where(flips[:, None], wg.to(w.dtype), w)
        return out_w, out_ids.to(ids.dtype)

    def finish(self) -> RoutingReport:
        """Fold the replayed decisions into the report (one host sync, at the end)."""
        if self._stats:
            st = torch.stack([v.to("cpu", torch.float64) for v in self._stats])  # [calls, 5]
            r = self.report
            r.flips += int(st[:, 0].sum())
            r.inconsistent += int(st[:, 1].sum())
            r.max_flip_margin = max(r.max_flip_margin, float(st[:, 2].max()))
            r.worst_inconsistency = max(r.worst_inconsistency, float(st[:, 3].max()))
            r.decisions += int(st[:, 4].sum())
            self._stats.clear()
        self._depth = None
        return self.report


@dataclass
class Pinning:
    """The model gate's hook: which pin (if any) a run_depths call records into or replays from."""

    pin: RoutingPin | None
    replay: bool
    notes: list[str] = field(default_factory=list)

    def start(self, depth: int) -> None:
        if self.pin is not None:
            self.pin.start(depth, replay=self.replay)


def n_moe_layers(weights: Any) -> int:
    from ..weights import MoEWeights

    return sum(isinstance(layer.ffn, MoEWeights) for layer in weights.layers)


def install(ops: Any, pin: RoutingPin) -> Any:
    """Route `ops.moe_router` - and `ops.add_rmsnorm_router`, which routes a MoE layer's decode calls under
    `[engine] fuse_router_norm` - through `pin` (the Ops object is the engine's; returned for chaining)."""
    ops.moe_router = pin.wrap(ops.moe_router)
    if hasattr(ops, "add_rmsnorm_router"):
        ops.add_rmsnorm_router = pin.wrap_fused(ops.add_rmsnorm_router)
    return ops


def recording(ops: Any, weights: Any) -> Pinning:
    """The golden run's side: `ops` record every MoE layer's choices (no pin for a model without MoE layers)."""
    n_moe = n_moe_layers(weights)
    pin = RoutingPin(n_moe, 0.0) if n_moe else None
    if pin is not None:
        install(ops, pin)
    return Pinning(pin, replay=False)


def replaying(ops: Any, n_moe: int, tape: dict[int, list], tie: float) -> Pinning:
    """The candidate's side: `ops` replay `tape` (the golden's choices per depth), judged with the router's `tie`."""
    pin = RoutingPin(n_moe, tie)
    pin.tape = dict(tape)
    install(ops, pin)
    return Pinning(pin, replay=True)
