"""What a plugin registers: an implementation of a named op, and the claim it makes about itself."""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Claim:
    """What the gate must prove before the implementation may run.

    kind="tolerance":    agrees with the op's reference within the op's row of the tolerance table
                         (`variant` picks a row, e.g. "bf16" for bfloat16 activations, "act_q8"
                         for quantized activations, "fp8_cache" for attention over a float8_e4m3fn MLA
                         cache; None = the float32 row).
    kind="bit_identical": byte-for-byte equal to implementation `to` (an impl name of the same op,
                         typically the unfused chain of the same backend) on every case.
    """

    kind: str
    variant: str | None = None
    to: str | None = None

    def __str__(self) -> str:
        if self.kind == "bit_identical":
            return f"bit-identical to {self.to}"
        return "within tolerance of the reference" + (f" ({self.variant})" if self.variant else "")


def tolerance(variant: str | None = None) -> Claim:
    return Claim("tolerance", variant=variant)


def bit_identical(to: str) -> Claim:
    return Claim("bit_identical", to=to)


@dataclass
class Implementation:
    op: str
    name: str
    backend: str
    devices: tuple[str, ...]
    fn: Callable[..., Any] | str
    claim: Claim
    plugin: str
    unavailable: str | None = None
    sources: tuple[str, ...] = ()
    doc: str = ""
    #: the stated policy, where the implementation hands some calls to other code: a function of the op's arguments
    #: (callable or "module:attr") giving None where the implementation's own kernels take the call and otherwise
    #: what runs it instead and why ("torch: IQ1_S experts"). The dispatcher counts those calls per step, so that a
    #: bench, a diagnosis and `generate` show them: a policy that is stated but not shown hides a slow path (GPU
    #: session 25: one-token Q4_K expert kernels passing every IQ1_S layer to a dequantizing path, 6.5 tok/s)
    policy: Callable[..., str | None] | str | None = None
    _resolved: Callable[..., Any] | None = field(default=None, repr=False)
    _resolved_policy: Callable[..., str | None] | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        return f"{self.op}={self.name}"

    @property
    def available(self) -> bool:
        return self.unavailable is None

    def resolve(self) -> Callable[..., Any]:
        """The callable itself (imports "module:attr" on first use)."""
        if self._resolved is None:
            self._resolved = _callable(self.fn)
        return self._resolved

    def resolve_policy(self) -> Callable[..., str | None] | None:
        """The stated policy's function (imports "module:attr" on first use); None where every call runs here."""
        if self.policy is not None and self._resolved_policy is None:
            self._resolved_policy = _callable(self.policy)
        return self._resolved_policy

    @property
    def policy_name(self) -> str | None:
        """The stated policy as "module:attr" (how a plugin names it, or how a callable given itself would be)."""
        if self.policy is None or isinstance(self.policy, str):
            return self.policy
        return f"{getattr(self.policy, '__module__', '?')}:{getattr(self.policy, '__qualname__', repr(self.policy))}"

    def where(self) -> str:
        """file:line of the implementation, for people looking for it."""
        try:
            fn = self.resolve() if self.available or callable(self.fn) else None
            if fn is None:
                return str(self.fn)
            src = inspect.getsourcefile(inspect.unwrap(fn))
            line = inspect.getsourcelines(inspect.unwrap(fn))[1]
            return f"{_short(src)}:{line}"
        except Exception:  # noqa: BLE001 - a location is a courtesy, never a failure
            return str(self.fn)

    def source_files(self) -> list[Path]:
        """Every file whose bytes define this implementation: its module and declared kernel sources."""
        files = []
        fn = self.resolve()
        src = inspect.getsourcefile(inspect.unwrap(fn))
        if src:
            files.append(Path(src))
        base = Path(src).parent if src else Path.cwd()
        files += [p if p.is_absolute() else base / p for p in map(Path, self.sources)]
        return files


def _callable(spec: Callable[..., Any] | str) -> Callable[..., Any]:
    """A callable given as itself or as "module:attr" (imported now)."""
    if callable(spec):
        return spec
    module, _, attr = str(spec).partition(":")
    return getattr(importlib.import_module(module), attr)


def _short(path: str | None) -> str:
    if not path:
        return "?"
    p = Path(path)
    parts = p.parts
    for anchor in ("plugins", "src", "site-packages"):
        if anchor in parts:
            return str(Path(*parts[parts.index(anchor) + 1:]))
    return str(p)
