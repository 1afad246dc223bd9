"""Warm the L2 with tensors a later kernel reads: not an op (it computes nothing), a scheduling hint the decode
step may place before a kernel so that the next one's weights stream in while it runs.

`prefetch(tensor)` launches `kernels/l2_prefetch.cu` on torch's current stream (so a CUDA graph capture records
it); the kernel issues bulk L2 prefetches. A prefetch changes no value anywhere: it can only change time.

Session 12's probe (bench/probes/l2_prefetch.py, H200; bench/GPU-PROBES.md): it does not pay. One token's Q4_K GEMVs
ran 6.78 us each from DRAM and 6.11 from the L2, and a prefetch launch cost 11 us, so nothing uses it. It stays as
the probe's instrument.
"""

from __future__ import annotations

import numpy as np
import torch

from sparkops.errors import BadInput

from ._runtime import launch

#: bytes per bulk prefetch instruction, and the launch shape: 4 warps of one block issue ~40 instructions for a
#: 5 MB weight
CHUNK = 32 * 1024
THREADS = 128


def prefetch(t: torch.Tensor, nbytes: int | None = None, blocks: int | None = None) -> None:
    """Prefetch the first `nbytes` (default all) of `t`'s storage into the L2. Asynchronous, on the current stream.
    `blocks`: the launch's blocks (default: one per 4 MB, at most 8); more blocks spread the prefetches over more SMs
    (session 12's 8-block launch drew ~34 GB/s an SM)."""
    if t.device.type != "cuda":
        raise BadInput(f"l2 prefetch: the tensor is on {t.device}, not a CUDA device")
    if not t.is_contiguous():
        raise BadInput("l2 prefetch: the tensor is not contiguous; prefetch its contiguous storage instead")
    total = t.numel() * t.element_size()
    n = total if nbytes is None else int(nbytes)
    if not 0 <= n <= total:
        raise BadInput(f"l2 prefetch: {n} bytes asked of a tensor of {total}")
    if t.data_ptr() % 16:
        raise BadInput("l2 prefetch: the tensor's address is not 16-byte aligned (bulk prefetch needs it)")
    if blocks is None:
        blocks = max(1, min(8, -(-n // (CHUNK * THREADS))))
    elif not 1 <= int(blocks) <= 65535:
        raise BadInput(f"l2 prefetch: blocks={blocks}; give 1 .. 65535 (or None for the default)")
    launch("l2_prefetch.cu", "l2_prefetch", t.device, (blocks,), (THREADS,),
           (np.uint64(t.data_ptr()), np.uint64(n), np.uint32(CHUNK)))
