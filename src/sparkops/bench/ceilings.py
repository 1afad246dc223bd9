"""The machine's ceilings, measured on the device at hand (never a datasheet figure).

  bandwidth  x.sum() over a buffer far larger than any cache (read bytes / time), and a copy
             (read + write bytes / time);
  matmul     a large matrix product on random data (bf16 on CUDA, float32 on the CPU);
  launch     many tiny launches timed by the wall clock: eager (what a Python engine pays per op)
             and, on CUDA, the same kernels replayed from one captured CUDA graph.

Data is random or a ramp, never zeros or constants (anchors section 6: zeros run ~15% faster).
A ceiling is the best the box did over the repeats (the minimum time), not the median: a busy
neighbour can only make a ceiling look lower, never higher, and a low ceiling would refuse honest
figures.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from .timing import RegionTimer, sync

#: default working sets: far beyond the H200's 50 MB L2 / a CPU's last-level cache
CUDA_BYTES = 2 * 2**30
CPU_BYTES = 256 * 2**20


@dataclass
class Ceilings:
    device: str
    read_bandwidth: float  # bytes/s, sum over a large buffer
    copy_bandwidth: float  # bytes/s counting read + write
    matmul_flops: float  # FLOP/s
    matmul_dtype: str
    launch_eager_s: float | None  # seconds per tiny op launched from Python (None: not measured)
    launch_graph_s: float | None  # seconds per kernel replayed from a CUDA graph (None on CPU)
    buffer_bytes: int
    dram_read_bandwidth: float | None = None  # the large-buffer figure, when read_bandwidth is a hotter level
    working_set_bytes: int | None = None  # the model's working set the hot figure was measured at
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _ramp(n: int, device: str, dtype: torch.dtype) -> torch.Tensor:
    """A non-constant buffer made quickly: a ramp folded into [-1, 1)."""
    x = torch.arange(n, device=device, dtype=torch.float32)
    x.mul_(0.6180339887).frac_().mul_(2).sub_(1)
    return x.to(dtype)


def _best_time(fn, device: str, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeats):
        with RegionTimer(device) as t:
            fn()
        times.append(t.seconds)
    return min(times)


def measure_bandwidth(device: str, nbytes: int | None = None, repeats: int = 10) -> tuple[float, float, int]:
    """(read bytes/s, copy bytes/s counting read + write, buffer bytes)."""
    nbytes = int(nbytes or (CUDA_BYTES if device == "cuda" else CPU_BYTES))
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    n = nbytes // torch.empty((), dtype=dtype).element_size()
    x = _ramp(n, device, dtype)
    y = torch.empty_like(x)
    t_read = _best_time(lambda: x.sum(dtype=torch.float32), device, repeats)
    t_copy = _best_time(lambda: y.copy_(x), device, repeats)
    if device == "cpu":  # also one thread through NumPy: immune to a thread pool starved by busy neighbours
        xn, yn = x.numpy(), y.numpy()
        t_read = min(t_read, _best_time(lambda: np.add.reduce(xn), device, repeats))
        t_copy = min(t_copy, _best_time(lambda: np.copyto(yn, xn), device, repeats))
    nb = x.numel() * x.element_size()
    del x, y
    return nb / t_read, 2 * nb / t_copy, nb


def measure_matmul(device: str, n: int | None = None, repeats: int = 5) -> tuple[float, str]:
    n = int(n or (8192 if device == "cuda" else 512))
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    out = torch.empty(n, n, device=device, dtype=dtype)
    t = _best_time(lambda: torch.matmul(a, b, out=out), device, repeats)
    if device == "cpu":  # and on one thread: a starved thread pool must not sink the ceiling
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            t = min(t, _best_time(lambda: torch.matmul(a, b, out=out), device, repeats))
        finally:
            torch.set_num_threads(threads)
    return 2 * n ** 3 / t, str(dtype).replace("torch.", "")


def measure_launch(device: str, launches: int = 2000) -> tuple[float, float | None]:
    """(seconds per eager tiny op, seconds per kernel replayed from a CUDA graph or None)."""
    x = torch.ones(1, device=device).add_(0.5)
    for _ in range(50):
        x.add_(1e-7)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(launches):
        x.add_(1e-7)
    sync(device)
    eager = (time.perf_counter() - t0) / launches
    if device != "cuda":
        return eager, None
    kernels = min(launches, 1000)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            x.add_(1e-7)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(kernels):
            x.add_(1e-7)
    graph.replay()
    sync(device)
    replays = 5
    t0 = time.perf_counter()
    for _ in range(replays):
        graph.replay()
    sync(device)
    return eager, (time.perf_counter() - t0) / (replays * kernels)


def measure(device: str, *, nbytes: int | None = None, matmul_n: int | None = None, launches: int = 2000,
            working_set: int | None = None, launch: bool = True) -> Ceilings:
    """Every ceiling of this box. With `working_set` (the model's bytes) smaller than the big buffer,
    the model may live in a cache level (k3-nano in a CPU's L3): the bandwidth is then also measured
    hot at the model's own size and the higher figure is the ceiling - a cache-resident working set
    is judged against the cache's bandwidth instead of flattering itself against DRAM's."""
    read, copy, nb = measure_bandwidth(device, nbytes)
    flops, dtype = measure_matmul(device, matmul_n)
    eager, graph = measure_launch(device, launches) if launch else (None, None)
    c = Ceilings(device, read, copy, flops, dtype, eager, graph, nb, dram_read_bandwidth=read,
                 working_set_bytes=working_set, note="read bandwidth over a buffer beyond the caches")
    if working_set is not None and working_set < nb:
        hot, hot_copy, _ = measure_bandwidth(device, max(int(working_set), 1 << 20))
        if hot > read:
            c.read_bandwidth, c.copy_bandwidth = hot, max(copy, hot_copy)
            c.note = (f"the model ({working_set / 2**20:.3g} MiB) is smaller than the {nb / 2**20:.3g} MiB buffer: "
                      f"read bandwidth measured hot at the model's size ({hot / 1e9:.4g} GB/s; beyond the caches "
                      f"{read / 1e9:.4g} GB/s)")
    return c


#: the anchors' H200 (spec/anchors.md section 1), for --paper runs with no device to measure
H200_ANCHORS = Ceilings("cuda (anchors: one H200, measured 2026-11-29)", 4.04e12, 4.21e12, 790e12, "bfloat16",
                        21.8e-6, 0.86e-6, 4 * 2**30)
