"""What an op contract is: the one meaning of a named op, its signature, and its test cases.

An op contract is written once per op (one module in `sparkops.ops`). Every implementation of the op,
in any backend, must accept exactly the contract's parameters (same names, same order, same kinds)
and compute the meaning the contract states. The NumPy implementation named by `reference` is the
definition; the gate judges every other implementation against it.

Parameter kinds:
  tensor  - a torch.Tensor read by the op
  weight  - a `sparkops.qweight.QWeight` (possibly quantized GGUF blocks)
  state   - a torch.Tensor the op reads AND updates in place (caches, recurrent state)
  scalar  - a Python int/float/bool fixed when the step is built (eps, top_k, scale)
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

ParamKind = Literal["tensor", "weight", "state", "scalar"]


@dataclass(frozen=True)
class Param:
    name: str
    kind: ParamKind
    shape: str  # e.g. "[T, D]"; "" for scalars
    dtype: str  # e.g. "activation", "cache" (the MLA cache: the activation dtype or fp8), "float32", "int64"
    doc: str


@dataclass
class Case:
    """One named, replayable check case.

    `calls` is a sequence of keyword-argument dicts applied in order; `state` tensors are passed to
    every call (the same objects), so a stateful op is checked over a multi-step sequence (a prefill
    chunk, then decode steps). Tensors are CPU tensors; the gate moves them to the device under test.
    """

    name: str
    calls: list[dict[str, Any]]
    state: dict[str, Any] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class OpContract:
    name: str
    summary: str
    meaning: str
    params: tuple[Param, ...]
    returns: str
    stub: Callable[..., Any]
    cases: Callable[[int], list[Case]]
    reference: str = "numpy"

    @property
    def signature(self) -> inspect.Signature:
        return inspect.signature(self.stub)

    @property
    def stateful(self) -> bool:
        return any(p.kind == "state" for p in self.params)

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def describe(self) -> str:
        lines = [f"{self.name}: {self.summary}", "", self.meaning.strip(), "", "parameters:"]
        for p in self.params:
            shape = f" {p.shape}" if p.shape else ""
            lines.append(f"  {p.name:<12} {p.kind:<7}{shape} {p.dtype}: {p.doc}")
        lines += ["", f"returns: {self.returns}"]
        return "\n".join(lines)


def make_contract(
    stub: Callable[..., Any],
    *,
    summary: str,
    params: tuple[Param, ...],
    returns: str,
    cases: Callable[[int], list[Case]],
    reference: str = "numpy",
) -> OpContract:
    """Build a contract from its stub function: the stub's signature and docstring are the contract's."""
    sig_names = tuple(inspect.signature(stub).parameters)
    declared = tuple(p.name for p in params)
    if sig_names != declared:  # a contract that disagrees with itself is a bug in sparkops
        raise AssertionError(f"contract {stub.__name__}: stub parameters {sig_names} != declared {declared}")
    return OpContract(
        name=stub.__name__,
        summary=summary,
        meaning=inspect.getdoc(stub) or "",
        params=params,
        returns=returns,
        stub=stub,
        cases=cases,
        reference=reference,
    )


def signature_mismatch(contract: OpContract, fn: Callable[..., Any]) -> str | None:
    """Why `fn` cannot implement `contract`, or None when its signature matches.

    The implementation must take exactly the contract's parameters, in order, by the same names.
    Extra parameters are allowed only when they have defaults and come after the contract's
    (implementation tuning knobs such as a chunk size); the engine never passes them.
    """
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        return f"its signature cannot be read ({exc})"
    got = list(sig.parameters.values())
    want = list(contract.signature.parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in got):
        return "it takes *args/**kwargs; spell out the contract's parameters " + _fmt(want)
    for i, w in enumerate(want):
        if i >= len(got):
            return f"missing parameter '{w.name}' (expected {_fmt(want)}, got {_fmt(got)})"
        g = got[i]
        if g.name != w.name:
            return f"parameter {i + 1} is '{g.name}', the contract says '{w.name}' (expected {_fmt(want)}, got {_fmt(got)})"
        if _keyword_only(w) != _keyword_only(g):
            where = "keyword-only" if _keyword_only(w) else "positional-or-keyword"
            return f"parameter '{w.name}' must be {where} (expected {_fmt(want)}, got {_fmt(got)})"
    for g in got[len(want):]:
        if g.default is inspect.Parameter.empty:
            return f"extra parameter '{g.name}' has no default; the engine would never pass it"
    return None


def _keyword_only(p: inspect.Parameter) -> bool:
    return p.kind == inspect.Parameter.KEYWORD_ONLY


def _fmt(params: list[inspect.Parameter]) -> str:
    return "(" + ", ".join(("*, " if False else "") + p.name for p in params) + ")"
