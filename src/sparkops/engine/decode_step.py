"""The decode step as one unit over static buffers, replayable as a single CUDA graph.

A step reads the current token from `token` (device memory), runs every layer, samples the next
token with the step counter `step` (device memory) and writes it back into `token`. Nothing in it
synchronizes the host, allocates per call outside the graph's pool, or branches on data, so on CUDA
it is captured once and replayed per token: the launch bill of hundreds of kernels becomes one
graph launch. The eager path runs the same body, so the two are checked against each other.
"""

from __future__ import annotations

import torch

from ..errors import BadInput
from .graph import forward
from .state import Snapshot


class DecodeStep:
    def __init__(self, engine, *, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0):
        self.engine = engine
        self.sampling = (float(temperature), int(top_k), float(top_p), int(seed))
        dev = engine.device
        self.token = torch.zeros(1, dtype=torch.int64, device=dev)  # in: the current token; out: the next one
        self.step = torch.zeros(1, dtype=torch.int64, device=dev)  # the sampler's counter
        self.logits: torch.Tensor | None = None  # [1, V] of the last step (a graph-owned buffer once captured)
        self.graph = None
        #: once captured: the calls a step hands on by stated policies ("op=impl -> what (why)": calls a step)
        self.passed: dict[str, float] = {}

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def _body(self) -> None:
        e = self.engine
        temperature, top_k, top_p, seed = self.sampling
        logits = forward(e.ops, e.model, e.state, self.token, e.dtype, True, e.fused, e.low_rank,
                         getattr(e, "side", None), getattr(e, "fuse_kda_norm", False),
                         fuse_gates=getattr(e, "fuse_kda_gates", False),
                         fuse_router=getattr(e, "fuse_router_norm", False),
                         fuse_conv=getattr(e, "fuse_conv_kda", False),
                         shared=getattr(e, "shared_side", None),
                         fuse_moe_norm=getattr(e, "fuse_moe_norm", False),
                         fuse_oproj_norm=getattr(e, "fuse_oproj_norm", False))  # advances state.pos
        nxt = e.ops.sample(logits.float(), temperature, top_k, top_p, seed, self.step)
        self.token.copy_(nxt.view(1))
        self.step.add_(1)
        self.logits = logits

    def __call__(self) -> torch.Tensor:
        """Run one step (replay the graph if captured); returns the next token as a device tensor [1]."""
        e = self.engine
        if e.state.length + 1 > e.max_context:
            raise BadInput(f"decoding past the context of {e.max_context} tokens; raise --max-context")
        with torch.inference_mode():
            if self.graph is not None:
                self.graph.replay()
            else:
                self._body()
        e.state.length += 1
        return self.token

    def forced(self, tokens: torch.Tensor) -> None:
        """Run one step per token of `tokens` ([N] on the device), each fed in as the step's input instead
        of the token it sampled (teacher forcing: what timing and gating compare against an eager decode)."""
        for i in range(tokens.shape[0]):
            self.token.copy_(tokens[i:i + 1])
            self()

    def capture(self, warmup: int = 2) -> None:
        """Capture the step as one CUDA graph. The state is left exactly as it was before."""
        e = self.engine
        if e.device.type != "cuda":
            raise BadInput("a decode step can be captured only on CUDA (use --device cuda)")
        if e.state.length + warmup + 1 > e.max_context:
            raise BadInput("no room in the context for the capture's warm-up steps")
        snap = Snapshot(e)
        token, step = self.token.clone(), self.step.clone()
        before = _round_trips(e.ops)
        side = torch.cuda.Stream(device=e.device)
        side.wait_stream(torch.cuda.current_stream(e.device))
        with torch.inference_mode(), torch.cuda.stream(side):
            for _ in range(max(warmup, 1)):  # first calls upload tables, compile kernels, pick algorithms
                self._body()
        torch.cuda.current_stream(e.device).wait_stream(side)
        snap.restore()
        self.token.copy_(token)
        self.step.copy_(step)
        # Only the ops the step calls count: an op the step never calls (kda_norm without fuse_kda_norm,
        # kda_lowrank_norm without fuse_kda_gates, add_rmsnorm_router without fuse_router_norm, short_conv_kda_norm
        # without fuse_conv_kda, moe_experts_add_rmsnorm without fuse_moe_norm, linear_add_rmsnorm without
        # fuse_oproj_norm) may be unselected and its reference CPU-only. The warm-up ran the step eagerly, so its
        # counters name them.
        taken = sorted(op for op, n in _round_trips(e.ops).items() if n > before.get(op, 0))
        if taken:
            raise BadInput(f"cannot capture a step whose ops make host round trips: {taken}; "
                           f"select CUDA implementations for them (`sparkops plan --device cuda` shows them)")
        graph = torch.cuda.CUDAGraph()
        from ..dispatch import passed_of, passed_per_step

        passed = passed_of(e.ops)
        with torch.inference_mode(), torch.cuda.graph(graph):
            self._body()
        self.passed = passed_per_step(passed, passed_of(e.ops), 1)  # the body ran once: one step's hand-offs
        snap.restore()  # capturing does not run the kernels, but leave nothing to chance
        self.token.copy_(token)
        self.step.copy_(step)
        self.graph = graph


def _round_trips(ops) -> dict[str, int]:
    """Host round trips taken so far, by op (the dispatcher's counters)."""
    suffix = ":round_trip"
    return {k[:-len(suffix)]: n for k, n in ops.summary().items() if k.endswith(suffix)}
