"""The MLA cache's dtypes (sparkops/kvcache.py): the fp8 rounding against a from-the-format reference, the names
--cache-dtype takes, which cache an engine's attention may run with, and a state copied into an fp8 cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sparkops.errors import BadInput
from sparkops.kvcache import FP8, FP8_MAX, fp8_round_reference, parse_cache_dtype, resolve_cache_dtype, to_cache


def _values() -> np.ndarray:
    """Every binade e4m3fn has (subnormals included), values just past the largest finite, exact ties, NaN."""
    g = np.random.default_rng(7)
    spread = np.concatenate([g.standard_normal(20000) * s for s in (1e-4, 3e-3, 0.1, 1.0, 30.0, 400.0)])
    # a tie halfway between two neighbours in each binade, and one a hair either side of it
    ties = np.array([1.0625, 2.125, 0.5 + 2**-5, 2**-9 * 1.5, 2**-9 * 2.5, 2**-9 * 0.5, 416.0, 440.0])
    edges = np.array([0.0, -0.0, 447.9, 448.0, 449.0, 463.9, 464.0, 465.0, 1e6, -1e6, 2**-6, 2**-10, np.nan])
    return np.concatenate([spread, ties, ties * (1 + 1e-6), ties * (1 - 1e-6), -ties, edges]).astype(np.float32)


def test_the_fp8_rounding_is_round_to_nearest_even_with_saturation():
    x = _values()
    got = to_cache(torch.from_numpy(x), FP8)
    assert got.dtype == FP8
    want = fp8_round_reference(x)
    got64 = got.to(torch.float64).numpy()
    assert np.array_equal(np.isnan(got64), np.isnan(want))
    finite = ~np.isnan(want)
    assert np.array_equal(got64[finite], want[finite])
    assert np.isnan(got64[np.isnan(x)]).all()  # NaN stays NaN
    assert np.abs(got64[~np.isnan(x)]).max() == FP8_MAX  # an overflow saturates, never NaN
    assert got64[x == np.float32(2**-9 * 0.5)][0] == 0.0  # the tie below the smallest subnormal goes to even: zero
    assert got64[x == np.float32(1.0625)][0] == 1.0  # 1 + 1/16 lies halfway between 1 and 1.125: even is 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_the_rows_dtype_does_not_change_the_rounding(dtype):
    """A row in bf16 (the engine's), f16 or f64 rounds as its float32 value does (f64: as its own value)."""
    x = torch.from_numpy(_values())
    x = x[torch.isfinite(x) & (x.abs() < 6e4)].to(dtype)
    got = to_cache(x, FP8).view(torch.uint8)
    want = to_cache(x.float(), FP8).view(torch.uint8) if dtype != torch.float64 else \
        torch.from_numpy(fp8_round_reference(x.numpy())).to(FP8).view(torch.uint8)
    assert torch.equal(got, want)


def test_an_overflow_saturates_whatever_torch_s_own_cast_does():
    """The clamp makes saturation one rule on every torch and device (torch's cast has not always saturated)."""
    big = torch.tensor([500.0, -1e4, 1e30])
    assert to_cache(big, FP8).float().tolist() == [FP8_MAX, -FP8_MAX, FP8_MAX]


def test_other_cache_dtypes_are_a_plain_cast():
    x = torch.randn(4, 8)
    assert torch.equal(to_cache(x, torch.bfloat16), x.to(torch.bfloat16))
    assert to_cache(x, torch.float32) is not None and torch.equal(to_cache(x, torch.float32), x)


@pytest.mark.parametrize("text,dtype", [("auto", None), (None, None), ("float8_e4m3fn", FP8), ("fp8", FP8),
                                        ("bfloat16", torch.bfloat16), ("f32", torch.float32)])
def test_the_cache_dtype_names(text, dtype):
    assert parse_cache_dtype(text) == dtype


def test_a_bad_cache_dtype_name_lists_the_good_ones():
    with pytest.raises(BadInput, match="--cache-dtype float8: use auto, float32, bfloat16, float16 or float8_e4m3fn"):
        parse_cache_dtype("float8")


def _plan(attention: str):
    """A plan on the CPU whose attention is `attention` (records are not needed to read its claim)."""
    from sparkops.ops import OP_NAMES, get_contract
    from sparkops.plugins import load_catalog
    from sparkops.registry.file import Registry
    from sparkops.registry.plan import make_plan

    reg = Registry.empty("unsaved.toml")
    for op in OP_NAMES:
        reg.set(op, "cpu", attention if op == "attention" else get_contract(op).reference, fallback="reference")
    return make_plan(reg, load_catalog(), "cpu", verify_checks=False)


def test_the_cache_follows_the_attention_unless_asked():
    fp8, plain = _plan("torch_fp8cache"), _plan("torch")
    assert resolve_cache_dtype(fp8, torch.bfloat16, None) == FP8  # auto: the attention proven on fp8 caches
    assert resolve_cache_dtype(plain, torch.bfloat16, None) == torch.bfloat16  # auto: the activation dtype
    assert resolve_cache_dtype(fp8, torch.bfloat16, FP8) == FP8
    assert resolve_cache_dtype(plain, torch.float32, torch.bfloat16) == torch.bfloat16
    assert resolve_cache_dtype(None, torch.float32, None) == torch.float32  # ops built without a plan


def test_no_cache_dtype_runs_on_an_attention_not_proven_on_it():
    with pytest.raises(BadInput, match="attention=torch is not proven on an fp8 cache.*torch_fp8cache"):
        resolve_cache_dtype(_plan("torch"), torch.bfloat16, FP8)
    with pytest.raises(BadInput, match="--cache-dtype bfloat16: attention=torch_fp8cache reads a float8_e4m3fn"):
        resolve_cache_dtype(_plan("torch_fp8cache"), torch.bfloat16, torch.bfloat16)


def test_a_state_copy_rounds_into_an_fp8_cache_only_when_asked():
    from sparkops.config import load_preset
    from sparkops.engine.state import MLAState, SequenceState

    cfg = load_preset("k3-nano")
    src = SequenceState(cfg, 16, torch.device("cpu"), torch.bfloat16)
    dst = SequenceState(cfg, 16, torch.device("cpu"), FP8)
    for t in src.tensors()[:-1]:
        t.copy_(torch.randn(t.shape) * 50)
    src.length = 9
    with pytest.raises(BadInput, match="same max context and cache dtype"):
        dst.copy_from(src)
    assert all(float(t.float().abs().sum()) == 0 for t in dst.tensors())  # refused whole: nothing half-copied
    dst.copy_from(src, round_cache=True)
    pairs = [(a, b) for a, b in zip(dst.layers, src.layers) if isinstance(a, MLAState)]
    assert pairs and all(torch.equal(a.cache.view(torch.uint8), to_cache(b.cache, FP8).view(torch.uint8))
                         for a, b in pairs)
    others = [(a, b) for a, b in zip(dst.tensors(), src.tensors()) if a.dtype != FP8]
    assert all(torch.equal(a, b) for a, b in others) and dst.length == 9
