"""What the engine-fusion tests share (fuse_kda_norm, fuse_kda_gates, fuse_router_norm, fuse_conv_kda): a counter of
the engine's calls of chosen ops, the run of phases whose logits they compare, and the NMSE they judge them by."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import torch

from sparkops.engine import Engine
from sparkops.engine.decode_step import DecodeStep


class OpCalls:
    """Counts the engine's calls of `ops`, per phase (take() returns the counts since the last take and resets)."""

    def __init__(self, engine: Engine, ops: Sequence[str]):
        self.ops = tuple(ops)
        self.count: Counter[str] = Counter()
        for op in self.ops:
            setattr(engine.ops, op, self._wrap(op, getattr(engine.ops, op)))

    def _wrap(self, op, inner):
        def call(*args, **kwargs):
            self.count[op] += 1
            return inner(*args, **kwargs)

        return call

    def take(self) -> dict[str, int]:
        out = {op: self.count[op] for op in self.ops}
        self.count.clear()
        return out


def run_phases(eng: Engine, prefills: Iterable[list[int]] = (list(range(3, 30)),),
               steps: Iterable[int] = (2, 30)) -> torch.Tensor:
    """The prefills, eager decodes of 5 and 9, then the replayed step's body (a CUDA graph on CUDA) fed `steps`: the
    logits of each, stacked."""
    rows = [eng.prefill(list(p)) for p in prefills] + [eng.decode(t) for t in (5, 9)]
    step = DecodeStep(eng)
    if eng.device.type == "cuda":
        step.capture()
    for t in steps:
        step.token.fill_(t)
        step()
        rows.append(step.logits.float().clone())
    return torch.cat(rows)


def nmse(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double().cpu(), want.double().cpu()
    return float(((got - want) ** 2).sum() / (want ** 2).sum())


def q4k_nano():
    """k3-nano with its KDA and MLA value heads 64 wide and its experts 256 rows (its own widths, 32 and 64, are not
    whole Q4_K super-blocks, so q4_k_m stores its o_proj and expert weights in Q8_0): every o_proj, expert and shared
    expert then in Q4_K, the shapes the one-token kernels take themselves (on k3-nano they hand every call to their
    stated policies). The same seed and mix as the engine tests' k3-nano."""
    import dataclasses

    from sparkops.config import load_preset
    from sparkops.synth import synth_weights

    cfg = dataclasses.replace(load_preset("k3-nano"), name="k3-nano-q4k", kda_head_dim=64, v_head_dim=64,
                              moe_intermediate_size=256)
    return synth_weights(cfg, "q4_k_m", seed=5)


def option_engine(model, option: str, on: bool, device: str = "cpu", impls: dict[str, str] | None = None,
                  default: str = "torch", **engine):
    """An Engine on `model` over an in-memory registry selecting `default` for every op (`impls` where named) with
    fallback "error", [engine] `option` set to `on` and the other `engine` options as given (the checks not verified)."""
    from sparkops.dispatch import Ops
    from sparkops.ops import OP_NAMES
    from sparkops.plugins import load_catalog
    from sparkops.registry.file import Registry
    from sparkops.registry.plan import make_plan

    reg = Registry.empty("mem.toml")
    for op in OP_NAMES:
        reg.set(op, device, (impls or {}).get(op, default), fallback="error")
    reg.set_engines({option: on, **engine})
    return Engine(model, Ops(make_plan(reg, load_catalog(), device, verify_checks=False)), max_context=96)


def capture_refuses_only_when_on(model, option: str, op: str, registry=None) -> None:
    """On CUDA, a registry with no CUDA selection of `op` (its reference, CPU-only, makes a host round trip a call):
    the step captures while `option` is off (the step never calls `op`) and is refused, naming `op`, once on, the state
    left as it was. `registry(on)`: the test's own registry with `option` on or off (default: torch for every op)."""
    import pytest

    from sparkops.dispatch import Ops
    from sparkops.errors import BadInput
    from sparkops.ops import OP_NAMES
    from sparkops.plugins import load_catalog
    from sparkops.registry.file import Registry
    from sparkops.registry.plan import make_plan

    def all_torch(on: bool) -> Registry:
        reg = Registry.empty("mem.toml")
        for name in OP_NAMES:
            reg.set(name, "cuda", "torch", fallback="error")
        reg.set_engines({option: on})
        return reg

    def engine(on: bool) -> Engine:
        reg = (registry or all_torch)(on)
        del reg.doc["ops"][op]
        return Engine(model, Ops(make_plan(reg, load_catalog(), "cuda", verify_checks=False)), max_context=32)

    eng = engine(False)
    eng.prefill([3, 4])
    step = DecodeStep(eng)
    step.capture()
    assert step.graph is not None
    eng = engine(True)
    eng.prefill([3, 4])
    before = eng.state.length
    with pytest.raises(BadInput, match=rf"host round trips: \['{op}'\]"):
        DecodeStep(eng).capture()
    assert eng.state.length == before
