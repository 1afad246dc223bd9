"""The one collective the sharded graph needs - a sum over ranks - and, on demand, its time.

`Collectives.all_reduce(x, where)` returns the sum of every rank's x (x itself when the world is
one rank). Timing is off unless asked for, so a step stays free of host synchronisation:
  CPU (gloo)   all_reduce blocks the caller, so the wall clock around it is the time the step
               spent in the collective, waiting for the slowest rank included;
  CUDA (NCCL)  events on the current stream before and after: the step's stream waits for NCCL's
               work, so the gap between them is the collective as the step sees it (skew included).
               Read with `take()`, which synchronises - outside the timed region.
The sum is taken in `reduce_dtype` (float32 by default): summing bfloat16 partials in bfloat16
would round each partial sum to 8 bits, and at batch 1 the message (D values) is latency-bound,
so the wider type costs nothing measurable.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import torch


class Collectives:
    def __init__(self, world: int = 1, rank: int = 0, group: Any = None, *, device: str | torch.device = "cpu",
                 reduce_dtype: torch.dtype | None = torch.float32, timed: bool = False):
        self.world, self.rank, self.group = int(world), int(rank), group
        self.device = torch.device(device)
        self.reduce_dtype = reduce_dtype
        self.timed = timed
        self.calls: dict[str, int] = defaultdict(int)
        self._seconds: dict[str, float] = defaultdict(float)
        self._events: list[tuple[str, Any, Any]] = []

    def all_reduce(self, x: torch.Tensor, where: str = "") -> torch.Tensor:
        """The sum over ranks of x (every rank gets the same tensor back)."""
        if self.world == 1:
            return x
        import torch.distributed as dist

        self.calls[where] += 1
        buf = x if self.reduce_dtype is None or x.dtype == self.reduce_dtype else x.to(self.reduce_dtype)
        buf = buf.contiguous()
        if not self.timed:
            dist.all_reduce(buf, group=self.group)
        elif self.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dist.all_reduce(buf, group=self.group)
            end.record()
            self._events.append((where, start, end))
        else:
            t0 = time.perf_counter()
            dist.all_reduce(buf, group=self.group)
            self._seconds[where] += time.perf_counter() - t0
        return buf if buf.dtype == x.dtype else buf.to(x.dtype)

    # -- timing ------------------------------------------------------------------------------------
    def reset(self) -> None:
        self.calls.clear()
        self._seconds.clear()
        self._events.clear()

    def take(self) -> dict[str, float]:
        """Seconds spent in collectives since the last reset, by reduce point (synchronises on CUDA)."""
        if self._events:
            torch.cuda.synchronize(self.device)
            for where, start, end in self._events:
                self._seconds[where] += start.elapsed_time(end) / 1e3
            self._events.clear()
        return dict(self._seconds)

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            if self.device.type == "cuda":
                dist.barrier(group=self.group, device_ids=[self.device.index or 0])
            else:
                dist.barrier(group=self.group)
