"""The numpy plugin's carrier adapter: torch tensors in, float64 NumPy inside, torch tensors out.

CPU tensors become zero-copy NumPy views where NumPy has the dtype; state parameters are updated
in place (through the view, or copied back where a view was impossible, e.g. bfloat16). Floating
outputs are cast to the dtype of the contract's reference input (`like`), so the reference returns
what the engine carries.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np
import torch

from sparkops.ops import get_contract
from sparkops.qweight import QWeight

_VIEWABLE = {torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int8, torch.uint8,
             torch.bool}


def numpy_op(op: str, like: str | None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Adapt a NumPy function to the carrier for op `op`; cast floating outputs to the dtype of input `like`."""
    contract = get_contract(op)
    names = contract.param_names
    state = {p.name for p in contract.params if p.kind == "state"}

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            bound = dict(zip(names, args))
            bound.update(kwargs)
            arrays, copied = {}, []
            for name, value in bound.items():
                if isinstance(value, torch.Tensor):
                    arr = _to_numpy(value)
                    if name in state and not _is_view(value):
                        copied.append((value, arr))
                    arrays[name] = arr
                else:
                    arrays[name] = value
            out = fn(**arrays)
            for tensor, arr in copied:
                tensor.copy_(torch.from_numpy(arr))
            if like is None:
                dtype = None
            elif like == "dtype":
                dtype = bound["dtype"]
            else:
                dtype = bound[like].dtype
            return _from_numpy(out, dtype)

        return call

    return wrap


def _is_view(t: torch.Tensor) -> bool:
    return t.device.type == "cpu" and t.dtype in _VIEWABLE and t.is_contiguous()


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    if _is_view(t):
        return t.detach().numpy()
    return t.detach().to("cpu", torch.float64 if t.is_floating_point() else t.dtype).contiguous().numpy()


def _from_numpy(out: Any, dtype: torch.dtype | None) -> Any:
    if isinstance(out, tuple):
        return tuple(_from_numpy(o, dtype) for o in out)
    if isinstance(out, np.ndarray):
        t = torch.from_numpy(np.ascontiguousarray(out))
        if dtype is not None and t.is_floating_point():
            t = t.to(dtype)
        return t
    return out


def dequant(w: QWeight) -> np.ndarray:
    """float64 values of a weight (the reference dequantizer, exactly gguf-py's values)."""
    return w.dequantize().numpy().astype(np.float64)
