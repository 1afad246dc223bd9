"""[engine] fuse_router_norm (engine/graph.py): a MoE layer's call of at most ROUTER_NORM_MAX_T tokens runs its residual
add, FFN norm and router as one op (add_rmsnorm_router) where the unfused graph calls add_rmsnorm then moe_router; a
longer call (a prefill chunk) and a dense-FFN layer keep the two apart. The logits stay within float32 rounding of the
unfused ones, eagerly and through the replayed step (DecodeStep must pass the option on), and the model gate's routing
pin sees the fused op's decisions.
"""

from __future__ import annotations


import pytest
import torch

from sparkops.bench.harness import selections
from sparkops.cli import main
from sparkops.config import load_preset
from sparkops.dispatch import Ops
from sparkops.engine import Engine
from sparkops.engine.decode_step import DecodeStep
from sparkops.engine.graph import ROUTER_NORM_MAX_T
from sparkops.gate.routing import RoutingPin, install
from sparkops.ops import OP_NAMES
from sparkops.plugins import load_catalog
from sparkops.registry.file import Registry
from sparkops.registry.plan import make_plan
from sparkops.synth import synth_weights
from tests.engine.fusion_support import OpCalls, capture_refuses_only_when_on, nmse, run_phases
from sparkops.weights import MoEWeights


@pytest.fixture(scope="module")
def nano():
    return synth_weights(load_preset("k3-nano"), "q4_k_m", seed=5)


def _registry(device: str, fuse_router: bool, impls: dict[str, str] | None = None, default: str = "torch",
              **engine) -> Registry:
    reg = Registry.empty("mem.toml")
    for op in OP_NAMES:
        reg.set(op, device, (impls or {}).get(op, default), fallback="error")
    reg.set_engines({"fuse_router_norm": fuse_router, **engine})
    return reg


def _engine(model, fuse_router: bool, device: str = "cpu", **kw) -> Engine:
    plan = make_plan(_registry(device, fuse_router, **kw), load_catalog(), device, verify_checks=False)
    return Engine(model, Ops(plan), max_context=96)


def _layers(model) -> tuple[int, int]:
    """(MoE layers, dense-FFN layers)."""
    moe = sum(isinstance(layer.ffn, MoEWeights) for layer in model.layers)
    return moe, len(model.layers) - moe


#: the ops whose calls the tests count (OpCalls, per phase): the norm and router ops
COUNTED = ("add_rmsnorm", "moe_router", "add_rmsnorm_router", "moe_experts")


def _run(eng: Engine) -> torch.Tensor:
    """A prefill longer than ROUTER_NORM_MAX_T, a short one, eager decodes, then the replayed step's body (a CUDA graph
    on CUDA): the logits of each."""
    return run_phases(eng, prefills=(list(range(3, 30)), [7, 8, 9]))


def test_decode_calls_the_fused_op_and_a_prefill_chunk_keeps_the_pair(nano):
    """Per forward: a MoE layer makes one add_rmsnorm_router call (at most ROUTER_NORM_MAX_T tokens) or one
    add_rmsnorm and one moe_router call (longer); a dense layer always its add_rmsnorm; every layer's second
    add_rmsnorm (into the next layer's attention norm) stays."""
    moe, dense = _layers(nano)
    n = len(nano.layers)
    assert moe > 0 and dense > 0 and ROUTER_NORM_MAX_T == 8
    eng = _engine(nano, True)
    calls = OpCalls(eng, COUNTED)
    eng.prefill(list(range(3, 3 + ROUTER_NORM_MAX_T + 1)))  # one token too many: the unfused graph
    assert calls.take() == {"add_rmsnorm": 2 * n, "moe_router": moe, "add_rmsnorm_router": 0, "moe_experts": moe}
    eng.prefill(list(range(40, 40 + ROUTER_NORM_MAX_T)))  # a short prompt chunk: fused
    assert calls.take() == {"add_rmsnorm": n + dense, "moe_router": 0, "add_rmsnorm_router": moe, "moe_experts": moe}
    eng.decode(7)
    assert calls.take() == {"add_rmsnorm": n + dense, "moe_router": 0, "add_rmsnorm_router": moe, "moe_experts": moe}
    step = DecodeStep(eng)
    step()
    assert calls.take()["add_rmsnorm_router"] == moe, "the replayed step lost the option"
    plain = _engine(nano, False)
    calls = OpCalls(plain, COUNTED)
    plain.decode(7)
    assert calls.take() == {"add_rmsnorm": 2 * n, "moe_router": moe, "add_rmsnorm_router": 0, "moe_experts": moe}


@pytest.mark.parametrize("default", ["torch", "numpy"])
def test_logits_stay_within_float32_rounding_of_the_unfused_graph(nano, default):
    """The fused op is the composition of the two (the numpy reference literally; torch's its two float32 ops): the
    logits agree to float32 rounding (the numpy registry: to the bit), also with the KDA fusions on."""
    for extra in ({}, {"fuse_projections": True, "fuse_kda_norm": True}):
        want = _run(_engine(nano, False, default=default, **extra))
        got = _run(_engine(nano, True, default=default, **extra))
        assert torch.isfinite(got).all() and got.shape == want.shape
        if default == "numpy":
            assert torch.equal(got, want)
        else:
            assert nmse(got, want) < 1e-10


def test_the_cli_sets_it_the_plan_shows_it_and_the_bench_says_so(tmp_path, capsys, nano):
    p = tmp_path / "r.toml"
    _registry("cpu", False).save(p)
    assert main(["engine", "--registry", str(p), "fuse_router_norm=on"]) == 0
    assert Registry.load(p).engine_options()["fuse_router_norm"] is True
    capsys.readouterr()
    main(["plan", "--registry", str(p), "--device", "cpu"])  # unproven selections: it says so, and shows the options
    assert "engine: fuse_router_norm" in capsys.readouterr().out
    eng = Engine(nano, Ops(make_plan(Registry.load(p), load_catalog(), "cpu", verify_checks=False)), max_context=32)
    assert eng.fuse_router_norm and selections(eng)["[engine]"] == "fuse_router_norm"
    assert "[engine]" not in selections(_engine(nano, False))


def test_without_a_selection_the_reference_runs_it_and_is_counted(nano):
    """No silent fallback: a registry that turns the option on but selects no add_rmsnorm_router (fallback
    "reference") runs the reference, and the plan and the counters say so."""
    reg = _registry("cpu", True)
    del reg.doc["ops"]["add_rmsnorm_router"]
    plan = make_plan(reg, load_catalog(), "cpu", verify_checks=False)
    assert plan.entries["add_rmsnorm_router"].fallback_taken and "add_rmsnorm_router" in plan.fallbacks
    eng = Engine(nano, Ops(plan), max_context=32)
    eng.prefill([3, 4])
    eng.decode(5)
    assert eng.ops.summary().get("add_rmsnorm_router:fallback") == 2 * _layers(nano)[0]


def test_the_routing_pin_records_and_replays_the_fused_op_s_decisions(nano):
    """The model gate pins routing through ops.moe_router; under fuse_router_norm a MoE layer's short calls route in
    add_rmsnorm_router, which the pin must see too: the golden's choices recorded by the fused op replay over an
    unfused run of the same positions (and the reverse), layer by layer, with no flip."""
    moe = _layers(nano)[0]
    tokens = list(range(3, 20))

    def run(fuse: bool, pin: RoutingPin, replay: bool) -> None:
        eng = _engine(nano, fuse)
        install(eng.ops, pin)
        pin.start(len(tokens), replay=replay)
        eng.prefill(tokens[:5])  # short: fused when on
        for t in tokens[5:8]:
            eng.decode(t)
        pin.finish()

    golden = RoutingPin(moe, 0.0)
    run(True, golden, replay=False)
    assert [sum(r.shape[0] for r in rows) for rows in golden.tape[len(tokens)]] == [8] * moe
    cand = RoutingPin(moe, 1e-5)
    cand.tape = dict(golden.tape)
    run(False, cand, replay=True)
    assert cand.report.decisions == 8 * moe and cand.report.flips == 0 and cand.report.passed
    again = RoutingPin(moe, 1e-5)
    again.tape = dict(golden.tape)
    run(True, again, replay=True)
    assert again.report.decisions == 8 * moe and again.report.flips == 0


@pytest.mark.gpu
def test_gpu_the_captured_step_with_the_fused_kernel_keeps_the_gate(nano):
    """On CUDA: the replayed step with add_rmsnorm_router=cupy_rowwarp_pdl within float32 rounding of the unfused graph
    on the torch plugin's norm and router (float32 activations), one launch a MoE layer fewer in the captured step."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    impls = {"add_rmsnorm_router": "cupy_rowwarp_pdl"}
    want = _run(_engine(nano, False, "cuda", impls=impls))
    eng = _engine(nano, True, "cuda", impls=impls)
    got = _run(eng)
    assert torch.isfinite(got).all()
    assert nmse(got, want) < 1e-8
    handed = {k: n for k, n in eng.ops.passed().items() if k.startswith("add_rmsnorm_router")}
    assert not handed, f"the kernel took none of these calls itself: {handed}"


@pytest.mark.gpu
def test_gpu_capture_refuses_only_the_round_trips_the_step_takes(nano):
    """A registry with no CUDA add_rmsnorm_router (its reference, CPU-only, would make a host round trip a call)
    captures a step while fuse_router_norm is off - the step never calls it - and refuses, naming it, once on."""
    capture_refuses_only_when_on(nano, "fuse_router_norm", "add_rmsnorm_router",
                                 registry=lambda on: _registry("cuda", on))
