"""IQ1_S weights repacked for the one-token kernels that read no grid ("t2": two bits a weight), once per weight.

Why. Every IQ1_S kernel so far looks up 4 rows of the 2048-row IQ1_S grid per 32 weights a lane. GPU session 51 moved
the grid into shared memory and measured the kernels still bound by that gather (half the shared-memory wavefronts
bank conflicts, 13% of DRAM; the Q4_K GEMVs of the same step, which look nothing up, reach several times that). A grid
row is 8 values in {-1, 0, 1}: stored as g + 1 in 2 bits each, a sub-block's 32 weights are 8 bytes, and a __dp4a
operand is `(word >> 2 m) & 0x03030303` - two instructions, no table. The price is bytes: 72 a super-block against
IQ1_S's 50 (2.25 bits a weight against 1.5625), which the kernels read instead of the GGUF's blocks.

Layout of a super-block of 256 weights (72 bytes, rows of whole super-blocks, as the IQ1_S row they come from):
  [0:2]   d, fp16 (IQ1_S's)
  [2:4]   zero
  [4:8]   u32: nibble s (bits 4 s .. 4 s + 3) = IQ1_S's qh[s] >> 12 (the sub-block's 3-bit scale k and its delta's sign)
  [8:72]  sub-block s (32 weights) at 8 + 8 s: two u32, weights 0-15 then 16-31; in word h, byte k holds the codes
          c = g + 1 of weights 16 h + 4 m + k in bits 2 m, 2 m + 1 (m = 0..3), so that (word >> 2 m) & 0x03030303 are
          weights 16 h + 4 m .. 16 h + 4 m + 3 as four bytes.
The weight is d (2 k + 1) (c - 1 + delta), delta -1/8 where the nibble's bit 3 is set, else +1/8: exactly IQ1_S's value
(a lossless repacking; tests/backends/test_iq1s_t2.py decodes it against the reference dequantizer).

The repacked copy lives beside the weight (`repacked`): made on the first call that needs it, kept while the weight's
data tensor lives and is unmodified (keyed by its identity and version counter, as sparkops_torch._weights' CPU
cache), and refused by name inside a CUDA graph capture, where it cannot be made (the step's eager warm-up makes it).
"""

from __future__ import annotations

import weakref

import torch
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput

#: bytes of an IQ1_S super-block of 256 weights, and of its repacked form
IQ1S_BYTES = GGML_QUANT_SIZES[Q.IQ1_S][1]
T2_BYTES = 72
#: super-blocks converted at once (bounds the conversion's transient memory: ~600 bytes a super-block)
CHUNK = 1 << 18

_grids: dict[torch.device, torch.Tensor] = {}
_kept: dict[int, tuple[weakref.ref, int, torch.Tensor]] = {}


def _codes_table(device: torch.device) -> torch.Tensor:
    """The IQ1_S grid as codes g + 1, uint8 [2048, 8], on device (made once per device)."""
    t = _grids.get(device)
    if t is None:
        from sparkops.gguf.quants import iq1s_grid

        t = (torch.from_numpy(iq1s_grid().astype("int16")) + 1).to(torch.uint8).to(device)
        _grids[device] = t
    return t


def to_t2(raw: torch.Tensor) -> torch.Tensor:
    """IQ1_S blocks (uint8 [..., nsb * 50]) repacked as t2 (uint8 [..., nsb * 72]) on the same device (the module's
    docstring has the layout)."""
    if raw.dtype != torch.uint8 or raw.shape[-1] % IQ1S_BYTES:
        raise BadInput(f"IQ1_S t2 repacking: expected uint8 rows of whole {IQ1S_BYTES}-byte blocks, got "
                       f"{raw.dtype} rows of {raw.shape[-1]} bytes")
    nsb = raw.shape[-1] // IQ1S_BYTES
    blocks = raw.reshape(-1, IQ1S_BYTES)  # [B, 50]
    out = torch.empty((blocks.shape[0], T2_BYTES), dtype=torch.uint8, device=raw.device)
    table = _codes_table(raw.device)
    shifts = torch.tensor([0, 3, 6, 9], device=raw.device)
    weights2 = (torch.arange(4, device=raw.device) * 2).to(torch.uint8)  # a code's bit offset in its byte, 2 m
    for b0 in range(0, blocks.shape[0], CHUNK):
        b = blocks[b0:b0 + CHUNK]
        n = b.shape[0]
        qh = b[:, 34:50:2].long() | (b[:, 35:50:2].long() << 8)  # [n, 8]
        idx = b[:, 2:34].long().view(n, 8, 4) | (((qh.unsqueeze(-1) >> shifts) & 7) << 8)  # [n, 8 sub-blocks, 4]
        c = table[idx].view(n, 8, 2, 4, 4)  # [n, s, h, m, k]: weight 16 h + 4 m + k of sub-block s
        packed = (c << weights2.view(1, 1, 1, 4, 1)).sum(dim=3, dtype=torch.uint8)  # [n, s, h, k]: no carries
        nib = ((qh >> 12) & 15).view(n, 4, 2)  # [n, 4 bytes, 2 nibbles]
        o = out[b0:b0 + n]
        o[:, 0:2] = b[:, 0:2]
        o[:, 2:4] = 0
        o[:, 4:8] = (nib[:, :, 0] | (nib[:, :, 1] << 4)).to(torch.uint8)
        o[:, 8:72] = packed.reshape(n, 64)
    return out.view(*raw.shape[:-1], nsb * T2_BYTES)


def repacked(raw: torch.Tensor) -> torch.Tensor:
    """raw's t2 form, made once and kept while raw lives unmodified; BadInput inside a CUDA graph capture when it is
    not made yet (run the step once eagerly first, as the engine's warm-up does)."""
    key = id(raw)
    entry = _kept.get(key)
    if entry is not None:
        ref, version, t2 = entry
        if ref() is raw and version == _version(raw):
            return t2
        _kept.pop(key, None)
    if raw.is_cuda and torch.cuda.is_current_stream_capturing():
        raise BadInput("IQ1_S t2 kernels: a weight's repacked copy is made on its first call, which cannot be inside "
                       "a CUDA graph capture; run the step once eagerly before capturing it")
    t2 = to_t2(raw)
    _kept[key] = (weakref.ref(raw, lambda _r, key=key: _kept.pop(key, None)), _version(raw), t2)
    return t2


def _version(t: torch.Tensor) -> int:
    """t's in-place modification counter; -1 for an inference-mode tensor, which keeps none."""
    try:
        return t._version
    except RuntimeError:
        return -1
