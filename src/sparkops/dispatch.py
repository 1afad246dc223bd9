"""Turning a plan into the ops the graph calls: resolved once, when the step is built, never per call.

`Ops` has one attribute per named op (`ops.linear(x, w)`). A fallback or a host round trip, when the
plan takes one, is wrapped here and counted; the direct path is the implementation itself.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

import torch

from .errors import SparkopsError
from .ops import get_contract
from .qweight import QWeight
from .registry.plan import Plan


class NonFinite(SparkopsError):
    """NaN or Inf appeared in an activation (only looked for with check_finite=True)."""


class Ops:
    """The named ops as callables for one device class, with counters of fallbacks and round trips."""

    def __init__(self, plan: Plan, *, check_finite: bool = False):
        plan.require()
        self.plan = plan
        self.check_finite = check_finite
        self.device = plan.device
        self.counters: Counter[str] = Counter()
        for op, entry in plan.entries.items():
            fn = self._stated(entry.runs, entry.runs.resolve())
            if entry.round_trip:
                fn = _host_round_trip(fn, op, torch.device(plan.device), self.counters)
            if entry.fallback_taken:
                fn = _counted(fn, self.counters, f"{op}:fallback")
            if entry.by_type:
                fn = _by_weight_type(fn, op, {t: self._stated(i, i.resolve()) for t, i in entry.by_type.items()})
            if check_finite:
                fn = _finite_checked(fn, op, entry.runs.key + "".join(f"; {t}: {i.name}"
                                                                      for t, i in entry.by_type.items()))
            setattr(self, op, fn)

    def summary(self) -> dict[str, int]:
        return dict(self.counters)

    def passed(self) -> dict[str, int]:
        """Calls so far that a selected implementation handed on by its stated policy: "op=impl -> what (why)": n."""
        return {k[len(PASSED):]: n for k, n in self.counters.items() if k.startswith(PASSED)}

    def taken(self) -> dict[str, int]:
        """Fallbacks and host round trips taken so far (the counters that are not stated policies)."""
        return {k: n for k, n in self.counters.items() if not k.startswith(PASSED)}

    def _stated(self, impl, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn`, counting the calls its implementation's stated policy hands on (Implementation.policy)."""
        policy = impl.resolve_policy()
        return fn if policy is None else _policy_counted(fn, policy, f"{PASSED}{impl.key}", self.counters)


#: the counters' prefix for calls an implementation's stated policy handed on
PASSED = "passed:"


def _policy_counted(fn: Callable[..., Any], policy: Callable[..., str | None], key: str,
                    counters: Counter[str]) -> Callable[..., Any]:
    """Count, by what took them, the calls `policy` says the implementation does not run itself. Decided on the
    host before the call, like the call itself: a captured graph counts once, at capture."""

    def call(*args: Any, **kwargs: Any) -> Any:
        other = policy(*args, **kwargs)
        if other is not None:
            counters[f"{key} -> {other}"] += 1
        return fn(*args, **kwargs)

    return call


def passed_of(ops: Any) -> dict[str, int]:
    """`ops.passed()`, or nothing for an ops object without counters (a stand-in some tests give an engine)."""
    return ops.passed() if hasattr(ops, "passed") else {}


def passed_per_step(before: dict[str, int], after: dict[str, int], steps: int) -> dict[str, float]:
    """The stated policies' hand-offs between two `Ops.passed()` readings, per step (one decimal where not whole)."""
    out = {}
    for k, n in after.items():
        d = (n - before.get(k, 0)) / max(steps, 1)
        if d:
            out[k] = int(d) if float(d).is_integer() else round(d, 1)
    return out


def _by_weight_type(fn: Callable[..., Any], op: str, typed: dict[str, Callable[..., Any]]) -> Callable[..., Any]:
    """Calls whose typed weight (registry.file.TYPED_OPS) is one of `typed`'s GGUF types go to that type's
    implementation, the others to `fn`. Decided per call on the host, before any launch: a captured graph records
    the implementation each call picked."""
    from .registry.file import typed_weight_type

    type_of = typed_weight_type(op)

    def call(*args: Any, **kwargs: Any) -> Any:
        impl = typed.get(type_of(args, kwargs))
        return (impl or fn)(*args, **kwargs)

    return call


def _counted(fn: Callable[..., Any], counters: Counter[str], key: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        counters[key] += 1
        return fn(*args, **kwargs)

    return call


def _finite_checked(fn: Callable[..., Any], op: str, key: str) -> Callable[..., Any]:
    """Raise as soon as an op returns NaN or Inf (on demand: it synchronises the device)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        for i, o in enumerate(out if isinstance(out, tuple) else (out,)):
            if isinstance(o, torch.Tensor) and o.is_floating_point() and not bool(torch.isfinite(o).all()):
                bad = int((~torch.isfinite(o)).sum())
                raise NonFinite(f"{op} ({key}) returned {bad} non-finite value(s) in output {i} of shape "
                                f"{list(o.shape)}; rerun with a reference implementation of {op} to see "
                                f"whether the model or the implementation is at fault")
        return out

    return call


def _host_round_trip(fn: Callable[..., Any], op: str, device: torch.device,
                     counters: Counter[str]) -> Callable[..., Any]:
    """Run a CPU implementation on CUDA data: copy in, call, copy results (and updated state) back."""
    contract = get_contract(op)
    names = contract.param_names
    state = {p.name for p in contract.params if p.kind == "state"}
    key = f"{op}:round_trip"

    def to_cpu(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return v.detach().cpu()
        if isinstance(v, QWeight):
            return v.to("cpu")
        return v

    def call(*args: Any, **kwargs: Any) -> Any:
        counters[key] += 1
        cargs = [to_cpu(a) for a in args]
        ckw = {k: to_cpu(v) for k, v in kwargs.items()}
        out = fn(*cargs, **ckw)
        pairs = [(names[i], a, c) for i, (a, c) in enumerate(zip(args, cargs))] + \
            [(k, kwargs[k], ckw[k]) for k in kwargs]
        for name, orig, host in pairs:
            if name in state and isinstance(orig, torch.Tensor) and orig.device != host.device:
                orig.copy_(host)  # state updated in place on the host goes back to the device
        if isinstance(out, tuple):
            return tuple(o.to(device) if isinstance(o, torch.Tensor) else o for o in out)
        return out.to(device) if isinstance(out, torch.Tensor) else out

    return call
