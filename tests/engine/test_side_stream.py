"""The side stream ([engine] side_stream, engine/branches.py): a KDA layer's gate projections run on a second CUDA
stream, concurrent with q/k/v and their short conv, and the logits keep every bit.

On the CPU there is no second stream (the stated policy: the side work runs inline), so these tests prove what
is the same everywhere: which work goes to the side lane, that the rest stays on the main one, and that the
reordered forward gives the one-stream forward's bits. The GPU tests prove the streams: the side launches go to
the side stream, the captured graph holds the branches, and eager and captured steps keep every bit, also
when GEMVs with arrival counters run on both lanes at once.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from sparkops.cli import main
from sparkops.config import load_preset
from sparkops.dispatch import Ops
from sparkops.engine import Engine
from sparkops.engine.branches import SideStream
from sparkops.engine.decode_step import DecodeStep
from sparkops.engine.graph import GATE_INPUTS, gates_apart
from sparkops.lanes import MAIN, SIDE, lane, on_lane
from sparkops.ops import OP_NAMES
from sparkops.plugins import load_catalog
from sparkops.registry.file import Registry
from sparkops.registry.plan import make_plan
from sparkops.synth import synth_weights

#: the weights whose linears belong on the side lane: the gate inputs, their fused group, the up-projections
SIDE_WEIGHTS = re.compile(r"(f_a|g_a|beta|f_b|g_b|ssm_(f_a|g_a|beta|f_b|g_b))")


@pytest.fixture(scope="module")
def mixed():
    """k3-nano in the 48B's mix: q/k/v Q4_K, the gate inputs and up-projections F16 (two groups when fused)."""
    return synth_weights(load_preset("k3-nano"), "q4_k_m", seed=3)


@pytest.fixture(scope="module")
def floats():
    """k3-nano in float32: fused, a KDA layer's six projections are one group (nothing can fork)."""
    return synth_weights(load_preset("k3-nano"), "f32", seed=3)


def _registry(device: str, side: bool, fused: bool = False, low_rank: bool = False,
              impls: dict[str, str] | None = None, priority: bool = False) -> Registry:
    reg = Registry.empty("mem.toml")
    for op in OP_NAMES:
        reg.set(op, device, (impls or {}).get(op, "torch"), fallback="error")
    reg.set_engines({"fuse_projections": fused, "fuse_short_conv": fused, "fuse_low_rank": low_rank,
                     "side_stream": side, "side_priority": side and priority})
    return reg


def _engine(model, device: str = "cpu", **kw) -> Engine:
    plan = make_plan(_registry(device, **kw), load_catalog(), device, verify_checks=False)
    return Engine(model, Ops(plan), max_context=96)


class _Lanes:
    """Records, per op call, (op, lane, weight name for a linear)."""

    def __init__(self, engine: Engine):
        self.calls: list[tuple[str, int, str]] = []
        for op in OP_NAMES:
            inner = getattr(engine.ops, op, None)
            if inner is not None:
                setattr(engine.ops, op, self._wrap(op, inner))

    def _wrap(self, op, inner):
        def call(*args, **kwargs):
            name = getattr(args[1], "name", "") if op == "linear" and len(args) > 1 else ""
            self.calls.append((op, lane(), name))
            return inner(*args, **kwargs)

        return call


def _run(eng: Engine, chunk: int | None = None) -> torch.Tensor:
    """Prefill (whole or in chunks), eager decodes, then the replayed step's body (a CUDA graph on CUDA)."""
    rows = [eng.prefill(list(range(3, 40)), chunk_size=chunk)] + [eng.decode(t) for t in (5, 9, 11)]
    step = DecodeStep(eng)
    if eng.device.type == "cuda":
        step.capture()
    for t in (2, 30, 7):
        step.token.fill_(t)
        step()
        rows.append(step.logits.float().clone())
    return torch.cat(rows)


# ---- lanes ---------------------------------------------------------------------------------------------------------

def test_the_lane_is_main_unless_set_and_restored_after_a_raise():
    assert lane() == MAIN
    with on_lane(SIDE):
        assert lane() == SIDE
    with pytest.raises(KeyError), on_lane(SIDE):
        raise KeyError("boom")
    assert lane() == MAIN
    with pytest.raises(ValueError, match="lane must be 0"):
        with on_lane(2):
            pass


def test_a_fork_is_the_side_lane_inline_off_cuda_and_not_reentrant():
    side = SideStream(torch.device("cpu"))
    assert side.stream is None
    with side.fork():
        assert lane() == SIDE
        with pytest.raises(RuntimeError, match="not re-entrant"):
            with side.fork():
                pass
    assert lane() == MAIN
    side.join(torch.zeros(2))  # nothing to wait for off CUDA
    with side.fork():  # usable again after the refused nesting
        assert lane() == SIDE


def test_the_triton_arrival_counters_are_a_pool_a_lane():
    from sparkops_triton import _arrival

    dev = torch.device("cpu")
    main_pool = _arrival.counters("linear", dev, 4)
    with on_lane(SIDE):
        side_pool = _arrival.counters("linear", dev, 4)
        assert _arrival.counters("linear", dev, 4) is side_pool
    assert side_pool is not main_pool and side_pool.data_ptr() != main_pool.data_ptr()
    assert _arrival.pool_on(dev) is main_pool and _arrival.pool_on(dev, SIDE) is side_pool
    side_pool[3] = 7
    main_pool[1] = 5
    _arrival.reset_pool(dev)  # every lane's
    assert not side_pool.any() and not main_pool.any()


# ---- which work forks ------------------------------------------------------------------------------------------------

def test_the_gates_fork_only_where_no_group_mixes_them_with_q_k_v(mixed, floats):
    from sparkops.engine.fusion import fuse

    n_kda = sum(layer.kind == "kda" for layer in mixed.layers)
    for model, fused, forks in ((mixed, True, n_kda), (mixed, False, n_kda), (floats, True, 0), (floats, False, n_kda)):
        eng = _engine(model, side=True, fused=fused)
        assert eng.side is not None and len(eng.side_layers) == forks, (model.metadata["quant_mix"], fused)
    groups = fuse(floats)
    kda = next(i for i, layer in enumerate(floats.layers) if layer.kind == "kda")
    assert not gates_apart(groups[(kda, "attn")]) and gates_apart(())
    assert _engine(mixed, side=False).side is None


@pytest.mark.parametrize("fused,low_rank", [(False, False), (True, False), (True, True)])
def test_the_gate_projections_run_on_the_side_lane_and_nothing_else_does(mixed, fused, low_rank):
    on, off = _engine(mixed, side=True, fused=fused, low_rank=low_rank), \
        _engine(mixed, side=False, fused=fused, low_rank=low_rank)
    rec_on, rec_off = _Lanes(on), _Lanes(off)
    for eng in (on, off):
        eng.prefill([4, 8, 15, 16, 23])
        eng.decode(42)
        DecodeStep(eng).forced(torch.tensor([7]))  # the replayed step's body forks too
    assert sorted((op, w) for op, _, w in rec_on.calls) == sorted((op, w) for op, _, w in rec_off.calls)
    assert all(ln == MAIN for _, ln, _ in rec_off.calls)
    side = [(op, w) for op, ln, w in rec_on.calls if ln == SIDE]
    assert side and all(op == "linear" and SIDE_WEIGHTS.search(w) for op, w in side), side
    n_kda = sum(layer.kind == "kda" for layer in mixed.layers)
    per_layer = (1 if fused else len(GATE_INPUTS)) + (1 if low_rank else 2)  # projections, then the up-projections
    assert len(side) == 3 * n_kda * per_layer  # three forwards (the prefill, the decode, the step)
    main_linears = [w for op, ln, w in rec_on.calls if op == "linear" and ln == MAIN]
    assert not any(SIDE_WEIGHTS.search(w) for w in main_linears), main_linears


def test_a_float_model_fused_keeps_one_lane(floats):
    rec = _Lanes(eng := _engine(floats, side=True, fused=True))
    eng.prefill([1, 2, 3])
    assert rec.calls and all(ln == MAIN for _, ln, _ in rec.calls)


# ---- the same bits ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fused,low_rank,chunk", [(False, False, None), (True, False, 16), (True, True, None)])
def test_the_side_stream_keeps_every_bit_on_the_cpu(mixed, fused, low_rank, chunk):
    got = [_run(_engine(mixed, side=side, fused=fused, low_rank=low_rank), chunk) for side in (False, True)]
    assert torch.equal(got[0], got[1])


# ---- what the user sees ----------------------------------------------------------------------------------------------

def test_engine_cli_sets_side_stream_and_plan_states_its_policy(tmp_path: Path, capsys):
    p = tmp_path / "r.toml"
    p.write_text("")
    assert main(["engine", "--registry", str(p), "side_stream=on"]) == 0
    assert Registry.load(p).engine_options()["side_stream"] is True
    capsys.readouterr()
    main(["plan", "--device", "cpu", "--registry", str(p)])
    out = " ".join(capsys.readouterr().out.split())
    assert "side_stream: a KDA layer's gate projections" in out and "CPU: inline, one stream" in out
    assert "mixes a gate input with q/k/v" in out


def test_side_priority_needs_side_stream(tmp_path: Path, capsys):
    from sparkops.errors import RegistryError

    p = tmp_path / "r.toml"
    p.write_text("[engine]\nside_priority = true\n")
    with pytest.raises(RegistryError, match="side_priority = true needs side_stream = true"):
        Registry.load(p)
    p.write_text("")
    assert main(["engine", "--registry", str(p), "side_priority=on"]) == 2  # refused, nothing written
    assert "needs side_stream" in capsys.readouterr().err and p.read_text() == ""
    assert main(["engine", "--registry", str(p), "side_priority=on", "side_stream=on"]) == 0
    assert Registry.load(p).engine_options()["side_priority"] is True


def test_a_bench_row_says_how_many_layers_fork(mixed, floats):
    from sparkops.bench.harness import selections

    n_kda = sum(layer.kind == "kda" for layer in mixed.layers)
    assert selections(_engine(mixed, side=True))["[engine]"] == f"side_stream ({n_kda} of {n_kda} KDA layers)"
    assert selections(_engine(floats, side=True, fused=True))["[engine]"] == \
        f"fuse_projections, fuse_short_conv, side_stream (0 of {n_kda} KDA layers)"
    assert "[engine]" not in selections(_engine(mixed, side=False))


# ---- on the GPU ------------------------------------------------------------------------------------------------------

#: CUDA implementations with reused device memory on both lanes: split-K GEMVs that count arrivals in a pool
#: (triton_lastblock: the F16 gates on the side and the Q4_K q/k/v on the main lane at once), or the same with
#: programmatic dependent launch (triton_pdl, after norms that launch their dependents early)
CUDA_IMPLS = {
    "lastblock": {"embedding": "triton", "rmsnorm": "triton", "add_rmsnorm": "triton", "linear": "triton_lastblock",
                  "short_conv": "triton", "kda": "triton", "gated_rmsnorm": "triton", "sample": "triton"},
    "pdl": {"embedding": "triton", "rmsnorm": "triton", "add_rmsnorm": "triton_pdl", "linear": "triton_pdl",
            "short_conv": "triton", "kda": "triton", "gated_rmsnorm": "triton_pdl", "sample": "triton"},
}


def _cuda_engine(model, side: bool, impls: str = "lastblock", **kw) -> Engine:
    return _engine(model, "cuda", side=side, impls=CUDA_IMPLS[impls], **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("priority", [False, True])
@pytest.mark.parametrize("impls", sorted(CUDA_IMPLS))
@pytest.mark.parametrize("fused,low_rank", [(False, False), (True, False), (True, True)])
def test_the_side_stream_keeps_every_bit_eager_and_captured(mixed, fused, low_rank, impls, priority):
    """Prefill, eager decodes and a captured step's replays: the side stream's logits (at the default priority, and
    at the highest: [engine] side_priority) equal the one stream's, bit for bit, with split-K GEMVs counting arrivals
    on both lanes at once; every pool is back at zero."""
    from sparkops_triton import _arrival

    got = [_run(_cuda_engine(mixed, side, impls, fused=fused, low_rank=low_rank, priority=priority))
           for side in (False, True)]
    assert torch.isfinite(got[0]).all() and torch.equal(got[0], got[1])
    dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.synchronize()
    for n in (MAIN, SIDE):
        pool = _arrival.pool_on(dev, n)
        assert pool is not None and not pool.any(), f"lane {n}: arrival counters left non-zero"


@pytest.mark.gpu
def test_the_side_launches_go_to_the_side_stream(mixed):
    eng = _cuda_engine(mixed, True, "pdl", fused=True)
    streams: list[tuple[int, int]] = []
    inner = eng.ops.linear

    def linear(x, w):
        streams.append((lane(), torch.cuda.current_stream().cuda_stream))
        return inner(x, w)

    eng.ops.linear = linear
    eng.prefill([1, 2, 3])
    side = {s for ln, s in streams if ln == SIDE}
    main_ = {s for ln, s in streams if ln == MAIN}
    assert side == {eng.side.stream.cuda_stream} and eng.side.stream.cuda_stream not in main_


@pytest.mark.gpu
def test_side_priority_makes_the_side_stream_the_higher_priority_one(mixed):
    low, high = (_cuda_engine(mixed, True, "pdl", fused=True, priority=p) for p in (False, True))
    assert low.side.stream.priority == torch.cuda.current_stream().priority == 0
    assert high.side.stream.priority == torch.cuda.Stream.priority_range()[1] < 0


def _node_priorities(dot: str) -> list[int]:
    """The priority field of every kernel node of a CUDA graph's verbose DOT dump."""
    return [int(m.group(1)) for m in re.finditer(r"\{priority \| (-?\d+)\}", dot)]


def _joins(dot: str) -> int:
    """Nodes of a CUDA graph's DOT dump with two or more incoming edges."""
    into: dict[str, int] = {}
    for m in re.finditer(r'"?(\w+)"?\s*->\s*"?(\w+)"?', dot):
        into[m.group(2)] = into.get(m.group(2), 0) + 1
    return sum(1 for n in into.values() if n >= 2)


@pytest.mark.gpu
def test_the_captured_step_holds_a_branch_a_kda_layer(mixed, tmp_path, monkeypatch):
    import sparkops.engine.decode_step as ds

    real = torch.cuda.CUDAGraph

    def debug_graph(*args, **kwargs):  # the step's graph, kept (not only instantiated) for a DOT dump
        g = real(*args, **{**kwargs, "keep_graph": True})
        g.enable_debug_mode()
        return g

    monkeypatch.setattr(ds.torch.cuda, "CUDAGraph", debug_graph)
    joins, raised = {}, {}
    for side, priority in ((False, False), (True, False), (True, True)):
        eng = _cuda_engine(mixed, side, "pdl", fused=True, priority=priority)
        eng.prefill([1, 2, 3])
        step = DecodeStep(eng)
        step.capture()
        path = tmp_path / f"step-{side}-{priority}.dot"
        step.graph.debug_dump(str(path))
        assert path.exists(), "the CUDA graph was not kept for its DOT dump"
        dot = path.read_text()
        joins[side, priority] = _joins(dot)
        raised[side, priority] = sum(p != 0 for p in _node_priorities(dot))
    n_kda = sum(layer.kind == "kda" for layer in mixed.layers)
    assert joins[True, False] - joins[False, False] >= n_kda, joins
    assert joins[True, True] == joins[True, False]  # the same branches
    # side_priority: the side kernels (the F16 group, f_b, g_b: three a KDA layer) keep their stream's priority
    assert raised[False, False] == raised[True, False] == 0 and raised[True, True] == 3 * n_kda, raised
