"""What the CuPy backend's GPU tests share: replaying a captured chain of PDL launches against the same work launched
plainly (tests/backends/test_cupy_pdl.py, test_cupy_add_rmsnorm_router.py), and the MLA attention tests' inputs on
the device, NaN-filled scratch and error measure (test_cupy_attention_fp8.py, test_cupy_attention_twin.py)."""

from __future__ import annotations

from typing import Callable, Sequence

import torch

#: the device the GPU tests run on
DEV = torch.device("cuda")
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """A float tensor's bits as integers of its size (so -0.0 and +0.0 differ); any other tensor as it is."""
    return t.view(_BITS[t.element_size()]) if t.is_floating_point() else t


def replays_match(capture: Callable[[], Sequence[torch.Tensor]], plain: Callable[[], Sequence[torch.Tensor]],
                  refresh: Callable[[], None], replays: int = 5) -> None:
    """Capture `capture()` (the PDL launches; it returns its output tensors) in a CUDA graph, then before each replay
    `refresh()` the inputs, compute `plain()` (the same work launched plainly: the expected outputs) and poison the
    captured outputs (NaN, or -1 for integers: an id no expert has). Every replay must give the plain bits: a kernel
    that read its input before the kernel before it finished reads the poison or the replay before's values."""
    refresh()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        capture()  # compiled and warmed (counters made) outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            outs = capture()
        for replay in range(replays):
            refresh()
            wants = plain()
            for o in outs:
                o.fill_(float("nan") if o.is_floating_point() else -1)
            graph.replay()
            torch.cuda.synchronize()
            for i, (o, want) in enumerate(zip(outs, wants)):
                assert torch.isfinite(want.float()).all(), f"replay {replay}: plain output {i} is not finite"
                assert torch.equal(_bits(o), _bits(want)), f"replay {replay}: output {i} differs from the plain run"
    finally:
        graph.reset()


def on_device(args: dict) -> dict:
    """A call's arguments with every tensor copied to the device (the CPU originals stay as they were)."""
    return {k: v.clone().to(DEV) if isinstance(v, torch.Tensor) else v for k, v in args.items()}


def nan_scratch_in(monkeypatch, attention_module) -> None:
    """The attention module's intermediate buffers (its `_scratch`) NaN-filled: a value read that no kernel wrote
    shows in the output."""
    monkeypatch.setattr(attention_module, "_scratch",
                        lambda shape, dtype, device: torch.full(shape, float("nan"), dtype=dtype, device=device))


def nmse(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want||^2 / ||want||^2 in float64 on the CPU; got must be finite (a NaN or Inf is an unwritten value or
    a stale row read, never an error of size)."""
    got = got.detach().double().cpu()
    assert torch.isfinite(got).all(), "NaN/Inf in the output (an unwritten value or a stale row read)"
    return float(((got - want) ** 2).sum() / (want ** 2).sum())
