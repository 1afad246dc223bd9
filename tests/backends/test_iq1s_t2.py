"""sparkops_cupy._iq1s_t2: the IQ1_S -> t2 repacking is lossless (decoded from its documented layout, every weight
equals the reference dequantizer's), keeps its copy while the weight lives unmodified, and refuses bad input by name.
Runs on CPU: the repacking is torch code on whatever device the weight is on."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops.gguf.quants import dequantize, random_blocks

t2 = pytest.importorskip("sparkops_cupy._iq1s_t2")


def decode_t2(packed: np.ndarray) -> np.ndarray:
    """The weights of t2 super-blocks (uint8 [n, 72]) by the module's layout, written out independently: [n, 256]."""
    n = packed.shape[0]
    d = packed[:, 0:2].copy().view("<f2").astype(np.float32)  # [n, 1]
    nib = packed[:, 4:8].copy().view("<u4")[:, 0]  # [n]
    out = np.empty((n, 256), np.float32)
    for s in range(8):
        v = (nib >> (4 * s)) & 15
        dl = d[:, 0] * (2 * (v & 7) + 1).astype(np.float32)
        delta = np.where(v & 8, np.float32(-0.125), np.float32(0.125))
        for h in range(2):
            word = packed[:, 8 + 8 * s + 4 * h: 12 + 8 * s + 4 * h]  # [n, 4 bytes k]
            for m in range(4):
                for k in range(4):
                    c = (word[:, k] >> (2 * m)) & 3
                    g = c.astype(np.float32) - 1
                    out[:, 32 * s + 16 * h + 4 * m + k] = dl * (g + delta)
    return out


@pytest.mark.parametrize("shape", [(3, 256), (5, 2304), (2, 3, 512)])
def test_every_weight_of_the_repacked_blocks_equals_the_reference(shape):
    raw = random_blocks(np.random.default_rng(sum(shape)), shape, Q.IQ1_S, 0.02)  # uint8 [..., rows, nsb * 50]
    packed = t2.to_t2(torch.from_numpy(np.ascontiguousarray(raw))).numpy()
    assert packed.shape == (*shape[:-1], shape[-1] // 256 * 72)
    got = decode_t2(packed.reshape(-1, 72)).reshape(shape)
    want = dequantize(raw, Q.IQ1_S, shape)
    np.testing.assert_array_equal(got, want)
    assert not packed.reshape(-1, 72)[:, 2:4].any()


def test_codes_are_two_bits_of_grid_plus_one_and_every_grid_row_round_trips():
    """All 2048 grid rows, each once as group 0 of a sub-block: the codes read back are the grid plus one."""
    from sparkops.gguf.quants import iq1s_grid

    blocks = np.zeros((2048 // 32 * 4, 50), np.uint8)  # 256 super-blocks, 8 sub-blocks each: 2048 group-0 slots
    blocks[:, 0:2] = np.frombuffer(np.float16(1.0).tobytes(), np.uint8)
    for i in range(2048):
        sb, s = divmod(i, 8)
        blocks[sb, 2 + 4 * s] = i & 255
        qh = (i >> 8) & 7
        blocks[sb, 34 + 2 * s] = qh
    packed = t2.to_t2(torch.from_numpy(blocks)).numpy()
    for i in range(2048):
        sb, s = divmod(i, 8)
        word = packed[sb, 8 + 8 * s: 12 + 8 * s]
        codes = [(word[k] >> (2 * m)) & 3 for m in range(2) for k in range(4)]  # weights 0..7 of the sub-block
        assert codes == list(iq1s_grid()[i].astype(int) + 1), i


def test_the_copy_is_kept_while_the_weight_lives_unmodified_and_made_again_after_a_change():
    raw = torch.from_numpy(np.ascontiguousarray(random_blocks(np.random.default_rng(4), (4, 256), Q.IQ1_S, 0.02)))
    first = t2.repacked(raw)
    assert t2.repacked(raw) is first
    raw[0, 0] ^= 1  # an in-place change: the version counter moves
    again = t2.repacked(raw)
    assert again is not first and torch.equal(again, t2.to_t2(raw))
    key = id(raw)
    del raw
    assert key not in t2._kept  # dies with its weight


@pytest.mark.parametrize("bad, says", [(torch.zeros(4, 49, dtype=torch.uint8), "rows of 49 bytes"),
                                       (torch.zeros(4, 50, dtype=torch.int8), "torch.int8")])
def test_bad_input_is_refused_by_name(bad, says):
    with pytest.raises(BadInput, match=says):
        t2.to_t2(bad)
