"""Which cases the gate runs, and how a case's inputs reach the reference and the implementation.

Seeds: the pinned seeds (the same cases every run, so a result can be compared over time) plus at
least one fresh seed drawn from os.urandom on every run (so an implementation tuned until the pinned
cases pass is still caught). Every case name carries its seed ("T5_D96@1234"), so
`sparkops check OP=IMPL --case T5_D96@1234` regenerates exactly that case.

Placement: the reference always runs on the CPU on float32 inputs; the implementation gets its own
copies on the device under test. For a "bf16" claim the contract's activation inputs (params whose
dtype is "activation") are cast to bfloat16 for the implementation, and the reference gets the
same values upcast to float32, so both compute from identical numbers. An "fp8_cache" claim gets its activations in
bfloat16 too, and its cache inputs (params whose dtype is "cache") rounded to float8_e4m3fn as the engine rounds a
cache row (sparkops/kvcache.py); the reference gets those fp8 values as float32. Objects shared between
the calls of a case (state, a weight used by every call) stay shared in each copy.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import BadInput
from ..kvcache import FP8, to_cache
from ..ops import Case, OpContract, get_contract
from ..qweight import QWeight
from .tolerances import BF16_ACTIVATIONS, FP8_CACHE

#: the seeds every run checks; fresh ones are added on top
PINNED_SEEDS = (0, 1)


def fresh_seed() -> int:
    """A seed no earlier run is likely to have used (and never a pinned one)."""
    return 2 + int.from_bytes(os.urandom(4), "little") % (2**31 - 3)


def default_seeds(fresh: int = 1) -> tuple[int, ...]:
    return (*PINNED_SEEDS, *(fresh_seed() for _ in range(max(1, fresh))))


def split_name(name: str) -> tuple[str, int]:
    """("T5_D96", 1234) from "T5_D96@1234"; a clear error when the name carries no seed."""
    family, sep, seed = name.rpartition("@")
    if not sep or not family or not seed.lstrip("-").isdigit():
        raise BadInput(f"case name '{name}' does not end in @SEED; use a name as `sparkops check` prints it, "
                       f"e.g. T5_D96@0")
    return family, int(seed)


@functools.lru_cache(maxsize=64)
def _generated(op: str, seed: int) -> tuple[Case, ...]:
    """The contract's cases for a seed, generated once per process (quantizing case weights costs)."""
    return tuple(get_contract(op).cases(seed))


def cases_for(op: str, seeds: tuple[int, ...]) -> list[Case]:
    return [c for s in seeds for c in _generated(op, s)]


def find_case(op: str, name: str) -> Case:
    """Regenerate the one case called `name` (its seed is in the name)."""
    _, seed = split_name(name)
    cases = _generated(op, seed)
    for c in cases:
        if c.name == name:
            return c
    listed = ", ".join(c.name for c in cases) or "(none)"
    raise BadInput(f"op '{op}' has no case '{name}'; with seed {seed} its cases are: {listed}")


def cases_digest(op: str) -> str:
    """The sha256 of what makes the op's cases: the source of the module that defines its contract's `cases` (the
    sweep, its constants, the contract itself) and of ops/_cases.py (the generators they share). A check record
    keeps it, so that a record proven on other cases - fewer of them, or none that its kernels take - goes stale when
    the cases change (session 27 found the one-token Q4_K kernels proven on cases that every one handed on).
    Source, not generated tensors: the same on every machine and torch version."""
    return _cases_digest(op)


@functools.lru_cache(maxsize=64)
def _cases_digest(op: str) -> str:
    fn = get_contract(op).cases
    h = hashlib.sha256()
    for path in (Path(inspect.getsourcefile(fn) or ""), Path(__file__).parent.parent / "ops" / "_cases.py"):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def family(name: str) -> str:
    return name.rpartition("@")[0] or name


# -- placement ---------------------------------------------------------------------------------------
@dataclass
class Placed:
    """One copy of a case's inputs: positional arguments per call, and the state objects."""

    calls: list[list[Any]]  # per call, the arguments in the contract's order
    kwargs: list[dict[str, Any]]  # per call, the same by name (what the metrics read)
    state: dict[str, torch.Tensor]


def activation_params(contract: OpContract) -> set[str]:
    """The params in the activation dtype: "activation" ones, and "cache" ones (the MLA cache and its new rows) outside
    the fp8_cache variant."""
    return {p.name for p in contract.params if p.dtype in ("activation", "cache")}


def cache_params(contract: OpContract) -> set[str]:
    return {p.name for p in contract.params if p.dtype == "cache"}


def place(case: Case, contract: OpContract, variant: str, device: str, *, reference: bool) -> Placed:
    """Copies of the case's inputs for the reference (CPU, float32 view of the variant's values) or
    for the implementation (on `device`, in the variant's activation dtype)."""
    acts = activation_params(contract)
    fp8 = cache_params(contract) if variant == FP8_CACHE else set()
    bf16 = variant in BF16_ACTIVATIONS
    memo: dict[int, Any] = {}

    def copy(name: str, v: Any) -> Any:
        key = id(v)
        if key in memo:
            return memo[key]
        if isinstance(v, torch.Tensor):
            t = v.detach().clone()
            if name in fp8 and t.is_floating_point():
                t = to_cache(t, FP8)  # the engine's rounding of a cache row (kvcache.py)
                if reference:
                    t = t.to(torch.float32)
            elif bf16 and name in acts and t.is_floating_point():
                t = t.to(torch.bfloat16)
                if reference:
                    t = t.to(torch.float32)
            if not reference:
                t = t.to(device)
            out: Any = t.contiguous() if reference else t
        elif isinstance(v, QWeight):
            raw = v.raw.detach().clone()
            out = QWeight(raw if reference else raw.to(device), v.qtype, v.shape, v.name)
        elif isinstance(v, torch.dtype) and bf16 and not reference and v.is_floating_point:
            out = torch.bfloat16  # the activation dtype an op is asked to produce (embedding)
        else:
            out = v
        memo[key] = out
        return out

    state = {k: copy(k, v) for k, v in case.state.items()}
    calls, kwargs = [], []
    names = contract.param_names
    for i, call in enumerate(case.calls):
        missing = [n for n in names if n not in call and n not in state]
        if missing:
            raise BadInput(f"{contract.name} case {case.name} call {i}: no value for {missing}; the case "
                           f"generator in sparkops/ops/{contract.name}.py must give every parameter")
        kw = {n: state[n] if n in state else copy(n, call[n]) for n in names}
        kwargs.append(kw)
        calls.append([kw[n] for n in names])
    return Placed(calls, kwargs, state)
