"""Arrival counters for kernels whose last block of a token finishes the work (moe_router.cu, add_rmsnorm_router.cu):
one int32 pool per (device, lane), every counter zero between launches (each launch's last block zeroes its slot).

A pool is created by the op's first call on that device and lane, which must come before any CUDA-graph capture: a
zeroing inside a capture would not be replayed, so a missing pool during one is an error naming the fix, not a silent
allocation. Each op keeps its own pools, so two ops never share a counter.
"""

from __future__ import annotations

import torch

from sparkops.errors import BadInput
from sparkops.lanes import MAIN, lane


#: the forms of kernels/row_add_norm.cuh's ran_last_block (the last-block norm folds' ARRIVAL), in the order of its
#: codes (RAN_FLAT, RAN_TREE, RAN_RELEASE): "flat" (every block at one counter, acq_rel), "tree" (RAN_GROUPS counters,
#: then one) or "release" (one counter, a release-only atomic, the acquire fenced by the last block alone). GPU session
#: 36 (H100) timed the flat form's fold at 15.9 us a layer over the plain MoE down and 5.5 over the o_proj GEMV, ~1 us
#: expected; session 37 timed the tree form (not contention on one address) and the release form (not the L1
#: invalidation each acq_rel atomic makes) at the same cost. Session 38 (bench/probes/fold_anatomy.py) found the tail
#: was never the arrival (+1.8 us a layer in the MoE down, none in the o_proj) but the last block's norm, its loads
#: waiting one by one; row_add_norm.cuh's vector form took the folds to +4.0 and +1.1 us, still more than the Triton
#: norm costs in the chain (+1.6, +0.2): per op both folds lose (x0.893, x0.864)
RAN_FORMS = ("flat", "tree", "release")


#: arrival forms for timing only (row_add_norm.cuh's RAN_RELAXED: no release, no acquire, so the last block may read
#: rows not yet visible to it): taken only while TIMING_ONLY is set, which a side-by-side sets around its column
TIMING_ONLY_FORMS = ("relaxed",)
TIMING_ONLY = False


def ran_form(op: str, arrival: str) -> int:
    """The kernel's code for `op`'s ARRIVAL (sparkops_cupy.<op>.ARRIVAL), or an error naming the forms."""
    if arrival in TIMING_ONLY_FORMS:
        if not TIMING_ONLY:
            raise BadInput(f"{op}: the arrival {arrival!r} is for timing only (no release, no acquire: the last block "
                           f"may read rows other blocks have not made visible); use one of {list(RAN_FORMS)} "
                           f"(sparkops_cupy.{op}.ARRIVAL)")
        return len(RAN_FORMS) + TIMING_ONLY_FORMS.index(arrival)
    if arrival not in RAN_FORMS:
        raise BadInput(f"{op}: the arrival's forms are {list(RAN_FORMS)}, not {arrival!r} (sparkops_cupy.{op}.ARRIVAL)")
    return RAN_FORMS.index(arrival)


#: the forms of the last block's scratch (kernels/row_add_norm.cuh's GLOBAL; the folds' SCRATCH): "shared" (a shared
#: flag and a shared float a warp: 144 bytes of static shared memory in the kernel) or "global" (__syncthreads_or and a
#: float a warp in the counter pool: no shared memory, as the plain kernels); the "global" kernels' names carry a "g"
#: (normgpdl). Session 37 (H100) timed both alike: the shared-memory carveout is not the folds' cost either
RAN_SCRATCHES = ("shared", "global")
#: the counter pool of a last-block norm kernel: 1 + RAN_GROUPS (32) int32 counters, then the global scratch's 32 floats
#: (row_add_norm.cuh's RAN_PART_OFFSET)
RAN_POOL = 33 + 32


def ran_scratch(op: str, scratch: str) -> str:
    """The kernel-name infix for `op`'s SCRATCH ("norm" or "normg"), or an error naming the forms."""
    if scratch not in RAN_SCRATCHES:
        raise BadInput(f"{op}: the scratch's forms are {list(RAN_SCRATCHES)}, not {scratch!r} "
                       f"(sparkops_cupy.{op}.SCRATCH)")
    return "normg" if scratch == "global" else "norm"


def ran_choice(op: str, arrival: str, scratch: str) -> tuple[str, int]:
    """`op`'s kernel-name infix and arrival code for its ARRIVAL and SCRATCH (ran_scratch, ran_form), checked at each
    call: the last-block norm folds' one place to turn their two module constants into a launch."""
    return ran_scratch(op, scratch), ran_form(op, arrival)


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


class CounterPools:
    """The arrival-counter pools of one op (`op` names it in errors), `size` int32 counters each."""

    def __init__(self, op: str, size: int):
        self.op, self.size = op, size
        self._pools: dict[tuple[int, int], torch.Tensor] = {}

    def get(self, device: torch.device) -> torch.Tensor:
        """The pool of the device and the caller's lane (sparkops.lanes: a side stream's launches count apart)."""
        key = (_index(device), lane())
        pool = self._pools.get(key)
        if pool is None:
            if torch.cuda.is_current_stream_capturing():
                raise BadInput(f"{self.op}: the arrival counters of {device} (lane {key[1]}) do not exist yet and a "
                               f"CUDA graph is being captured; call the op once on this device and lane before "
                               f"capturing (a warm-up call), as the engine's warm-up does")
            with torch.inference_mode(False):  # a normal tensor even when the first call is an inference-mode warm-up
                pool = torch.zeros(self.size, dtype=torch.int32, device=device)  # [size]
            self._pools[key] = pool
        return pool

    def on(self, device: torch.device, n: int = MAIN) -> torch.Tensor | None:
        """The pool of the device and lane `n` if it exists (tests check it is all zeros after every call)."""
        return self._pools.get((_index(device), n))
