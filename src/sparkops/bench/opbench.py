"""Per-op benchmark cases at the presets' real shapes, and which implementations may be timed.

The shapes are not typed in by hand: a small model with the preset's real dimensions (all of them;
only the layer count is reduced for the 48B, keeping one KDA + dense-FFN layer and one MLA + MoE
layer) is synthesized and run once - a prefill and a decode step - through a recording Ops, which
keeps each op's arguments the first time a new shape signature appears. So every op is benchmarked
on exactly the shapes, dtypes, quant types and (realistic, never zero) values the engine gives it.
The MLA attention decode call is then re-posed at the long depths the scoreboard measures (a random
cache of D rows, pos = D).

Only implementations that pass the gate on this machine are timed: the reference, a selection whose
check record in the registry is valid, or - failing a record - one proven right now by the op gate
(cached for the session). On CUDA the arguments are rotated over copies that together exceed the L2
(anchors section 6: a working set that fits in L2 flatters).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..config import ModelConfig, load_preset
from ..ops import OP_NAMES, get_contract
from ..qweight import QWeight

#: bytes a rotation set must exceed on CUDA (the H200's L2 is 50 MB: four times that)
ROTATE_BYTES = 200 * 2**20
MAX_COPIES = 32


@dataclass(frozen=True)
class ShapePreset:
    preset: str
    mix: str
    prefill_tokens: int
    attention_depths: tuple[int, ...]  # decode attention re-posed at these depths
    cuda_only: bool
    layers: int | None = None  # reduce to one KDA+dense and one MLA+MoE layer when set (2)


PRESETS = (
    ShapePreset("k3-nano", "f32", prefill_tokens=64, attention_depths=(1024, 4000), cuda_only=False),
    ShapePreset("kimi-linear-48b-a3b", "q4_k_m", prefill_tokens=512, attention_depths=(4096, 32768, 131072),
                cuda_only=True, layers=2),
)


def shape_config(sp: ShapePreset) -> ModelConfig:
    cfg = load_preset(sp.preset)
    if sp.layers is None:
        return cfg
    # layer 1: KDA with the dense FFN (first_k_dense = 1); layer 2: MLA with the MoE - every op, real dims
    return dataclasses.replace(cfg, name=f"{cfg.name}-shapes", num_layers=2, kda_layers=(1,), full_attn_layers=(2,),
                               first_k_dense=1)


@dataclass
class Call:
    op: str
    phase: str  # "prefill" | "decode"
    label: str  # a readable shape signature
    args: tuple[Any, ...]  # positional, in contract order
    state: tuple[int, ...] = ()  # indices of state arguments (shared across rotated copies)

    @property
    def id(self) -> str:
        return f"{self.phase} {self.op} {self.label}"

    @property
    def nbytes(self) -> int:
        return sum(_nbytes(a) for a in self.args)


def _nbytes(a: Any) -> int:
    if isinstance(a, QWeight):
        return a.nbytes
    if isinstance(a, torch.Tensor):
        return a.numel() * a.element_size()
    return 0


def _sig(a: Any) -> str:
    if isinstance(a, QWeight):
        return f"{a.qtype.name}{'x'.join(map(str, a.shape))}"
    if isinstance(a, torch.Tensor):
        return f"{str(a.dtype).replace('torch.', '')}{'x'.join(map(str, a.shape))}"
    if a is None:
        return "none"
    return ""


def readable(op: str, contract: Any, args: tuple[Any, ...]) -> str:
    """A short label: tokens, the weights' types and shapes, the attention's context."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    first = tensors[0] if tensors else None
    t = "" if first is None else f"T{first.shape[0]}" + (f"x{first.shape[1]}" if first.dim() == 2 else "")
    parts = [t]
    if first is not None and first.is_floating_point() and first.dtype != torch.float32:
        parts.append(str(tensors[0].dtype).replace("torch.", ""))
    for p, a in zip(contract.params, args):
        if isinstance(a, QWeight):
            parts.append(f"{p.name}={a.qtype.name}[{'x'.join(map(str, a.shape))}]")
    if op == "attention":
        names = [p.name for p in contract.params]
        pos = int(args[names.index("pos")].reshape(-1)[0])
        parts.append(f"ctx{pos + args[0].shape[0]}")
    if op == "kda":
        parts.append(f"H{args[0].shape[1]}xD{args[0].shape[2]}")
    return " ".join(x for x in parts if x)


def _clone(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return a.detach().clone()
    return a


class _Recorder:
    """An Ops stand-in that runs each op and keeps its arguments on the first new signature."""

    def __init__(self, ops: Any):
        self._ops = ops
        self.phase = "prefill"
        self.calls: list[Call] = []
        self.seen: set[tuple] = set()
        for name in OP_NAMES:
            setattr(self, name, self._wrap(name, getattr(ops, name)))

    def _wrap(self, op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        contract = get_contract(op)
        state_idx = tuple(i for i, p in enumerate(contract.params) if p.kind == "state")

        def call(*args: Any, **kwargs: Any) -> Any:
            bound = contract.signature.bind(*args, **kwargs)
            ordered = tuple(bound.arguments[p.name] for p in contract.params)
            signature = (op, self.phase, tuple(map(_sig, ordered)))
            if signature not in self.seen:  # arguments before the call: state as it was
                self.seen.add(signature)
                label = readable(op, contract, ordered)
                n = sum(c.op == op and c.phase == self.phase and c.label.split("#")[0] == label
                        for c in self.calls)
                self.calls.append(Call(op, self.phase, label + (f"#{n + 1}" if n else ""),
                                       tuple(_clone(a) for a in ordered), state_idx))
            return fn(*args, **kwargs)

        return call

    def __getattr__(self, item: str) -> Any:
        return getattr(self._ops, item)


def capture(sp: ShapePreset, device: str, seed: int = 0) -> list[Call]:
    """Every distinct op call of one prefill and one decode step of the preset's shapes on `device`."""
    from ..engine import Engine
    from ..synth import synth_weights
    from .depth import random_tokens

    cfg = shape_config(sp)
    weights = synth_weights(cfg, sp.mix, seed=seed, method="auto", tokenizer="none")
    ops = _runnable_ops(device)
    rec = _Recorder(ops)
    eng = Engine(weights, ops, max_context=sp.prefill_tokens + 1)
    eng.ops = rec
    toks = random_tokens(sp.prefill_tokens + 1, cfg.vocab_size, seed)
    eng.prefill(toks[:sp.prefill_tokens])
    rec.phase = "decode"
    eng.decode(toks[sp.prefill_tokens:])
    # the engine ran under inference_mode: clone again outside it so benchmarks may update state in place
    calls = [dataclasses.replace(c, args=tuple(_clone(a) for a in c.args)) for c in rec.calls]
    return calls + _deep_attention(calls, sp, device, seed)


def _runnable_ops(device: str) -> Any:
    """Ops to capture arguments with: the checkout's registry if it can run here; else every op on its
    torch implementation (the capture needs realistic values and shapes, not a verdict: every case is
    timed only after the gate, below); else every op on its reference."""
    from ..dispatch import Ops
    from ..engine.loading import make_ops
    from ..errors import SparkopsError
    from ..registry.file import Registry
    from ..registry.plan import make_plan

    try:
        return make_ops(device)
    except SparkopsError:
        pass
    catalog = session_catalog()
    reg = Registry.empty("<capture>")
    for op in OP_NAMES:
        impl = catalog.implementations(op).get("torch")
        if impl is not None and impl.available and device in impl.devices:
            reg.set(op, device, "torch", fallback="reference")
    return Ops(make_plan(reg, catalog, device, verify_checks=False))


def _deep_attention(calls: list[Call], sp: ShapePreset, device: str, seed: int) -> list[Call]:
    """The decode attention call re-posed at each long depth: a random cache of D+1 rows, pos = D."""
    base = next((c for c in calls if c.op == "attention" and c.phase == "decode"), None)
    if base is None:
        return []
    names = [p.name for p in get_contract("attention").params]
    out = []
    g = torch.Generator(device=device).manual_seed(seed)
    for d in sp.attention_depths:
        args = list(base.args)
        old = args[names.index("cache")]
        cache = torch.randn(d + 1, old.shape[1], generator=g, device=device, dtype=torch.float32).to(old.dtype)
        args[names.index("cache")] = cache
        args[names.index("pos")] = torch.tensor([d], dtype=torch.int64, device=device)
        label = readable("attention", get_contract("attention"), tuple(args))
        out.append(Call("attention", "decode", label, tuple(args), base.state))
    return out


# -- which implementations may be timed ------------------------------------------------------------------
@dataclass
class Eligibility:
    """Cache of gate verdicts for one session: (op, impl, device) -> None (ok) or why not."""

    catalog: Any
    registry: Any = None
    verdicts: dict[tuple[str, str, str], str | None] = field(default_factory=dict)
    prove_missing: bool = True

    def why_not(self, op: str, name: str, device: str) -> str | None:
        key = (op, name, device)
        if key not in self.verdicts:
            self.verdicts[key] = self._judge(op, name, device)
        return self.verdicts[key]

    def _judge(self, op: str, name: str, device: str) -> str | None:
        from ..gate.records import record_problem

        impl = self.catalog.get(op, name)
        if impl.unavailable:
            return f"{impl.key} is unavailable here: {impl.unavailable}"
        if device not in impl.devices:
            return f"{impl.key} runs only on {'/'.join(impl.devices)}"
        if name == get_contract(op).reference:
            return None
        sel = self.registry.selection(op, device) if self.registry is not None else None
        if sel is not None and sel.impl == name and record_problem(impl, sel.check, device, self.catalog) is None:
            return None
        if not self.prove_missing:
            return f"{impl.key} has no valid check record on {device} (run `sparkops check {impl.key}`)"
        from ..gate.check import prove

        outcome = prove(impl, device, self.catalog)
        return None if outcome.passed else f"{impl.key} fails the gate on {device}: {outcome.summary}"


def bench_device() -> str:
    """The device bench/ times: the GPU when there is one."""
    return "cuda" if torch.cuda.is_available() else "cpu"


@functools.cache
def session_catalog() -> Any:
    from ..plugins import load_catalog

    return load_catalog()


@functools.cache
def session_eligibility() -> Eligibility:
    """One Eligibility (gate verdict cache) per process, over the checkout's registry."""
    from ..paths import default_registry
    from ..registry.file import Registry

    return Eligibility(session_catalog(), Registry.load(default_registry()))


def candidates(op: str, device: str, catalog: Any) -> list[str]:
    """Implementation names of `op` that could run on `device` (before the gate decides)."""
    return [n for n, i in sorted(catalog.implementations(op).items()) if device in i.devices]


# -- running one case ---------------------------------------------------------------------------------------
def place(call: Call, device: str) -> Call:
    """The call with every tensor and weight on `device`."""
    args = tuple(a.to(device) if isinstance(a, (torch.Tensor, QWeight)) else a for a in call.args)
    return dataclasses.replace(call, args=args)


def rotation(call: Call, device: str) -> list[tuple[Any, ...]]:
    """Argument sets to cycle through: on CUDA enough copies to exceed ROTATE_BYTES (state shared)."""
    if device != "cuda":
        return [call.args]
    n = call.nbytes
    copies = 1 if n >= ROTATE_BYTES else min(MAX_COPIES, math.ceil(ROTATE_BYTES / max(n, 1)))
    sets = [call.args]
    for _ in range(copies - 1):
        sets.append(tuple(a if i in call.state else _copy(a) for i, a in enumerate(call.args)))
    return sets


def _copy(a: Any) -> Any:
    if isinstance(a, QWeight):
        return QWeight(a.raw.clone(), a.qtype, a.shape, a.name)
    if isinstance(a, torch.Tensor):
        return a.clone()
    return a


def runner(fn: Callable[..., Any], sets: list[tuple[Any, ...]], device: str) -> Callable[[], None]:
    """One benchmark round: one call per argument set, then (on CUDA) a synchronize."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def round_() -> None:
        for args in sets:
            fn(*args)
        sync()

    return round_
