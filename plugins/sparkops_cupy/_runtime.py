"""Loading and launching the CuPy plugin's CUDA kernels on torch's current stream.

- Sources: `kernels/*.cu` (+ the `.cuh` headers they include), compiled by NVRTC through
  `cupy.RawModule` for the device's own architecture (sm_90 on an H200). Compiled modules are kept
  in a cache keyed by the sha256 of the source, every header's bytes, the options and the device's
  compute capability, so an edited kernel is never served stale (CuPy's own on-disk cache is keyed
  by the source too).
- Launch: on `torch.cuda.current_stream().cuda_stream`, wrapped as a `cupy.cuda.ExternalStream`, so a
  kernel lands in the same stream order as torch's work and is recorded by a CUDA graph capture of
  that stream. No launch reads anything back to the host.
- Arguments: tensors go in as their device pointers (8-byte values; the callers keep the tensors
  alive across the launch), integers and floats as explicit numpy scalars of the kernel's C types.
  `as_cupy` gives a zero-copy CuPy view of a tensor through DLPack, for code that wants CuPy arrays.

Nothing here imports CuPy at module import time: the plugin registers (and reports itself
unavailable) on machines without CuPy or a GPU.
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from sparkops.errors import BadInput, Unavailable

from ._pdl import launch_pdl

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
#: NVRTC options; the architecture is added by CuPy from the device (compute capability 9.0 -> sm_90).
#: Headers are expanded into the source before compiling (`expanded_source`), so no include path is
#: needed and CuPy's own on-disk cache, keyed by the source text, also sees every header change.
OPTIONS = ("--std=c++17",)

NO_CUPY = "cupy is not installed (pip install sparkops[gpu])"
NO_CUDA = "no CUDA device (torch.cuda.is_available() is false)"

#: activation dtype codes shared with kernels/common.cuh (DT_F32, DT_BF16, DT_F16)
DTYPE_CODE = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\s*$", re.MULTILINE)
_lock = threading.Lock()
_modules: dict[str, Any] = {}
_functions: dict[tuple[str, str, int], Any] = {}
_smem_set: dict[tuple[str, str, int], int] = {}
_streams: dict[tuple[int, int], Any] = {}


# ---- availability -------------------------------------------------------------------------------------

def unavailable_reason() -> str | None:
    """None when the kernels can run here, else why not (what `sparkops plan` shows)."""
    import importlib.util

    if importlib.util.find_spec("cupy") is None:
        return NO_CUPY
    if not torch.cuda.is_available():
        return NO_CUDA
    try:
        cp = _cupy()
        if cp.cuda.runtime.getDeviceCount() < 1:
            return NO_CUDA
    except Exception as exc:  # noqa: BLE001 - a broken CuPy install is a reason, not a crash
        return f"cupy failed to initialise ({type(exc).__name__}: {exc}); check that cupy matches the CUDA driver"
    return None


@functools.cache
def _cupy():
    import cupy

    return cupy


# ---- sources and modules ------------------------------------------------------------------------------

def source_files(cu_name: str) -> tuple[str, ...]:
    """The kernel file and every header it includes (transitively), relative to this package."""
    seen: list[str] = []

    def visit(name: str) -> None:
        rel = f"kernels/{name}"
        if rel in seen:
            return
        seen.append(rel)
        for inc in _INCLUDE.findall((KERNEL_DIR / name).read_text()):
            visit(inc)

    visit(cu_name)
    return tuple(seen)


def expanded_source(cu_name: str) -> str:
    """The kernel source with its `#include "x.cuh"` lines replaced by the headers (each once)."""
    done: set[str] = set()

    def expand(name: str) -> str:
        if name in done:
            return ""
        done.add(name)
        text = _PRAGMA_ONCE.sub("", (KERNEL_DIR / name).read_text())
        return _INCLUDE.sub(lambda m: expand(m.group(1)), text)

    return expand(cu_name)


def module_key(source: str, capability: tuple[int, int]) -> str:
    """sha256 over the (expanded) source, the compile options and the target: the compile cache key."""
    h = hashlib.sha256()
    h.update(source.encode())
    h.update(repr(OPTIONS).encode())
    h.update(f"sm_{capability[0]}{capability[1]}".encode())
    return h.hexdigest()


def _module(cu_name: str, device: int):
    cp = _cupy()
    code = expanded_source(cu_name)
    key = module_key(code, torch.cuda.get_device_capability(device))
    with _lock:
        mod = _modules.get(key)
        if mod is None:
            with cp.cuda.Device(device):
                mod = cp.RawModule(code=code, options=OPTIONS, backend="nvrtc")
                if hasattr(mod, "compile"):
                    mod.compile()  # compile now, so an error surfaces here and not inside a graph capture
            _modules[key] = mod
    return mod


def kernel(cu_name: str, name: str, device: int):
    """The compiled kernel `name` of `kernels/<cu_name>` for CUDA device index `device`."""
    fkey = (cu_name, name, device)
    fn = _functions.get(fkey)
    if fn is None:
        with _lock:
            fn = _functions.get(fkey)
        if fn is None:
            mod = _module(cu_name, device)
            with _cupy().cuda.Device(device):
                fn = mod.get_function(name)
            _functions[fkey] = fn
    return fn


# ---- launching ----------------------------------------------------------------------------------------

def _stream(device: int):
    """torch's current stream on `device` as a CuPy ExternalStream (cached per stream handle)."""
    ptr = torch.cuda.current_stream(device).cuda_stream
    key = (device, ptr)
    s = _streams.get(key)
    if s is None:
        s = _cupy().cuda.ExternalStream(ptr, device)
        _streams[key] = s
    return s


def launch(cu_name: str, name: str, device: torch.device, grid: Sequence[int], block: Sequence[int],
           args: Sequence[Any], shared_mem: int = 0, pdl: bool = False) -> None:
    """Launch `name` from `kernels/<cu_name>` on torch's current stream of `device`. Asynchronous.
    `pdl`: with programmatic dependent launch (_pdl.py), for kernels written for it only."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    fn = kernel(cu_name, name, idx)
    if shared_mem > 48 * 1024:
        fkey = (cu_name, name, idx)
        if _smem_set.get(fkey, 0) < shared_mem:
            limit = max_shared_memory(idx)
            if shared_mem > limit:
                raise BadInput(f"kernel {name}: needs {shared_mem} bytes of shared memory, the device allows "
                               f"{limit}; the input is too wide for this implementation, use another one")
            fn.max_dynamic_shared_size_bytes = shared_mem
            _smem_set[fkey] = shared_mem
    grid = tuple(int(g) for g in grid)
    if any(g <= 0 for g in grid):
        return  # nothing to do (an empty input)
    cp = _cupy()
    if pdl:
        with cp.cuda.Device(idx):
            launch_pdl(fn.kernel.ptr, grid, tuple(int(b) for b in block), tuple(args), int(shared_mem),
                       torch.cuda.current_stream(idx).cuda_stream)
        return
    with cp.cuda.Device(idx), _stream(idx):
        fn(grid, tuple(int(b) for b in block), tuple(args), shared_mem=int(shared_mem))


@functools.cache
def sm_count(device: int) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


@functools.cache
def shared_memory_per_sm(device: int) -> int:
    """Shared memory one multiprocessor holds for all its resident blocks (bytes)."""
    per_sm = getattr(torch.cuda.get_device_properties(device), "shared_memory_per_multiprocessor", None)
    if per_sm:
        return int(per_sm)
    cp = _cupy()
    attr = getattr(cp.cuda.runtime, "cudaDevAttrMaxSharedMemoryPerMultiprocessor", 81)
    return int(cp.cuda.runtime.deviceGetAttribute(attr, device))


@functools.cache
def max_shared_memory(device: int) -> int:
    """Largest dynamic shared memory one block may opt into on `device` (bytes)."""
    optin = getattr(torch.cuda.get_device_properties(device), "shared_memory_per_block_optin", None)
    if optin:
        return int(optin)
    cp = _cupy()
    attr = getattr(cp.cuda.runtime, "cudaDevAttrMaxSharedMemoryPerBlockOptin", 97)
    return int(cp.cuda.runtime.deviceGetAttribute(attr, device))


# ---- arguments ----------------------------------------------------------------------------------------

def ptr(t: torch.Tensor | None) -> np.uint64:
    """A tensor's device pointer as a kernel argument (0 for None: an absent optional input)."""
    return np.uint64(0 if t is None else t.data_ptr())


def i32(v: int) -> np.int32:
    return np.int32(v)


def i64(v: int) -> np.int64:
    return np.int64(v)


def f32(v: float) -> np.float32:
    return np.float32(v)


def as_cupy(t: torch.Tensor):
    """Zero-copy CuPy view of a CUDA tensor (DLPack), ordered on torch's current stream."""
    cp = _cupy()
    idx = t.device.index if t.device.index is not None else torch.cuda.current_device()
    with cp.cuda.Device(idx), _stream(idx):
        return cp.from_dlpack(t.detach())


# ---- input checks shared by the ops (host-side only: shapes, dtypes, devices; never values) ----------

def cuda_device(op: str, **tensors: torch.Tensor | None) -> torch.device:
    """The one CUDA device all given tensors live on, or BadInput naming the tensor that is elsewhere."""
    dev = None
    for name, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise BadInput(f"{op}: '{name}' must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cuda":
            raise BadInput(f"{op}: '{name}' is on {t.device}; the cupy implementation runs on CUDA tensors, "
                           f"move it with .cuda() or select a CPU implementation")
        if dev is None:
            dev = t.device
        elif t.device != dev:
            raise BadInput(f"{op}: '{name}' is on {t.device} but the other inputs are on {dev}; put them on "
                           f"one device")
    if dev is None:
        raise Unavailable(f"{op}: no CUDA tensor among the inputs")
    return dev


def act_code(op: str, name: str, t: torch.Tensor) -> int:
    """The kernel dtype code of an activation tensor, or BadInput listing the supported dtypes."""
    code = DTYPE_CODE.get(t.dtype)
    if code is None:
        raise BadInput(f"{op}: '{name}' has dtype {t.dtype}; the cupy kernels take float32, bfloat16 or "
                       f"float16 activations, convert it with .float()")
    return code


def expect_shape(op: str, name: str, t: torch.Tensor, want: Sequence[int | None], what: str = "") -> None:
    shape = tuple(t.shape)
    if len(shape) != len(want) or any(w is not None and w != s for w, s in zip(want, shape)):
        spelled = "[" + ", ".join("*" if w is None else str(w) for w in want) + "]"
        hint = f" ({what})" if what else ""
        raise BadInput(f"{op}: '{name}' has shape {list(shape)}, expected {spelled}{hint}; pass a tensor of that "
                       f"shape")


def contiguous(t: torch.Tensor) -> torch.Tensor:
    """A dense copy only when needed (a strided view cannot be read by a pointer)."""
    return t if t.is_contiguous() else t.contiguous()
