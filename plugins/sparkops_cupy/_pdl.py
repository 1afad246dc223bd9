"""Launching a compiled kernel with programmatic dependent launch (PDL): `cuLaunchKernelEx` with the
programmatic-stream-serialization attribute, called through ctypes.

Why: CuPy's launch (`RawKernel.__call__`) takes no launch attributes. With the attribute, the kernel may be
scheduled once the kernel before it in the stream has let it (`griddepcontrol.launch_dependents`, kernels/
common.cuh's `pdl_launch_dependents`) instead of when that kernel ends, and the kernel itself waits
(`pdl_wait`) before it reads what the kernel before wrote. A CUDA graph capture of the stream records the launch
with a programmatic edge. Only kernels written for it may be launched so: `pdl_wait` before their first read of
another kernel's output and before their first global write.

The structures are the driver API's (cuda.h, CUDA 12.0+): `CUlaunchConfig` and `CUlaunchAttribute` with its
64-byte value union; the attribute's id is CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (6).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any, Sequence

import numpy as np

from sparkops.errors import Unavailable

#: CUlaunchAttributeID CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (cuda.h)
PROGRAMMATIC_STREAM_SERIALIZATION = 6


class LaunchAttributeValue(ctypes.Union):
    """CUlaunchAttributeValue: 64 bytes, 8-byte aligned (its largest member holds a pointer)."""

    _fields_ = [("pad", ctypes.c_char * 64), ("as_int", ctypes.c_int), ("_align", ctypes.c_void_p)]


class LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: the id, padding to 8 bytes, the value."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", LaunchAttributeValue)]


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


@functools.cache
def _driver():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise Unavailable(f"programmatic dependent launch needs the CUDA driver library (libcuda.so.1): {exc}") from exc
    fn = getattr(lib, "cuLaunchKernelEx", None)
    if fn is None:
        raise Unavailable("programmatic dependent launch needs cuLaunchKernelEx (a CUDA 12 driver); this driver "
                          "lacks it: launch without pdl")
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    return lib, fn


def kernel_params(args: Sequence[Any]) -> tuple[ctypes.Array, list[np.ndarray]]:
    """The `void**` array of a launch: one pointer to each argument's bytes. Arguments are numpy scalars of the
    kernel's C types (_runtime.ptr, i32, i64, f32); the returned holders keep those bytes alive for the call."""
    holders = []
    for i, a in enumerate(args):
        if not isinstance(a, np.generic):
            raise TypeError(f"kernel argument {i} is a {type(a).__name__}; pass a numpy scalar of the kernel's C type "
                            f"(sparkops_cupy._runtime.ptr / i32 / i64 / f32)")
        holders.append(np.array(a))  # 0-d: its own buffer of the scalar's bytes
    params = (ctypes.c_void_p * max(1, len(holders)))(*[h.ctypes.data for h in holders])
    return params, holders


def launch_config(grid: Sequence[int], block: Sequence[int], shared_mem: int, stream: int,
                  attr: LaunchAttribute) -> LaunchConfig:
    g = tuple(grid) + (1,) * (3 - len(grid))
    b = tuple(block) + (1,) * (3 - len(block))
    return LaunchConfig(g[0], g[1], g[2], b[0], b[1], b[2], int(shared_mem), ctypes.c_void_p(stream),
                        ctypes.pointer(attr), 1)


def programmatic_attribute() -> LaunchAttribute:
    attr = LaunchAttribute()
    attr.id = PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.as_int = 1
    return attr


def launch_pdl(function_ptr: int, grid: Sequence[int], block: Sequence[int], args: Sequence[Any], shared_mem: int,
               stream: int) -> None:
    """Launch the CUfunction `function_ptr` on CUstream `stream` with programmatic dependent launch. The caller has
    made the function's device current and set its dynamic shared memory limit."""
    _, fn = _driver()
    attr = programmatic_attribute()
    config = launch_config(grid, block, shared_mem, stream, attr)
    params, holders = kernel_params(args)
    err = fn(ctypes.byref(config), ctypes.c_void_p(function_ptr), params, None)
    del holders
    if err != 0:
        raise RuntimeError(f"cuLaunchKernelEx with programmatic dependent launch failed: CUresult {err}")
