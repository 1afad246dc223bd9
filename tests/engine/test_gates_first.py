"""[engine] gates_first (engine/graph.py _gate_inputs_first): with the side stream, a KDA layer's gate-input
projection (f_a | g_a | beta, alone or as their fused group) runs on the main line before q/k/v, and only the
up-projections (f_b, g_b, or fuse_low_rank's block-diagonal weight) fork; with fuse_kda_gates nothing forks. The same
ops on the same inputs, so the logits keep the one-stream forward's bits on the CPU, eagerly and through the replayed
step, under each KDA path (the linears, fuse_kda_norm, fuse_kda_gates, fuse_conv_kda). The GPU test proves the same
bits with the streams and a captured graph.
"""

from __future__ import annotations

import re

import pytest
import torch

from sparkops.cli import main
from sparkops.config import load_preset
from sparkops.dispatch import Ops
from sparkops.engine import Engine
from sparkops.engine.decode_step import DecodeStep
from sparkops.errors import RegistryError
from sparkops.lanes import MAIN, SIDE, lane
from sparkops.ops import OP_NAMES
from sparkops.plugins import load_catalog
from sparkops.registry.file import Registry
from sparkops.registry.plan import make_plan
from sparkops.synth import synth_weights
from tests.engine.fusion_support import run_phases

GATE_INPUT = re.compile(r"ssm_(f_a|g_a|beta)")
UP_PROJECTION = re.compile(r"ssm_[fg]_b")
QKV = re.compile(r"attn_[qkv]\.weight")

#: the KDA paths gates_first reorders: the gate linears (with the block-diagonal up-projection or the two), the fused
#: recurrence-and-norm, the fused gates (nothing left to fork), the fused conv (the merged conv's op)
PATHS = {
    "linears": {"fuse_projections": True},
    "low_rank": {"fuse_projections": True, "fuse_low_rank": True},
    "unfused": {},
    "kda_norm": {"fuse_projections": True, "fuse_kda_norm": True},
    "kda_gates": {"fuse_projections": True, "fuse_kda_gates": True},
    "conv_kda": {"fuse_projections": True, "fuse_short_conv": True, "fuse_conv_kda": True},
}


@pytest.fixture(scope="module")
def nano():
    """k3-nano in the 48B's mix: q/k/v Q4_K, the gate inputs and up-projections F16 (so they fork)."""
    return synth_weights(load_preset("k3-nano"), "q4_k_m", seed=11)


def _engine(model, side: bool, first: bool, device: str = "cpu", impls: dict[str, str] | None = None,
            **engine) -> Engine:
    reg = Registry.empty("mem.toml")
    for op in OP_NAMES:
        reg.set(op, device, (impls or {}).get(op, "torch"), fallback="error")
    reg.set_engines({"side_stream": side, "gates_first": side and first, **engine})
    return Engine(model, Ops(make_plan(reg, load_catalog(), device, verify_checks=False)), max_context=96)


class _Linears:
    """Per linear call: (lane, weight name), in order."""

    def __init__(self, engine: Engine):
        self.calls: list[tuple[int, str]] = []
        inner = engine.ops.linear

        def linear(x, w):
            self.calls.append((lane(), w.name))
            return inner(x, w)

        engine.ops.linear = linear


@pytest.mark.parametrize("path", list(PATHS))
def test_the_gate_inputs_run_first_on_the_main_line_and_only_the_up_projections_fork(nano, path):
    eng = _engine(nano, True, True, **PATHS[path])
    rec = _Linears(eng)
    eng.decode(5)
    first_qkv = next(i for i, (_, w) in enumerate(rec.calls) if QKV.search(w))
    gate_inputs = [(i, ln) for i, (ln, w) in enumerate(rec.calls) if GATE_INPUT.search(w)]
    assert gate_inputs and all(ln == MAIN for _, ln in gate_inputs)
    assert gate_inputs[0][0] < first_qkv  # the first KDA layer's gate inputs before its q/k/v
    side = [w for ln, w in rec.calls if ln == SIDE]
    assert all(UP_PROJECTION.search(w) for w in side), side
    n_kda = sum(layer.kind == "kda" for layer in nano.layers)
    if path == "kda_gates":
        assert side == []  # the codes were all the side stream had: nothing forks
    else:
        assert len(side) == n_kda * (1 if path == "low_rank" else 2)


@pytest.mark.parametrize("path", list(PATHS))
def test_the_logits_keep_the_one_stream_bits(nano, path):
    one, side, first = (run_phases(_engine(nano, s, f, **PATHS[path])) for s, f in
                        ((False, False), (True, False), (True, True)))
    assert torch.equal(one, side) and torch.equal(one, first)


def test_the_registry_refuses_it_without_side_stream_and_the_plan_says_what_it_does(tmp_path, capsys):
    p = tmp_path / "r.toml"
    p.write_text("[engine]\ngates_first = true\n")
    with pytest.raises(RegistryError, match=r"gates_first = true needs side_stream = true \(it orders what forks"):
        Registry.load(p)
    p.write_text("")
    assert main(["engine", "--registry", str(p), "gates_first=on"]) == 2
    assert "needs side_stream" in capsys.readouterr().err and p.read_text() == ""
    assert main(["engine", "--registry", str(p), "gates_first=on", "side_stream=on"]) == 0
    capsys.readouterr()
    main(["plan", "--device", "cpu", "--registry", str(p)])
    out = " ".join(capsys.readouterr().out.split())
    assert "gates_first: with side_stream: a KDA layer's gate-input projection" in out


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["linears", "kda_norm"])
def test_gpu_the_logits_keep_the_one_stream_bits_eager_and_captured(nano, path):
    """The side stream with its gate inputs first, the PDL Triton kernels on both lanes: prefill, eager decodes and a
    captured step's replays give the one-stream forward's logits bit for bit."""
    impls = {"embedding": "triton", "rmsnorm": "triton", "add_rmsnorm": "triton_pdl", "linear": "triton_pdl",
             "short_conv": "triton", "kda": "triton", "gated_rmsnorm": "triton_pdl", "sample": "triton"}
    one, first = (run_phases(_engine(nano, s, s, "cuda", impls, **PATHS[path])) for s in (False, True))
    assert torch.isfinite(one).all() and torch.equal(one, first)


def test_a_decode_step_body_keeps_the_order(nano):
    """The replayed step's body (DecodeStep, eagerly on the CPU) takes the engine's side stream and so its order."""
    eng = _engine(nano, True, True, fuse_projections=True)
    eng.prefill([1, 2, 3])
    rec = _Linears(eng)
    DecodeStep(eng)()
    assert all(ln == MAIN for ln, w in rec.calls if GATE_INPUT.search(w))
    assert any(ln == SIDE for ln, _ in rec.calls)
