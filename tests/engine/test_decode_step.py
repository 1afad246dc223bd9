"""The decode step over static buffers (what a CUDA graph captures) equals the eager decode."""

from __future__ import annotations

import pytest
import torch

from sparkops.config import load_preset
from sparkops.dispatch import Ops
from sparkops.engine import Engine
from sparkops.engine.decode_step import DecodeStep
from sparkops.errors import BadInput
from sparkops.ops import OP_NAMES
from sparkops.plugins import load_catalog
from sparkops.registry.file import Registry
from sparkops.registry.plan import make_plan
from sparkops.synth import synth_weights


@pytest.fixture(scope="module")
def model():
    return synth_weights(load_preset("k3-nano"), "f32", seed=4)


def _engine(model, device="cpu", max_context=64):
    reg = Registry.empty("mem.toml")
    for op in OP_NAMES:
        reg.set(op, device, "torch", fallback="error")
    return Engine(model, Ops(make_plan(reg, load_catalog(), device, verify_checks=False)), max_context=max_context)


def _step_tokens(eng, prompt, n, capture=False, **sampling):
    logits = eng.prefill(prompt, last_only=True)
    step = torch.zeros(1, dtype=torch.int64, device=eng.device)
    tok = eng.ops.sample(logits, sampling.get("temperature", 0.0), sampling.get("top_k", 0),
                         sampling.get("top_p", 1.0), sampling.get("seed", 0), step)
    ds = DecodeStep(eng, **sampling)
    if capture:
        ds.capture()
    ds.token.copy_(tok.view(1))
    ds.step.fill_(1)
    out, rows = [int(tok[0])], []
    for _ in range(n - 1):
        out.append(int(ds()[0]))
        rows.append(ds.logits.float().clone())
    return out, torch.cat(rows)


@pytest.mark.parametrize("sampling", [{}, {"temperature": 0.9, "top_p": 0.9, "seed": 3}])
def test_step_body_equals_generate(model, sampling):
    prompt = [5, 9, 200, 17, 3]
    eng = _engine(model)
    want = eng.generate(prompt, 12, **sampling).tokens
    got, _ = _step_tokens(_engine(model), prompt, 12, **sampling)
    assert got == want


def test_step_refuses_to_run_past_the_context(model):
    eng = _engine(model, max_context=8)
    eng.prefill([1, 2, 3, 4, 5, 6, 7, 8])
    with pytest.raises(BadInput, match="past the context of 8"):
        DecodeStep(eng)()


def test_capture_needs_cuda(model):
    with pytest.raises(BadInput, match="only on CUDA"):
        DecodeStep(_engine(model)).capture()


@pytest.mark.gpu
def test_captured_step_replays_bit_identically_to_eager(model):
    prompt = [5, 9, 200, 17, 3, 44, 91]
    eager, eager_logits = _step_tokens(_engine(model, "cuda"), prompt, 16, temperature=0.8, seed=2)
    graph, graph_logits = _step_tokens(_engine(model, "cuda"), prompt, 16, capture=True, temperature=0.8, seed=2)
    assert graph == eager
    assert torch.equal(graph_logits, eager_logits)


def test_model_gate_judges_the_captured_step(model):
    """`check --model --captured` decodes through DecodeStep (eager body on CPU) and still passes."""
    from sparkops.gate.model_gate import model_check

    reg = Registry.empty("mem.toml")
    for op in OP_NAMES:
        reg.set(op, "cpu", "torch", fallback="error")
    out = model_check("k3-nano", reg, weights=model, depths=(1, 9), decode_steps=3, captured=True)
    assert out.error is None, out.error
    assert out.passed and len(out.depths) == 2


@pytest.mark.gpu
def test_model_gate_on_the_captured_cuda_step(model):
    from sparkops.gate.model_gate import model_check

    reg = Registry.empty("mem.toml")
    for op in OP_NAMES:
        reg.set(op, "cuda", "torch", fallback="error")
    out = model_check("k3-nano", reg, device="cuda", weights=model, depths=(1, 9), decode_steps=3, captured=True)
    assert out.error is None and out.passed, out.error
