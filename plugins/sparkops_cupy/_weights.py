"""GGUF weights as the kernels see them: which kernel variant, the bytes of one row, the IQ1_S table.

A QWeight keeps its blocks exactly as stored (`raw`: uint8 [*lead, rows, row_bytes], or the typed
array for F32/F16/BF16). Kernels read rows straight from that memory by pointer: row r of expert e
starts at (e * rows + r) * row_bytes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops.qweight import QWeight

from ._runtime import DTYPE_CODE

#: kernel name suffix per type (the kernels' QT_* families in quant_dot.cuh)
SUFFIX = {Q.F32: "float", Q.F16: "float", Q.BF16: "float", Q.Q8_0: "q8_0", Q.Q4_K: "q4_k", Q.Q6_K: "q6_k",
          Q.IQ1_S: "iq1_s"}
#: the alignment each type's row loads assume (Q4_K reads 16-byte words; the others 2-byte halves)
_ALIGN = {Q.F32: 4, Q.F16: 2, Q.BF16: 2, Q.Q8_0: 2, Q.Q4_K: 16, Q.Q6_K: 2, Q.IQ1_S: 2}
_FLOAT_CODE = {Q.F32: DTYPE_CODE[torch.float32], Q.F16: DTYPE_CODE[torch.float16], Q.BF16: DTYPE_CODE[torch.bfloat16]}


@dataclass(frozen=True)
class KernelWeight:
    """What a kernel needs to know of a weight: its type family, data, and row length in bytes."""

    suffix: str
    raw: torch.Tensor
    row_bytes: int
    wdt: int  # element type code of float weights (unused by block types)
    is_float: bool


def kernel_weight(op: str, name: str, w: QWeight, device: torch.device) -> KernelWeight:
    if not isinstance(w, QWeight):
        raise BadInput(f"{op}: '{name}' must be a sparkops.qweight.QWeight, got {type(w).__name__}")
    if w.raw.device != device:
        raise BadInput(f"{op}: weight '{name}' ({w.name}) is on {w.raw.device}, the activations on {device}; "
                       f"move it with QWeight.to('{device}')")
    raw = w.raw if w.raw.is_contiguous() else w.raw.contiguous()
    if raw.data_ptr() % _ALIGN[w.qtype]:
        raise BadInput(f"{op}: weight '{name}' ({w.name}) data is not {_ALIGN[w.qtype]}-byte aligned; "
                       f"load it into its own allocation (e.g. QWeight(raw.clone(), ...))")
    cols = w.shape[-1]
    if w.is_float:
        return KernelWeight("float", raw, cols * raw.element_size(), _FLOAT_CODE[w.qtype], True)
    return KernelWeight(SUFFIX[w.qtype], raw, raw.shape[-1], 0, False)


@functools.cache
def _grid_words() -> np.ndarray:
    """IQ1_S's grid as 2048 x 2 little-endian words of four int8 values each (uint32 [2048, 2])."""
    from sparkops.gguf.quants import iq1s_grid

    grid = np.ascontiguousarray(iq1s_grid(), dtype=np.int8)  # [2048, 8] in {-1, 0, 1}
    return grid.view(np.uint32).reshape(2048, 2).copy()


#: bytes of the nibble grid a shared-grid block copies in (IQ1S_NIB_BYTES in kernels/iq1s_q8.cuh)
NIB_GRID_BYTES = 2048 * 4


def _grid_nibbles() -> np.ndarray:
    """IQ1_S's grid as 2048 words of 8 values g + 1 (0, 1, 2) in 4 bits each, byte k holding value k in its low nibble
    and value k + 4 in its high one (uint32 [2048]): the shared-memory table of the _sg kernels
    (kernels/iq1s_q8.cuh)."""
    from sparkops.gguf.quants import iq1s_grid

    g = np.asarray(iq1s_grid(), dtype=np.int16) + 1  # [2048, 8] in {0, 1, 2}
    packed = (g[:, :4] | (g[:, 4:] << 4)).astype(np.uint8)  # [2048, 4]: byte k = value k | value k + 4 << 4
    return np.ascontiguousarray(packed).view("<u4").reshape(2048).copy()


_grids: dict[int, torch.Tensor] = {}
_nibble_grids: dict[int, torch.Tensor] = {}


def iq1s_grid(device: torch.device) -> torch.Tensor:
    """The IQ1_S table on `device` (uploaded once per device; call it outside a graph capture first)."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    g = _grids.get(idx)
    if g is None:
        words = torch.from_numpy(_grid_words().view(np.int32))  # [2048, 2]
        g = words.to(torch.device("cuda", idx))
        _grids[idx] = g
    return g


def iq1s_grid_nibbles(device: torch.device) -> torch.Tensor:
    """The IQ1_S nibble grid (`_grid_nibbles`) on `device`, 16-byte aligned (its own allocation), uploaded once per
    device; call it outside a graph capture first."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    g = _nibble_grids.get(idx)
    if g is None:
        g = torch.from_numpy(_grid_nibbles().view(np.int32)).to(torch.device("cuda", idx))  # [2048]
        _nibble_grids[idx] = g
    return g
