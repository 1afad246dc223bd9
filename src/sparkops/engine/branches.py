"""The side stream: independent work of a layer run concurrently with its main line, as two branches of one graph.

Why. A decode step is a chain of small kernels, each latency-bound: a GEMV of a few MB costs a launch, a ramp and
a DRAM round trip whatever its bytes (bench/GPU-PROBES.md). Some of a KDA layer's work does not depend on the rest
until the recurrence: the gate projections (f_a | g_a | beta, then f_b and g_b: three tiny F16 GEMVs, ~2.6 us each
on the 48B) read only the normed input, as q/k/v and their short conv do. On one stream they wait in line; on a
second stream they run while the q/k/v GEMV streams its 16 MB, and a CUDA graph captured over both holds two
branches that the device runs at once.

What. With `[engine] side_stream = true`, `SideStream.fork()` is the block whose launches go to the side stream:
the side stream first waits for everything the main stream has enqueued, and the block runs as lane 1
(sparkops.lanes, so that implementations keep their reused device memory apart). `join(*tensors)` makes the main
stream wait for the side stream and marks the side's outputs as used on the main stream. The kernels and their
inputs are those of the one-stream forward, so the outputs are the same bits; the gate proves it on the captured
step. Stated policy off CUDA: there is no second stream, the block runs inline in order (on lane 1 all the same),
and `plan` says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from ..lanes import SIDE, on_lane


class SideStream:
    """A device's side stream for the forward's declared-independent work (the module docstring)."""

    def __init__(self, device: torch.device, high_priority: bool = False, gates_first: bool = False):
        self.device = device
        #: [engine] gates_first: a KDA layer's gate-input projection (f_a | g_a | beta) runs on the main line before
        #: q/k/v, and only what follows it (the up-projections f_b, g_b) forks here (graph.py's KDA paths read it)
        self.gates_first = gates_first
        #: the CUDA stream the side work runs on; None off CUDA (the work runs inline: the stated policy). With
        #: `high_priority` ([engine] side_priority) at the device's highest stream priority: PyTorch instantiates a
        #: captured graph with node priorities, so the side kernels' blocks are then dispatched before the main
        #: line's waiting ones (the same kernels and bits; only the order blocks start in changes)
        self.stream = None
        if device.type == "cuda":
            priority = torch.cuda.Stream.priority_range()[1] if high_priority else 0  # (lowest, highest)
            self.stream = torch.cuda.Stream(device=device, priority=priority)
        self._open = False

    @contextmanager
    def fork(self) -> Iterator[None]:
        """The block's launches go to the side stream, after all the main stream's work so far."""
        if self._open:
            raise RuntimeError("SideStream.fork() is not re-entrant: join the open fork first")
        self._open = True
        try:
            with on_lane(SIDE):
                if self.stream is None:
                    yield
                    return
                self.stream.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(self.stream):
                    yield
        finally:
            self._open = False

    def join(self, *outputs: torch.Tensor | None) -> None:
        """The main stream waits for the side stream's work; `outputs` (made on the side) are now used on the main
        stream, so that the allocator does not hand their memory to the side stream while the main one reads it."""
        if self.stream is None:
            return
        main = torch.cuda.current_stream(self.device)
        main.wait_stream(self.stream)
        for t in outputs:
            if t is not None:
                t.record_stream(main)

