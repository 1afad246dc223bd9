"""Finding plugins through entry points and collecting what they register, one plugin at a time.

A plugin that raises while importing or registering is recorded with its traceback and skipped;
the rest keep working, so `sparkops plugins`, `ops`, `plan` and `swap` still run and can be used to
get out of trouble.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Callable

import pluggy

from ..errors import ContractMismatch, UnknownName
from ..ops import CONTRACTS, get_contract, signature_mismatch
from . import hookspecs
from .implementation import DEVICES, Claim, Implementation

GROUP = "sparkops"


@dataclass
class PluginInfo:
    name: str
    module: str
    distribution: str
    version: str
    status: str = "ok"  # "ok" | "failed"
    error: str | None = None  # the traceback when it failed
    implementations: list[Implementation] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)  # implementations refused at registration, with why


@dataclass
class Catalog:
    plugins: list[PluginInfo]
    by_op: dict[str, dict[str, Implementation]]

    def implementations(self, op: str) -> dict[str, Implementation]:
        get_contract(op)
        return self.by_op.get(op, {})

    def get(self, op: str, name: str) -> Implementation:
        impls = self.implementations(op)
        if name not in impls:
            valid = ", ".join(sorted(impls)) or "(none registered)"
            raise UnknownName(f"op '{op}' has no implementation '{name}'; its implementations are: {valid}")
        return impls[name]

    def reference(self, op: str) -> Implementation:
        return self.get(op, get_contract(op).reference)


def load_catalog(extra: list[tuple[str, Any]] | None = None) -> Catalog:
    """Load every plugin of the entry-point group (plus `extra` (name, module) pairs, for tests)."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    plugins: list[PluginInfo] = []
    by_op: dict[str, dict[str, Implementation]] = {}
    sources: list[tuple[PluginInfo, Callable[[], Any]]] = []
    for ep in sorted(_entry_points(), key=lambda e: (e.name != "numpy", e.name)):
        info = PluginInfo(name=ep.name, module=ep.value, distribution=_dist_name(ep), version=_dist_version(ep))
        sources.append((info, ep.load))
    for name, module in extra or []:
        info = PluginInfo(name=name, module=getattr(module, "__name__", str(module)), distribution="(in-process)",
                          version="")
        sources.append((info, lambda module=module: module))
    for info, load in sources:
        plugins.append(info)
        try:
            module = load()
            pm.register(module, name=info.name)
        except Exception:  # noqa: BLE001 - one broken plugin must not take the tool down
            info.status, info.error = "failed", traceback.format_exc()
            continue
        for impl in pm.hook.register_implementations.get_hookimpls():
            if impl.plugin_name != info.name:
                continue
            try:
                impl.function(register=_registrar(info, by_op))
            except Exception:  # noqa: BLE001
                info.status, info.error = "failed", traceback.format_exc()
    return Catalog(plugins=plugins, by_op=by_op)


def _registrar(info: PluginInfo, by_op: dict[str, dict[str, Implementation]]) -> Callable[..., None]:
    def register(op: str, name: str, backend: str, devices: tuple[str, ...] | list[str], fn: Any, claim: Claim,
                 *, unavailable: str | None = None, sources: tuple[str, ...] = (), doc: str = "",
                 policy: Any = None) -> None:
        where = f"plugin '{info.name}', op '{op}', implementation '{name}'"
        try:
            contract = get_contract(op)
            devices = tuple(devices)
            bad = [d for d in devices if d not in DEVICES]
            if bad or not devices:
                raise ContractMismatch(f"{where}: devices {list(devices)} must be a non-empty subset of {list(DEVICES)}")
            if not isinstance(claim, Claim):
                raise ContractMismatch(f"{where}: claim must be sparkops.plugins.tolerance(...) or bit_identical(...)")
            impl = Implementation(op=op, name=name, backend=backend, devices=devices, fn=fn, claim=claim,
                                  plugin=info.name, unavailable=unavailable, sources=tuple(sources), doc=doc,
                                  policy=policy)
            if impl.available or callable(fn):
                _takes_the_op(contract, impl.resolve, f"{where}: cannot import {fn!r}",
                              f"{where}: signature does not match the contract")
                if policy is not None:
                    _takes_the_op(contract, impl.resolve_policy, f"{where}: cannot import its policy {policy!r}",
                                  f"{where}: its policy takes other arguments than the op")
            existing = by_op.setdefault(op, {}).get(name)
            if existing is not None:
                raise ContractMismatch(f"{where}: the name is already taken by plugin '{existing.plugin}'")
        except (ContractMismatch, UnknownName) as exc:
            info.rejected.append(str(exc))
            return
        by_op[op][name] = impl
        info.implementations.append(impl)

    return register


def _takes_the_op(contract, resolve: Callable[[], Any], cannot_import: str, mismatch: str) -> None:
    """Raise ContractMismatch unless `resolve()` imports a function with the op's parameters (each message ends with
    why)."""
    try:
        fn = resolve()
    except Exception as exc:  # noqa: BLE001
        raise ContractMismatch(f"{cannot_import}: {exc}") from exc
    why = signature_mismatch(contract, fn)
    if why:
        raise ContractMismatch(f"{mismatch}: {why}")


def _entry_points() -> list[EntryPoint]:
    return list(entry_points(group=GROUP))


def _dist_name(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.metadata["Name"] if dist is not None else "?"


def _dist_version(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.version if dist is not None else "?"


def all_ops() -> tuple[str, ...]:
    return tuple(CONTRACTS)
