"""How the Triton plugin registers: interpreter -> CPU, CUDA -> cuda, neither -> unavailable with the reason;
every entry's signature matches its contract, and its kernel sources exist (the gate hashes them)."""

from pathlib import Path

import pytest
import torch

from sparkops.plugins import load_catalog

pytest.importorskip("triton", reason="triton is not installed (pip install sparkops[gpu])")

import sparkops_triton  # noqa: E402
from sparkops_triton import IMPLEMENTATIONS, _runtime  # noqa: E402

MINE = [(op, name) for op, name, *_ in IMPLEMENTATIONS]


def triton_impls(catalog):
    return {(op, n): i for op, impls in catalog.by_op.items() for n, i in impls.items() if i.backend == "triton"}


def test_interpreter_registers_every_kernel_on_cpu():
    with _runtime.interpreted():  # TRITON_INTERPRET=1, and the kernel modules it imports are dropped after
        catalog = load_catalog()
    info = next(p for p in catalog.plugins if p.name == "triton")
    assert info.status == "ok", info.error
    assert not info.rejected, info.rejected  # every signature matched its contract
    found = triton_impls(catalog)
    for key in MINE:
        impl = found[key]
        assert impl.available and impl.devices == ("cpu",), impl
        for src in impl.source_files():
            assert src.exists(), f"{impl.key}: kernel source {src} is missing"


def test_interpreted_copies_reach_sibling_modules_imported_as_attributes():
    """`interpreted` drops the plugin's kernel modules from sys.modules and from the package's attributes, so a module
    that does `from . import kda` gets the interpreted copy too, not a compiled one imported earlier in the process
    (kda_norm's split form launches kda's kernel; CI once failed it by test order alone); afterwards the compiled
    modules are back, the same objects."""
    import importlib

    compiled = importlib.import_module("sparkops_triton.kda")
    assert type(compiled._kda_recurrent_kernel).__name__ == "JITFunction"
    with _runtime.interpreted("kda_norm") as (mod,):
        assert mod.kda is not compiled and type(mod.kda._kda_recurrent_kernel).__name__ == "InterpretedFunction"
    assert sparkops_triton.kda is compiled and importlib.import_module("sparkops_triton.kda") is compiled


def test_without_cuda_or_interpreter_every_kernel_says_why(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    found = triton_impls(load_catalog())
    for key in MINE:
        impl = found[key]
        assert not impl.available and impl.devices == ("cuda",)
        assert "TRITON_INTERPRET=1" in impl.unavailable and "CUDA" in impl.unavailable


def test_with_cuda_the_kernels_run_on_cuda(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert _runtime.availability() == (("cuda",), None)


def test_without_triton_the_reason_names_the_import(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_triton(name, *args, **kwargs):
        if name == "triton" or name.startswith("triton."):
            raise ImportError("No module named 'triton'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_triton)
    devices, why = _runtime.availability()
    assert devices == ("cuda",) and "triton cannot be imported" in why and "pip install triton" in why


def test_the_plugin_module_does_not_import_triton():
    """Registration must work without triton: the package and _runtime import it only inside functions."""
    for path in (Path(sparkops_triton.__file__), Path(_runtime.__file__)):
        top = [line for line in path.read_text().splitlines() if line.startswith(("import triton", "from triton"))]
        assert not top, f"{path.name} imports triton at module level: {top}"
