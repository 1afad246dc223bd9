"""Arrival counters for the "last block" pattern: the program that finishes last adds up the partials.

A split kernel (split-K GEMV, the MoE down GEMV over a token's experts, the router's logits GEMV)
used to write float32 partials and launch a second small kernel to add them in a fixed order. A
decode step is hundreds of such tiny launches inside one CUDA graph (~2 us each on an H200), so the
"_lastblock" implementations fold the second launch into the first:

    every program   writes its partial as before;
                    tl.debug_barrier()  - every thread of the program has issued its stores;
                    one thread: old = atomic_add(counter[slot], 1, sem="acq_rel", scope="gpu");
    old == n - 1    (the n-th and last contributor to `slot`): read ALL n partials (its own too) in
                    the same fixed order as the old combine kernel, with ld.global.cg (L2, never a
                    stale L1 line), do the same float32 additions and the same cast, write the
                    output, and store 0 back into counter[slot].

Memory ordering (PTX memory model): the barrier orders the other threads' partial stores before the
arriving thread's release (CTA-level synchronization, then a gpu-scope release is cumulative over
what it has observed: the pattern CUTLASS's split-K semaphore uses). Each arrival is acq_rel and
reads the value the previous arrival wrote, so the chain of arrivals carries every earlier program's
stores to the last one; `arrive` puts a second barrier after the atomic, so every thread of the last
program reads the partials after that acquire. Triton 3.6 compiles this (sm_90 PTX) to: the partial
st.global; bar.sync; one thread's atom.global.gpu.acq_rel.add.u32; the old value broadcast through
shared memory between two bar.syncs; the last program's ld.global.cg loop; st.global of the output and
of the zero. Results are bit-identical to the two-launch code: the same partials, added in the same
order, whichever program happens to be last.

Assumptions, stated because nothing checks them at run time:
  * one pool of counters per device and lane (sparkops.lanes), shared by every launch of that lane: kernels that
    use it run one at a time within a lane (one stream a lane, as the engine and a CUDA graph captured from its
    streams do). The engine's side stream (`[engine] side_stream`) is lane 1, with its own pool, so that a GEMV
    there and one on the main stream never count in the same slots; two streams of one lane would corrupt each
    other's counts;
  * programmatic dependent launch (linear's "triton_pdl": `_gemv_kernel` with PDL, launched with launch_pdl)
    breaks "one at a time" on purpose: such a GEMV may start while the previous kernel of the stream - often
    another GEMV on this same pool, its last programs still arriving, adding partials and zeroing their slots -
    is running. It is safe because the PDL kernel touches its counters (and its partials and outputs, whose
    memory the allocator may have taken from a buffer the previous kernel still reads) only after
    `griddepcontrol.wait`, which returns once the previous grid has completed and its memory operations are
    visible; before the wait it issues weight loads only (nothing any kernel writes). Every counter operation
    (arrive, the partial reads, depart) must stay after that wait. The chain is transitive: a kernel completes
    only after its own wait returned, so the previous kernel's predecessors are complete too. A PDL kernel
    that skipped the wait would break this for every kernel after it;
  * a launch leaves its counters at zero (the last program of each slot resets it), so the next
    launch, or the next replay of a captured CUDA graph, starts from zero. A launch that dies half
    way (a device fault; an exception inside the interpreter) leaves the pool dirty: `reset_pool`.
A pool is zeroed once (torch.zeros) on the first call on a device in its lane; that call must come before any
CUDA-graph capture (an allocation inside a capture would belong to the graph's private pool and its
zeroing would not be replayed), so a missing pool during capture is an error, not a silent allocation.

Triton 3.6's interpreter (CPU tests) runs the programs of a launch one after another: atomic_add with
sem/scope is a plain read-modify-write there, debug_barrier a no-op and cache_modifier ignored, so the
CPU tests prove the arithmetic and the counter bookkeeping, and only a GPU run proves the ordering.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sparkops.errors import BadInput
from sparkops.lanes import MAIN, SIDE, lane

#: int32 counters per device (64 KB). The largest user is the MoE down GEMV: T x cdiv(D, rows) slots
#: (8 x 72 at the 48B decode shape); a split-K GEMV needs fewer slots than GEMV_PROGRAMS_PER_SM x SMs.
POOL_COUNTERS = 1 << 14

_POOLS: dict[str, torch.Tensor] = {}


def counters(op: str, device: torch.device, needed: int) -> torch.Tensor:
    """The int32 counter pool [POOL_COUNTERS] of the device and the caller's lane, all zero between launches; created
    on first use.

    `needed` is how many counters (slots 0 .. needed - 1) the caller's launch uses; more than the pool
    holds is a BadInput naming the op and the fix."""
    if needed > POOL_COUNTERS:
        raise BadInput(f"{op}: the last-block launch needs {needed} arrival counters but the pool holds "
                       f"{POOL_COUNTERS}; raise sparkops_triton._arrival.POOL_COUNTERS (before the first call "
                       f"on the device), or use the two-launch implementation (\"triton\")")
    key = _key(device, lane())
    pool = _POOLS.get(key)
    if pool is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise BadInput(f"{op}: the arrival counters of {device} (lane {lane()}) do not exist yet and a CUDA graph "
                           f"is being captured (their zeroing would not be replayed); call the op once on this "
                           f"device and lane before capturing (a warm-up call), as the engine's warm-up does")
        with torch.inference_mode(False):  # a normal tensor even when the first call is an inference-mode warm-up
            pool = torch.zeros(POOL_COUNTERS, dtype=torch.int32, device=device)  # [POOL_COUNTERS]
        _POOLS[key] = pool
    return pool


def _key(device: torch.device, n: int) -> str:
    return str(device) if n == MAIN else f"{device}/lane{n}"


def pool_on(device: torch.device, n: int = MAIN) -> torch.Tensor | None:
    """The pool of the device and lane `n` if it exists (tests check it is all zeros after every call)."""
    return _POOLS.get(_key(device, n))


def reset_pool(device: torch.device) -> None:
    """Zero the device's counters in every lane (after a launch that did not finish); outside any CUDA-graph
    capture."""
    for n in (MAIN, SIDE):
        pool = _POOLS.get(_key(device, n))
        if pool is not None:
            pool.zero_()


@triton.jit
def arrive(counter_ptr, slot, contributors):
    """Count this program in at counter[slot]; True in the program that arrives last (the
    `contributors`-th). Every program of the launch that contributes to `slot` must call it once,
    after its partial stores; the last one must `depart` after reading the partials."""
    tl.debug_barrier()                                     # every thread's partial stores issued
    seen = tl.atomic_add(counter_ptr + slot, 1, sem="acq_rel", scope="gpu")
    tl.debug_barrier()                                     # the acquire happens before any thread reads
    return seen == contributors - 1


@triton.jit
def depart(counter_ptr, slot):
    """The last program leaves counter[slot] at zero for the next launch (or graph replay)."""
    tl.store(counter_ptr + slot, 0)
