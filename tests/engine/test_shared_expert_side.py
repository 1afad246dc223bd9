"""[engine] shared_expert_side (engine/graph.py shared_apart): a decode call's MoE layers run their shared expert as a
dense SwiGLU FFN on the side stream and add it into the residual there, while the main line routes and runs
moe_experts with no shared expert; the layer's closing add_rmsnorm adds the routed output to that residual. A prefill
chunk keeps the shared expert inside moe_experts.

On the CPU the side block runs inline on the side lane (branches.py's stated policy). These tests prove what is the
same everywhere: which calls go where (the shared expert's linears, its SwiGLU and its add on the side lane; moe_experts
handed no shared weights), that a prefill is untouched, that the logits stay within a float32 rounding of the run
without it (the sums are taken in another order: not the same bits, and not claimed), and that the registry, the
engine and the bench say what runs. The GPU test proves the streams: the captured step replays the eager step's bits
with the shared expert's launches on the side stream.
"""

from __future__ import annotations

import re

import pytest
import torch

from sparkops.bench.harness import selections
from sparkops.cli import main
from sparkops.config import load_preset
from sparkops.dispatch import Ops
from sparkops.engine import Engine
from sparkops.engine.decode_step import DecodeStep
from sparkops.engine.graph import SHARED_SIDE_MAX_T
from sparkops.errors import BadInput, RegistryError
from sparkops.lanes import MAIN, SIDE, lane
from sparkops.ops import OP_NAMES
from sparkops.plugins import load_catalog
from sparkops.registry.file import Registry
from sparkops.registry.plan import make_plan
from sparkops.synth import synth_weights
from sparkops.weights import DenseFFNWeights, MoEWeights
from tests.engine.fusion_support import nmse, run_phases

#: a shared expert's weights by GGUF name (alone, or gate|up stacked by fuse_projections)
SHARED = re.compile(r"(gate|up|down)_shexp")


@pytest.fixture(scope="module")
def nano():
    """k3-nano in the 48B's mix (Q4_K experts and shared expert), one shared expert a MoE layer."""
    return synth_weights(load_preset("k3-nano"), "q4_k_m", seed=7)


def _registry(device: str, shared: bool, side: bool = True, impls: dict[str, str] | None = None,
              **engine) -> Registry:
    reg = Registry.empty("mem.toml")
    for op in OP_NAMES:
        reg.set(op, device, (impls or {}).get(op, "torch"), fallback="error")
    reg.set_engines({"side_stream": side, "shared_expert_side": shared, **engine})
    return reg


def _engine(model, shared: bool, device: str = "cpu", **kw) -> Engine:
    plan = make_plan(_registry(device, shared, **kw), load_catalog(), device, verify_checks=False)
    return Engine(model, Ops(plan), max_context=96)


def _moe_layers(model) -> int:
    return sum(isinstance(layer.ffn, MoEWeights) and layer.ffn.s_gate is not None for layer in model.layers)


class _Calls:
    """Per op call: (op, lane, a linear's weight name, whether a moe_experts call was handed a shared expert)."""

    def __init__(self, engine: Engine):
        self.calls: list[tuple[str, int, str, bool | None]] = []
        for op in OP_NAMES:
            inner = getattr(engine.ops, op, None)
            if inner is not None:
                setattr(engine.ops, op, self._wrap(op, inner))

    def _wrap(self, op, inner):
        def call(*args, **kwargs):
            name = getattr(args[1], "name", "") if op == "linear" and len(args) > 1 else ""
            with_shared = args[6] is not None if op == "moe_experts" else None
            self.calls.append((op, lane(), name, with_shared))
            return inner(*args, **kwargs)

        return call

    def take(self) -> list[tuple[str, int, str, bool | None]]:
        out, self.calls = self.calls, []
        return out


@pytest.mark.parametrize("fused", [False, True])
def test_a_decode_call_runs_the_shared_expert_on_the_side_lane_and_a_prefill_keeps_it_in_moe_experts(nano, fused):
    n, dense = _moe_layers(nano), sum(isinstance(layer.ffn, DenseFFNWeights) for layer in nano.layers)
    eng = _engine(nano, True, fuse_projections=fused)
    rec = _Calls(eng)
    assert n > 0 and len(eng.shared_side) == n and SHARED_SIDE_MAX_T == 8
    eng.prefill(list(range(3, 3 + SHARED_SIDE_MAX_T + 4)))  # a chunk past the limit: as without the option
    pre = rec.take()
    assert [s for op, _, _, s in pre if op == "moe_experts"] == [True] * n
    assert not any(SHARED.search(w) for _, _, w, _ in pre) and [op for op, *_ in pre].count("swiglu") == dense
    for phase in (lambda: eng.decode(7), lambda: DecodeStep(eng)()):  # an eager decode, the replayed step's body
        phase()
        calls = rec.take()
        assert [s for op, _, _, s in calls if op == "moe_experts"] == [False] * n, "moe_experts got the shared expert"
        side = [(op, w) for op, ln, w, _ in calls if ln == SIDE]
        shared_linears = [w for op, w in side if op == "linear" and SHARED.search(w)]
        assert len(shared_linears) == n * (2 if fused else 3)  # gate|up as one linear (fused) or two, then down
        assert [op for op, _ in side].count("swiglu") == n and [op for op, _ in side].count("add_rmsnorm") == n
        assert not any(SHARED.search(w) for op, ln, w, _ in calls if ln == MAIN)
        main_ops = [op for op, ln, _, _ in calls if ln == MAIN]
        assert main_ops.count("moe_router") == n and main_ops.count("swiglu") == dense  # the dense layer's own


def test_the_logits_stay_within_a_float32_rounding_of_the_run_without_it(nano):
    """Prefill (untouched: the same bits), eager decodes and the replayed step: h + shared + routed summed in another
    order than h + (routed + shared), each rounded to float32 on the CPU."""
    off, on = (run_phases(_engine(nano, shared)) for shared in (False, True))
    prefill_rows = 27  # run_phases' prefill of 27 tokens comes first
    assert torch.equal(off[:prefill_rows], on[:prefill_rows])
    assert torch.isfinite(on).all() and nmse(on, off) < 1e-10, nmse(on, off)


def test_the_registry_and_the_engine_refuse_it_without_side_stream(tmp_path, capsys, nano):
    p = tmp_path / "r.toml"
    p.write_text("[engine]\nshared_expert_side = true\n")
    with pytest.raises(RegistryError, match=r"shared_expert_side = true needs side_stream = true \(the shared expert "
                                            r"runs on the side stream"):
        Registry.load(p)
    p.write_text("")
    assert main(["engine", "--registry", str(p), "shared_expert_side=on"]) == 2  # refused, nothing written
    assert "needs side_stream" in capsys.readouterr().err and p.read_text() == ""
    assert main(["engine", "--registry", str(p), "shared_expert_side=on", "side_stream=on"]) == 0
    assert Registry.load(p).engine_options()["shared_expert_side"] is True
    plan = make_plan(_registry("cpu", False, side=False), load_catalog(), "cpu", verify_checks=False)
    plan.engine["shared_expert_side"] = True  # options that came another way than a registry's checks
    with pytest.raises(BadInput, match=r"shared_expert_side = true needs side_stream = true .*sparkops engine "
                                       r"side_stream=on, or shared_expert_side=off"):
        Engine(nano, Ops(plan), max_context=32)


def test_the_plan_and_a_bench_row_say_what_runs(tmp_path, capsys, nano):
    p = tmp_path / "r.toml"
    _registry("cpu", True).save(p)
    assert main(["plan", "--device", "cpu", "--registry", str(p)]) in (0, 1)  # the checks are not this test's
    out = " ".join(capsys.readouterr().out.split())
    assert "shared_expert_side: with side_stream: a decode step's MoE layers run their shared expert" in out
    assert "CPU: inline, one stream" in out
    n, kda = _moe_layers(nano), sum(layer.kind == "kda" for layer in nano.layers)
    moe = sum(isinstance(layer.ffn, MoEWeights) for layer in nano.layers)
    assert selections(_engine(nano, True))["[engine]"] == \
        f"side_stream ({kda} of {kda} KDA layers), shared_expert_side ({n} of {moe} MoE layers)"
    assert "shared_expert_side" not in selections(_engine(nano, False))["[engine]"]


# ---- on the GPU ------------------------------------------------------------------------------------------------------

#: CUDA implementations (Triton; torch where Triton has none) for k3-nano's shapes: the shared expert's linears and
#: the routed experts on both lanes at once
CUDA_IMPLS = {"embedding": "triton", "rmsnorm": "triton", "add_rmsnorm": "triton_pdl", "linear": "triton_pdl",
              "short_conv": "triton", "kda": "triton", "gated_rmsnorm": "triton_pdl", "swiglu": "triton",
              "sample": "triton"}


@pytest.mark.gpu
@pytest.mark.parametrize("fused", [False, True])
def test_gpu_the_captured_step_replays_the_eager_bits_with_the_shared_expert_on_the_side_stream(nano, fused):
    """The shared expert's linears launch on the side stream; the captured step replays what eager decodes of the
    same tokens give, bit for bit; and the logits stay within a float32 rounding of the engine without it."""
    def engine(shared: bool) -> Engine:
        return _engine(nano, shared, "cuda", impls=CUDA_IMPLS, fuse_projections=fused)

    eng = engine(True)
    streams: list[tuple[str, int]] = []
    inner = eng.ops.linear

    def linear(x, w):
        streams.append((w.name, torch.cuda.current_stream().cuda_stream))
        return inner(x, w)

    eng.ops.linear = linear
    eng.prefill([1, 2, 3])
    streams.clear()
    eng.decode(4)
    shared_streams = {s for name, s in streams if SHARED.search(name)}
    assert shared_streams == {eng.side.stream.cuda_stream}
    eager = engine(True)
    rows = torch.cat([eager.prefill(list(range(3, 30)))] + [eager.decode(t) for t in (5, 9, 2, 30)])
    on = run_phases(engine(True))  # the same prefill and decodes, the last two through the captured step
    assert torch.isfinite(on).all() and torch.equal(on, rows)
    off = run_phases(engine(False))
    assert nmse(on, off) < 1e-8, nmse(on, off)


@pytest.mark.gpu
def test_gpu_the_step_s_experts_at_the_48b_shape_without_the_shared_expert():
    """What moe_experts runs under the option in the step: cupy_rowwarp_pdl_q8_pairs_ld (and the pairs form whose bits
    it claims) with no shared expert (Fs = 0: 8 slots of 1024 rows, the down's 32 super-blocks a warp) at the 48B's
    shape, against torch's float32 experts within the act_q8 row (the contract's CUDA cases prove a small no-shared
    call; this is the real one)."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from gguf import GGMLQuantizationType as Q
    from sparkops_cupy import moe_experts as cme
    from sparkops_cupy._workloads import moe_workload
    from sparkops_torch.moe_experts import moe_experts as torch_experts

    dev = torch.device("cuda", torch.cuda.current_device())
    sets, _ = moe_workload(load_preset("kimi-linear-48b-a3b"), Q.Q4_K, torch.bfloat16).build(dev, 3)
    for s in sets[:3]:
        args = dict(s, s_gate=None, s_up=None, s_down=None)
        got = cme.moe_experts_rowwarp_pdl_q8_pairs_ld(**args)
        same = cme.moe_experts_rowwarp_pdl_q8_pairs(**args)
        want = torch_experts(**{**args, "x": args["x"].float()})
        torch.cuda.synchronize()
        assert torch.isfinite(got.float()).all() and torch.equal(got, same)
        assert nmse(got.float(), want) < 1e-2, nmse(got.float(), want)
