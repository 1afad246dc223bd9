"""How the torch ops turn a QWeight into float values: the dequantization policy, in one place.

Policy:
  * CUDA: dequantize on the fly, on every call, in row tiles of at most `TILE_VALUES` values, and
    keep nothing. The 48B model's weights stay quantized in GPU memory; the transient tile is
    bounded (64 MiB of float32) whatever the weight's size, so even the [163840, 2304] lm_head never
    expands whole. Tiles are cut by shape only, so the work is the same on every call (graph capture).
  * CPU: a small LRU cache of whole float32 weights, so the demo model (a few MB in all) is
    dequantized once instead of on every token. It is bounded by SPARKOPS_TORCH_CPU_CACHE_MB
    (default 512; 0 turns it off); a weight bigger than a quarter of the budget is never cached and
    takes the tiled path instead, so the 48B model on CPU costs no extra memory. An entry is keyed by
    the identity of the weight's data tensor and its version counter, so a freed or modified weight
    is never served stale, and an entry dies with its weight. (A weight created under
    torch.inference_mode() has no version counter; the engine loads weights outside it.)
  * F32 weights are used as they are (no copy); F16/BF16 are converted like the quantized types.
"""

from __future__ import annotations

import os
import weakref
from collections import OrderedDict

import torch

from sparkops.qweight import QWeight

from .dequant import dequantize_raw

#: values per dequantized tile (64 MiB of float32)
TILE_VALUES = 1 << 24

_ENV = "SPARKOPS_TORCH_CPU_CACHE_MB"


class _CpuCache:
    """LRU of float32 weights keyed by id(raw); each entry holds a weak reference to its raw tensor."""

    def __init__(self) -> None:
        self.entries: OrderedDict[int, tuple[weakref.ref, int, torch.Tensor]] = OrderedDict()
        self.bytes = 0

    @staticmethod
    def budget() -> int:
        try:
            return max(0, int(float(os.environ.get(_ENV, "512")) * (1 << 20)))
        except ValueError:
            return 512 << 20

    def get(self, raw: torch.Tensor) -> torch.Tensor | None:
        entry = self.entries.get(id(raw))
        if entry is None:
            return None
        ref, version, values = entry
        if ref() is not raw or version != _version(raw):
            self._drop(id(raw))
            return None
        self.entries.move_to_end(id(raw))
        return values

    def put(self, raw: torch.Tensor, values: torch.Tensor) -> None:
        key, size = id(raw), values.numel() * values.element_size()
        budget = self.budget()
        if size * 4 > budget:
            return
        self._drop(key)
        self.entries[key] = (weakref.ref(raw, lambda _r, key=key: self._drop(key)), _version(raw), values)
        self.bytes += size
        while self.bytes > budget and self.entries:
            self._drop(next(iter(self.entries)))

    def _drop(self, key: int) -> None:
        entry = self.entries.pop(key, None)
        if entry is not None:
            self.bytes -= entry[2].numel() * entry[2].element_size()

    def clear(self) -> None:
        self.entries.clear()
        self.bytes = 0


CPU_CACHE = _CpuCache()


def _version(t: torch.Tensor) -> int:
    """t's in-place modification counter; -1 for an inference-mode tensor, which keeps none."""
    try:
        return t._version
    except RuntimeError:
        return -1


def cacheable(weight: QWeight) -> bool:
    """Whether `dense(weight)` keeps the float32 copy (CPU only, small enough for the budget)."""
    return weight.raw.device.type == "cpu" and _numel(weight) * 4 * 4 <= CPU_CACHE.budget()


def cached(weight: QWeight) -> torch.Tensor | None:
    """The float32 values of a weight if they are at hand without work (F32 data, or a CPU cache hit)."""
    raw = weight.raw
    if raw.dtype == torch.float32:
        return raw
    return CPU_CACHE.get(raw) if raw.device.type == "cpu" else None


def dense(weight: QWeight) -> torch.Tensor:
    """The whole weight as float32 [*shape] on its device (cached on CPU when `cacheable`)."""
    hit = cached(weight)
    if hit is not None:
        return hit
    raw = weight.raw
    values = dequantize_raw(raw, weight.qtype, weight.shape[-1])
    if cacheable(weight):
        CPU_CACHE.put(raw, values)
    return values


def rows(weight: QWeight, index: torch.Tensor) -> torch.Tensor:
    """float32 values of the leading-dimension slices `index` ([n] int64, on the weight's device).

    Only those slices are read and dequantized (chosen experts, looked-up embedding rows), unless
    the whole weight already sits in the CPU cache.
    """
    raw = weight.raw
    if raw.device.type == "cpu" and (cached(weight) is not None or cacheable(weight)):
        return dense(weight)[index]
    return dequantize_raw(raw[index], weight.qtype, weight.shape[-1])


def linear_t(x: torch.Tensor, weight: QWeight, compute: torch.dtype = torch.float32) -> torch.Tensor:
    """x [T, IN] @ dequantize(weight [OUT, IN])^T in `compute` dtype, tiled over OUT when not cached."""
    x = x.to(compute)
    raw = weight.raw
    if raw.dtype == compute:
        return x @ raw.t()
    if compute == torch.float32:
        hit = cached(weight)
        if hit is not None or cacheable(weight):
            return x @ (hit if hit is not None else dense(weight)).t()
    out_rows, cols = weight.shape[-2], weight.shape[-1]
    step = max(1, TILE_VALUES // cols)
    if step >= out_rows:
        return x @ dequantize_raw(raw, weight.qtype, cols).to(compute).t()
    out = torch.empty(*x.shape[:-1], out_rows, dtype=compute, device=x.device)
    for r0 in range(0, out_rows, step):  # a static tiling: same tiles on every call
        r1 = min(out_rows, r0 + step)
        out[..., r0:r1] = x @ dequantize_raw(raw[r0:r1], weight.qtype, cols).to(compute).t()
    return out


def _numel(weight: QWeight) -> int:
    n = 1
    for s in weight.shape:
        n *= s
    return n
