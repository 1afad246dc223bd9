"""Turning a plan into the ops the graph calls: resolved once, when the step is built, never per call.

`Ops` has one attribute per named op (`ops.linear(x, w)`). A fallback or a host round trip, when the
plan takes one, is wrapped here and counted; the direct path is the implementation itself.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

import torch

from .qweight import QWeight
from .registry.plan import Plan


class Ops:
    """The named ops as callables for one device class, with counters of fallbacks and round trips."""

    def __init__(self, plan: Plan):
        plan.require()
        self.plan = plan
        self.device = plan.device
        self.counters: Counter[str] = Counter()
        for op, entry in plan.entries.items():
            fn = entry.runs.resolve()
            if entry.round_trip:
                fn = _host_round_trip(fn, torch.device(plan.device), self.counters, f"{op}:round_trip")
            if entry.fallback_taken:
                fn = _counted(fn, self.counters, f"{op}:fallback")
            setattr(self, op, fn)

    def summary(self) -> dict[str, int]:
        return dict(self.counters)


def _counted(fn: Callable[..., Any], counters: Counter[str], key: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        counters[key] += 1
        return fn(*args, **kwargs)

    return call


def _host_round_trip(fn: Callable[..., Any], device: torch.device, counters: Counter[str],
                     key: str) -> Callable[..., Any]:
    """Run a CPU implementation on CUDA data: copy in, call, copy results (and updated state) back."""

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
        for orig, host in list(zip(args, cargs)) + [(kwargs[k], ckw[k]) for k in kwargs]:
            if isinstance(orig, torch.Tensor) and orig.device != host.device:
                orig.copy_(host)  # state updated in place on the host goes back to the device
        if isinstance(out, tuple):
            return tuple(o.to(device) if isinstance(o, torch.Tensor) else o for o in out)
        return out.to(device) if isinstance(out, torch.Tensor) else out

    return call
