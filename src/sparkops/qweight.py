"""QWeight: a weight tensor kept exactly as it is stored in the GGUF file (quantized blocks or plain floats).

Ops dequantize on the fly; nothing else in sparkops expands a quantized weight. The logical shape is
PyTorch's [*lead, rows, cols] (a linear weight is [out, in]; stacked experts are [E, out, in]). For
block-quantized types `raw` is uint8 [*lead, rows, row_bytes] (row_bytes = cols / block_size *
type_size); for F32/F16/BF16 `raw` is the typed tensor [*lead, rows, cols] itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from .errors import BadInput

#: the GGUF types sparkops reads (spec: F32, F16, BF16, Q8_0, Q4_K, Q6_K, IQ1_S)
SUPPORTED = (
    GGMLQuantizationType.F32,
    GGMLQuantizationType.F16,
    GGMLQuantizationType.BF16,
    GGMLQuantizationType.Q8_0,
    GGMLQuantizationType.Q4_K,
    GGMLQuantizationType.Q6_K,
    GGMLQuantizationType.IQ1_S,
)
_FLOAT_DTYPES = {
    GGMLQuantizationType.F32: torch.float32,
    GGMLQuantizationType.F16: torch.float16,
    GGMLQuantizationType.BF16: torch.bfloat16,
}


def check_supported(qtype: int, what: str) -> GGMLQuantizationType:
    """The type as an enum, or a clear error naming the tensor and the supported types."""
    try:
        t = GGMLQuantizationType(int(qtype))
    except ValueError:
        t = None
    if t not in SUPPORTED:
        names = ", ".join(s.name for s in SUPPORTED)
        shown = t.name if t is not None else f"type id {int(qtype)}"
        raise BadInput(f"{what}: quant type {shown} is not supported by sparkops (supported: {names}); "
                       f"re-quantize the file to one of them")
    return t


def block_geometry(qtype: int) -> tuple[int, int]:
    """(values per block, bytes per block) of a GGUF type."""
    return GGML_QUANT_SIZES[GGMLQuantizationType(int(qtype))]


@dataclass
class QWeight:
    raw: torch.Tensor
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]
    name: str = "<unnamed>"

    def __post_init__(self) -> None:
        self.qtype = check_supported(self.qtype, self.name)
        self.shape = tuple(int(s) for s in self.shape)
        block, nbytes = block_geometry(self.qtype)
        cols = self.shape[-1]
        if cols % block:
            raise BadInput(f"{self.name}: {self.qtype.name} needs rows whose length is a multiple of {block}, "
                           f"got shape {list(self.shape)}")
        if self.qtype in _FLOAT_DTYPES:
            want, dtype = self.shape, _FLOAT_DTYPES[self.qtype]
            if self.raw.dtype != dtype:
                raise BadInput(f"{self.name}: {self.qtype.name} data must be {dtype}, got {self.raw.dtype}")
        else:
            want = (*self.shape[:-1], cols // block * nbytes)
            if self.raw.dtype != torch.uint8:
                raise BadInput(f"{self.name}: {self.qtype.name} blocks must be uint8, got {self.raw.dtype}")
        if tuple(self.raw.shape) != tuple(want):
            raise BadInput(f"{self.name}: {self.qtype.name} data of shape {list(self.raw.shape)} does not hold "
                           f"a {list(self.shape)} weight (expected data shape {list(want)})")

    @property
    def is_float(self) -> bool:
        return self.qtype in _FLOAT_DTYPES

    @property
    def device(self) -> torch.device:
        return self.raw.device

    @property
    def nbytes(self) -> int:
        return self.raw.numel() * self.raw.element_size()

    def to(self, device: str | torch.device) -> "QWeight":
        return QWeight(self.raw.to(device), self.qtype, self.shape, self.name)

    def __getitem__(self, index: int) -> "QWeight":
        """One slice along the leading dimension (one expert of a stacked expert tensor)."""
        if len(self.shape) < 3:
            raise BadInput(f"{self.name}: only stacked (3-D) weights can be indexed, shape is {list(self.shape)}")
        return QWeight(self.raw[index], self.qtype, self.shape[1:], f"{self.name}[{index}]")

    def dequantize(self) -> torch.Tensor:
        """Float32 values on the CPU via the NumPy reference dequantizer (tests and tools, never a hot path)."""
        from .gguf.quants import dequantize

        raw = self.raw.detach().cpu()
        if self.is_float:
            return raw.to(torch.float32)
        return torch.from_numpy(dequantize(raw.numpy(), self.qtype, self.shape))

    @classmethod
    def from_float(cls, values: torch.Tensor, qtype: int, name: str = "<unnamed>") -> "QWeight":
        """Quantize float values honestly (round-to-nearest in the type's own format)."""
        from .gguf.quants import quantize

        qtype = check_supported(qtype, name)
        if qtype in _FLOAT_DTYPES:
            return cls(values.detach().to(_FLOAT_DTYPES[qtype]).contiguous(), qtype, tuple(values.shape), name)
        raw = quantize(values.detach().cpu().to(torch.float32).numpy(), qtype)
        return cls(torch.from_numpy(raw), qtype, tuple(values.shape), name)
