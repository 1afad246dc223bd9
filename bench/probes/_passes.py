"""The two passes of a probe that Nsight Compute reads (rowwarp_kernels.py, router_kernels.py): every launch once to
warm up (compilation, tables, arrival counters: what `ncu --launch-skip N` passes over), then once more, each waited
on and named, for the profiler to measure."""

from __future__ import annotations

from collections.abc import Callable

import torch


def warm_then_measured(calls: list[tuple[str, Callable[[], object]]]) -> None:
    """Run each (label, call) once, synchronize, then run each again, synchronizing and printing its label."""
    for _, call in calls:
        call()
    torch.cuda.synchronize()
    for label, call in calls:
        call()
        torch.cuda.synchronize()
        print(f"launched {label}", flush=True)
