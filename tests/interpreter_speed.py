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
import math
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
    if not _cuda_device():  # the frontend's own types where kernels are compiled for a GPU and run (the device)
        _remember_shape_types(tl.core)
    _skip_dead_overflow_checks(interpreter)
    return True


def _cuda_device() -> bool:
    """Is there a CUDA device for Triton to compile for and run on? There the GPU tests prove the kernels as
    production builds them, so the shape-type cache (which replaces Triton frontend code the compiler runs too, not
    only the interpreter) stays out; on a machine without one only the interpreter and sm_90 compile checks run."""
    try:
        import torch
    except Exception:  # noqa: BLE001 - no torch: no device the tests could use
        return False
    return bool(torch.cuda.is_available())


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


def _int_values(values, constexpr) -> tuple | None:
    """values (ints, or constexprs holding ints: a shape) as a tuple of ints, or None where any is something else
    (a bool, a float, a tensor, a subclass, ...): those take Triton's own path."""
    out = []
    for v in values:
        if type(v) is int:
            out.append(v)
        elif type(v) is constexpr and type(v.value) is int:
            out.append(v.value)
        else:
            return None
    return tuple(out)


def _remember_shape_types(core) -> None:
    """Every interpreted op builds its result's block type, and every tensor and block type builds a tl.tuple of its
    shape: Triton computes each one's tuple_type (a constexpr_type an element and a name string) and checks the
    shape (ints, powers of two) afresh - over a million times in one interpreted MoE test, a fifth of its time. For a
    shape of plain ints (or constexprs of ints) the answer depends on those ints alone, so it is computed once and
    given again as equal fresh objects: a new tuple_type (new lists; the shared constexpr_types are never changed)
    with the name Triton would write, block_type's numel and name, and a tensor's shape tuple (fresh constexprs) and
    numel from the same ints. Anything else - fields, a bool or float, a shape Triton refuses (its error), a tensor
    of a scalar type - goes to Triton's own code."""
    tuple_type, block_type, tl_tuple = getattr(core, "tuple_type", None), getattr(core, "block_type", None), \
        getattr(core, "tuple", None)
    original_types = getattr(core, "_type_for_tuple_values", None)
    constexpr = getattr(core, "constexpr", None)
    if None in (tuple_type, block_type, tl_tuple, original_types, constexpr) or \
            getattr(original_types, "_sparkops_remembered", False):
        return
    original_block_init = block_type.__init__
    types_known: dict = {}  # ints -> (constexpr_types, name) of Triton's tuple_type for them
    shapes_known: dict = {}  # ints -> (numel, the shape's str) of a valid block shape

    def _type_for_tuple_values(values, fields=None):
        ints = _int_values(values, constexpr) if fields is None else None
        if ints is None:
            return original_types(values, fields)
        known = types_known.get(ints)
        if known is None:
            model = original_types(list(ints))
            known = types_known[ints] = (tuple(model.types), model.name)
        ty = tuple_type.__new__(tuple_type)
        ty.types = list(known[0])
        ty.fields = [""] * len(ints)
        ty.name = known[1]
        return ty

    def block_type_init(self, element_ty, shape):
        # Triton asserts a list or a tl.tuple (a builtin tuple fails its assert: it goes there)
        values = shape.values if isinstance(shape, tl_tuple) else shape if isinstance(shape, list) else None
        ints = _int_values(values, constexpr) if values is not None else None
        known = shapes_known.get(ints) if ints else None
        if known is None:
            original_block_init(self, element_ty, shape)  # Triton's checks (and errors), the reference answer
            if ints:
                shapes_known[ints] = (self.numel, str(self.shape))
            return
        self.element_ty = element_ty
        self.shape = tl_tuple(list(ints))
        self.numel = known[0]
        self.name = f"<{known[1]}, {element_ty}>"

    tensor = getattr(core, "tensor", None)
    original_tensor_init = getattr(tensor, "__init__", None)

    def tensor_init(self, handle, type):
        """Triton's tensor.__init__ for a block type of plain ints (its shape as constexprs, a tl.tuple typed by
        _type_for_tuple_values), without building the tuple's type from its constexprs one by one."""
        shape = type.shape if type.__class__ is block_type else None
        ints = _int_values(shape.values, constexpr) if shape.__class__ is tl_tuple else None
        if not ints:
            return original_tensor_init(self, handle, type)
        self.handle = handle
        self.numel = constexpr(math.prod(ints))
        self.type = type
        self.dtype = type.scalar
        self.shape = tl_tuple([constexpr(s) for s in ints], _type_for_tuple_values(ints))

    _type_for_tuple_values._sparkops_remembered = True
    core._type_for_tuple_values = _type_for_tuple_values
    block_type.__init__ = block_type_init
    if original_tensor_init is not None and base_init_is_objects(tensor):
        tensor.__init__ = tensor_init


def base_init_is_objects(tensor) -> bool:
    """tensor.__init__'s super().__init__() is object's (nothing to do) for every base between them."""
    return all("__init__" not in vars(c) for c in tensor.__mro__[1:-1])


def _skip_dead_overflow_checks(interpreter) -> None:
    """Every integer add, sub and mul of an interpreted kernel (an offset, an index) also runs Triton's overflow
    check (`binary_op_sanitize_overflow_impl`: both operands cast to int64, the op again, compared with the type's
    bounds, 7 more interpreted ops) whose only product is a `device_assert` - and `device_assert` returns at once,
    doing nothing, unless the builder's options.debug is on, which the interpreter's never is (InterpreterOptions'
    default; nothing sets it). So the check is skipped where its result would be thrown away: on the interpreter's
    builder with debug off and TritonSemantic's own device_assert; a quarter of an interpreted MoE decode's time.
    Compiled kernels (another builder) and a debug run keep Triton's code."""
    try:
        from triton.language.semantic import TritonSemantic
    except Exception:  # noqa: BLE001 - another Triton: nothing skipped
        return
    original = getattr(TritonSemantic, "binary_op_sanitize_overflow_impl", None)
    device_assert = getattr(TritonSemantic, "device_assert", None)
    builder = getattr(interpreter, "InterpreterBuilder", None)
    if None in (original, device_assert, builder) or getattr(original, "_sparkops_skipped", False):
        return

    def binary_op_sanitize_overflow_impl(self, lhs, rhs, binary_op):
        options = getattr(self.builder, "options", None)
        if (type(self.builder) is builder and getattr(options, "debug", True) is False
                and type(self).device_assert is device_assert):
            return None  # Triton's would compute a condition and hand it to a device_assert that drops it
        return original(self, lhs, rhs, binary_op)

    binary_op_sanitize_overflow_impl._sparkops_skipped = True
    TritonSemantic.binary_op_sanitize_overflow_impl = binary_op_sanitize_overflow_impl
