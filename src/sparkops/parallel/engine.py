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
    def __init__(self, shard: ModelWeights, ops: Ops, plan: ShardPlan, comm: Collectives | None = None, *,
                 max_context: int | None = None, dtype: torch.dtype = torch.float32,
                 cache_dtype: torch.dtype | None = None, placement: Placement | None = None,
                 prefill_chunk: int | None = None):
        if shard.config != plan.local_config():
            raise BadInput(f"the shard's config ({shard.config.kda_heads} KDA / {shard.config.mla_heads} MLA heads) is "
                           f"not rank {plan.rank}'s of {plan.world}; build it with shard_model or synth_shard and "
                           f"the same plan")
        super().__init__(shard, ops, max_context=max_context, dtype=dtype, cache_dtype=cache_dtype)
        self.plan = plan
        self.comm = comm or Collectives(plan.world, plan.rank, device=self.device)
        if self.comm.world != plan.world:
            raise BadInput(f"the collectives span {self.comm.world} ranks, the shard plan {plan.world}")
        self.placement = placement or Placement()
        self.prefill_chunk = prefill_chunk
        self.global_config = plan.config

    def prefill(self, tokens: torch.Tensor | list[int], *, last_only: bool = False,
                chunk_size: int | None = None) -> torch.Tensor:
        """Feed T tokens (in chunks of `chunk_size`, default the engine's `prefill_chunk`, None = all at
        once); float32 logits [T, V] (or [1, V] with last_only), the same on every rank."""
        ids = self._tokens(tokens)
        chunk = chunk_size if chunk_size is not None else self.prefill_chunk
        if chunk is not None and chunk < 1:
            raise BadInput(f"chunk_size must be at least 1, got {chunk}")
        step = ids.shape[0] if chunk is None else chunk
        out = []
        with torch.inference_mode():
            for start in range(0, ids.shape[0], step):
                part = ids[start:start + step]
                final = start + step >= ids.shape[0]
                logits = forward(self.ops, self.model, self.plan, self.comm, self.state, part, self.dtype,
                                 last_only, self.placement)
                self.state.length += part.shape[0]
                if not last_only or final:
                    out.append(logits)
        return torch.cat(out).float() if len(out) > 1 else out[0].float()
