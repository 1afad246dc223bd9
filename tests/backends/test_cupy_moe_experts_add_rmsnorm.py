"""moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm on CUDA beyond the contract's cases: at the 48B's MoE shape
(2304 wide, 1024 hidden, top-8, a shared expert, Q4_K) in bfloat16, float32 and float16 activations, the experts'
part is moe_experts=cupy_rowwarp_pdl_q8_hidden's, bit for bit (summed is that pair's output added to the residual and
rounded once), and normed is the torch add_rmsnorm of it within the add_rmsnorm row; every output written (fresh
outputs are NaN under the gate's poisoning); the arrival counter left at zero; three layers of the step's chain
replayed from one graph after the PDL norm and router giving the plain launches' bits; a NaN in x carried to every
output; and the stated policy for the calls it does not take.

Skipped with a reason where there is no CUDA device (tests/conftest.py) or no CuPy.
"""

from __future__ import annotations

import pytest
import torch

from sparkops.gate.poison import poisoned
from sparkops.gate.tolerances import rule_for

from tests.backends.cupy_support import replays_match

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")

from sparkops_cupy import moe_experts as cme  # noqa: E402  (after the skip)
from sparkops_cupy import moe_experts_add_rmsnorm as cmn  # noqa: E402
from tests.backends.test_cupy_pdl import _moe_48b, _NormRouterLayers  # noqa: E402

DEV = torch.device("cuda")


def _stream(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A residual stream [1, 2304] of spread 3 in `dtype` and a norm gain near one (float32)."""
    g = torch.Generator().manual_seed(seed)
    return ((torch.randn(1, 2304, generator=g) * 3).to(DEV, dtype),
            (1.0 + 0.2 * torch.randn(2304, generator=g)).to(DEV))


def _nmse(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    return float(((got - want) ** 2).sum() / (want ** 2).sum())


@pytest.mark.parametrize("scratch", cmn.SCRATCHES)
@pytest.mark.parametrize("arrival", cmn.ARRIVALS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16], ids=["bf16", "fp32", "fp16"])
def test_the_experts_are_the_q8_hidden_pair_s_bits_and_the_norm_is_torch_s(dtype, arrival, scratch, monkeypatch):
    from sparkops_torch.add_rmsnorm import add_rmsnorm

    monkeypatch.setattr(cmn, "ARRIVAL", arrival)
    monkeypatch.setattr(cmn, "SCRATCH", scratch)

    for seed in range(3):
        x, weights, ids, w = _moe_48b(60 + seed, DEV)
        x = x.to(dtype)
        residual, gain = _stream(seed, dtype)
        assert cmn.fused_serves(x, w["w_gate"], w["w_up"], w["w_down"], w["s_gate"], w["s_up"], w["s_down"], residual,
                                gain)
        with poisoned():
            normed, summed = cmn.moe_experts_add_rmsnorm_q8_hidden(x, weights, ids, **w, residual=residual,
                                                                   norm_weight=gain, eps=1e-5)
            y = cme.moe_experts_rowwarp_pdl_q8_hidden(x, weights, ids, **w)
            torch.cuda.synchronize()
        assert normed.shape == summed.shape == (1, 2304) and normed.dtype == summed.dtype == dtype
        for name, o in (("normed", normed), ("summed", summed)):
            bad = ~torch.isfinite(o.float())
            assert not bad.any(), f"{name}: {int(bad.sum())} values never written (NaN)"
        assert torch.equal(summed, (y.float() + residual.float()).to(dtype)), "the experts' output is not the pair's"
        want_n, want_s = add_rmsnorm(y, residual, gain, 1e-5)
        assert torch.equal(summed, want_s)
        limit = rule_for("add_rmsnorm", "fp32" if dtype == torch.float32 else "bf16").limit
        assert _nmse(normed.float(), want_n.float()) <= limit
        assert not cmn.counters(DEV).any(), "a launch left the arrival counter above zero"


@pytest.mark.parametrize("scratch", cmn.SCRATCHES)
@pytest.mark.parametrize("arrival", cmn.ARRIVALS)
def test_the_chain_replayed_from_a_graph_gives_the_plain_launches_bits(arrival, scratch, monkeypatch):
    """Three layers of the step's MoE chain - the triggering norm and the PDL router (_NormRouterLayers), then the fused
    experts whose normed output and stream are the layer's - captured once and replayed with new inputs, every
    output NaN before each replay, against the same chain launched plainly: a down that read the hidden vector, or a
    last block that read the row or the residual, before its producer finished gives the replay before's, or NaN."""
    pytest.importorskip("triton")
    monkeypatch.setattr(cmn, "ARRIVAL", arrival)
    monkeypatch.setattr(cmn, "SCRATCH", scratch)
    dev = torch.device("cuda", torch.cuda.current_device())
    x, weights, ids, w = _moe_48b(70, dev)
    del x, weights, ids
    w = dict(w)
    chain = _NormRouterLayers(dev, 71, 24, torch.bfloat16)
    residual, gain = _stream(72, torch.bfloat16)

    def layers(pdl: bool) -> list[torch.Tensor]:
        monkeypatch.setattr(cmn, "PDL", pdl)
        out = []
        for f, (wts, idx) in chain(pdl):
            out.extend(cmn.moe_experts_add_rmsnorm_q8_hidden(f, wts, idx, **w, residual=residual, norm_weight=gain,
                                                             eps=1e-5))
        return out

    replays_match(lambda: layers(True), lambda: layers(False), chain.refresh, replays=4)
    assert not cmn.counters(dev).any()


def test_a_nan_in_x_reaches_every_output():
    """A NaN in x makes every expert output NaN (the Q8 staging's scale carries it), so the whole sum and the norm."""
    x, weights, ids, w = _moe_48b(73, DEV)
    x[0, 100] = float("nan")
    residual, gain = _stream(74, torch.bfloat16)
    normed, summed = cmn.moe_experts_add_rmsnorm_q8_hidden(x, weights, ids, **w, residual=residual, norm_weight=gain,
                                                           eps=1e-5)
    torch.cuda.synchronize()
    assert torch.isnan(normed.float()).all() and torch.isnan(summed.float()).all()
    assert not cmn.counters(DEV).any()


def test_the_stated_policy_runs_the_pair_then_torch_s_norm():
    """Two tokens (the kernels take one) and a residual of another dtype go to the q8_hidden pair's own policy and
    the torch add_rmsnorm: the same bits as that composition, and the policy says which."""
    from sparkops_cupy._policies import experts_norm_passes
    from sparkops_torch.add_rmsnorm import add_rmsnorm

    x, weights, ids, w = _moe_48b(75, DEV)
    residual, gain = _stream(76, torch.bfloat16)
    x2, w2, ids2 = x.repeat(2, 1), weights.repeat(2, 1), ids.repeat(2, 1)
    r2 = residual.repeat(2, 1)
    got = cmn.moe_experts_add_rmsnorm_q8_hidden(x2, w2, ids2, **w, residual=r2, norm_weight=gain, eps=1e-5)
    want = add_rmsnorm(cme.moe_experts_rowwarp_pdl_q8_hidden(x2, w2, ids2, **w), r2, gain, 1e-5)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    assert "2 tokens" in experts_norm_passes(x2, w2, ids2, **w, residual=r2, norm_weight=gain, eps=1e-5)
    r32 = residual.float()
    assert "residual" in experts_norm_passes(x, weights, ids, **w, residual=r32, norm_weight=gain, eps=1e-5)
    got = cmn.moe_experts_add_rmsnorm_q8_hidden(x, weights, ids, **w, residual=r32, norm_weight=gain, eps=1e-5)
    want = add_rmsnorm(cme.moe_experts_rowwarp_pdl_q8_hidden(x, weights, ids, **w), r32, gain, 1e-5)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    assert experts_norm_passes(x, weights, ids, **w, residual=residual, norm_weight=gain, eps=1e-5) is None


@pytest.mark.parametrize("constant,value,match", [
    ("ARRIVAL", "ring", r"arrival's forms are \['flat', 'tree', 'release'\], not 'ring'.*ARRIVAL"),
    ("ARRIVAL", "relaxed", r"arrival 'relaxed' is for timing only.*ARRIVAL"),
    ("SCRATCH", "local", r"scratch's forms are \['shared', 'global'\], not 'local'.*SCRATCH")])
def test_a_form_it_does_not_have_is_refused_naming_the_constant(constant, value, match, monkeypatch):
    x, weights, ids, w = _moe_48b(79, DEV)
    residual, gain = _stream(80, torch.bfloat16)
    monkeypatch.setattr(cmn, constant, value)
    with pytest.raises(Exception, match=match):
        cmn.moe_experts_add_rmsnorm_q8_hidden(x, weights, ids, **w, residual=residual, norm_weight=gain, eps=1e-5)


def test_the_two_scratches_give_the_same_bits(monkeypatch):
    """The global scratch sums the warps' squares in the shared one's order: normed and summed are the same bytes."""
    x, weights, ids, w = _moe_48b(81, DEV)
    residual, gain = _stream(82, torch.bfloat16)
    got = {}
    for scratch in cmn.SCRATCHES:
        monkeypatch.setattr(cmn, "SCRATCH", scratch)
        got[scratch] = cmn.moe_experts_add_rmsnorm_q8_hidden(x, weights, ids, **w, residual=residual,
                                                             norm_weight=gain, eps=1e-5)
    (n0, s0), (n1, s1) = got.values()
    assert torch.equal(n0.view(torch.int16), n1.view(torch.int16)) and torch.equal(s0.view(torch.int16),
                                                                                   s1.view(torch.int16))
    assert not cmn.counters(DEV).any(), "the global scratch was not left at zero"


def test_the_counter_is_made_before_a_capture_and_refused_inside_one(monkeypatch):
    """The pool is created by a call outside any capture (a zeroing inside one would not be replayed); a first call
    during a capture is refused by name."""
    from sparkops_cupy._counters import CounterPools

    monkeypatch.setattr(cmn, "_POOLS", CounterPools("moe_experts_add_rmsnorm", cmn.POOL_COUNTERS))
    x, weights, ids, w = _moe_48b(77, DEV)
    residual, gain = _stream(78, torch.bfloat16)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        cme.moe_experts_rowwarp_pdl_q8_hidden(x, weights, ids, **w)  # its kernels compiled outside the capture
    torch.cuda.current_stream().wait_stream(side)
    try:
        with pytest.raises(Exception, match="arrival counters"):
            with torch.cuda.graph(graph):
                cmn.moe_experts_add_rmsnorm_q8_hidden(x, weights, ids, **w, residual=residual, norm_weight=gain,
                                                      eps=1e-5)
    finally:
        graph.reset()
    cmn.moe_experts_add_rmsnorm_q8_hidden(x, weights, ids, **w, residual=residual, norm_weight=gain, eps=1e-5)
    torch.cuda.synchronize()
    assert cmn.counters(DEV) is not None and not cmn.counters(DEV).any()
