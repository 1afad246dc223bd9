"""ShardedEngine: one rank of a tensor/expert-parallel world, with the Engine's prefill/decode API.

Every rank builds its own ShardedEngine on its shard and is fed the same tokens in the same order
(SPMD); each returns the same full logits. It is an `Engine` (generate, decode, reset, length,
the token checks are inherited unchanged) whose config is the rank's local config (its own head
counts: SequenceState then allocates only this rank's KDA heads, and the whole MLA latent cache,
which every head reads) and whose forward is the sharded one.
"""

from __future__ import annotations

import torch

from ..dispatch import Ops
from ..engine import Engine
from ..errors import BadInput
from ..weights import ModelWeights
from .collectives import Collectives
from .graph import Placement, forward
from .sharding import ShardPlan


class ShardedEngine(Engine):
    fusable = False  # the sharded graph splits q/k/v by heads itself; projection fusion is not applied

    def __init__(self, shard: ModelWeights, ops: Ops, plan: ShardPlan, comm: Collectives | None = None, *,
                 max_context: int | None = None, dtype: torch.dtype = torch.float32,
                 cache_dtype: torch.dtype | None = None, placement: Placement | None = None,
                 prefill_chunk: int | None = None):
        if shard.config != plan.local_config():
            raise BadInput(f"the shard's config ({shard.config.kda_heads} KDA / {shard.config.mla_heads} MLA heads) is "
                           f"not rank {plan.rank}'s of {plan.world}; build it with shard_model or synth_shard and "
                           f"the same plan")
        super().__init__(shard, ops, max_context=max_context, dtype=dtype, cache_dtype=cache_dtype,
                         prefill_chunk=prefill_chunk)
        self.plan = plan
        self.comm = comm or Collectives(plan.world, plan.rank, device=self.device)
        if self.comm.world != plan.world:
            raise BadInput(f"the collectives span {self.comm.world} ranks, the shard plan {plan.world}")
        self.placement = placement or Placement()
        self.global_config = plan.config

    def _forward(self, ids: torch.Tensor, last_only: bool) -> torch.Tensor:
        """The sharded forward: this rank's heads and experts, the reduce points of parallel/graph.py."""
        return forward(self.ops, self.model, self.plan, self.comm, self.state, ids, self.dtype, last_only,
                       self.placement)
