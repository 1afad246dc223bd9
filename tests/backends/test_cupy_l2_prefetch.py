"""sparkops_cupy.l2_prefetch: a scheduling hint, not an op. It must refuse what it cannot prefetch with an error
that names the fix, change no value anywhere, and be capturable in the CUDA graph of a decode step. Whether it
pays is bench/probes/l2_prefetch.py's question (run on the GPU, recorded in bench/GPU-PROBES.md)."""

from __future__ import annotations

import pytest
import torch

from sparkops.errors import BadInput


def test_a_cpu_tensor_is_refused_naming_the_device():
    from sparkops_cupy.l2_prefetch import prefetch

    with pytest.raises(BadInput, match="not a CUDA device"):
        prefetch(torch.zeros(16, dtype=torch.uint8))


@pytest.mark.gpu
def test_gpu_prefetch_changes_nothing_and_is_captured_in_a_graph():
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from sparkops_cupy.l2_prefetch import prefetch

    w = torch.randint(0, 255, (5 * 2**20 + 48,), dtype=torch.uint8, device="cuda")  # a tail that is not 32 KiB
    before = w.clone()
    x = torch.randn(1024, device="cuda")
    y = torch.empty_like(x)
    prefetch(w)
    prefetch(w, nbytes=100)  # rounded down to 96: a hint, never past the range
    prefetch(w, blocks=132)  # spread over an H100's SMs: most threads find no chunk left
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        prefetch(w)
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(g):
        prefetch(w)
        torch.mul(x, 2.0, out=y)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert torch.equal(w, before) and torch.equal(y, x * 2.0)
    with pytest.raises(BadInput, match="16-byte aligned"):
        prefetch(w[1:])
    with pytest.raises(BadInput, match="bytes asked"):
        prefetch(w, nbytes=w.numel() + 1)
    with pytest.raises(BadInput, match="blocks=0"):
        prefetch(w, blocks=0)
