"""The chunk proof of a prefill figure: the prompt's result must not depend on the chunk it was timed in.

    proof = prove(engine, fill, prompt, steps, timed_chunk, gate_depths, rule)

The model gate runs forwards of its depths' sizes (1, 64, 4096 for the 48B); a prefill timed in chunks of
32768 runs shapes the gate never saw (a grouped GEMM of 262144 routed rows, a KDA pass over 512 sub-chunks,
a causal attention over 32768 queries). A kernel that is wrong only at those shapes would still give a fast,
well-formed cache, and verify_depth (rows written, finite) would pass it. So after the timed rounds each arm
prefills the same prompt twice more, untimed: in the timed chunks, and in chunks of a size the gate proved
(its largest depth below the timed chunk); then decodes the same `steps` tokens after each. The two runs'
logits - the prompt's last position and every decode step after it, [1 + steps, V] - must agree within the
gate's own model rule for the arm's claim (KL, mean KL, top-1). A figure whose arm fails is refused.

Routing is pinned as the model gate pins it (gate/routing.py): the reference run records each MoE layer's
expert choices by (layer, position), the timed-chunk run replays them. Without it, a kernel whose bits change
with the chunk (correctly: another cuBLAS tile, cuDNN's attention from an empty cache and another kernel after
a history) flips near-tied expert choices, and on a random model each flip cascades through the KDA state:
session 11's SDPA arm was refused at KL max 0.565 though its attention agreed with exact float32 attention to
NMSE 9e-6 at the very shapes of both chunkings. A flip is counted and reported; a router whose choice is not a
top-k of its own scores fails the proof.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch

from ..errors import CheckFailed
from ..gate.model_gate import judge_depths
from ..gate.routing import RoutingPin, RoutingReport, install, n_moe_layers
from ..gate.tolerances import ModelRule

#: decode steps after the prompt whose logits are compared too (each arm's cache holds them: max_context)
CHECK_STEPS = 8
#: the reference chunking runs at most this many forwards; a gate depth that would need more (a 64-token
#: depth under a 32768-token prompt) gives way to half the timed chunk
MAX_REFERENCE_CHUNKS = 64


class ChunkDependence(CheckFailed):
    """A prefill's result changed with its chunk size beyond the gate's tolerance: no figure (the refusal, with the
    arm's label and its proof, goes on record like a gate's)."""

    def __init__(self, message: str, label: str | None = None, proof: "ChunkProof | None" = None):
        super().__init__(message)
        self.label = label
        self.proof = proof
        self.verdict = None  # the gate passed; what refused the figure is the proof


@dataclass
class ChunkProof:
    timed_chunk: int  # tokens per forward in the timed prefill (the whole prompt when no --chunk)
    reference_chunk: int | None  # tokens per forward in the run it is compared with; None: nothing to compare
    why: str  # how the reference chunk was chosen (or why there is none)
    rows: int = 0  # logit rows compared: the prompt's last position and the decode steps after it
    kl_max: float = math.nan
    kl_mean: float = math.nan
    top1: float = math.nan
    rule: str = ""
    passed: bool = True
    routing: str = ""  # the routing pin's report line (RoutingReport.line), or why routing ran free

    def as_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}

    def line(self) -> str:
        if self.reference_chunk is None:
            return f"chunking: timed in chunks of {self.timed_chunk}; not compared ({self.why})"
        verdict = "ok" if self.passed else "FAIL"
        routing = f"; {self.routing}" if self.routing else ""
        return (f"chunking: chunks of {self.timed_chunk} vs {self.reference_chunk} ({self.why}): {self.rows} rows, "
                f"KL max {self.kl_max:.3g}, mean {self.kl_mean:.3g}, top-1 {self.top1:.3f} ({self.rule}){routing}: "
                f"{verdict}")


def reference_chunk(tokens: int, timed_chunk: int | None,
                    gate_depths: list[int] | tuple[int, ...]) -> tuple[int | None, int, str]:
    """(reference chunk or None, the timed chunk, why): the largest gate depth below the timed chunk, so the
    comparison runs forwards of a size the gate compared with the golden; half the timed chunk where that
    depth would need more than MAX_REFERENCE_CHUNKS forwards."""
    timed = min(int(timed_chunk or tokens), tokens)
    if timed <= 1:
        return None, timed, "one token per forward has no smaller chunking"
    below = [d for d in gate_depths if 1 <= d < timed]
    if below and math.ceil(tokens / max(below)) <= MAX_REFERENCE_CHUNKS:
        return max(below), timed, "the largest gate depth below the timed chunk"
    ref = max(1, timed // 2)
    why = (f"half the timed chunk: the largest gate depth below it ({max(below)}) would take over "
           f"{MAX_REFERENCE_CHUNKS} forwards" if below else "half the timed chunk: no gate depth lies below it")
    return ref, timed, why


def prove(engine: Any, fill: Callable[[], None], prompt: torch.Tensor, steps: torch.Tensor, timed_chunk: int | None,
          gate_depths: list[int] | tuple[int, ...], rule: ModelRule, router_tie: float | None) -> ChunkProof:
    """Compare the engine's prefill of `prompt` [T] in the timed chunks with one in the reference chunks, each
    started from `fill()` (the context before the prompt) and followed by decoding `steps` [S] teacher-forced.
    `router_tie`: the moe_router tolerance row's tie for the arm's claim (the gate's), with which the timed run
    replays the reference's expert choices; None runs routing free (stated in the proof)."""
    t = int(prompt.numel())
    ref_chunk, timed, why = reference_chunk(t, timed_chunk, gate_depths)
    if ref_chunk is None:
        return ChunkProof(timed, None, why)
    n_moe = n_moe_layers(engine.model)  # the engine's weights (a rank's shard in the sharded bench)
    free = ("no router tolerance was given" if router_tie is None else
            "the model has no MoE layers" if not n_moe else "")
    pin = None if free else RoutingPin(n_moe, router_tie)
    original = engine.ops.moe_router if pin is not None else None
    if pin is not None:
        install(engine.ops, pin)
    try:
        ref = _run(engine, fill, prompt, steps, ref_chunk, pin, replay=False)  # [1 + S, V], its choices recorded
        cand = _run(engine, fill, prompt, steps, timed, pin, replay=True)       # the timed chunks, replaying them
    finally:
        if pin is not None:
            engine.ops.moe_router = original
    report = pin.report if pin is not None else RoutingReport(pinned=False, why_free=free)
    r = judge_depths({t: ref}, {t: cand}, rule)[0]  # the gate's own judgement of one depth's rows
    return ChunkProof(timed, ref_chunk, why, r.positions, r.kl_max, r.kl_mean, r.top1, str(rule),
                      r.passed and report.passed, report.line())


def _run(engine: Any, fill: Callable[[], None], prompt: torch.Tensor, steps: torch.Tensor, chunk: int,
         pin: RoutingPin | None, replay: bool) -> torch.Tensor:
    """Logits [1 + S, V] in float64 on the CPU: the prompt's last position, then each decode step's; the pin (if
    any) records or replays the expert choices of the prompt and the steps (not the fill's)."""
    fill()
    if pin is not None:
        pin.start(int(prompt.numel()), replay=replay)
    try:
        rows = [engine.prefill(prompt, last_only=True, chunk_size=chunk)]  # [1, V]
        for i in range(int(steps.numel())):
            rows.append(engine.decode(steps[i:i + 1]))  # [1, V]
    finally:
        if pin is not None:
            pin.finish()  # the replay's decisions into its report; either way later calls (the next fill) pass through
    return torch.cat([r.detach().to("cpu", torch.float64) for r in rows])
