"""Poisoning: memory an implementation allocates is NaN (floats) or the largest integer until it writes it.

An implementation that leaves part of its output unwritten returns whatever the allocator handed
it - often, on a quiet machine, the right numbers from the previous call, which is how such bugs
pass naive tests. Under `poisoned()`:

  torch   deterministic mode with `torch.utils.deterministic.fill_uninitialized_memory`, which
          makes torch.empty / empty_like / new_empty fill floats with NaN and integers with their
          maximum (on CPU and CUDA);
  numpy   numpy.empty / empty_like return NaN- / max-filled arrays (the NumPy backends);
  cupy    where cupy is already imported, fresh allocations from its memory pool are set to 0xFF
          bytes (NaN in float16/bfloat16/float32) on the current stream.

Deterministic mode is entered with warn_only=True, so an op without a deterministic kernel still
runs (its warning is silenced here); every setting is restored on exit. `spoil()` then poisons a
returned output after the gate has copied it, so an implementation that hands back a reused buffer
is caught on its next call.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from typing import Any, Iterator

import numpy as np
import torch
import torch.utils.deterministic as deterministic


@contextlib.contextmanager
def poisoned() -> Iterator[None]:
    was_on = torch.are_deterministic_algorithms_enabled()
    was_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    was_fill = deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    deterministic.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*(deterministic|CUBLAS_WORKSPACE_CONFIG).*")
            with _numpy_poisoned(), _cupy_poisoned():
                yield
    finally:
        deterministic.fill_uninitialized_memory = was_fill
        torch.use_deterministic_algorithms(was_on, warn_only=was_warn)


def _fill_value(dtype: np.dtype) -> Any:
    if np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.complexfloating):
        return np.nan
    if np.issubdtype(dtype, np.integer):
        return np.iinfo(dtype).max
    return None


@contextlib.contextmanager
def _numpy_poisoned() -> Iterator[None]:
    empty, empty_like = np.empty, np.empty_like

    def poisoned_empty(*args: Any, **kwargs: Any) -> np.ndarray:
        a = empty(*args, **kwargs)
        v = _fill_value(a.dtype)
        if v is not None:
            a.fill(v)
        return a

    def poisoned_empty_like(*args: Any, **kwargs: Any) -> np.ndarray:
        a = empty_like(*args, **kwargs)
        v = _fill_value(a.dtype)
        if v is not None:
            a.fill(v)
        return a

    np.empty, np.empty_like = poisoned_empty, poisoned_empty_like
    try:
        yield
    finally:
        np.empty, np.empty_like = empty, empty_like


@contextlib.contextmanager
def _cupy_poisoned() -> Iterator[None]:
    cupy = sys.modules.get("cupy")  # only when a CuPy implementation is in play (never imported here)
    if cupy is None:
        yield
        return
    try:
        pool = cupy.get_default_memory_pool()
        previous = cupy.cuda.get_allocator()
    except Exception:  # noqa: BLE001 - an old or partial cupy: no pool poisoning, torch's still applies
        yield
        return

    def alloc(size: int):
        mem = pool.malloc(size)
        if size:
            cupy.cuda.runtime.memsetAsync(mem.ptr, 0xFF, size, cupy.cuda.get_current_stream().ptr)
        return mem

    cupy.cuda.set_allocator(alloc)
    try:
        yield
    finally:
        cupy.cuda.set_allocator(previous)


def spoil(outputs: tuple[Any, ...], keep: list[torch.Tensor]) -> None:
    """Fill returned tensors with poison in place, except those sharing memory with `keep` (inputs/state)."""
    kept = {_storage(t) for t in keep if isinstance(t, torch.Tensor)}
    for o in outputs:
        if not isinstance(o, torch.Tensor) or o.numel() == 0 or _storage(o) in kept:
            continue
        try:
            with torch.inference_mode():
                if o.is_floating_point() or o.is_complex():
                    o.fill_(float("nan"))
                elif o.dtype == torch.bool:
                    o.fill_(True)
                else:
                    o.fill_(torch.iinfo(o.dtype).max)
        except RuntimeError:  # a read-only or otherwise unwritable result: nothing to spoil
            pass


def _storage(t: torch.Tensor) -> tuple[str, int]:
    return (str(t.device), t.untyped_storage().data_ptr())
