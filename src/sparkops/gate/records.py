"""Check records: what the gate writes when an implementation passes, and when a record still holds.

A record is stale when the implementation's source changed (its module, the modules of its own
package that module imports, transitively, and its declared kernel sources), when its claim or its
row of the tolerance table changed, when it was made on another device class, when the check
failed, when the pinned reference (reference.lock) changed since, when the op's cases changed since
(cases_digest), or - for a bit-identity claim - when the implementation it claims to equal changed.
The engine refuses a selection whose record is stale; the message says what to run.
"""

from __future__ import annotations

import ast
import datetime as _dt
import hashlib
import importlib.util
import inspect
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import BadInput
from ..ops import get_contract
from ..plugins.implementation import Implementation
from .tolerances import rule_for, variant_name


# -- what defines an implementation ------------------------------------------------------------------
def source_files(impl: Implementation) -> list[tuple[str, Path]]:
    """(stable name, path) of every file whose bytes define `impl`, sorted by name.

    The module that holds the callable; every module of the same top-level package it imports
    (`from ._common import f32`, `from . import kernels`), followed transitively, so a change to a
    shared helper invalidates the records of every implementation that uses it; and the declared
    kernel sources (`register(..., sources=(...))`, e.g. a .cu file or a Triton module read at run
    time). Names are relative to the directory holding the top-level package, so a hash made in one
    checkout equals the hash made in another.
    """
    fn = inspect.unwrap(impl.resolve())
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    try:
        main = Path(inspect.getsourcefile(fn) or "")
    except TypeError:  # a builtin or compiled callable has no Python source
        main = Path("")
    top = (getattr(module, "__name__", "") or "").split(".")[0]
    root = _package_root(module, main)
    found: dict[Path, None] = {}
    if main.is_file():
        _collect(main, getattr(module, "__name__", ""), getattr(module, "__package__", None), top, found)
    base = main.parent if main.is_file() else Path.cwd()
    for extra in (p if p.is_absolute() else base / p for p in map(Path, impl.sources)):  # declared kernel sources
        if not extra.is_file():
            raise BadInput(f"{impl.key} (plugin '{impl.plugin}') declares the source file {extra}, which does not "
                           f"exist; fix `sources=` in its register() call (paths are relative to {main.parent})")
        found[extra.resolve()] = None
    if not found:
        raise BadInput(f"{impl.key} (plugin '{impl.plugin}'): no source file defines it (a compiled callable?); "
                       f"declare the files it is built from with `sources=` in its register() call")
    return sorted(((_stable_name(p, root), p) for p in found), key=lambda np_: np_[0])


def _package_root(module: Any, main: Path) -> Path:
    """The directory that holds the top-level package (or the module, if it is a plain module)."""
    name = getattr(module, "__name__", "") or ""
    depth = name.count(".") + (1 if main.name == "__init__.py" else 0)
    root = main.resolve().parent
    for _ in range(depth):
        root = root.parent
    return root


def _stable_name(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return path.name


def _collect(path: Path, modname: str, package: str | None, top: str, found: dict[Path, None]) -> None:
    path = path.resolve()
    if path in found or not path.exists():
        return
    found[path] = None
    if path.suffix != ".py" or not top:
        return
    try:
        tree = ast.parse(path.read_bytes())
    except SyntaxError:
        return
    pkg = package if package is not None else modname.rpartition(".")[0]
    if path.name == "__init__.py":
        pkg = modname
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, pkg)
            if base is None or base.split(".")[0] != top:
                continue
            for a in node.names:  # `from .x import y`: the submodule y if there is one, else x (where y lives)
                sub = f"{base}.{a.name}"
                targets.append(sub if a.name != "*" and _origin(sub) is not None else base)
        elif isinstance(node, ast.Import):
            targets += [a.name for a in node.names]
        for name in targets:
            if name.split(".")[0] != top:
                continue
            sub = _origin(name)
            if sub is not None:
                _collect(sub, name, None, top, found)


def _absolute(module: str | None, level: int, package: str) -> str | None:
    if level == 0:
        return module
    parts = package.split(".") if package else []
    if level - 1 > len(parts):
        return None
    base = parts[:len(parts) - (level - 1)]
    return ".".join(base + ([module] if module else [])) or None


def _origin(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    return Path(spec.origin)


def source_hash(impl: Implementation) -> str:
    """sha256 over the implementation's key and the names and bytes of its source files."""
    h = hashlib.sha256()
    h.update(impl.key.encode())
    for name, path in source_files(impl):
        h.update(b"\0" + name.encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


# -- where a check ran --------------------------------------------------------------------------------
def device_info(device: str) -> dict[str, str]:
    """The device class, the device's name and its compute capability ("" on CPU)."""
    if device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        return {"device_class": "cuda", "device_name": torch.cuda.get_device_name(),
                "compute_capability": f"{major}.{minor}"}
    name = platform.processor() or platform.machine() or "cpu"
    return {"device_class": "cpu", "device_name": f"cpu {name}".strip(), "compute_capability": ""}


def library_versions() -> dict[str, str]:
    """Versions of everything that can change an implementation's numbers ("absent" when not installed)."""

    def dist(*names: str) -> str:
        for n in names:
            try:
                return metadata.version(n)
            except metadata.PackageNotFoundError:
                continue
        return "absent"

    from .. import __version__

    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
            "cuda": str(torch.version.cuda or "none"), "triton": dist("triton"),
            "cupy": dist("cupy-cuda13x", "cupy-cuda12x", "cupy"), "sparkops": __version__}


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


# -- is a record still good? ------------------------------------------------------------------------
def record_problem(impl: Implementation, record: dict[str, Any] | None, device: str,
                   catalog: Any = None) -> str | None:
    """None when `record` lets `impl` run on `device`, else what is wrong with it.

    `catalog` (optional) lets a bit-identity record be checked against the current source of the
    implementation it claims to equal.
    """
    if impl.name == get_contract(impl.op).reference:
        return None
    if not record:
        return "no check record"
    if record.get("passed") is not True:
        return "its recorded check failed"
    if record.get("op") not in (None, impl.op) or record.get("impl") not in (None, impl.name):
        return f"the record is for {record.get('op')}={record.get('impl')}, not {impl.key}"
    if record.get("device_class") != device:
        return f"it was checked on {record.get('device_class')!r}, not {device!r}"
    if not isinstance(record.get("cases"), int) or record["cases"] <= 0:
        return "the record shows no cases run"
    try:
        current = source_hash(impl)
    except (OSError, TypeError, BadInput) as exc:
        return f"its source cannot be read to verify the record ({exc})"
    if record.get("source_hash") != current:
        return "its source changed since it was checked"
    if record.get("claim") != str(impl.claim):
        return f"its claim changed since it was checked (recorded: {record.get('claim')!r}, now: {str(impl.claim)!r})"
    problem = _rule_problem(impl, record)
    if problem:
        return problem
    if impl.claim.kind == "bit_identical" and catalog is not None:
        problem = _target_problem(impl, record, catalog)
        if problem:
            return problem
    problem = _cases_problem(impl.op, record)
    if problem:
        return problem
    from .lockref import holds_for, reference_digest

    ref = reference_digest()
    if ref is not None and record.get("reference_digest") != ref and not holds_for(impl.op,
                                                                                   record.get("reference_digest")):
        return "the pinned reference (reference.lock) changed since it was checked"
    return None


#: each op's cases_digest as it stood when records began to keep it (GPU session 27): a record written before then
#: was proven on those cases, so it holds while they stand, and goes stale once they change
CASES_BEFORE_RECORDS_KEPT_THEM = {
    "embedding": "c18fad2cc8bf557307014d8fc930990e3d17f4370657e80235954e01a5ea3977",
    "rmsnorm": "c234dff908922df14576a3e62c7ed30f891dc74ee841b611f4e80a6362075470",
    "add_rmsnorm": "301b2acd2d75bfe4c3f9db3cfce85b812a651e95000b3f39c0673068d384cf2c",
    "linear": "3bd963d30357b12ac850418822a967501e382a6e50300f234c808e67faf60c6e",
    "quantize_act": "3038789c87c0035ecd7c83b0fc202966ea0dbe9db403e655115ece0930842e7c",
    "rmsnorm_quantize": "4f19fe43d81b0f5bcf48fc4792cb4bddaa1f629492f8b6cbf5545fd80a52a7e0",
    "short_conv": "6bef58bf28c901384dd2776807a8c41bc501c9e94c8b0ddf76d5a2e1c5df5350",
    "kda": "f20ed6751ba9526c18b981eb56bb2e567734e2118bc6f85d4d6a1a16c2c80cb9",
    "gated_rmsnorm": "fb9925260960048a2a7c97418449c4ab7208960f02e9b9c8f3c440db4597b97c",
    "kda_norm": "7fd6d55b3cef1ca5ad98a930802b74c676fbeaaa85115088a6ede376cb0b0d7f",
    "kda_lowrank_norm": "d72c4557e276a94025b0c31b4696c881f5fb563f445ea0e1a35381911c102f10",
    "attention": "dff1c42999a457858f5dc5511c32e988a1340a59789765d4593a62783f179228",
    "moe_router": "a04c59c74e328d9e0acf04c3fe7ae91205c60185281b1f64e2a6002dff3e9eec",
    "moe_experts": "53b2b19410688776b1b85c6d8cc897504d31959d93efeec9786c804198c089e3",
    "swiglu": "f1e730b986fa0bee25c1d4096dc61abeff0b719530960955d22924301d780a44",
    "sample": "4c1bf07f4df4eb5dfc39d6c522b66bef4eb2257d27ce716c9aec84741022bfaa",
}


def _cases_problem(op: str, record: dict[str, Any]) -> str | None:
    from .cases import cases_digest

    kept = record.get("cases_digest") or CASES_BEFORE_RECORDS_KEPT_THEM.get(op)
    if kept != cases_digest(op):
        return f"the op's cases changed since it was checked (src/sparkops/ops/{op}.py)"
    return None


def _rule_problem(impl: Implementation, record: dict[str, Any]) -> str | None:
    try:
        variant = record.get("variant") or variant_name(impl.claim.variant)
        rule = str(rule_for(impl.op, variant))
    except BadInput as exc:
        return str(exc)
    if record.get("rule") != rule:
        return f"the tolerance table changed for {impl.op} ({variant}) since it was checked: now {rule}"
    return None


def _target_problem(impl: Implementation, record: dict[str, Any], catalog: Any) -> str | None:
    try:
        target = catalog.get(impl.op, impl.claim.to)
        if record.get("target_source_hash") != source_hash(target):
            return f"{target.key}, which it claims to be bit-identical to, changed since it was checked"
    except Exception as exc:  # noqa: BLE001 - an unknown or unreadable target is a stale record, said plainly
        return f"the implementation it claims to equal ({impl.claim.to}) cannot be verified: {exc}"
    return None
