"""The Triton whole-weight decode to bfloat16 (`sparkops_triton.dequantize`), the first half of "triton_dqmm".

CPU: Triton's interpreter on every GGUF type, rows that are not a multiple of the program's tile, two chunks a row,
a stacked [E, rows, cols] weight; each value must be the float64 dequantizer's (`QWeight.dequantize`, checked against
gguf-py elsewhere) rounded to bfloat16, give or take one bfloat16 step (the kernel forms a * q + b in float32 first).
GPU (marked gpu, H200): the 48B's expert stack and a projection, checked the same way on a row subset, and timed
(bytes read and written per second against the measured 4.04 TB/s read ceiling):
    pytest -m gpu -s tests/backends/test_triton_dequantize.py
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops.qweight import QWeight

triton = pytest.importorskip("triton")

from tests.backends.triton_support import poisoned  # noqa: E402,F401

TYPES = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.IQ1_S]
TWO_CHUNKS = {Q.F32: 320, Q.F16: 288, Q.BF16: 320, Q.Q8_0: 352, Q.Q4_K: 512, Q.Q6_K: 512, Q.IQ1_S: 512}
ANCHOR_BW = 4.04e12


@pytest.fixture(scope="module")
def kernels():
    """(dequantize, linear) compiled for the interpreter; the normal modules come back after."""
    from sparkops_triton._runtime import interpreted

    with interpreted("dequantize", "linear") as mods:
        yield mods


def assert_bf16_of(got: torch.Tensor, want: torch.Tensor) -> None:
    """got (bfloat16) is want (float64) rounded to bfloat16, within one bfloat16 step of want's magnitude."""
    assert got.dtype == torch.bfloat16
    g, w = got.detach().cpu().double(), want.detach().cpu().double()
    assert torch.isfinite(g).all(), "a value was not written (the output was poisoned)"
    step = w.abs() * 2.0 ** -8 + 1e-30                                  # one bf16 step (8 significant bits)
    bad = (g - w).abs() > step
    assert not bad.any(), f"{int(bad.sum())} values off by more than a bfloat16 step; first at {bad.nonzero()[0]}"


def make_weight(g: torch.Generator, shape: tuple, qtype) -> QWeight:
    return QWeight.from_float(torch.randn(*shape, generator=g, dtype=torch.float64).float() * 0.05, qtype)


def decode(mods, w: QWeight) -> torch.Tensor:
    dq, lin = mods
    return dq.dequantize_bf16(w.raw, w.qtype, lin.grid_for(w, w.raw), w.shape[-1])


@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_every_type_is_the_dequantizer_in_bf16(kernels, poisoned, qtype):
    """70 rows (not a multiple of the 16-row tile), two chunks a row."""
    w = make_weight(torch.Generator().manual_seed(int(qtype)), (70, TWO_CHUNKS[qtype]), qtype)
    got = decode(kernels, w)
    assert got.shape == (70, TWO_CHUNKS[qtype])
    assert_bf16_of(got, w.dequantize())


def test_stacked_experts_keep_their_shape(kernels, poisoned):
    w = make_weight(torch.Generator().manual_seed(5), (3, 40, 256), Q.Q4_K)
    got = decode(kernels, w)
    assert got.shape == (3, 40, 256)
    for e in range(3):
        assert_bf16_of(got[e], w[e].dequantize())


def test_out_is_written_in_place_and_checked(kernels, poisoned):
    dq, lin = kernels
    w = make_weight(torch.Generator().manual_seed(6), (20, 256), Q.Q6_K)
    out = torch.empty((20, 256), dtype=torch.bfloat16)
    assert dq.dequantize_bf16(w.raw, w.qtype, w.raw, 256, out=out).data_ptr() == out.data_ptr()
    assert_bf16_of(out, w.dequantize())
    with pytest.raises(BadInput, match="bfloat16 \\[20, 256\\]"):
        dq.dequantize_bf16(w.raw, w.qtype, w.raw, 256, out=torch.empty((20, 256)))
    with pytest.raises(BadInput, match="last dim"):
        dq.dequantize_bf16(w.raw.t(), w.qtype, w.raw, 256)


# ---------------------------------------------------------------------------------------------
# GPU (H200): the 48B's shapes, checked on a row subset and timed
# ---------------------------------------------------------------------------------------------

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on the H200)")


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qtype,shape", [(Q.Q4_K, (256, 1024, 2304)), (Q.Q6_K, (256, 2304, 1024)),
                                         (Q.Q4_K, (4096, 2304)), (Q.IQ1_S, (256, 1024, 2304))],
                         ids=lambda v: getattr(v, "name", "x".join(map(str, v)) if isinstance(v, tuple) else v))
def test_gpu_dequantize_48b(qtype, shape):
    """An expert stack (gate/up Q4_K, down Q6_K, IQ1_S) and a projection: bf16 values on 64 rows, then timed."""
    from sparkops.gguf.quants import random_blocks
    from sparkops_triton.dequantize import dequantize_bf16
    from sparkops_triton.linear import grid_for

    from tests.backends.test_triton_linear import time_in_graph

    dev = torch.device("cuda")
    raw = torch.from_numpy(random_blocks(np.random.default_rng(int(qtype)), shape, qtype, 0.02)).to(dev)
    w = QWeight(raw, qtype, shape)
    out = torch.empty(shape, dtype=torch.bfloat16, device=dev).view(-1, shape[-1])
    got = dequantize_bf16(raw, qtype, grid_for(w, raw), shape[-1], out=out)
    flat = raw.reshape(-1, raw.shape[-1])
    rows = torch.arange(0, flat.shape[0], flat.shape[0] // 64, device=dev)
    want = QWeight(flat[rows].cpu(), qtype, (len(rows), shape[-1])).dequantize()
    assert_bf16_of(got.reshape(-1, shape[-1])[rows], want)
    sec = time_in_graph(lambda i: dequantize_bf16(raw, qtype, grid_for(w, raw), shape[-1], out=out), 4)
    moved = raw.nbytes + out.nbytes
    print(f"\ndequantize_bf16 {qtype.name} {'x'.join(map(str, shape))}: {sec * 1e6:.1f} us, "
          f"{moved / sec / 1e9:.0f} GB/s read+written ({100 * moved / sec / ANCHOR_BW:.0f}% of 4.04 TB/s), "
          f"{raw.nbytes / 1e6:.1f} MB -> {out.nbytes / 1e6:.1f} MB")
