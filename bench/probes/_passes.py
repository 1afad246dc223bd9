"""The two passes of a probe that Nsight Compute reads (rowwarp_kernels.py, router_kernels.py, moe_kernels.py): every
launch once to warm up (compilation, tables, arrival counters: what `ncu --launch-skip N` passes over), then once more,
each waited on and named, for the profiler to measure. And the plain read the probes time beside their kernels."""

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


def streaming_read():
    """The Triton kernel `_read_kernel(w_ptr, out_ptr, n_words, BLOCK)`: a plain streaming read of int32 words, each
    program's sum stored so that the loads stay - the floor no kernel of the same bytes beats (made on first use: it
    needs triton and a GPU)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _read_kernel(w_ptr, out_ptr, n_words, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(w_ptr + i, mask=i < n_words, other=0)
        tl.store(out_ptr + tl.program_id(0), tl.sum(v, axis=0))

    return _read_kernel
