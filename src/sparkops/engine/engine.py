"""The engine: prefill a prompt in one forward, decode one token at a time, generate text.

An Engine binds model weights (on one device), the resolved ops (dispatch happens once, here) and
one sequence's state. `prefill(p)` then `decode(t...)` gives the logits of `prefill(p + t...)`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..dispatch import Ops
from ..errors import BadInput
from ..kvcache import resolve_cache_dtype
from ..registry.file import excludes_problem
from ..weights import ModelWeights
from .branches import SideStream
from .fusion import Groups, fuse, low_rank_weights, merged_conv_layers, shared_ffns
from .graph import forward, gates_apart
from .state import SequenceState


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    tokens: list[int] = field(default_factory=list)

    @property
    def prefill_tok_s(self) -> float:
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds else float("nan")

    @property
    def decode_tok_s(self) -> float:
        n = self.generated_tokens - 1  # the first generated token comes from the prefill's logits
        return n / self.decode_seconds if self.decode_seconds and n > 0 else float("nan")


def engine_options(ops: Ops) -> dict[str, object]:
    """The [engine] options of the registry the ops were planned from (none for ops built otherwise)."""
    plan = getattr(ops, "plan", None)
    return dict(getattr(plan, "engine", None) or {})


class Engine:
    #: whether this engine's graph can take fused projections (the sharded graph cannot)
    fusable = True

    def __init__(self, model: ModelWeights, ops: Ops, *, max_context: int | None = None,
                 dtype: torch.dtype = torch.float32, cache_dtype: torch.dtype | None = None,
                 prefill_chunk: int | None = None):
        self.device = torch.device(ops.device)
        if model.embed.device.type != self.device.type:
            model = model.to(self.device)
        self.model = model
        self.ops = ops
        self.config = model.config
        self.dtype = dtype
        self.prefill_chunk = prefill_chunk
        self.max_context = int(max_context or min(self.config.context_length, 4096))
        if self.max_context > self.config.context_length:
            raise BadInput(f"max_context {self.max_context} exceeds the model's context length "
                           f"{self.config.context_length}")
        #: the projection groups when the registry's [engine] table asks for fuse_projections (fusion.py)
        options = engine_options(ops)
        self.fused: Groups | None = fuse(self.model) if self.fusable and options.get("fuse_projections") else None
        #: with fuse_short_conv too, the KDA layers whose q/k/v short convs run as one (their windows one buffer)
        merged = merged_conv_layers(self.fused) if options.get("fuse_short_conv") else set()
        #: with fuse_low_rank too, the KDA layers' block-diagonal [[f_b, 0], [0, g_b]] weights (fusion.py)
        self.low_rank = low_rank_weights(self.model, self.fused) if self.fused and options.get("fuse_low_rank") \
            else {}
        #: with side_stream, the KDA layers' gate projections run on a second CUDA stream (branches.py)
        self.side = SideStream(self.device, bool(options.get("side_priority")), bool(options.get("gates_first"))) \
            if self.fusable and options.get("side_stream") else None
        #: the KDA layers whose gate projections fork onto it (not those whose fused group mixes them with q/k/v)
        self.side_layers = [i for i, layer in enumerate(self.model.layers) if layer.kind == "kda"
                            and gates_apart((self.fused or {}).get((i, "attn"), ()))] if self.side else []
        #: with fuse_kda_norm, a decode step's KDA layers run their recurrence and output norm as one op (kda_norm)
        self.fuse_kda_norm = self.fusable and bool(options.get("fuse_kda_norm"))
        #: with fuse_kda_gates, they also take their two low-rank gate up-projections (f_b, g_b) into that op
        #: (kda_lowrank_norm), with or without fuse_kda_norm
        self.fuse_kda_gates = self.fusable and bool(options.get("fuse_kda_gates"))
        #: with fuse_router_norm, a decode step's MoE layers run their residual add, FFN norm and router as one op
        #: (add_rmsnorm_router)
        self.fuse_router_norm = self.fusable and bool(options.get("fuse_router_norm"))
        #: with fuse_conv_kda, a decode step's KDA layers with the merged q|k|v conv (fuse_short_conv) run that conv,
        #: their recurrence and output norm as one op (short_conv_kda_norm); never with fuse_kda_gates (the registry
        #: refuses the pair, and so does the engine, for options that did not come through a registry's checks)
        self.fuse_conv_kda = self.fusable and bool(options.get("fuse_conv_kda"))
        #: with fuse_moe_norm, a decode step's MoE layers run their experts and the next block's residual add and norm
        #: as one op (moe_experts_add_rmsnorm); a layer whose shared expert runs apart (shared_expert_side) keeps them
        #: apart
        self.fuse_moe_norm = self.fusable and bool(options.get("fuse_moe_norm"))
        #: with fuse_oproj_norm, a decode step's attention blocks end with their output projection and the FFN's
        #: residual add and norm as one op (linear_add_rmsnorm); never with fuse_router_norm (refused below)
        self.fuse_oproj_norm = self.fusable and bool(options.get("fuse_oproj_norm"))
        problem = excludes_problem(options) if self.fusable else None
        if problem is not None:
            raise BadInput(problem)
        #: with shared_expert_side (and side_stream), a decode step's MoE layers run their shared expert as a dense
        #: SwiGLU FFN on the side stream, beside the router and the routed experts (graph.shared_apart): {layer: that
        #: FFN}. Without side_stream there is no side to run it on: refused, naming the fix (the registry refuses it too)
        self.shared_side = {}
        if self.fusable and options.get("shared_expert_side"):
            if self.side is None:
                raise BadInput("[engine] shared_expert_side = true needs side_stream = true (the shared expert runs on "
                               "the side stream, which only side_stream makes): sparkops engine side_stream=on, or "
                               "shared_expert_side=off")
            self.shared_side = shared_ffns(self.model, self.fused is not None)
        self.state = SequenceState(self.config, self.max_context, self.device,
                                   resolve_cache_dtype(getattr(ops, "plan", None), dtype, cache_dtype),
                                   merged_conv=merged)

    # -- the two phases ------------------------------------------------------------------------
    def prefill(self, tokens: torch.Tensor | list[int], *, last_only: bool = False,
                chunk_size: int | None = None) -> torch.Tensor:
        """Feed T tokens; float32 logits [T, V] (or [1, V] with last_only).

        The prompt goes through the model in chunks of `chunk_size` tokens (default: the engine's
        `prefill_chunk`, None = all at once). Each chunk is one forward over every layer, continuing
        the caches, so the result equals one whole-prompt forward up to rounding; the chunk bounds
        the activation memory of long prompts.
        """
        ids = self._tokens(tokens)
        chunk = chunk_size if chunk_size is not None else self.prefill_chunk
        if chunk is not None and chunk < 1:
            raise BadInput(f"chunk_size must be at least 1, got {chunk}")
        step = ids.shape[0] if chunk is None else chunk
        out = []
        with torch.inference_mode():
            for start in range(0, ids.shape[0], step):
                part = ids[start:start + step]
                logits = self._forward(part, last_only)
                self.state.length += part.shape[0]
                if not last_only or start + step >= ids.shape[0]:  # with last_only, only the final row counts
                    out.append(logits)
        return torch.cat(out).float() if len(out) > 1 else out[0].float()

    def _forward(self, ids: torch.Tensor, last_only: bool) -> torch.Tensor:
        """One forward over every layer for the tokens `ids`, advancing the state (subclasses shard it)."""
        return forward(self.ops, self.model, self.state, ids, self.dtype, last_only, self.fused, self.low_rank,
                       self.side, self.fuse_kda_norm, fuse_gates=self.fuse_kda_gates,
                       fuse_router=self.fuse_router_norm, fuse_conv=self.fuse_conv_kda, shared=self.shared_side,
                       fuse_moe_norm=self.fuse_moe_norm, fuse_oproj_norm=self.fuse_oproj_norm)

    def decode(self, token: torch.Tensor | list[int] | int) -> torch.Tensor:
        """Feed one token; float32 logits [1, V]."""
        ids = self._tokens([token] if isinstance(token, int) else token)
        if ids.shape[0] != 1:
            raise BadInput(f"decode takes exactly one token, got {ids.shape[0]}")
        return self.prefill(ids)

    def reset(self) -> None:
        self.state.reset()

    @property
    def length(self) -> int:
        """Tokens held in the caches (host mirror of the device position)."""
        return self.state.length

    # -- text ----------------------------------------------------------------------------------
    def generate(self, prompt: list[int], n: int, *, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                 seed: int = 0, on_token=None, graph: bool = False) -> GenerationStats:
        """Greedy by default; calls on_token(id) as each token is produced.

        graph=True (CUDA): every decode step is one replay of a captured CUDA graph (DecodeStep).
        """
        if not prompt:
            raise BadInput("the prompt is empty; give at least one token")
        if len(prompt) + n > self.max_context:
            raise BadInput(f"prompt ({len(prompt)} tokens) + {n} new tokens exceeds the context of "
                           f"{self.max_context}; shorten the prompt, lower -n or raise --max-context")
        stats = GenerationStats(prompt_tokens=len(prompt))
        step = torch.zeros(1, dtype=torch.int64, device=self.device)
        self._sync()
        t0 = time.perf_counter()
        logits = self.prefill(prompt, last_only=True)
        tok = self.ops.sample(logits, temperature, top_k, top_p, seed, step)  # [1]
        self._sync()
        stats.prefill_seconds = time.perf_counter() - t0
        stepper = None
        if graph:
            from .decode_step import DecodeStep

            stepper = DecodeStep(self, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
            stepper.capture()
        t0 = time.perf_counter()
        for i in range(n):
            tid = int(tok[0])
            stats.tokens.append(tid)
            stats.generated_tokens += 1
            if on_token:
                on_token(tid)
            if i + 1 == n or tid == self.config.eos_token_id:
                break
            step.add_(1)
            if stepper is not None:
                stepper.token.copy_(tok.view(1))
                stepper.step.copy_(step)
                tok = stepper()
            else:
                logits = self.decode(tok.view(1))
                tok = self.ops.sample(logits, temperature, top_k, top_p, seed, step)
        self._sync()
        stats.decode_seconds = time.perf_counter() - t0
        return stats

    # -- helpers -------------------------------------------------------------------------------
    def _tokens(self, tokens) -> torch.Tensor:
        ids = torch.as_tensor(tokens, dtype=torch.int64).reshape(-1)
        if ids.numel() == 0:
            raise BadInput("no tokens given")
        vocab = self.config.vocab_size
        if ids.device.type == "cpu":  # validating device-resident ids would synchronise; callers own those
            bad = ids[(ids < 0) | (ids >= vocab)]
            if bad.numel():
                raise BadInput(f"token id {int(bad[0])} is out of range for vocabulary size {vocab}")
        if self.state.length + ids.numel() > self.max_context:
            raise BadInput(f"{ids.numel()} tokens after {self.state.length} cached exceed the context of "
                           f"{self.max_context} tokens; shorten the prompt or raise --max-context")
        return ids.to(self.device)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
