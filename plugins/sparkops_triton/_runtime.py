"""What every Triton kernel module of this plugin shares: where the kernels can run, input checks that
name the bad argument and the fix, launch sizing, and a way to run the kernels in Triton's interpreter.

Nothing here imports triton at module level: the plugin must register (as unavailable, with the
reason) on a machine that does not have it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
from typing import Iterator, Sequence

import torch

from sparkops.errors import BadInput

PACKAGE = __name__.rpartition(".")[0]
NO_CUDA = "no CUDA device (set TRITON_INTERPRET=1 to run the kernels in the Triton interpreter on CPU)"


def interpreting() -> bool:
    """True when TRITON_INTERPRET asks for Triton's interpreter (kernels then run on CPU tensors)."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


def availability() -> tuple[tuple[str, ...], str | None]:
    """(devices, None) where the kernels can run, else (devices, why not)."""
    try:
        import triton  # noqa: F401  - the import is the check
    except Exception as exc:  # noqa: BLE001 - any import failure means the backend cannot run
        return ("cuda",), f"triton cannot be imported ({type(exc).__name__}: {exc}); pip install triton"
    if interpreting():
        return ("cpu",), None
    if torch.cuda.is_available():
        return ("cuda",), None
    return ("cuda",), NO_CUDA


@contextlib.contextmanager
def interpreted(*modules: str) -> Iterator[list]:
    """Import fresh copies of this plugin's kernel modules with TRITON_INTERPRET=1, yield them, restore.

    `triton.jit` decides at decoration time whether a kernel is compiled or interpreted, so a test
    that wants the interpreter in a process that may also hold the compiled kernels (a GPU machine)
    needs its own copies of the modules. The previous modules and environment come back afterwards.
        with interpreted("rmsnorm") as (mod,): mod.rmsnorm(x, w, 1e-5)
    """
    saved_env = os.environ.get("TRITON_INTERPRET")
    prefix = PACKAGE + "."
    keep = {prefix + "_runtime"}
    package = sys.modules[PACKAGE]
    saved = {k: v for k, v in sys.modules.items() if k.startswith(prefix) and k not in keep}
    saved_attrs = dict(vars(package))  # importing a submodule also binds it as an attribute of the package
    for k in saved:
        del sys.modules[k]
        if "." not in k[len(prefix):]:  # `from . import kda` reads the package's attribute before sys.modules:
            package.__dict__.pop(k[len(prefix):], None)  # unbound, it imports the fresh copy too
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield [importlib.import_module(prefix + m) for m in modules]
    finally:
        for k in [k for k in sys.modules if k.startswith(prefix) and k not in keep]:
            del sys.modules[k]
        sys.modules.update(saved)
        for name in [n for n in vars(package) if n not in saved_attrs]:
            delattr(package, name)
        for name, value in saved_attrs.items():
            if getattr(package, name, None) is not value:
                setattr(package, name, value)
        if saved_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved_env


def _interpreter_fixes() -> None:
    """Two gaps of Triton 3.6's interpreter (compiled kernels are not affected), filled once per process:

    - loop bounds: it holds scalars as 1-element arrays and turns one into an int with int(array),
      which NumPy 2 refuses; `for i in range(n)` with `n` a kernel argument then fails. We add, for
      the duration of each interpreted launch (its own patch scope restores it), an __index__ that
      reads the single element;
    - bf16 matrix products: it keeps bfloat16 as raw uint16 bits and multiplies those bits in
      tl.dot; we widen bf16 operands to float32 first (exact), as the tensor cores do;
    - float32 -> bf16 casts: it truncates the mantissa; the GPU rounds to nearest even, and so do we;
    - triton imported before TRITON_INTERPRET was set: triton.language's own @jit functions (tl.sum,
      tl.sigmoid, tl.cumsum, ...) are then compiled-kernel objects that refuse to be called; we let
      such a call run the function through the interpreter, as it would had the variable been set
      first. (Compilation never calls a @jit function object, so compiled kernels are unaffected.)
      tl.sort, which the interpreter would run as a bitonic network of Python-level reductions
      (minutes for a few thousand keys), is done with NumPy's sort along the last axis instead.
    """
    try:
        import numpy as np
        from triton.runtime import interpreter
        import triton.language as tl
    except Exception:  # noqa: BLE001 - without the interpreter there is nothing to fix
        return
    original = interpreter._patch_lang_tensor
    if not getattr(original, "_sparkops_fix", False):
        def patch(tensor, scope):
            original(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

        patch._sparkops_fix = True
        interpreter._patch_lang_tensor = patch
    builder = interpreter.InterpreterBuilder
    dot = builder.create_dot
    if not getattr(dot, "_sparkops_fix", False):
        def widen(x):
            if x.dtype != tl.bfloat16:
                return x
            bits = np.asarray(x.data).astype(np.uint32) << np.uint32(16)
            return interpreter.TensorHandle(bits.view(np.float32), tl.float32)

        def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
            return dot(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

        create_dot._sparkops_fix = True
        builder.create_dot = create_dot
    cast = builder.cast_impl
    if not getattr(cast, "_sparkops_fix", False):
        def cast_impl(self, src, dst_type):
            if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
                bits = np.ascontiguousarray(src.data, dtype=np.float32).view(np.uint32).astype(np.uint64)
                rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest, ties to even
                nan = np.isnan(np.asarray(src.data, dtype=np.float32))
                out = np.where(nan, 0x7FC0, rounded).astype(np.uint16)
                return interpreter.TensorHandle(out, dst_type.scalar)
            return cast(self, src, dst_type)

        cast_impl._sparkops_fix = True
        builder.cast_impl = cast_impl
    from triton.runtime.jit import JITFunction

    if not getattr(JITFunction.__call__, "_sparkops_fix", False):
        as_interpreted: dict = {}

        sort_fn = tl.standard.sort.fn

        def numpy_sort(x, dim=None, descending=False):
            last = len(x.shape) - 1
            dim = last if dim is None else int(getattr(dim, "value", dim))
            if dim not in (-1, last):
                raise NotImplementedError("the interpreter's fast tl.sort sorts along the last axis only")
            data = np.sort(np.asarray(x.handle.data), axis=-1)
            if bool(getattr(descending, "value", descending)):
                data = np.ascontiguousarray(data[..., ::-1])
            return tl.core.tensor(interpreter.TensorHandle(data, x.handle.dtype), x.type)

        def call(self, *args, **kwargs):
            if self.fn is sort_fn:
                return numpy_sort(*args, **kwargs)
            fn = as_interpreted.get(id(self))  # by id: hashing a @jit function would analyse its source
            if fn is None:
                fn = as_interpreted[id(self)] = interpreter.InterpretedFunction(self.fn)
            # as InterpretedFunction.__call__ does, but undoing the patches afterwards: this function's
            # module (triton.language.core) is one the kernel's own launch did not patch, so its
            # patches would outlive the launch and break later compilations in this process
            scope = interpreter._patch_lang(self.fn)
            try:
                return fn.rewrite()(*args, **kwargs)
            finally:
                scope.restore()

        call._sparkops_fix = True
        JITFunction.__call__ = call


# ---- input checks (host-side shape/dtype/device checks only: nothing here synchronizes) ----

def expect(op: str, name: str, t, want: Sequence[int | None], what: str = "") -> None:
    """Raise BadInput unless `t` is a tensor with len(want) dims matching the non-None entries."""
    if not isinstance(t, torch.Tensor):
        raise BadInput(f"{op}: '{name}' is a {type(t).__name__}; pass a torch.Tensor")
    shape = tuple(t.shape)
    if len(shape) != len(want) or any(w is not None and w != s for w, s in zip(want, shape)):
        spelled = "[" + ", ".join("*" if w is None else str(w) for w in want) + "]"
        hint = f" ({what})" if what else ""
        raise BadInput(f"{op}: '{name}' has shape {list(shape)}, expected {spelled}{hint}; pass a tensor of that shape")


def expect_device(op: str, **tensors: torch.Tensor) -> torch.device:
    """All tensors on one device, and the one this backend runs on here (CUDA, or CPU when interpreting)."""
    devices = {name: t.device for name, t in tensors.items()}
    first_name, first = next(iter(devices.items()))
    for name, dev in devices.items():
        if dev != first:
            raise BadInput(f"{op}: '{name}' is on {dev} but '{first_name}' is on {first}; move them to one device")
    want = "cpu" if interpreting() else "cuda"
    if want == "cpu":
        _interpreter_fixes()
    if first.type != want:
        how = ("unset TRITON_INTERPRET to run on CUDA tensors" if want == "cpu"
               else "move the tensors to CUDA, or set TRITON_INTERPRET=1 (before triton is imported) for CPU")
        raise BadInput(f"{op}: the Triton kernels run on {want} tensors here, got {first}; {how}")
    return first


def expect_dtype(op: str, name: str, t: torch.Tensor, allowed: Sequence[torch.dtype]) -> None:
    if t.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise BadInput(f"{op}: '{name}' is {str(t.dtype).replace('torch.', '')}; pass one of {names}")


def expect_inplace(op: str, name: str, t: torch.Tensor, dtype: torch.dtype = torch.float32) -> None:
    """A state tensor is updated in place: it must already be contiguous and of the state dtype."""
    if t.dtype != dtype:
        raise BadInput(f"{op}: state '{name}' is {t.dtype}, the kernel updates {dtype} state in place; "
                       f"allocate it as {dtype}")
    if not t.is_contiguous():
        raise BadInput(f"{op}: state '{name}' is not contiguous, so it cannot be updated in place; "
                       f"allocate it contiguous (torch.zeros(...) is)")


FLOATS = (torch.float32, torch.float16, torch.bfloat16)


# ---- launch sizing ----

def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of the device (a small stand-in in the interpreter)."""
    if device.type != "cuda":
        return 4
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device())


def cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))
