"""Vectorised torch dequantizers for the seven GGUF types sparkops reads, on the blocks' own device.

Every function takes the uint8 block bytes where they live (CPU or CUDA) and returns float32 values
on the same device: no host round trip, no `.item()`, no data-dependent Python branching, so a
dequantization can sit inside a captured CUDA graph. The float32 arithmetic follows the NumPy
reference (`sparkops.gguf.quants.dequantize`, gguf-py's formulas) operation by operation, in the same
order, so the results are bit-identical in float32 (tests/backends/test_torch_dequant.py proves it).

Block layouts (GGUF, little-endian; QK_K = 256):
  Q8_0  34 B / 32 values : f16 d | int8 q[32]                          x = d * q
  Q4_K 144 B / 256 values: f16 d | f16 dmin | 12 B packed 6-bit (scale, min) x 8 | 128 B nibbles
                                                                        x = (d*sc) * q - (dmin*m)
  Q6_K 210 B / 256 values: 128 B low nibbles | 64 B high 2-bit pairs | int8 scales[16] | f16 d
                                                                        x = (d*scale) * (q - 32)
  IQ1_S 50 B / 256 values: f16 d | 32 B grid-index low bytes | 8 x u16 (3 index bits x 4, 3-bit
                           scale, delta sign)                           x = dl * (grid + delta)
"""

from __future__ import annotations

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops.qweight import QWeight, block_geometry

QK_K = 256
_FLOAT = {Q.F32: torch.float32, Q.F16: torch.float16, Q.BF16: torch.bfloat16}


def dequantize(weight: QWeight, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The whole weight as `dtype` values [*shape] on the weight's device."""
    return dequantize_raw(weight.raw, weight.qtype, weight.shape[-1]).to(dtype)


def dequantize_raw(raw: torch.Tensor, qtype: int, cols: int) -> torch.Tensor:
    """float32 values [*lead, cols] from GGUF data [*lead, row_bytes] (or the typed float tensor).

    `raw` may be any gather of a QWeight's rows (a few experts, a few embedding rows): blocks never
    straddle rows, so any set of whole rows dequantizes on its own.
    """
    qtype = Q(int(qtype))
    if qtype in _FLOAT:
        return raw.to(torch.float32)
    block, nbytes = block_geometry(qtype)
    lead = tuple(raw.shape[:-1])
    if raw.dtype != torch.uint8 or raw.shape[-1] * block != cols * nbytes:
        raise BadInput(f"{qtype.name} data of shape {list(raw.shape)} ({raw.dtype}) does not hold rows of "
                       f"{cols} values; pass the QWeight's raw uint8 blocks")
    if raw.numel() == 0:
        return torch.empty(*lead, cols, dtype=torch.float32, device=raw.device)
    blocks = raw.reshape(-1, nbytes)  # [n, type_size]
    values = _BLOCK_DEQUANTIZERS[qtype](blocks)  # [n, block]
    return values.reshape(*lead, cols)


# -- little-endian field readers ------------------------------------------------------------------

def _f16(blocks: torch.Tensor, offset: int) -> torch.Tensor:
    """float32 [n, 1] from the float16 stored at byte `offset` of each block (exact conversion)."""
    return blocks[:, offset:offset + 2].contiguous().view(torch.float16).to(torch.float32)


def _u16(blocks: torch.Tensor, start: int, count: int) -> torch.Tensor:
    """int32 [n, count] from `count` little-endian uint16 values starting at byte `start`."""
    b = blocks[:, start:start + 2 * count].to(torch.int32).reshape(-1, count, 2)
    return b[..., 0] | (b[..., 1] << 8)


# -- the block formats ----------------------------------------------------------------------------

def _q8_0(blocks: torch.Tensor) -> torch.Tensor:
    d = _f16(blocks, 0)  # [n, 1]
    q = blocks[:, 2:].contiguous().view(torch.int8).to(torch.float32)  # [n, 32]
    return q * d


def _q4_k_scale_min(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The 8 six-bit scales and mins of a Q4_K block from its 12 packed bytes (int32 [n, 8] each)."""
    p = packed.to(torch.int32).reshape(-1, 3, 4)
    d, m, m_d = p[:, 0], p[:, 1], p[:, 2]  # [n, 4] each
    sc = torch.cat([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], dim=-1)
    mn = torch.cat([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], dim=-1)
    return sc, mn


def _q4_k(blocks: torch.Tensor) -> torch.Tensor:
    n = blocks.shape[0]
    d = _f16(blocks, 0)
    dmin = _f16(blocks, 2)
    sc, mn = _q4_k_scale_min(blocks[:, 4:16])
    d = (d * sc.to(torch.float32)).reshape(n, 8, 1)  # [n, 8 sub-blocks, 1]
    dm = (dmin * mn.to(torch.float32)).reshape(n, 8, 1)
    qs = blocks[:, 16:].reshape(n, 4, 32)  # uint8: nibble arithmetic needs no wider type
    q = torch.stack([qs & 0x0F, qs >> 4], dim=2).reshape(n, 8, 32).to(torch.float32)  # low nibbles, then high
    return (d * q - dm).reshape(n, QK_K)


def _q6_k(blocks: torch.Tensor) -> torch.Tensor:
    n = blocks.shape[0]
    ql = blocks[:, :128].reshape(n, 2, 64)  # uint8 throughout: a 6-bit code fits
    qh = blocks[:, 128:192].reshape(n, 2, 32)
    scales = blocks[:, 192:208].contiguous().view(torch.int8).to(torch.float32)  # [n, 16]
    d = _f16(blocks, 208)
    d = (d * scales).reshape(n, 16, 1)
    lo = torch.stack([ql & 0x0F, ql >> 4], dim=2)  # [n, 2, 2, 64]
    hi = torch.stack([qh & 3, (qh >> 2) & 3, (qh >> 4) & 3, qh >> 6], dim=2)  # [n, 2, 4, 32]
    q = (lo.reshape(n, 8, 32) | (hi.reshape(n, 8, 32) << 4)).reshape(n, 16, 16).to(torch.float32) - 32.0  # exact
    return (d * q).reshape(n, QK_K)


_IQ1S_DELTA = 0.125
_grids: dict[torch.device, torch.Tensor] = {}


def iq1s_grid(device: torch.device | str) -> torch.Tensor:
    """The IQ1_S codebook as float32 [2048, 8] on `device`, uploaded once per device and kept.

    Call it (or dequantize one IQ1_S weight) before capturing a CUDA graph: the first call copies
    the table from the host.
    """
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    grid = _grids.get(device)
    if grid is None:
        host = np.array(_host_iq1s_grid(), dtype=np.float32).reshape(2048, 8)  # a private, writable copy
        grid = torch.from_numpy(host).to(device)
        _grids[device] = grid
    return grid


def _host_iq1s_grid():
    """The table as the reference dequantizer uses it (sparkops.gguf.quants; gguf-py's copy if absent)."""
    try:
        from sparkops.gguf.quants import iq1s_grid as reference_grid
    except ImportError:  # the reference module predates the accessor: gguf-py holds the same table
        from gguf.quants import IQ1_S

        IQ1_S.init_grid()
        return IQ1_S.grid
    return reference_grid()


def _iq1_s(blocks: torch.Tensor) -> torch.Tensor:
    n = blocks.shape[0]
    d = _f16(blocks, 0)  # [n, 1]
    qs = blocks[:, 2:34].to(torch.int32)  # [n, 32] low 8 bits of the grid indices
    qh = _u16(blocks, 34, 8)  # [n, 8] one per 32-value sub-block
    dl = (d * (2 * ((qh >> 12) & 7) + 1).to(torch.float32)).reshape(n, 8, 1, 1)
    delta = torch.where((qh & 0x8000) == 0, _IQ1S_DELTA, -_IQ1S_DELTA).to(torch.float32).reshape(n, 8, 1, 1)
    high = torch.stack([qh & 7, (qh >> 3) & 7, (qh >> 6) & 7, (qh >> 9) & 7], dim=2)  # [n, 8, 4]
    idx = qs | (high.reshape(n, 32) << 8)  # [n, 32] grid rows in [0, 2048)
    grid = iq1s_grid(blocks.device)[idx.reshape(-1).long()].reshape(n, 8, 4, 8)
    return (dl * (grid + delta)).reshape(n, QK_K)


_BLOCK_DEQUANTIZERS = {Q.Q8_0: _q8_0, Q.Q4_K: _q4_k, Q.Q6_K: _q6_k, Q.IQ1_S: _iq1_s}
