"""An engine on an fp8 MLA cache (k3-nano, CPU): what it writes, what it reads, and that it stays one model."""

from __future__ import annotations

import pytest
import torch

from sparkops.config import load_preset
from sparkops.dispatch import Ops
from sparkops.engine import Engine
from sparkops.engine.state import MLAState
from sparkops.errors import BadInput
from sparkops.kvcache import FP8, to_cache
from sparkops.ops import OP_NAMES, get_contract
from sparkops.plugins import load_catalog
from sparkops.registry.file import Registry
from sparkops.registry.plan import make_plan
from sparkops.synth import synth_weights

T = 40


@pytest.fixture(scope="module")
def model():
    return synth_weights(load_preset("k3-nano"), "f32", seed=4)


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, 317, (T,), generator=torch.Generator().manual_seed(6))


def _ops(attention: str) -> Ops:
    """The torch plugin's ops with `attention` (plans without check records: the engine's behaviour is tested here,
    the gate's proofs in tests/gate)."""
    reg = Registry.empty("mem.toml")
    for op in OP_NAMES:
        reg.set(op, "cpu", attention if op == "attention" else "torch", fallback="error")
    return Ops(make_plan(reg, load_catalog(), "cpu", verify_checks=False))


def _caches(eng: Engine) -> list[torch.Tensor]:
    return [st.cache for st in eng.state.layers if isinstance(st, MLAState)]


def test_an_fp8_attention_gets_an_fp8_cache_by_default(model):
    eng = Engine(model, _ops("torch_fp8cache"), max_context=64)
    assert eng.state.cache_dtype == FP8 and all(c.dtype == FP8 and c.element_size() == 1 for c in _caches(eng))
    assert Engine(model, _ops("torch"), max_context=64).state.cache_dtype == torch.float32


def test_an_fp8_cache_on_an_attention_not_proven_on_it_is_refused(model):
    with pytest.raises(BadInput, match="attention=torch is not proven on an fp8 cache"):
        Engine(model, _ops("torch"), max_context=64, cache_dtype=FP8)
    with pytest.raises(BadInput, match="reads a float8_e4m3fn cache"):
        Engine(model, _ops("torch_fp8cache"), max_context=64, cache_dtype=torch.float32)


def test_the_cache_holds_the_rows_rounded_as_kvcache_rounds_them(model, tokens):
    """The first MLA layer's rows do not depend on any attention before them: in the fp8 engine they must be exactly
    to_cache of the float32 engine's rows, and rows past the length stay unwritten (zero)."""
    kinds = model.config.layer_kinds
    first = kinds.index("mla")
    assert "mla" not in kinds[:first]
    f32 = Engine(model, _ops("torch"), max_context=64)
    fp8 = Engine(model, _ops("torch_fp8cache"), max_context=64)
    f32.prefill(tokens)
    fp8.prefill(tokens)
    want = to_cache(f32.state.layers[first].cache[:T], FP8)
    got = fp8.state.layers[first].cache
    assert torch.equal(got[:T].view(torch.uint8), want.view(torch.uint8))
    assert not got[T:].view(torch.uint8).any()


def test_decode_after_prefill_equals_one_prefill_on_an_fp8_cache(model, tokens):
    whole = Engine(model, _ops("torch_fp8cache"), max_context=64).prefill(tokens)
    eng = Engine(model, _ops("torch_fp8cache"), max_context=64)
    rows = [eng.prefill(tokens[:17])] + [eng.decode(tokens[i:i + 1]) for i in range(17, T)]
    got = torch.cat(rows)
    assert float(((got - whole) ** 2).sum() / (whole ** 2).sum()) < 1e-10


def test_the_fp8_cache_moves_the_logits_a_little(model, tokens):
    """The cache really is read in fp8 (the logits differ from a float32 cache's), and it stays the same model."""
    ref = Engine(model, _ops("torch"), max_context=64).prefill(tokens).double()
    got = Engine(model, _ops("torch_fp8cache"), max_context=64).prefill(tokens).double()
    nmse = float(((got - ref) ** 2).sum() / (ref ** 2).sum())
    assert 1e-9 < nmse < 1e-2
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() > 0.9


def test_the_reference_contract_reads_the_cache_param_as_a_cache():
    """The attention contract marks latent and cache as "cache" params: the fp8_cache variant rounds exactly those."""
    params = {p.name: p.dtype for p in get_contract("attention").params}
    assert params["cache"] == params["latent"] == "cache" and params["q"] == "activation"
