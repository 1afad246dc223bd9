"""Lanes: the lines of work that may run at the same time on one device.

Why. With `[engine] side_stream = true` the forward puts work it declares independent (a KDA layer's gate
projections) on a second CUDA stream, so that two ops can be in flight at once (engine/branches.py). An
implementation that keeps device memory between calls - arrival counters, a reused workspace - would then be
written by two kernels at once if both lanes used the same buffer. Such an implementation keys that memory by
`lane()`: lane 0 is the main line of work, lane 1 the side stream. Everything an op allocates per call (torch's
stream-ordered allocator) needs nothing.

What. `lane()` says which lane the caller runs on; `on_lane(n)` is the context in which it says n (the engine's
fork sets it; a test may too). A context variable, so that a thread or task inherits its caller's lane.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

#: the lanes the engine uses
MAIN, SIDE = 0, 1

_LANE: ContextVar[int] = ContextVar("sparkops_lane", default=MAIN)


def lane() -> int:
    """The lane the caller runs on: 0 (MAIN) unless inside `on_lane`."""
    return _LANE.get()


@contextmanager
def on_lane(n: int) -> Iterator[None]:
    """Run the block as lane `n` (restored after, also when the block raises)."""
    if n not in (MAIN, SIDE):
        raise ValueError(f"lane must be {MAIN} (main) or {SIDE} (side), not {n!r}")
    token = _LANE.set(n)
    try:
        yield
    finally:
        _LANE.reset(token)
