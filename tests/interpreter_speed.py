"""Triton's interpreter without its redundant re-patching (and without rebuilding its dtype table on every call):
the same kernels, the same bits, less of the CPU suite's time (the interpreter tests were about half of it).

Triton 3.6's interpreter patches triton.language for the interpreter (`interpreter._patch_lang`: every builtin of
tl, tl.tensor, tl.math and tl.core.tensor_descriptor_base wrapped, found with inspect.getmembers) when a launch
starts, and undoes it when the launch ends. It then patches it again on every call of a @triton.jit helper inside
the kernel (`InterpretedFunction.__call__`, and sparkops_triton._runtime's call of triton.language's own @jit
functions): the same modules, while the launch's patches are still in place. That repeat finds nothing left to wrap
(a wrapped builtin is no builtin any more) and sets the few unconditional attributes (tl.range, tl.tensor's
__index__, ...) to functions doing the same as the ones already there - and it costs ~0.7 ms a call, a third of a
Q4_K MoE decode's interpreted time (the dequantize helpers are called per chunk, per program).

`install()` patches each language module once a launch: the launch's own patch runs as before; a helper's patch
while the launch runs is skipped where the launch already patched the modules its globals hold (as _patch_lang reads
them), and otherwise runs once and stays until the launch ends (triton.language's own @jit functions, tl.sum's say,
hold tl.core, which the kernel's launch does not patch: sparkops_triton._runtime patched and restored it around every
such call). At the launch's end every patch is restored, newest first, as before. Where Triton's internals are not
what this expects (another version), nothing is skipped: slower, never different. Installed by tests/conftest.py for
the whole session; kernels compiled for a GPU never reach the interpreter.
"""

from __future__ import annotations

import inspect
import sys
import weakref


class _NoScope:
    """What a skipped patch returns: nothing was set, so nothing is restored."""

    def restore(self) -> None:
        pass


def install() -> bool:
    """Wrap triton's interpreter._patch_lang (once a process); False where triton or its interpreter is missing."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except Exception:  # noqa: BLE001 - no triton, no interpreter to speed up
        return False
    original = getattr(interpreter, "_patch_lang", None)
    executor = getattr(getattr(interpreter, "GridExecutor", None), "__call__", None)
    if original is None or executor is None:
        return False
    if getattr(original, "_sparkops_once_a_launch", False):
        return True
    launch_code = executor.__code__
    patched: set[int] = set()  # the language modules (ids) patched for the running launch; empty between launches
    later: list = []  # the scopes of modules first patched by a helper of the running launch, restored at its end

    known: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # fn -> langs(fn): a module's globals are set

    def langs(fn) -> frozenset[int]:
        mods = known.get(fn)
        if mods is None:
            mods = known[fn] = frozenset(id(v) for v in fn.__globals__.values()
                                         if inspect.ismodule(v) and v in (tl, tl.core))
        return mods

    class _LaunchScope:
        """The launch's own patch: restored by the launch's `finally` (the helpers' patches first, newest first),
        which also ends the skipping."""

        def __init__(self, scope) -> None:
            self.scope = scope

        def restore(self) -> None:
            patched.clear()
            try:
                while later:
                    later.pop().restore()
            finally:
                self.scope.restore()

    def _patch_lang(fn):
        mods = langs(fn)
        if sys._getframe(1).f_code is launch_code:  # GridExecutor.__call__: a launch starts
            scope = original(fn)
            patched.clear()
            later.clear()
            patched.update(mods)
            return _LaunchScope(scope)
        if not patched or not mods:  # outside a launch, or no language module: as Triton does (its assert)
            return original(fn)
        if not mods <= patched:  # a module the launch did not patch (tl.core, for tl.sum's own @jit code)
            later.append(original(fn))  # patched once, for the rest of the launch
            patched.update(mods)
        return _NoScope()

    _patch_lang._sparkops_once_a_launch = True
    interpreter._patch_lang = _patch_lang
    _remember_np_dtypes(interpreter)
    return True


def _remember_np_dtypes(interpreter) -> None:
    """interpreter._get_np_dtype (the NumPy dtype holding a Triton type's values) builds its table of every dtype
    anew on each call - hundreds of thousands of calls in an interpreted kernel test, some 7% of its time. Its answer
    depends on the type's class and name alone (a block type's name spells its element type, a pointer's is uint64
    whatever it points to), so the first answer for a (class, name) is kept and given again; NumPy dtypes are
    immutable. A type without a name goes to Triton's function every time."""
    original = getattr(interpreter, "_get_np_dtype", None)
    if original is None or getattr(original, "_sparkops_remembered", False):
        return
    known: dict = {}

    def _get_np_dtype(tt_dtype):
        name = getattr(tt_dtype, "name", None)
        if not isinstance(name, str):
            return original(tt_dtype)
        key = (type(tt_dtype), name)
        np_dtype = known.get(key)
        if np_dtype is None:
            np_dtype = known[key] = original(tt_dtype)
        return np_dtype

    _get_np_dtype._sparkops_remembered = True
    interpreter._get_np_dtype = _get_np_dtype
