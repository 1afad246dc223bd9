"""linear_add_rmsnorm=cupy_rowwarp_pdl_norm on CUDA beyond the contract's cases: at the 48B's o_proj shape (2304 x
4096 Q4_K) and a partial block of rows, in bfloat16, float32 and float16 activations, the projection is linear=
cupy_rowwarp_pdl's warp form bit for bit (summed is its output added to the residual and rounded once) and normed is
the torch add_rmsnorm of it within the add_rmsnorm row; every output written (fresh outputs are NaN under the gate's
poisoning); the arrival counter left at zero; a chain of fused calls, each the PDL producer of the next one's input
and residual, replayed from one graph giving the plain launches' bits; a NaN in x carried to every output; and the
stated policy for the calls it does not take.

Skipped with a reason where there is no CUDA device (tests/conftest.py) or no CuPy.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.gate.poison import poisoned
from sparkops.gate.tolerances import rule_for
from sparkops.qweight import QWeight

from tests.backends.cupy_support import replays_match

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")

from sparkops_cupy import linear as cl  # noqa: E402  (after the skip)
from sparkops_cupy import linear_add_rmsnorm as cln  # noqa: E402

DEV = torch.device("cuda")


def _weight(seed: int, n: int, k: int) -> QWeight:
    from sparkops.gguf.quants import random_blocks

    raw = np.ascontiguousarray(random_blocks(np.random.default_rng(seed), (n, k), Q.Q4_K, k ** -0.5))
    return QWeight(torch.from_numpy(raw).to(DEV), Q.Q4_K, (n, k), f"o_proj{seed}")


def _call(seed: int, n: int, k: int, dtype: torch.dtype):
    g = torch.Generator().manual_seed(seed)
    return dict(x=torch.randn(1, k, generator=g).to(DEV, dtype), weight=_weight(seed, n, k),
                residual=(3 * torch.randn(1, n, generator=g)).to(DEV, dtype),
                norm_weight=(1.0 + 0.2 * torch.randn(n, generator=g)).to(DEV), eps=1e-5)


def _nmse(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    return float(((got - want) ** 2).sum() / (want ** 2).sum())


@pytest.mark.parametrize("scratch", cln.SCRATCHES)
@pytest.mark.parametrize("arrival", cln.ARRIVALS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16], ids=["bf16", "fp32", "fp16"])
@pytest.mark.parametrize("n,k", [(2304, 4096), (42, 512), (2306, 256), (60, 256)],
                         ids=["o_proj", "42x512", "2306x256", "60x256"])
def test_the_projection_is_the_warp_form_s_bits_and_the_norm_is_torch_s(dtype, n, k, arrival, scratch, monkeypatch):
    """(60 rows: 15 blocks, fewer than the tree's 32 groups: the groups past the grid never arrive.)"""
    from sparkops_torch.add_rmsnorm import add_rmsnorm

    monkeypatch.setattr(cln, "ARRIVAL", arrival)
    monkeypatch.setattr(cln, "SCRATCH", scratch)

    for seed in range(2):
        call = _call(60 + seed + n, n, k, dtype)
        assert cln.fused_serves(call["x"], call["weight"], call["residual"], call["norm_weight"])
        with poisoned():
            normed, summed = cln.linear_add_rmsnorm_rowwarp_pdl(**call)
            y = cl.linear_rowwarp_pdl(call["x"], call["weight"])
            torch.cuda.synchronize()
        assert normed.shape == summed.shape == (1, n) and normed.dtype == summed.dtype == dtype
        for name, o in (("normed", normed), ("summed", summed)):
            bad = ~torch.isfinite(o.float())
            assert not bad.any(), f"{name}: {int(bad.sum())} values never written (NaN)"
        want_n, want_s = add_rmsnorm(y, call["residual"], call["norm_weight"], call["eps"])
        assert torch.equal(summed, want_s), "the projection's output is not the warp form's"
        limit = rule_for("add_rmsnorm", "fp32" if dtype == torch.float32 else "bf16").limit
        assert _nmse(normed.float(), want_n.float()) <= limit
        assert not cln.counters(DEV).any(), "a launch left the arrival counter above zero"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_a_residual_off_16_byte_alignment_takes_the_scalar_norm_and_the_same_sums(dtype):
    """row_add_norm.cuh's vector norm reads 16-byte chunks; a residual 2 (bf16) or 4 (fp32) bytes past a 16-byte
    boundary (a view one value into a wider row) sends the last block to the scalar form instead (ran_vec_fits). Its
    summed stream is the same bits (one rounding of the same float sum) and its normed values stay within the row's
    tolerance of the aligned call's: the two forms differ only in the order of the squares' sums."""
    call = _call(71, 2304, 4096, dtype)
    wide = torch.empty(1, 2304 + 8, dtype=dtype, device=DEV)  # [1, N + 8]: a view one value in is off alignment
    shifted = wide[:, 1:2305]
    shifted.copy_(call["residual"])
    assert shifted.is_contiguous() and shifted.data_ptr() % 16 and call["residual"].data_ptr() % 16 == 0
    aligned_n, aligned_s = cln.linear_add_rmsnorm_rowwarp_pdl(**call)
    with poisoned():
        normed, summed = cln.linear_add_rmsnorm_rowwarp_pdl(**{**call, "residual": shifted})
        torch.cuda.synchronize()
    assert torch.isfinite(normed.float()).all() and torch.isfinite(summed.float()).all()
    assert torch.equal(summed, aligned_s)
    limit = rule_for("add_rmsnorm", "fp32" if dtype == torch.float32 else "bf16").limit
    assert _nmse(normed.float(), aligned_n.float()) <= limit
    assert not cln.counters(DEV).any()


@pytest.mark.parametrize("scratch", cln.SCRATCHES)
@pytest.mark.parametrize("arrival", cln.ARRIVALS)
def test_a_chain_replayed_from_a_graph_gives_the_plain_launches_bits(arrival, scratch, monkeypatch):
    """Four fused calls on 2304 x 2304 weights, each reading the normed row and the stream the one before wrote (a PDL
    producer of both its x and its residual), captured once and replayed with new inputs, every output NaN before each
    replay, against the same chain launched plainly: a block that read x before its wait, or a last block that read
    the row or the residual early, gives the replay before's values, or NaN."""
    monkeypatch.setattr(cln, "ARRIVAL", arrival)
    monkeypatch.setattr(cln, "SCRATCH", scratch)
    weights = [_weight(80 + i, 2304, 2304) for i in range(4)]
    gains = [(1.0 + 0.2 * torch.randn(2304, generator=torch.Generator().manual_seed(90 + i))).to(DEV)
             for i in range(4)]
    g = torch.Generator().manual_seed(95)
    x0 = torch.empty(1, 2304, dtype=torch.bfloat16, device=DEV)
    r0 = torch.empty(1, 2304, dtype=torch.bfloat16, device=DEV)

    def refresh() -> None:
        x0.copy_(torch.randn(1, 2304, generator=g))
        r0.copy_(3 * torch.randn(1, 2304, generator=g))

    def chain(pdl: bool) -> list[torch.Tensor]:
        monkeypatch.setattr(cln, "PDL", pdl)
        x, h, out = x0, r0, []
        for w, gain in zip(weights, gains):
            x, h = cln.linear_add_rmsnorm_rowwarp_pdl(x, w, h, gain, 1e-5)
            out += [x, h]
        return out

    replays_match(lambda: chain(True), lambda: chain(False), refresh, replays=4)
    assert not cln.counters(DEV).any()


def test_a_nan_in_x_reaches_every_output():
    call = _call(70, 2304, 4096, torch.bfloat16)
    call["x"][0, 100] = float("nan")
    normed, summed = cln.linear_add_rmsnorm_rowwarp_pdl(**call)
    torch.cuda.synchronize()
    assert torch.isnan(normed.float()).all() and torch.isnan(summed.float()).all()
    assert not cln.counters(DEV).any()


def test_the_stated_policy_runs_cupy_rowwarp_pdl_then_torch_s_norm():
    """Two tokens, a tall weight (the copy form's) and a residual of another dtype go to linear=cupy_rowwarp_pdl and
    the torch add_rmsnorm: the same bits as that composition, and the policy says which."""
    from sparkops_cupy._policies import linear_norm_passes
    from sparkops_torch.add_rmsnorm import add_rmsnorm

    def same(call):
        got = cln.linear_add_rmsnorm_rowwarp_pdl(**call)
        want = add_rmsnorm(cl.linear_rowwarp_pdl(call["x"], call["weight"]), call["residual"], call["norm_weight"],
                           call["eps"])
        assert all(torch.equal(a, b) for a, b in zip(got, want))
        return linear_norm_passes(**call)

    call = _call(71, 2304, 4096, torch.bfloat16)
    two = dict(call, x=call["x"].repeat(2, 1), residual=call["residual"].repeat(2, 1))
    assert "2 tokens" in same(two)
    assert "ROWWARP_TALL_ROWS" in same(_call(72, 4096, 2304, torch.bfloat16))
    assert "residual" in same(dict(call, residual=call["residual"].float()))
    assert linear_norm_passes(**call) is None


def test_the_counter_is_made_before_a_capture_and_refused_inside_one(monkeypatch):
    from sparkops_cupy._counters import CounterPools

    monkeypatch.setattr(cln, "_POOLS", CounterPools("linear_add_rmsnorm", cln.POOL_COUNTERS))
    call = _call(73, 2304, 4096, torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        cl.linear_rowwarp_pdl(call["x"], call["weight"])  # the weight's kernel view made outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with pytest.raises(Exception, match="arrival counters"):
            with torch.cuda.graph(graph):
                cln.linear_add_rmsnorm_rowwarp_pdl(**call)
    finally:
        graph.reset()
    cln.linear_add_rmsnorm_rowwarp_pdl(**call)
    torch.cuda.synchronize()
    assert cln.counters(DEV) is not None and not cln.counters(DEV).any()
