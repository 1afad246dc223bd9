"""The engine on k3-nano: prefill/decode splits, chunked prefill, context limits, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sparkops.dispatch import Ops
from sparkops.engine import Engine
from sparkops.errors import BadInput
from sparkops.ops import OP_NAMES
from sparkops.plugins import load_catalog
from sparkops.registry.file import Registry
from sparkops.registry.plan import make_plan
from sparkops.synth import synth_weights
from sparkops.config import load_preset

T = 80


@pytest.fixture(scope="module")
def model():
    return synth_weights(load_preset("k3-nano"), "f32", seed=3)


def _ops(impl: str) -> Ops:
    reg = Registry.empty("mem.toml")
    for op in OP_NAMES:
        reg.set(op, "cpu", impl, fallback="error")
    return Ops(make_plan(reg, load_catalog(), "cpu", verify_checks=False))


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, 317, (T,), generator=torch.Generator().manual_seed(5))


@pytest.fixture(scope="module")
def whole(model, tokens):
    return Engine(model, _ops("numpy"), max_context=128, dtype=torch.float64).prefill(tokens).double()


def _nmse(a, b):
    return float(((a - b) ** 2).sum() / (b ** 2).sum())


@pytest.mark.parametrize("split", [1, 31, 32, 33, 64, 79])
def test_prefill_then_decode_equals_whole_prefill(model, tokens, whole, split):
    eng = Engine(model, _ops("numpy"), max_context=128, dtype=torch.float64)
    rows = [eng.prefill(tokens[:split])] + [eng.decode(tokens[i:i + 1]) for i in range(split, T)]
    assert eng.length == T and int(eng.state.pos) == T
    assert _nmse(torch.cat(rows).double(), whole) < 1e-12  # float64 inside; logits come back float32 (ulp flips)


@pytest.mark.parametrize("chunk", [1, 7, 32, 64, 100])
def test_chunked_prefill_does_not_depend_on_the_chunk(model, tokens, whole, chunk):
    eng = Engine(model, _ops("torch"), max_context=128)
    got = eng.prefill(tokens, chunk_size=chunk).double()
    assert _nmse(got, whole) < 1e-10 and (got.argmax(-1) == whole.argmax(-1)).all()
    last = Engine(model, _ops("torch"), max_context=128).prefill(tokens, chunk_size=chunk, last_only=True)
    assert last.shape == (1, model.config.vocab_size)
    assert _nmse(last.double(), whole[-1:]) < 1e-10


def test_logits_vary_and_stay_finite(whole):
    assert torch.isfinite(whole).all()
    assert whole.std(dim=-1).min() > 0.1 and len(set(whole.argmax(-1).tolist())) > 3


def test_context_overflow_and_bad_tokens_are_clear_errors(model):
    eng = Engine(model, _ops("torch"), max_context=16)
    with pytest.raises(BadInput, match="exceed the context of 16"):
        eng.prefill(list(range(17)))
    with pytest.raises(BadInput, match="token id 320 is out of range for vocabulary size 320"):
        eng.prefill([1, 320])
    with pytest.raises(BadInput, match="token id -1"):
        eng.prefill([-1])
    with pytest.raises(BadInput, match="no tokens"):
        eng.prefill([])
    with pytest.raises(BadInput, match="chunk_size must be at least 1"):
        eng.prefill([1, 2], chunk_size=0)
    assert eng.length == 0, "a refused call must not advance the caches"
    with pytest.raises(BadInput, match="exceeds the model's context length"):
        Engine(model, _ops("torch"), max_context=10 ** 9)


def test_generate_is_deterministic_and_stops_at_n(model):
    eng = Engine(model, _ops("torch"), max_context=64)
    a = eng.generate([1, 2, 3], 10, temperature=0.8, top_p=0.9, seed=11).tokens
    eng.reset()
    b = eng.generate([1, 2, 3], 10, temperature=0.8, top_p=0.9, seed=11).tokens
    assert a == b and len(a) == 10
    eng.reset()
    with pytest.raises(BadInput, match="exceeds the context"):
        eng.generate(list(range(60)), 10)


def test_check_finite_names_the_op(model):
    import dataclasses

    bad = dataclasses.replace(model, output_norm=model.output_norm * float("inf"))
    reg = Registry.empty("mem.toml")
    for op in OP_NAMES:
        reg.set(op, "cpu", "torch", fallback="error")
    ops = Ops(make_plan(reg, load_catalog(), "cpu", verify_checks=False), check_finite=True)
    from sparkops.dispatch import NonFinite

    with pytest.raises(NonFinite, match=r"add_rmsnorm \(add_rmsnorm=torch\) returned"):
        Engine(bad, ops, max_context=16).prefill([1, 2, 3])
