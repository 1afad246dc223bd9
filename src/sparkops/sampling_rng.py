"""The counter-based random numbers `sample` uses, defined once so every backend draws the same noise.

u(seed, step, row, id) = (H + 0.5) / 2^24 with H = top 24 bits of
    mix(id + mix(row + mix(step + mix(seed))))
where mix is the 32-bit integer hash "lowbias32" (Chris Wellons' hash-prospector constants
0x7feb352d, 0x846ca68b) and + wraps modulo 2^32. No state: a captured decode step reads `step`
from device memory and draws fresh noise on every replay.
"""

from __future__ import annotations

import numpy as np

M1 = 0x7FEB352D
M2 = 0x846CA68B


def mix32(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.uint32)
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint32(16))
        x = x * np.uint32(M1)
        x = x ^ (x >> np.uint32(15))
        x = x * np.uint32(M2)
        x = x ^ (x >> np.uint32(16))
    return x


def uniform(seed: int, step: int, rows: int, vocab: int) -> np.ndarray:
    """float64 [rows, vocab] in (0, 1)."""
    with np.errstate(over="ignore"):
        s = mix32(np.uint32(step & 0xFFFFFFFF) + mix32(np.uint32(seed & 0xFFFFFFFF)))
        r = mix32(np.arange(rows, dtype=np.uint32) + s)  # [rows]
        h = mix32(np.arange(vocab, dtype=np.uint32)[None, :] + r[:, None])
    return ((h >> np.uint32(8)).astype(np.float64) + 0.5) / float(1 << 24)
