"""The torch dequantizers against the NumPy reference (sparkops.gguf.quants), bit for bit in float32.

Random bytes in every field (finite fp16 scales), plus the reference's own random_blocks, over
shapes with leading dimensions; gathered rows dequantize on their own; the IQ1_S grid is uploaded
once per device. The same comparison on CUDA is in test_torch_cuda.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops.gguf import quants as ref
from sparkops.qweight import QWeight
from sparkops_torch import dequant

BLOCK_TYPES = (Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.IQ1_S)
ALL_TYPES = (Q.F32, Q.F16, Q.BF16) + BLOCK_TYPES
F16_FIELDS = {Q.Q8_0: (0,), Q.Q4_K: (0, 2), Q.Q6_K: (208,), Q.IQ1_S: (0,)}  # byte offsets of fp16 scales


def random_bytes(rng: np.random.Generator, qtype, shape) -> np.ndarray:
    """Uniform random bytes, except the fp16 fields: random finite fp16 values of any exponent."""
    raw = rng.integers(0, 256, size=ref.storage_shape(qtype, shape), dtype=np.uint8)
    blocks = raw.reshape(-1, GGML_QUANT_SIZES[qtype][1])
    for off in F16_FIELDS[qtype]:
        mant_sign = rng.integers(0, 1 << 16, size=blocks.shape[0], dtype=np.uint16) & np.uint16(0x83FF)
        exponent = rng.integers(0, 31, size=blocks.shape[0], dtype=np.uint16)  # 31 would be Inf/NaN
        blocks[:, off:off + 2] = (mant_sign | (exponent << 10)).astype("<u2").view(np.uint8).reshape(-1, 2)
    return raw


def as_qweight(raw: np.ndarray, qtype, shape) -> QWeight:
    if qtype == Q.BF16:  # the reference keeps bf16 as uint16 bit patterns
        return QWeight(torch.from_numpy(raw.view(np.int16).copy()).view(torch.bfloat16), qtype, shape)
    return QWeight(torch.from_numpy(np.ascontiguousarray(raw)), qtype, shape)


def bits(t: torch.Tensor) -> torch.Tensor:
    assert t.dtype == torch.float32
    return t.contiguous().view(torch.int32)


@pytest.mark.parametrize("qtype", BLOCK_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("shape", [(256,), (7, 512), (3, 5, 256), (0, 256)], ids=str)
def test_random_bytes_dequantize_bit_exact(qtype, shape):
    rng = np.random.default_rng(17 + int(qtype) + 3 * len(shape))
    raw = random_bytes(rng, qtype, shape)
    want = torch.from_numpy(ref.dequantize(raw, qtype, shape))
    got = dequant.dequantize_raw(torch.from_numpy(raw), qtype, shape[-1])
    assert got.shape == want.shape
    assert torch.equal(bits(got), bits(want))


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda t: t.name)
def test_reference_random_blocks_dequantize_bit_exact(qtype):
    rng = np.random.default_rng(int(qtype))
    shape = (4, 6, 512)
    raw = ref.random_blocks(rng, shape, qtype, std=0.3)
    want = torch.from_numpy(ref.dequantize(raw, qtype, shape))
    got = dequant.dequantize(as_qweight(raw, qtype, shape))
    assert torch.equal(bits(got), bits(want))
    assert float(want.std()) > 0.1  # real data, not zeros


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda t: t.name)
def test_gathered_rows_dequantize_alone(qtype):
    """Any set of whole rows (experts, embedding rows) dequantizes to those rows of the whole."""
    rng = np.random.default_rng(100 + int(qtype))
    shape = (9, 4, 256)
    w = as_qweight(ref.random_blocks(rng, shape, qtype, std=1.0), qtype, shape)
    whole = dequant.dequantize(w)
    pick = torch.tensor([7, 0, 7, 3])
    got = dequant.dequantize_raw(w.raw[pick], qtype, shape[-1])
    assert torch.equal(bits(got), bits(whole[pick]))


def test_iq1s_grid_is_uploaded_once_and_matches_the_reference():
    grid = dequant.iq1s_grid("cpu")
    assert grid is dequant.iq1s_grid(torch.device("cpu"))
    assert torch.equal(grid, torch.from_numpy(ref.iq1s_grid().astype(np.float32)))


def test_bad_block_data_is_refused():
    with pytest.raises(BadInput, match="Q4_K"):
        dequant.dequantize_raw(torch.zeros(3, 100, dtype=torch.uint8), Q.Q4_K, 256)
    with pytest.raises(BadInput, match="uint8"):
        dequant.dequantize_raw(torch.zeros(3, 144, dtype=torch.int16), Q.Q4_K, 256)


def test_output_dtype_follows_the_request():
    rng = np.random.default_rng(3)
    w = as_qweight(ref.random_blocks(rng, (5, 256), Q.Q6_K, std=1.0), Q.Q6_K, (5, 256))
    assert dequant.dequantize(w, torch.bfloat16).dtype == torch.bfloat16
    assert torch.equal(dequant.dequantize(w, torch.bfloat16), dequant.dequantize(w).to(torch.bfloat16))
