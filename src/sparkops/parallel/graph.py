"""The sharded forward: engine.graph's blocks on a rank's shard, plus the reduce points.

Every rank holds the whole residual stream h [T, D] and runs every layer. Within a block it
computes only its own heads / experts / intermediate columns (sharding.py), so each block's output
is a partial sum over ranks. There are exactly two reduce points per layer, one per block, both
on a [T, D] tensor, both before the residual add:

    a = rmsnorm(h)
    y = attention block on this rank's heads            # partial: this rank's o_proj columns
    y = all_reduce(y)                                   # REDUCE POINT 1
    f, h = add_rmsnorm(y, h)
    y = this rank's experts (+ its slice of the shared expert / of the dense FFN)
    y = all_reduce(y)                                   # REDUCE POINT 2
    a, h = add_rmsnorm(y, h)
    ... logits = lm_head(a)  (replicated: identical on every rank)

Why there, and not elsewhere (seed, lecture 07):
  * Not earlier. Before o_proj (or before the expert's down projection) the ranks hold different
    things (different heads' outputs, different experts' hidden units), not parts of one sum: they
    would have to be gathered, not added, and the gathered tensor is wider (P or F > D).
  * Not later. h is replicated: every rank adds the same h. Reducing after the residual add sums
    world copies of it, h_next = y + world * h: the residual stream is multiplied by tp_size every
    layer. Nothing crashes - the shapes are the same and RMSNorm even hides the growth from the
    next block - so only the logits show it. `Placement(late={...})` builds exactly that bug so the
    model gate can be shown to refuse it (tests/parallel).
  * Once per block, not once per expert: the weighted combine of the experts is linear, so the
    per-expert partial sums can be added locally first; one reduce completes the expert-parallel
    combine and the tensor-parallel shared expert together.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..config import ModelConfig
from ..dispatch import Ops
from ..engine.graph import kda_block, mla_block
from ..engine.state import SequenceState
from ..errors import BadInput
from ..weights import DenseFFNWeights, ModelWeights, MoEWeights
from .collectives import Collectives
from .sharding import ShardPlan

REDUCE_POINTS = ("attn", "ffn")
DISPATCH = ("compact", "masked")


@dataclass(frozen=True)
class Placement:
    """How the sharded graph places its reduces and dispatches tokens to experts.

    late:     reduce points moved past the residual add - a deliberate bug (see the module doc);
              empty in every real run.
    dispatch: "compact" gathers only the (token, slot) pairs routed to this rank's experts (reads
              only the chosen local experts; the pair count reaches the host, one synchronisation
              per MoE layer on CUDA); "masked" keeps the static [T, K] shape with the other ranks'
              slots weighted 0 (no synchronisation: capturable in a CUDA graph, but every rank reads
              K experts' weights).
    """

    late: frozenset[str] = field(default_factory=frozenset)
    dispatch: str = "compact"

    def __post_init__(self) -> None:
        bad = set(self.late) - set(REDUCE_POINTS)
        if bad:
            raise BadInput(f"late reduce point(s) {sorted(bad)}: the reduce points are {', '.join(REDUCE_POINTS)}")
        if self.dispatch not in DISPATCH:
            raise BadInput(f"dispatch '{self.dispatch}': use one of {', '.join(DISPATCH)}")


def forward(ops: Ops, model: ModelWeights, plan: ShardPlan, comm: Collectives, state: SequenceState,
            tokens: torch.Tensor, dtype: torch.dtype, last_only: bool, placement: Placement) -> torch.Tensor:
    """Run T new tokens through this rank's shard; the full logits [T, V] (or [1, V]), same on every rank."""
    cfg = model.config  # the local config: this rank's head counts
    eps = cfg.rms_norm_eps
    h = ops.embedding(model.embed, tokens, dtype)  # [T, D] replicated residual stream
    a = ops.rmsnorm(h, model.layers[0].attn_norm, eps)
    for i, layer in enumerate(model.layers):
        st = state.layers[i]
        if layer.kind == "kda":
            y = kda_block(ops, cfg, layer.attn, st, a)  # [T, D] partial: this rank's heads through o_proj
        else:
            y = mla_block(ops, cfg, layer.attn, st, state.pos, a)  # [T, D] partial
        f, h = residual(ops, comm, y, h, layer.ffn_norm, eps, "attn", placement)
        y = ffn_partial(ops, cfg, layer.ffn, plan, f, placement.dispatch)  # [T, D] partial
        next_norm = model.layers[i + 1].attn_norm if i + 1 < len(model.layers) else model.output_norm
        a, h = residual(ops, comm, y, h, next_norm, eps, "ffn", placement)
    if last_only:
        a = a[-1:]
    state.pos.add_(tokens.shape[0])
    return ops.linear(a, model.output)  # [T or 1, V], replicated lm_head


def residual(ops: Ops, comm: Collectives, y: torch.Tensor, h: torch.Tensor, norm: torch.Tensor, eps: float,
             where: str, placement: Placement) -> tuple[torch.Tensor, torch.Tensor]:
    """Complete a block's partial output, add it to the residual stream, normalise: (normed, new h)."""
    if where not in placement.late:
        # THE REDUCE POINT: y is a partial sum over ranks (row-parallel o_proj / down, this rank's
        # experts); h is replicated. Sum first, then add h once.
        y = comm.all_reduce(y, where)  # [T, D]
        return ops.add_rmsnorm(y, h, norm, eps)
    # Deliberately wrong (tests only): add the replicated h on every rank, then sum -> y + world * h.
    _, s = ops.add_rmsnorm(y, h, norm, eps)
    s = comm.all_reduce(s, where)  # [T, D] = y + world * h
    return ops.rmsnorm(s, norm, eps), s


def ffn_partial(ops: Ops, cfg: ModelConfig, w: DenseFFNWeights | MoEWeights, plan: ShardPlan, f: torch.Tensor,
                dispatch: str) -> torch.Tensor:
    """This rank's share of the FFN output [T, D]: its dense columns, or its experts + shared columns."""
    if isinstance(w, DenseFFNWeights):
        if w.gate is None:  # this rank got no whole block of the intermediate
            return torch.zeros_like(f)
        return ops.linear(ops.swiglu(ops.linear(f, w.gate), ops.linear(f, w.up)), w.down)  # [T, D]
    weights, ids = ops.moe_router(f, w.router, w.bias, cfg.n_experts_per_token, cfg.n_group, cfg.topk_group,
                                  cfg.routed_scaling_factor, cfg.router_renorm_eps)  # [T, K] each, replicated
    e = plan.experts
    if dispatch == "masked":
        local = (ids >= e.lo) & (ids < e.hi)  # [T, K]
        ids_local = torch.where(local, ids - e.lo, torch.zeros_like(ids))  # other ranks' slots -> expert 0 ...
        w_local = torch.where(local, weights, torch.zeros_like(weights))  # ... with weight 0
        return ops.moe_experts(f, w_local, ids_local, w.gate_exps, w.up_exps, w.down_exps, w.s_gate, w.s_up,
                               w.s_down)  # [T, D]
    out = shared_partial(ops, w, f)
    return combine_local(ops, w, f, weights, ids, e.lo, e.hi, out)


def shared_partial(ops: Ops, w: MoEWeights, f: torch.Tensor) -> torch.Tensor:
    """This rank's columns of the shared expert, [T, D] (zeros when it holds none)."""
    if w.s_gate is None:
        return torch.zeros_like(f)
    return ops.linear(ops.swiglu(ops.linear(f, w.s_gate), ops.linear(f, w.s_up)), w.s_down)


def combine_local(ops: Ops, w: MoEWeights, f: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor,
                  lo: int, hi: int, out: torch.Tensor) -> torch.Tensor:
    """Token dispatch and the local half of the combine: out[t] += sum of this rank's chosen experts.

    Dispatch: the (token, slot) pairs whose expert lies in [lo, hi) become a batch of pairs, each
    with its one expert (local id) and its routing weight; moe_experts runs them (only those
    experts' rows are read). Combine: each pair's weighted output goes back to its (token, slot)
    place - every place written at most once, so no atomic adds and the same bits on every run -
    and the slots are summed in order; the other ranks' pairs arrive with the all_reduce that follows.
    """
    t, k = ids.shape
    tok, slot = torch.nonzero((ids >= lo) & (ids < hi), as_tuple=True)  # [n] each; n reaches the host
    if tok.numel() == 0:
        return out
    x = f[tok]  # [n, D]
    y = ops.moe_experts(x, weights[tok, slot].unsqueeze(1), (ids[tok, slot] - lo).unsqueeze(1),
                        w.gate_exps, w.up_exps, w.down_exps, None, None, None)  # [n, D], weighted
    slots = torch.zeros(t, k, f.shape[1], dtype=out.dtype, device=out.device)  # [T, K, D]
    slots[tok, slot] = y.to(out.dtype)
    return out + slots.sum(dim=1)  # [T, D]
