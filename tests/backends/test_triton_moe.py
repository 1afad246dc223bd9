"""The Triton MoE experts (fused decode GEMVs; grouped prefill GEMMs) and, through the gate's own
`prove`, the linear and embedding implementations, against the float64 reference.

CPU: Triton's interpreter on tiny shapes (see test_triton_linear.py); "triton_lastblock" (the down
kernel's last program per (row tile, token) does the combine) against "triton" bit for bit, and
"triton_prefetch" (deeper weight streams) against "triton_lastblock" at every depth. GPU (marked gpu,
H200): the 48B MoE shape (256 experts of 1024 x 2304, top-8, a shared expert), checked and timed in
a CUDA graph, "triton_lastblock" against "triton" and "triton_prefetch" against "triton_lastblock" bit for
bit, eagerly and replayed from CUDA graphs, and the three decode paths timed side by side:
    pytest -m gpu -s tests/backends/test_triton_moe.py
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.qweight import QWeight

triton = pytest.importorskip("triton")

from tests.backends.triton_support import (assert_pool_clean, assert_same_bits_replayed, poisoned,  # noqa: E402,F401
                                           prove_contract, same_bits, shuffled_programs)

FP32_TOL, BF16_TOL = 1e-5, 1e-2
ANCHOR_BW = 4.04e12


def _grouped_mm_on_cpu() -> bool:
    """torch._grouped_mm runs on CPU tensors (torch >= 2.8 has it; CPU kernels came later than CUDA's)."""
    try:
        a, b = torch.ones(4, 16, dtype=torch.bfloat16), torch.ones(2, 16, 8, dtype=torch.bfloat16)
        torch._grouped_mm(a, b, offs=torch.tensor([1, 4], dtype=torch.int32))
        return True
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


#: "triton_dqmm"'s MoE prefill multiplies with torch._grouped_mm; on a torch without it (or without its CPU kernel)
#: the interpreter tests of that path cannot run here (its refusal is tested on its own)
needs_grouped_mm = pytest.mark.skipif(not _grouped_mm_on_cpu(),
                                      reason=f"torch {torch.__version__} has no CPU torch._grouped_mm")


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    got, ref = got.detach().cpu().double(), ref.detach().cpu().double()
    assert torch.isfinite(got).all(), "output holds NaN/Inf (an element was not written?)"
    return ((got - ref).norm() / ref.norm()).item()


def moe_reference(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down) -> torch.Tensor:
    """float64, one (token, expert) at a time: the contract's formula written out."""
    deq = {}

    def w(q: QWeight) -> torch.Tensor:
        if id(q) not in deq:
            deq[id(q)] = q.to("cpu").dequantize().double()
        return deq[id(q)]

    x = x.detach().cpu().double()
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = int(ids[t, k])
            h = torch.nn.functional.silu(w(w_gate)[e] @ x[t]) * (w(w_up)[e] @ x[t])
            out[t] += float(weights[t, k]) * (w(w_down)[e] @ h)
        if s_gate is not None:
            out[t] += w(s_down) @ (torch.nn.functional.silu(w(s_gate) @ x[t]) * (w(s_up) @ x[t]))
    return out


def random_qweight(g: torch.Generator, qtype, *shape: int) -> QWeight:
    """A QWeight of random stored blocks (`random_blocks`: every code and scale drawn, not only those a quantizer
    would fit), values of spread shape[-1] ** -0.5, seeded from g. The kernels read blocks, whoever wrote them, and
    the float64 reference dequantizes the same blocks; quantizing floats instead cost the IQ1_S tests most of their
    time (~1.6 s a million values)."""
    from sparkops.gguf.quants import random_blocks

    rng = np.random.default_rng(int(torch.randint(0, 2 ** 62, (1,), generator=g)))
    raw = torch.from_numpy(random_blocks(rng, shape, qtype, shape[-1] ** -0.5))
    return QWeight(raw.view(torch.bfloat16) if qtype == Q.BF16 else raw, qtype, shape)


def moe_args(g: torch.Generator, qtype, t: int, d: int, f: int, e: int, k: int, shared: bool = True) -> dict:
    def qw(*shape):
        return random_qweight(g, qtype, *shape)

    return dict(x=torch.randn(t, d, generator=g), weights=torch.rand(t, k, generator=g) + 0.1,
                ids=torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)]),
                w_gate=qw(e, f, d), w_up=qw(e, f, d), w_down=qw(e, d, f),
                s_gate=qw(f, d) if shared else None, s_up=qw(f, d) if shared else None,
                s_down=qw(d, f) if shared else None)


def decode_case(full: dict, t: int, dt=torch.float32, shared: bool = True, bad: tuple | None = None) -> dict:
    """The first t tokens of `full` (moe_args) with x in dtype dt, without the shared expert unless `shared`;
    bad = (token, slot, id) puts that expert id (out of range: a NaN row) into the ids."""
    a = dict(full, x=full["x"][:t].to(dt), weights=full["weights"][:t], ids=full["ids"][:t].clone())
    if not shared:
        a.update(s_gate=None, s_up=None, s_down=None)
    if bad is not None:
        a["ids"][bad[0], bad[1]] = bad[2]
    return a


@pytest.fixture(scope="module")
def kernels():
    from sparkops_triton._runtime import interpreted

    with interpreted("moe_experts", "linear", "embedding", "_arrival", "moe_glue") as mods:
        yield mods


@pytest.fixture
def dequant_rows(kernels, monkeypatch):
    """The dqmm tests that take this decode their weights to bfloat16 128 rows a program (dequantize.DEQUANT_ROWS, 16
    compiled; test_gate_proves_contract's dqmm cases keep 16). Each value is decoded alone, so the rows a program takes
    change the launch, not a bit (the tune study dequant_bf16's variants; moe_experts._tiles gives the interpreter
    larger tiles the same way), and at 16 rows the interpreter ran 128 programs a weight of 8 experts, most of these
    tests' time. Their weights' rows are whole tiles (2048, 384, 256) or one ragged tile (96, 64): both masks run."""
    import sys

    monkeypatch.setattr(sys.modules[kernels[0].dequantize_bf16.__module__], "DEQUANT_ROWS", 128)




# ---------------------------------------------------------------------------------------------
# the gate's own judgement (contract cases, poisoned outputs, the tolerance table)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op,name,module,fn", [
    ("moe_experts", "triton", 0, "moe_experts"),
    ("moe_experts", "triton_lastblock", 0, "moe_experts_lastblock"),
    ("moe_experts", "triton_prefetch", 0, "moe_experts_prefetch"),
    ("moe_experts", "triton_flat", 0, "moe_experts_flat"),
    pytest.param("moe_experts", "triton_dqmm", 0, "moe_experts_dqmm", marks=needs_grouped_mm),
    pytest.param("moe_experts", "triton_dqmm_fused", 0, "moe_experts_dqmm_fused", marks=needs_grouped_mm),
    ("linear", "triton_dqmm", 1, "linear_dqmm"),
    ("linear", "triton_flat", 1, "linear_flat"),
    ("linear", "triton", 1, "linear"),
    ("linear", "triton_lastblock", 1, "linear_lastblock"),
    ("linear", "triton_fp32", 1, "linear_fp32"),
    ("embedding", "triton", 2, "embedding"),
])
def test_gate_proves_contract(kernels, op, name, module, fn):
    prove_contract(op, name, getattr(kernels[module], fn))


# ---------------------------------------------------------------------------------------------
# interpreter (CPU): decode and prefill paths
# ---------------------------------------------------------------------------------------------

def test_contract_cases_fp32(kernels, poisoned):
    """moe_experts_fp32 on the contract's cases (decode-sized and one prefill): the float32 paths. The cases the gate
    generates for seed 0 (`cases_for`, made once a process: quantizing their weights took this test half its time),
    the inputs test_gate_proves_contract reads too and leaves unchanged."""
    from sparkops.gate.cases import cases_for

    moe = kernels[0]
    for case in cases_for("moe_experts", (0,)):
        a = case.calls[0]
        assert rel_err(moe.moe_experts_fp32(**a), moe_reference(**a)) < FP32_TOL, case.name


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.IQ1_S, Q.Q6_K], ids=lambda q: q.name)
def test_prefill_grouped_gemm(kernels, poisoned, qtype):
    """T = 12 > 8: slots grouped by expert on the device, both dot precisions, with a shared expert."""
    moe = kernels[0]
    a = moe_args(torch.Generator().manual_seed(int(qtype)), qtype, t=12, d=256, f=256, e=5, k=2)
    ref = moe_reference(**a)
    assert rel_err(moe.moe_experts_fp32(**a), ref) < FP32_TOL
    err = rel_err(moe.moe_experts(**a), ref)
    assert 1e-5 < err < BF16_TOL


def test_prefill_uneven_experts_no_shared(kernels, poisoned):
    """Every token on the same two experts (one expert gets all slots, others none), Q8_0, no shared expert."""
    moe = kernels[0]
    a = moe_args(torch.Generator().manual_seed(3), Q.Q8_0, t=10, d=64, f=96, e=4, k=2, shared=False)
    a["ids"] = torch.tensor([[2, 0]] * 10)
    assert rel_err(moe.moe_experts_fp32(**a), moe_reference(**a)) < FP32_TOL


@needs_grouped_mm
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.IQ1_S, Q.Q6_K, Q.BF16], ids=lambda q: q.name)
def test_dqmm_prefill_decodes_once_and_is_bf16_accurate(kernels, dequant_rows, poisoned, qtype):
    """"triton_dqmm" at T = 24, 8 experts, top-2 (6 slots per expert: the decode-once path), with a shared expert,
    uneven routing (one expert gets no slot): bf16-accurate, not float32; T = 3 gives "triton_prefetch"'s bits."""
    moe = kernels[0]
    a = moe_args(torch.Generator().manual_seed(int(qtype) + 3), qtype, t=24, d=256, f=256, e=8, k=2)
    a["ids"][a["ids"] == 7] = 6  # expert 7 gets no slot: an empty group
    a["ids"][:, 1] = torch.where(a["ids"][:, 0] == a["ids"][:, 1], (a["ids"][:, 1] + 1) % 7, a["ids"][:, 1])
    assert moe.dqmm_applies(24, 2, 8)
    err = rel_err(moe.moe_experts_dqmm(**a), moe_reference(**a))
    assert 1e-5 < err < BF16_TOL
    d = decode_case(a, 3)
    assert same_bits(moe.moe_experts_dqmm(**d), moe.moe_experts_prefetch(**d))


def test_dqmm_small_prefill_is_the_fused_grouped_gemm(kernels, poisoned):
    """Below DQMM_SLOTS_PER_EXPERT slots per expert "triton_dqmm" keeps the fused grouped GEMMs: "triton"'s bits."""
    moe = kernels[0]
    a = moe_args(torch.Generator().manual_seed(21), Q.Q4_K, t=10, d=256, f=256, e=8, k=2)
    assert not moe.dqmm_applies(10, 2, 8) and moe.dqmm_applies(16, 2, 8) and not moe.dqmm_applies(8, 4, 8)
    assert same_bits(moe.moe_experts_dqmm(**a), moe.moe_experts(**a))


@needs_grouped_mm
def test_dqmm_bad_expert_id_gives_nan_rows(kernels, dequant_rows):
    moe = kernels[0]
    a = moe_args(torch.Generator().manual_seed(22), Q.Q8_0, t=20, d=64, f=96, e=4, k=2, shared=False)
    a["ids"][1, 1] = 4
    y = moe.moe_experts_dqmm(**a)
    assert torch.isnan(y[1]).all()
    keep = [i for i in range(20) if i != 1]
    assert rel_err(y[keep], moe_reference(**{**a, "x": a["x"][keep], "weights": a["weights"][keep],
                                             "ids": a["ids"][keep]})) < BF16_TOL


@needs_grouped_mm
@pytest.mark.parametrize("qtype, dt", [(Q.Q4_K, torch.float32), (Q.Q6_K, torch.bfloat16)],  # IQ1_S: the GPU test
                         ids=lambda v: getattr(v, "name", str(v).replace("torch.", "")))
def test_dqmm_fused_prefill_is_dqmm_with_its_glue_fused(kernels, dequant_rows, poisoned, qtype, dt):
    """"triton_dqmm_fused" on "triton_dqmm"'s prefill case (T = 24, 8 experts, top-2, a shared expert, an expert with
    no slot): bf16-accurate against the float64 formula, and within float32 rounding of "triton_dqmm" (the same
    bf16 operands; only the order of the top_k sum and the SiLU's formula differ); decode is "triton_prefetch"'s."""
    moe = kernels[0]
    a = moe_args(torch.Generator().manual_seed(int(qtype) + 11), qtype, t=24, d=256, f=256, e=8, k=2)
    a["ids"][a["ids"] == 7] = 6
    a["ids"][:, 1] = torch.where(a["ids"][:, 0] == a["ids"][:, 1], (a["ids"][:, 1] + 1) % 7, a["ids"][:, 1])
    a["x"] = a["x"].to(dt)
    y = moe.moe_experts_dqmm_fused(**a)
    assert y.dtype == dt
    assert 1e-5 < rel_err(y, moe_reference(**a)) < BF16_TOL
    assert rel_err(y, moe.moe_experts_dqmm(**a)) < (4e-3 if dt == torch.bfloat16 else 1e-4)
    d = decode_case(a, 3)
    assert same_bits(moe.moe_experts_dqmm_fused(**d), moe.moe_experts_prefetch(**d))


@needs_grouped_mm
@pytest.mark.parametrize("shared", [True, False])
def test_dqmm_fused_bad_expert_id_gives_nan_rows(kernels, dequant_rows, shared):
    moe = kernels[0]
    a = moe_args(torch.Generator().manual_seed(24), Q.Q8_0, t=20, d=64, f=96, e=4, k=2, shared=shared)
    a["ids"][1, 1] = -1
    a["ids"][7, 0] = 4
    y = moe.moe_experts_dqmm_fused(**a)
    assert torch.isnan(y[1]).all() and torch.isnan(y[7]).all()
    keep = [i for i in range(20) if i not in (1, 7)]
    assert rel_err(y[keep], moe_reference(**{**a, "x": a["x"][keep], "weights": a["weights"][keep],
                                             "ids": a["ids"][keep]})) < BF16_TOL


def test_swiglu_pairs_reads_gate_up_column_pairs(kernels):
    """h = silu(g) * u over (g, u) column pairs in float32, rounded to bfloat16 once: torch's formula to within one
    bf16 rounding step (the SiLU's own float32 formula may differ in the last bit); odd sizes cover the masks."""
    glue = kernels[4]
    g = torch.Generator().manual_seed(5)
    gu = (torch.randn(37, 2 * 300, generator=g) * 3).to(torch.bfloat16)  # [N, 2F]
    h = glue.swiglu_pairs(gu)
    want = (torch.nn.functional.silu(gu[:, 0::2].float()) * gu[:, 1::2].float()).to(torch.bfloat16)
    assert h.shape == (37, 300) and h.dtype == torch.bfloat16
    assert torch.allclose(h.float(), want.float(), rtol=2 ** -7, atol=1e-6)
    assert (h == want).float().mean() > 0.99
    with pytest.raises(Exception, match="pairs"):
        glue.swiglu_pairs(gu[:, :599])
    assert torch.equal(glue.swiglu_pairs(gu.t().contiguous().t()), h)  # strided rows: made contiguous first


def test_combine_slots_sums_each_tokens_slots_in_order(kernels):
    """out[t] = sum_k w[t, k] ys[pos[t, k]] + add[t], k in order, float32: exactly that loop in torch; NaN rows where
    bad; bf16 out rounds once."""
    glue = kernels[4]
    g = torch.Generator().manual_seed(6)
    t, k, d = 19, 3, 300
    ys = torch.randn(t * k, d, generator=g).to(torch.bfloat16)        # [N, D] sorted rows
    pos = torch.randperm(t * k, generator=g).view(t, k)
    w = torch.rand(t, k, generator=g)
    add = torch.randn(t, d, generator=g)
    bad = torch.zeros(t, dtype=torch.bool)
    bad[4] = True
    slots = torch.zeros(t, d)
    for j in range(k):
        slots += ys[pos[:, j]].float() * w[:, j:j + 1]
    want = slots + add
    out = glue.combine_slots(ys, pos, w, bad, torch.empty(t, d), add=add)
    assert torch.isnan(out[4]).all()
    keep = [i for i in range(t) if i != 4]
    assert torch.equal(out[keep], want[keep])
    out16 = glue.combine_slots(ys, pos, w, bad, torch.empty(t, d, dtype=torch.bfloat16))
    assert torch.equal(out16[keep], slots[keep].to(torch.bfloat16))
    with pytest.raises(Exception, match="contiguous"):
        glue.combine_slots(ys, pos[:, :2], w, bad, torch.empty(t, d))
    with pytest.raises(Exception, match="'add'"):
        glue.combine_slots(ys, pos, w, bad, torch.empty(t, d), add=add.double())


def test_dqmm_needs_torch_grouped_mm(kernels, monkeypatch):
    moe = kernels[0]
    monkeypatch.delattr(torch, "_grouped_mm")
    a = moe_args(torch.Generator().manual_seed(23), Q.Q8_0, t=20, d=64, f=96, e=4, k=2, shared=False)
    with pytest.raises(Exception, match="torch._grouped_mm .torch >= 2.8"):
        moe.moe_experts_dqmm(**a)


def test_bad_expert_id_gives_nan_rows(kernels):
    moe = kernels[0]
    for t in (2, 10):  # decode and prefill
        a = moe_args(torch.Generator().manual_seed(t), Q.Q4_K, t=t, d=256, f=256, e=4, k=2)
        a["ids"][1, 1] = 4
        y = moe.moe_experts(**a)
        assert torch.isnan(y[1]).all()
        keep = [i for i in range(t) if i != 1]
        assert rel_err(y[keep], moe_reference(**{**a, "x": a["x"][keep], "weights": a["weights"][keep],
                                                 "ids": a["ids"][keep]})) < BF16_TOL


def test_decode_is_deterministic(kernels):
    moe = kernels[0]
    a = moe_args(torch.Generator().manual_seed(9), Q.IQ1_S, t=2, d=256, f=256, e=4, k=2)
    assert torch.equal(moe.moe_experts(**a), moe.moe_experts(**a))


@pytest.mark.parametrize("qtype", [pytest.param(Q.Q4_K, marks=pytest.mark.slow), Q.IQ1_S, Q.BF16],
                         ids=lambda q: q.name)
def test_lastblock_is_bitwise_the_three_launch_decode(kernels, poisoned, qtype):
    """moe_experts_lastblock gives moe_experts' bits in decode: T = 1, 3, 8 (with and without the shared expert,
    float32 and bfloat16 activations), D = 512 (two row tiles in the interpreter), programs run in a shuffled
    order, and a bad expert id (NaN rows, the same NaN bits); the counters are zero after every call."""
    moe, arrival = kernels[0], kernels[3]
    g = torch.Generator().manual_seed(int(qtype) + 40)
    full = moe_args(g, qtype, t=8, d=512, f=256, e=4, k=2)
    with shuffled_programs(int(qtype)) as shuffled:
        for t, shared, dt in ((1, True, torch.float32), (3, True, torch.bfloat16), (8, False, torch.float32)):
            a = decode_case(full, t, dt, shared, bad=(1, 0, 4) if t == 3 else None)  # token 1's row NaN at T=3
            want = moe.moe_experts(**a)
            got = moe.moe_experts_lastblock(**a)
            assert same_bits(got, want), (t, shared, dt)
            assert torch.isnan(want).any(dim=1).tolist() == [t == 3 and i == 1 for i in range(t)]
            assert_pool_clean(arrival)
    assert shuffled


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.IQ1_S], ids=lambda q: q.name)
def test_prefetch_is_bitwise_the_lastblock_decode(kernels, poisoned, monkeypatch, qtype):
    """moe_experts_prefetch (gate and up in one loop, FETCH_DEPTH chunks in flight) gives moe_experts_lastblock's
    bits at every depth 1, 2, 3: D = 768 (gate/up rows of three chunks: depth 3 fetches ahead and past the end),
    F = 512 (down rows of two), T = 1 and 3 (with a bad expert id: the same NaN row), with and without the shared
    expert; programs shuffled; the counters are zero after every call. (The other fetch paths' prefetch is proven
    in test_triton_linear.py's prefetch test, every type.) The up kernels take 256 rows a program here (the
    interpreter's `_tiles` give 128): F's 512 rows are still two row tiles, of both kernels alike, in half the
    programs (the up kernels were most of this test's time); the down kernels keep their three tiles of 256."""
    moe, arrival = kernels[0], kernels[3]
    up, down, bn = moe._tiles()
    monkeypatch.setattr(moe, "_tiles", lambda: (2 * up, down, bn))
    g = torch.Generator().manual_seed(int(qtype) + 70)
    full = moe_args(g, qtype, t=3, d=768, f=512, e=3, k=2)
    with shuffled_programs(int(qtype) + 5) as shuffled:
        for depth, t, shared, dt in ((1, 1, True, torch.float32), (2, 3, True, torch.bfloat16),
                                     (3, 3, False, torch.float32)):
            monkeypatch.setattr(moe, "FETCH_DEPTH", depth)
            a = decode_case(full, t, dt, shared, bad=(2, 1, 7) if t == 3 else None)  # token 2's row NaN at T=3
            want = moe.moe_experts_lastblock(**a)
            got = moe.moe_experts_prefetch(**a)
            assert same_bits(got, want), (depth, t, shared, dt)
            assert torch.isnan(want).any(dim=1).tolist() == [t == 3 and i == 2 for i in range(t)]
            assert_pool_clean(arrival)
            if t == 1:
                assert rel_err(got, moe_reference(**a)) < FP32_TOL
    assert shuffled


def test_flat_decode_is_float32_accurate(kernels, poisoned):
    """moe_experts_flat (the pair loop with Q4_K through the flat GEMV form) against float64 in decode: T = 1 and 2,
    with and without the shared expert (gate/up rows of two chunks), a bad expert id giving its token's NaN row;
    Q6_K down weights keep their own decoder."""
    moe, arrival = kernels[0], kernels[3]
    g = torch.Generator().manual_seed(80)
    full = moe_args(g, Q.Q4_K, t=3, d=512, f=256, e=3, k=2)
    for t, shared in ((1, True), (2, False)):
        a = decode_case(full, t, shared=shared)
        assert rel_err(moe.moe_experts_flat(**a), moe_reference(**a)) < FP32_TOL, (t, shared)
        assert_pool_clean(arrival)
    y = moe.moe_experts_flat(**decode_case(full, 3, bad=(1, 0, 9)))
    assert torch.isnan(y).any(dim=1).tolist() == [False, True, False]
    mixed = dict(full, x=full["x"][:1], weights=full["weights"][:1], ids=full["ids"][:1],
                 w_down=random_qweight(g, Q.Q6_K, 3, 512, 256))
    assert rel_err(moe.moe_experts_flat(**mixed), moe_reference(**mixed)) < FP32_TOL


def test_prefetch_depth_is_checked(kernels, monkeypatch):
    """A FETCH_DEPTH the kernels do not unroll is refused by name, before any launch."""
    from sparkops.errors import BadInput

    moe = kernels[0]
    a = moe_args(torch.Generator().manual_seed(5), Q.Q8_0, t=1, d=256, f=256, e=2, k=1)
    monkeypatch.setattr(moe, "FETCH_DEPTH", 4)
    with pytest.raises(BadInput, match="FETCH_DEPTH is 4"):
        moe.moe_experts_prefetch(**a)


@pytest.mark.slow
def test_q6k_wide_loads_are_bitwise_the_byte_loads(kernels, poisoned, monkeypatch):
    """linear.Q6K_WIDE_LOADS reaches the decode GEMVs (routed and shared gate/up and down, all Q6_K here): the same
    bits as the byte loads, T = 1, 3, 8, with and without the shared expert, "triton" and "triton_lastblock".
    D = 512 (gate/up rows of two chunks), F = 256 (down rows of one); interpreter only (see test_triton_linear)."""
    moe, lin = kernels[0], kernels[1]
    g = torch.Generator().manual_seed(61)
    full = moe_args(g, Q.Q6_K, t=8, d=512, f=256, e=4, k=2)
    for t, shared, fn in ((1, True, moe.moe_experts), (3, False, moe.moe_experts_lastblock),
                          (8, True, moe.moe_experts_lastblock)):  # 2 CPU cores: three runs, not six
        a = decode_case(full, t, shared=shared)
        monkeypatch.setattr(lin, "Q6K_WIDE_LOADS", False)
        want = fn(**a)
        monkeypatch.setattr(lin, "Q6K_WIDE_LOADS", True)
        got = fn(**a)
        assert torch.isfinite(want).all() and same_bits(got, want), (t, shared, fn.__name__)
        assert rel_err(got, moe_reference(**a)) < FP32_TOL


# ---------------------------------------------------------------------------------------------
# GPU (H200): the 48B MoE layer
# ---------------------------------------------------------------------------------------------

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on the H200)")


def stacked_random(rng, shape, qtype, device) -> QWeight:
    from sparkops.gguf.quants import random_blocks

    raw = torch.from_numpy(random_blocks(rng, shape, qtype, shape[-1] ** -0.5))
    if qtype == Q.BF16:
        raw = raw.view(torch.bfloat16)
    return QWeight(raw.to(device), qtype, shape)


def layer_48b(rng, qtype, device) -> dict:
    """One 48B MoE layer's weights, real random blocks of `qtype` on `device`: 256 routed experts of [1024, 2304]
    gate/up and [2304, 1024] down, and the shared expert."""
    e, f, d = 256, 1024, 2304
    shapes = dict(w_gate=(e, f, d), w_up=(e, f, d), w_down=(e, d, f), s_gate=(f, d), s_up=(f, d), s_down=(d, f))
    return {name: stacked_random(rng, shape, qtype, device) for name, shape in shapes.items()}


def time_decode_48b(a: dict, named: dict, device, n: int = 16) -> tuple[dict, int]:
    """Seconds per T=1 decode call of each of `named` ({name: fn}) on the 48B layer `a`, bfloat16 x, n routings to 8
    of 256 experts in rotation (the L2 does not hold them) in one CUDA graph each; and the bytes a call reads."""
    from tests.backends.test_triton_linear import time_in_graph

    e, d, k = 256, 2304, 8
    idss = [torch.stack([torch.randperm(e)[:k]]).to(device) for _ in range(n)]
    x, wts = torch.randn(1, d, device=device, dtype=torch.bfloat16), (torch.rand(1, k) + 0.1).to(device)
    nbytes = 3 * k * a["w_gate"].nbytes // e + sum(a[s].nbytes for s in ("s_gate", "s_up", "s_down"))
    return {name: time_in_graph(lambda i, fn=fn: fn(x, wts, idss[i], **a), n) for name, fn in named.items()}, nbytes


def per_layer(times: dict, nbytes: int) -> str:
    return ", ".join(f"{name} {sec * 1e6:.2f} ({100 * nbytes / sec / ANCHOR_BW:.0f}%)" for name, sec in times.items())


def assert_moe_bits_replayed(old, new, a: dict, device) -> None:
    """`new` gives `old`'s bits on the 48B layer `a` at T = 1, 3, 8 (bfloat16 x, top-8 of 256), eagerly and replayed
    from CUDA graphs with new activations, expert ids and routing weights written before each replay."""
    e, d, k = 256, 2304, 8
    for t in (1, 3, 8):
        calls = [dict(x=torch.randn(t, d, device=device, dtype=torch.bfloat16),
                      weights=(torch.rand(t, k) + 0.1).to(device),
                      ids=torch.stack([torch.randperm(e)[:k] for _ in range(t)]).to(device)) for _ in range(2)]

        def change(r, calls=calls, t=t):
            for c in calls:
                c["x"].copy_(torch.randn(t, d, device=device))
                c["weights"].copy_(torch.rand(t, k) + 0.1)
                c["ids"].copy_(torch.stack([torch.randperm(e)[:k] for _ in range(t)]))

        assert_same_bits_replayed(lambda i, calls=calls: old(**calls[i], **a),
                                  lambda i, calls=calls: new(**calls[i], **a), change)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.IQ1_S], ids=lambda q: q.name)
def test_gpu_moe_48b(qtype):
    """256 experts of [1024, 2304], top-8, a shared expert: decode (T=1, timed) and prefill (T=256)."""
    from sparkops_triton.moe_experts import moe_experts, moe_experts_fp32

    from tests.backends.test_triton_linear import time_in_graph

    dev = torch.device("cuda")
    rng = np.random.default_rng(int(qtype))
    e, d, k = 256, 2304, 8
    a = layer_48b(rng, qtype, dev)
    for t, fn, tol in [(1, moe_experts_fp32, FP32_TOL), (256, moe_experts, BF16_TOL)]:
        call = dict(a, x=torch.randn(t, d, device=dev), weights=(torch.rand(t, k) + 0.1).to(dev),
                    ids=torch.stack([torch.randperm(e)[:k] for _ in range(t)]).to(dev))
        some = list(range(min(t, 4)))
        ref = moe_reference(**dict(call, x=call["x"][some], weights=call["weights"][some], ids=call["ids"][some]))
        assert rel_err(fn(**call)[some], ref) < tol
    n = 16  # a different 8 of 256 experts per call: the L2 does not hold them
    idss = [torch.stack([torch.randperm(e)[:k]]).to(dev) for _ in range(n)]
    x, wts = torch.randn(1, d, device=dev), (torch.rand(1, k) + 0.1).to(dev)
    sec = time_in_graph(lambda i: moe_experts(x, wts, idss[i], **a), n)
    nbytes = 3 * k * a["w_gate"].nbytes // e + sum(a[s].nbytes for s in ("s_gate", "s_up", "s_down"))
    print(f"\nmoe_experts triton decode {qtype.name} 48B T=1: {sec * 1e6:.1f} us for {nbytes / 1e6:.1f} MB, "
          f"{nbytes / sec / 1e9:.0f} GB/s, {100 * nbytes / sec / ANCHOR_BW:.1f}% of 4.04 TB/s")


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.IQ1_S], ids=lambda q: q.name)
def test_gpu_lastblock_is_bitwise_the_three_launch_decode(qtype):
    """The 48B MoE layer (256 experts of [1024, 2304], top-8, a shared expert), T = 1, 3, 8 in bfloat16:
    moe_experts_lastblock gives moe_experts' bits eagerly, and replayed from CUDA graphs with new activations,
    expert ids and routing weights each replay (the arrival counters reset themselves)."""
    from sparkops_triton.moe_experts import moe_experts, moe_experts_lastblock

    dev = torch.device("cuda")
    rng = np.random.default_rng(int(qtype) + 1)
    a = layer_48b(rng, qtype, dev)
    assert_moe_bits_replayed(moe_experts, moe_experts_lastblock, a, dev)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.IQ1_S], ids=lambda q: q.name)
def test_gpu_prefetch_is_bitwise_the_lastblock_decode(qtype):
    """The 48B MoE layer, T = 1, 3, 8 in bfloat16: moe_experts_prefetch gives moe_experts_lastblock's bits at depths
    1, 2 and 3, eagerly and replayed from CUDA graphs with new activations, expert ids and routing weights each
    replay. The compiled pair loop must keep each accumulator's operations and layout: wrong bits show here."""
    import sparkops_triton.moe_experts as m

    dev = torch.device("cuda")
    rng = np.random.default_rng(int(qtype) + 2)
    a = layer_48b(rng, qtype, dev)
    saved = m.FETCH_DEPTH
    try:
        for depth in (1, 2, 3):
            m.FETCH_DEPTH = depth
            assert_moe_bits_replayed(m.moe_experts_lastblock, m.moe_experts_prefetch, a, dev)
    finally:
        m.FETCH_DEPTH = saved
    print(f"\nmoe_experts triton_prefetch {qtype.name} 48B, depths 1-3, T=1,3,8: same bits as triton_lastblock")


@gpu
@pytest.mark.gpu
def test_gpu_prefetch_decode_timing():
    """Does the deeper stream pay? One 48B MoE layer's decode (Q4_K, T=1, 16 routings in rotation so the L2 does
    not hold the experts) in one CUDA graph: triton, triton_lastblock, and triton_prefetch at depths 1, 2, 3
    (depth 1 isolates the gate/up pair loop), microseconds per layer (median of the replays)."""
    import sparkops_triton.moe_experts as m

    dev = torch.device("cuda")
    a = layer_48b(np.random.default_rng(12), Q.Q4_K, dev)
    def at_depth(depth):
        def fn(*args, **kwargs):  # the depth is read when the kernels are launched (captured)
            m.FETCH_DEPTH = depth
            return m.moe_experts_prefetch(*args, **kwargs)
        return fn

    saved = m.FETCH_DEPTH
    try:
        times, nbytes = time_decode_48b(a, {"triton": m.moe_experts, "triton_lastblock": m.moe_experts_lastblock,
                                            **{f"triton_prefetch@{d}": at_depth(d) for d in (1, 2, 3)}}, dev)
    finally:
        m.FETCH_DEPTH = saved
    print(f"\nmoe_experts decode Q4_K 48B T=1 ({nbytes / 1e6:.1f} MB a layer), us per layer: "
          f"{per_layer(times, nbytes)}")


@gpu
@pytest.mark.gpu
def test_gpu_flat_decode_48b():
    """The 48B MoE layer (Q4_K, top-8, a shared expert): moe_experts_flat against float64 (T = 1 and 3), then timed
    against triton_prefetch (T=1, 16 routings in rotation, one CUDA graph)."""
    import sparkops_triton.moe_experts as m

    dev = torch.device("cuda")
    e, d, k = 256, 2304, 8
    a = layer_48b(np.random.default_rng(21), Q.Q4_K, dev)
    for t in (1, 3):
        call = dict(a, x=torch.randn(t, d, device=dev), weights=(torch.rand(t, k) + 0.1).to(dev),
                    ids=torch.stack([torch.randperm(e)[:k] for _ in range(t)]).to(dev))
        assert rel_err(m.moe_experts_flat(**call), moe_reference(**call)) < 1e-5, t
    times, nbytes = time_decode_48b(a, {"triton_prefetch": m.moe_experts_prefetch, "triton_flat": m.moe_experts_flat},
                                    dev)
    print(f"\nmoe_experts decode Q4_K 48B T=1 ({nbytes / 1e6:.1f} MB a layer), us per layer: "
          f"{per_layer(times, nbytes)}")


def used_experts(call: dict, tokens: list) -> dict:
    """The arguments of `tokens` alone with only the experts they route to (renumbered), on the CPU: the float64
    reference then dequantizes a few experts, not the whole 256-expert stacks (~5 GB each in float64)."""
    ids = call["ids"][tokens].cpu()
    used = torch.unique(ids)                                            # [U] sorted
    sub = {name: QWeight(call[name].raw[used.to(call[name].raw.device)].cpu(), call[name].qtype,
                         (len(used), *call[name].shape[1:])) for name in ("w_gate", "w_up", "w_down")}
    shared = {name: call[name].to("cpu") for name in ("s_gate", "s_up", "s_down")}
    return dict(x=call["x"][tokens].float().cpu(), weights=call["weights"][tokens].cpu(),
                ids=torch.searchsorted(used, ids), **sub, **shared)


def prefill_48b(qtype, seed: int, ts: tuple[int, ...]):
    """One 48B MoE layer (`layer_48b`: 256 experts of [1024, 2304], a shared expert) and, per T in ts, a prefill call
    (bf16 activations, top-8 of the 256 at random, routing weights in [0.1, 1.1)) with the 4 rows checked against
    float64: yields (T, call, rows)."""
    dev = torch.device("cuda")
    e, d, k = 256, 2304, 8
    a = layer_48b(np.random.default_rng(seed), qtype, dev)
    for t in ts:
        call = dict(a, x=torch.randn(t, d, device=dev, dtype=torch.bfloat16), weights=(torch.rand(t, k) + 0.1).to(dev),
                    ids=torch.stack([torch.randperm(e)[:k] for _ in range(t)]).to(dev))
        yield t, call, [0, 1, t // 2, t - 1]


def print_side_by_side(qtype, t: int, call: dict, fns: tuple) -> None:
    """Each implementation timed on `call` in one CUDA graph: ms, TFLOP/s of the routed and shared products, and each
    one's time over the first's."""
    from tests.backends.test_triton_linear import time_in_graph

    times = [time_in_graph(lambda i, fn=fn: fn(**call), 1, reps=5) for fn in fns]
    flop = 2 * 3 * t * (call["ids"].shape[1] + 1) * call["x"].shape[1] * call["w_gate"].shape[1]
    cols = ", ".join(f"{fn.__name__} {s * 1e3:.2f} ms ({flop / s / 1e12:.1f} TFLOP/s, x{s / times[0]:.3f})"
                     for fn, s in zip(fns, times))
    print(f"\nmoe_experts prefill {qtype.name} 48B layer T={t}: {cols}")


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.IQ1_S], ids=lambda q: q.name)
def test_gpu_dqmm_prefill_48b(qtype):
    """"triton_dqmm" against the fused grouped GEMMs ("triton_lastblock"'s prefill) on one 48B MoE layer (256 experts of
    [1024, 2304], top-8, a shared expert): both bf16-accurate on 4 tokens against float64; timed side by side at
    T = 512, 4096 (one CUDA graph each; TFLOP/s of the routed and shared products)."""
    from sparkops_triton.moe_experts import moe_experts_dqmm, moe_experts_lastblock

    for t, call, some in prefill_48b(qtype, int(qtype) + 40, (512, 4096)):
        ref = moe_reference(**used_experts(call, some))
        for fn in (moe_experts_dqmm, moe_experts_lastblock):
            assert rel_err(fn(**call)[some], ref) < BF16_TOL, (fn.__name__, t)
        print_side_by_side(qtype, t, call, (moe_experts_lastblock, moe_experts_dqmm))


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.IQ1_S], ids=lambda q: q.name)
def test_gpu_dqmm_fused_prefill_48b(qtype):
    """"triton_dqmm_fused" against "triton_dqmm" on one 48B MoE layer (256 experts of [1024, 2304], top-8, a shared
    expert) at T = 4096 and 16384 (the prefill chunks the suite times): bf16-accurate on 4 tokens against float64,
    within float32 rounding of "triton_dqmm" everywhere, a bad id's row NaN; timed side by side (one CUDA graph
    each)."""
    from sparkops_triton.moe_experts import moe_experts_dqmm, moe_experts_dqmm_fused

    for t, call, some in prefill_48b(qtype, int(qtype) + 50, (4096, 16384)):
        fused, plain = moe_experts_dqmm_fused(**call), moe_experts_dqmm(**call)
        assert rel_err(fused[some], moe_reference(**used_experts(call, some))) < BF16_TOL, t
        assert rel_err(fused, plain) < 4e-3, t  # bf16 outputs: one rounding apart at most
        bad = dict(call, ids=call["ids"].clone())
        bad["ids"][5, 3] = call["w_gate"].shape[0]
        y = moe_experts_dqmm_fused(**bad)
        assert torch.isnan(y[5]).all() and torch.isfinite(y[:5]).all() and torch.isfinite(y[6:]).all()
        print_side_by_side(qtype, t, call, (moe_experts_dqmm, moe_experts_dqmm_fused))
