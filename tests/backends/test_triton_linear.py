"""The Triton quantized matmul (linear) and embedding kernels against float64 references.

CPU: the kernels run in Triton's interpreter (fresh copies of the modules imported with
TRITON_INTERPRET=1, see `sparkops_triton._runtime.interpreted`) on tiny shapes: every GGUF type, T on
both sides of the GEMV/GEMM switch, OUT not a multiple of the row tile, the split-K path, stacked
expert weights. Outputs are poisoned (torch.empty fills NaN) so an unwritten element fails.
"triton_lastblock" (the split-K partials added by the GEMV's last program, `_arrival`) must give
"triton"'s bits, with the interpreter running the programs in a shuffled order, and leave its arrival
counters at zero. "triton_pdl" (that GEMV launched with programmatic dependent launch) must give
"triton_lastblock"'s bits; the interpreter has no griddepcontrol, so here only its arithmetic is proven.
"triton_prefetch" (FETCH_DEPTH chunks of weight loads in flight) must give "triton_lastblock"'s bits at depths 1-3.

GPU (marked gpu, run on an H200): the 48B shapes, a row subset checked against float64, and the time
of each kernel in a replayed CUDA graph (several weight buffers in rotation, so the 50 MB L2 does not
flatter) printed as GB/s and % of the measured 4.04 TB/s; "triton_lastblock" against "triton" bit for
bit, eagerly and replayed from CUDA graphs; "triton_pdl" against "triton_lastblock" the same way, with chains of
dependent PDL GEMVs back to back in one graph, and a 20-GEMV chain timed with and without PDL; the step's 40 F16
gate GEMVs a token (fuse_low_rank's shapes) bit for bit and timed each way (the F16 PDL rung's record);
"triton_prefetch" (deeper weight streams) against "triton_lastblock" bit for bit at depths 1-3, and timed at three
shapes:
    pytest -m gpu -s tests/backends/test_triton_linear.py
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops.ops import get_contract
from sparkops.qweight import QWeight

triton = pytest.importorskip("triton")

from tests.backends.triton_support import (assert_pool_clean, assert_same_bits_replayed, poisoned,  # noqa: E402,F401
                                           record_perop, same_bits, shuffled_programs)

TYPES = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.IQ1_S]
#: smallest row length per type that spans two chunks of 256 (so the split-K and prefetch paths run)
TWO_CHUNKS = {Q.F32: 320, Q.F16: 288, Q.BF16: 320, Q.Q8_0: 352, Q.Q4_K: 512, Q.Q6_K: 512, Q.IQ1_S: 512}
FP32_TOL, BF16_TOL = 1e-5, 1e-2
ANCHOR_BW = 4.04e12  # bytes/s, the measured H200 read bandwidth (spec/anchors.md)


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    got, ref = got.detach().cpu().double(), ref.detach().cpu().double()
    assert torch.isfinite(got).all(), "output holds NaN/Inf (an element was not written?)"
    return ((got - ref).norm() / ref.norm()).item()


def reference(x: torch.Tensor, w: QWeight) -> torch.Tensor:
    return x.double().cpu() @ w.dequantize().double().T


def make_weight(g: torch.Generator, rows: int, cols: int, qtype) -> QWeight:
    return QWeight.from_float(torch.randn(rows, cols, generator=g, dtype=torch.float64).float() * 0.05, qtype)


def ragged_rows(lin, qtype) -> int:
    """OUT of the dqmm, PDL and prefetch GEMV tests (70 rows before): the type's row tile at T = 1 (GEMV_CONFIG, a
    power of two; halved per doubling of T) plus 3. Past one tile, so at least two row tiles at every T (T = 1: 16 + 3
    rows in 16 and 3), and odd, so no tile of any T divides it: the last tile's row mask runs at T = 1, 3 and 8 alike,
    and a GEMV splits (or not) where it did at 70 rows. 70 took 18 and 35 row tiles at T = 3 and 8 for the 16-row
    types: the same paths, more programs."""
    return lin.GEMV_CONFIG[int(qtype)][0] + 3


@pytest.fixture(scope="module")
def kernels():
    """(linear, embedding, _arrival) modules compiled for the interpreter; the normal modules come back after."""
    from sparkops_triton._runtime import interpreted

    with interpreted("linear", "embedding", "_arrival") as mods:
        yield mods




# ---------------------------------------------------------------------------------------------
# interpreter (CPU)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("impl,tol_gemm", [("linear", BF16_TOL), ("linear_fp32", FP32_TOL),
                                           ("linear_lastblock", BF16_TOL), ("linear_pdl", BF16_TOL),
                                           ("linear_prefetch", BF16_TOL), ("linear_flat", BF16_TOL),
                                           ("linear_dqmm", BF16_TOL)])
def test_contract_cases(kernels, poisoned, impl, tol_gemm):
    lin = getattr(kernels[0], impl)
    cases = get_contract("linear").cases(20261129)
    assert cases
    for case in cases:
        args = case.calls[0]
        y = lin(**args)
        assert y.dtype == args["x"].dtype and y.shape == (args["x"].shape[0], args["weight"].shape[0])
        tol = FP32_TOL if args["x"].shape[0] <= kernels[0].GEMV_MAX_T else tol_gemm
        assert rel_err(y, reference(args["x"], args["weight"])) < tol, case.name


@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_gemv_awkward_shapes(kernels, poisoned, qtype):
    """T = 1 and 3, OUT = 5 (split-K over two chunks) and 70 (not a multiple of any row tile)."""
    lin = kernels[0]
    g = torch.Generator().manual_seed(int(qtype) + 1)
    k = TWO_CHUNKS[qtype]
    for t, out in [(1, 5), (3, 70)]:
        w = make_weight(g, out, k, qtype)
        x = torch.randn(t, k, generator=g)
        assert rel_err(lin.linear_fp32(x, w), reference(x, w)) < FP32_TOL, (t, out)


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.IQ1_S], ids=lambda q: q.name)
def test_gemm_awkward_shapes(kernels, poisoned, qtype):
    """T = 17 (past the GEMV), OUT = 70: both dot precisions."""
    lin = kernels[0]
    g = torch.Generator().manual_seed(int(qtype) + 7)
    w = make_weight(g, 70, TWO_CHUNKS[qtype], qtype)
    x = torch.randn(17, w.shape[1], generator=g)
    ref = reference(x, w)
    assert rel_err(lin.linear_fp32(x, w), ref) < FP32_TOL
    err = rel_err(lin.linear(x, w), ref)
    assert 1e-5 < err < BF16_TOL, "the bf16 path should be bf16-accurate (and not silently float32)"


@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_dqmm_prefill_is_bf16_accurate_and_decode_is_lastblock(kernels, poisoned, qtype):
    """"triton_dqmm": T = 17 and 40 through the decoded bf16 weight and one matmul (bf16-accurate, not float32,
    every element written); T = 1 and 8 bit for bit "triton_lastblock"'s GEMV. OUT = `ragged_rows` (it was 70): a
    ragged last row tile in the decode to bf16 (16 rows a program) and in the GEMVs, which split over the two chunks at
    T = 1 (and Q4_K's at T = 8) as at 70 rows, in 2 to 10 row tiles instead of up to 35."""
    lin = kernels[0]
    g = torch.Generator().manual_seed(int(qtype) + 11)
    out = ragged_rows(lin, qtype)
    w = make_weight(g, out, TWO_CHUNKS[qtype], qtype)
    for t in (17, 40):
        x = torch.randn(t, w.shape[1], generator=g)
        y = lin.linear_dqmm(x, w)
        assert y.dtype == x.dtype and y.shape == (t, out)
        assert 1e-5 < rel_err(y, reference(x, w)) < BF16_TOL, t
    for t in (1, 8):
        x = torch.randn(t, w.shape[1], generator=g)
        assert same_bits(lin.linear_dqmm(x, w), lin.linear_lastblock(x, w)), t


def test_dqmm_activation_dtypes(kernels, poisoned):
    """bf16 / fp16 activations through the dqmm prefill give that dtype back, bf16-accurate."""
    lin = kernels[0]
    g = torch.Generator().manual_seed(12)
    w = make_weight(g, 33, 512, Q.Q4_K)
    x = torch.randn(20, 512, generator=g)
    for dt in (torch.bfloat16, torch.float16):
        y = lin.linear_dqmm(x.to(dt), w)
        assert y.dtype == dt
        assert rel_err(y, reference(x.to(dt).float(), w)) < BF16_TOL


def test_activation_dtypes_and_stacked_experts(kernels, poisoned):
    """bf16/fp16 activations give that dtype back; one expert of a stacked [E, OUT, IN] weight."""
    lin = kernels[0]
    g = torch.Generator().manual_seed(3)
    stacked = QWeight.from_float(torch.randn(3, 40, 256, generator=g) * 0.05, Q.Q4_K)
    x = torch.randn(2, 256, generator=g)
    for e in range(3):
        assert rel_err(lin.linear_fp32(x, stacked[e]), reference(x, stacked[e])) < FP32_TOL
    for dt in (torch.bfloat16, torch.float16):
        y = lin.linear_fp32(x.to(dt), stacked[1])
        assert y.dtype == dt
        assert rel_err(y, reference(x.to(dt).float(), stacked[1])) < 1e-2


def test_split_k_is_deterministic(kernels):
    lin = kernels[0]
    g = torch.Generator().manual_seed(5)
    w = make_weight(g, 6, 1024, Q.Q4_K)  # 4 chunks over a tiny OUT: the split-K path
    x = torch.randn(1, 1024, generator=g)
    assert torch.equal(lin.linear(x, w), lin.linear(x, w))


def test_every_gemv_tuning_variant_is_correct(kernels, poisoned):
    """`python -m sparkops_triton._tune linear_gemv lm_head_q6k linear_q6k_small` times launch shapes of the Q4_K / Q6_K
    GEMVs and Q6_K's two fetches; each must compute the same product (rows per program and the split of K only change
    the order of the sums; the fetch changes nothing: variants of one tile give the same bits), here in the
    interpreter on a shape with a ragged row tile and several chunks."""
    from sparkops_triton import _tune

    lin = kernels[0]
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 1024, generator=g)
    studies = (("linear_gemv", Q.Q4_K), ("lm_head_q6k", Q.Q6_K), ("linear_q6k_small", Q.Q6_K))
    saved = {k: getattr(lin, k) for study, _ in studies for v in _tune.STUDIES[study][1] for k in v}
    try:
        for study, qtype in studies:
            w = make_weight(g, 70, 1024, qtype)  # 70 rows: no row tile divides it; 4 chunks: the split-K path
            ref = reference(x, w)
            by_tile: dict = {}
            for variant in _tune.STUDIES[study][1]:
                for k, v in variant.items():
                    setattr(lin, k, v)
                y = lin.linear(x, w)
                assert rel_err(y, ref) < FP32_TOL, (study, variant)
                tile = str((variant["GEMV_CONFIG"][int(qtype)], variant["GEMV_PROGRAMS_PER_SM"]))
                assert torch.equal(by_tile.setdefault(tile, y), y), (study, variant)
    finally:
        for k, v in saved.items():
            setattr(lin, k, v)


@pytest.mark.slow
def test_q6k_wide_loads_are_bitwise_the_byte_loads(kernels, poisoned, monkeypatch):
    """Q6K_WIDE_LOADS (Q6_K codes read as 16-bit words, `_dequant.Q6_K_WIDE`) gives the byte loads' GEMV bits: T = 1
    and 8; K = 256, 512, 768 (one, two, three chunks: chunks start 4-byte aligned and 2 mod 4 in turn, 210 bytes
    apart, so two chunks read both alignments and three run a loop of three, prologue and tail; it was nine, 2304, the
    same paths for three times the programs); OUT a multiple of the row tile or not; split-K (and its last-block form)
    and not. Interpreter only: on a GPU the accumulator's layout, hence the final sum's order, may differ. (A smaller
    grid than it was written with: the suite runs on 2 CPU cores.)"""
    lin = kernels[0]
    assert lin.gemv_qtype(Q.Q6_K) == int(Q.Q6_K) and lin.gemv_qtype(Q.Q4_K) == int(Q.Q4_K)
    g = torch.Generator().manual_seed(14)
    for k, out in ((256, 5), (512, 37), (768, 16)):  # row tiles 16 and 2 at T = 1 and 8
        w = make_weight(g, out, k, Q.Q6_K)
        for per_sm in (0, 64):  # no split; split K as far as its chunks go
            monkeypatch.setattr(lin, "GEMV_PROGRAMS_PER_SM", per_sm)
            for t in (1, 8):
                x = torch.randn(t, k, generator=g)
                monkeypatch.setattr(lin, "Q6K_WIDE_LOADS", False)
                want = lin.linear(x, w)
                monkeypatch.setattr(lin, "Q6K_WIDE_LOADS", True)
                assert lin.gemv_qtype(Q.Q6_K) == int(lin.Q6_K_WIDE.value)
                got = lin.linear(x, w)
                assert torch.isfinite(want).all() and same_bits(got, want), (k, out, per_sm, t)
                assert rel_err(got, reference(x, w)) < FP32_TOL
                if per_sm and t == 8 and k > 256:
                    assert same_bits(lin.linear_lastblock(x, w), want), (k, out, t)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_lastblock_is_bitwise_the_two_launch_gemv(kernels, poisoned, monkeypatch, qtype):
    """linear_lastblock gives linear's bits on split-K GEMVs: T = 1, 3, 8 with float32, bfloat16 and float16
    activations, 9 rows (no row tile divides them), K of four chunks split four ways, the programs run in a
    shuffled order (the last to arrive is not the highest split); the counters are zero after every call."""
    lin, _, arrival = kernels
    monkeypatch.setattr(lin, "GEMV_PROGRAMS_PER_SM", 64)  # 256 programs wanted on the interpreter's 4 "SMs"
    g = torch.Generator().manual_seed(int(qtype) + 21)
    w = make_weight(g, 9, 1024, qtype)
    with shuffled_programs(int(qtype)) as shuffled:
        for t, dt in ((1, torch.float32), (3, torch.bfloat16), (8, torch.float16)):
            _, _, splits, _ = lin.gemv_plan(qtype, t, 9, 4, torch.device("cpu"))
            assert splits == 4, "the shape must take the split-K path"
            x = torch.randn(t, 1024, generator=g).to(dt)
            want = lin.linear(x, w)
            got = lin.linear_lastblock(x, w)
            assert torch.isfinite(want).all() and same_bits(got, want), (t, dt)
            assert_pool_clean(arrival)
    assert shuffled, "the interpreter's programs were not shuffled"


def test_lastblock_counters_reset_between_calls(kernels, poisoned, monkeypatch):
    """Two calls in a row on one counter pool, new inputs each time (uneven splits: 3 chunks over 2 programs),
    then a GEMV that does not split: each is linear's bits, and the counters are zero after each."""
    lin, _, arrival = kernels
    monkeypatch.setattr(lin, "GEMV_PROGRAMS_PER_SM", 1)  # 4 programs wanted: 3 row tiles x 2 splits
    g = torch.Generator().manual_seed(8)
    w = make_weight(g, 70, 768, Q.Q4_K)
    assert lin.gemv_plan(Q.Q4_K, 2, 70, 3, torch.device("cpu"))[2:] == (2, 2)
    for _ in range(2):
        x = torch.randn(2, 768, generator=g)
        assert same_bits(lin.linear_lastblock(x, w), lin.linear(x, w))
        assert_pool_clean(arrival)
    monkeypatch.setattr(lin, "GEMV_PROGRAMS_PER_SM", 0)  # no split: one launch in both implementations
    x = torch.randn(2, 768, generator=g)
    assert same_bits(lin.linear_lastblock(x, w), lin.linear(x, w))
    assert_pool_clean(arrival)


#: one type per fetch path of the GEMV (Q4_K, Q6_K, IQ1_S, Q8_0, floats): PDL reorders only the first fetch
PDL_TYPES = [Q.BF16, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.IQ1_S]


@pytest.mark.parametrize("qtype", PDL_TYPES, ids=lambda q: q.name)
def test_pdl_is_bitwise_the_lastblock_gemv(kernels, poisoned, monkeypatch, qtype):
    """linear_pdl ("triton_pdl": the last-block GEMV with its PDL constexpr set) gives linear_lastblock's bits,
    split-K (9 rows, four chunks split four ways, programs shuffled) and not split (`ragged_rows`: a ragged row tile,
    four chunks a program), T = 1, 3, 8 with float32, bfloat16 and float16 activations; the counters are zero after
    every call. The interpreter has no griddepcontrol (PDL's instructions are gated on PTX, and no launch_pdl is
    passed), so this proves the PDL kernel's arithmetic and bookkeeping (a reordered prologue), not the GPU's
    overlap."""
    lin, _, arrival = kernels
    g = torch.Generator().manual_seed(int(qtype) + 31)
    with shuffled_programs(int(qtype) + 1) as shuffled:
        for per_sm, out, want_splits in ((64, 9, 4), (0, ragged_rows(lin, qtype), 1)):
            monkeypatch.setattr(lin, "GEMV_PROGRAMS_PER_SM", per_sm)
            w = make_weight(g, out, 1024, qtype)
            for t, dt in ((1, torch.float32), (3, torch.bfloat16), (8, torch.float16)):
                assert lin.gemv_plan(qtype, t, out, 4, torch.device("cpu"))[2] == want_splits
                x = torch.randn(t, 1024, generator=g).to(dt)
                want = lin.linear_lastblock(x, w)
                got = lin.linear_pdl(x, w)
                assert torch.isfinite(want).all() and same_bits(got, want) and torch.equal(got, want), (out, t, dt)
                assert_pool_clean(arrival)
                assert rel_err(got, reference(x.float(), w)) < (FP32_TOL if dt == torch.float32 else 1e-2)
    assert shuffled, "the interpreter's programs were not shuffled"


@pytest.mark.parametrize("qtype", PDL_TYPES, ids=lambda q: q.name)
def test_prefetch_is_bitwise_the_lastblock_gemv(kernels, poisoned, monkeypatch, qtype):
    """linear_prefetch (FETCH_DEPTH chunks of weight loads in flight) gives linear_lastblock's bits at depths 1, 2
    and 3: split-K (9 rows, four chunks split four ways: depths 2 and 3 fetch only past a program's one chunk)
    and not split (`ragged_rows`: a ragged row tile, four chunks a program: depth 3 fetches three real chunks ahead),
    T = 1, 3, 8; programs shuffled; counters zero after each."""
    lin, _, arrival = kernels
    g = torch.Generator().manual_seed(int(qtype) + 51)
    with shuffled_programs(int(qtype) + 2) as shuffled:
        for per_sm, out, want_splits in ((64, 9, 4), (0, ragged_rows(lin, qtype), 1)):
            monkeypatch.setattr(lin, "GEMV_PROGRAMS_PER_SM", per_sm)
            w = make_weight(g, out, 1024, qtype)
            for depth, t, dt in ((1, 1, torch.float32), (2, 3, torch.bfloat16), (3, 8, torch.float32),
                                 (3, 1, torch.float16)):
                monkeypatch.setattr(lin, "FETCH_DEPTH", depth)
                assert lin.gemv_plan(qtype, t, out, 4, torch.device("cpu"))[2] == want_splits
                x = torch.randn(t, 1024, generator=g).to(dt)
                want = lin.linear_lastblock(x, w)
                got = lin.linear_prefetch(x, w)
                assert torch.isfinite(want).all() and same_bits(got, want), (out, depth, t, dt)
                assert_pool_clean(arrival)
    assert shuffled, "the interpreter's programs were not shuffled"
    monkeypatch.setattr(lin, "FETCH_DEPTH", 4)
    with pytest.raises(BadInput, match="not 4"):
        lin.linear_prefetch(torch.randn(1, 1024), w)


def test_flat_q4k_gemv_is_float32_accurate(kernels, poisoned, monkeypatch):
    """linear_flat ("triton_flat": Q4_K through the flat GEMV form) against float64: split-K (9 rows, four chunks
    split four ways; T = 1 float32, T = 3 bfloat16) and not split (70 rows, ragged against the tile; T = 8 float16),
    programs shuffled, counters clean; other types take triton_lastblock's GEMV, bit for bit."""
    lin, _, arrival = kernels
    g = torch.Generator().manual_seed(111)
    with shuffled_programs(7) as shuffled:
        for per_sm, out, want_splits in ((64, 9, 4), (0, 70, 1)):
            monkeypatch.setattr(lin, "GEMV_PROGRAMS_PER_SM", per_sm)
            w = make_weight(g, out, 1024, Q.Q4_K)
            for t, dt in ((1, torch.float32), (3, torch.bfloat16)) if out == 9 else ((8, torch.float16),):
                assert lin.gemv_plan(Q.Q4_K, t, out, 4, torch.device("cpu"), flat=True)[2] == want_splits
                x = torch.randn(t, 1024, generator=g).to(dt)
                got = lin.linear_flat(x, w)
                assert rel_err(got, reference(x.float(), w)) < (FP32_TOL if dt == torch.float32 else 1e-2), (out, t)
                assert_pool_clean(arrival)
    assert shuffled
    w = make_weight(g, 9, 512, Q.Q6_K)
    x = torch.randn(2, 512, generator=g)
    assert same_bits(lin.linear_flat(x, w), lin.linear_lastblock(x, w))


def test_pdl_prefill_is_the_lastblock_gemm_and_needs_lastblock(kernels, poisoned):
    """Past the GEMV (T = 17) linear_pdl is linear_lastblock's GEMM, bit for bit; run_gemv refuses PDL without the
    last-block reduction (the two-launch GEMV's combine kernel would follow it without PDL)."""
    lin = kernels[0]
    g = torch.Generator().manual_seed(33)
    w = make_weight(g, 70, 512, Q.Q4_K)
    x = torch.randn(17, 512, generator=g)
    assert same_bits(lin.linear_pdl(x, w), lin.linear_lastblock(x, w))
    y = torch.empty(1, 70)
    with pytest.raises(BadInput, match="lastblock=True"):
        lin.run_gemv(x[:1], w.raw, w.qtype, w.raw, y, lastblock=False, pdl=True)


def test_arrive_elects_exactly_the_last_arrival(kernels, monkeypatch):
    """`_arrival.arrive` is True in one program per slot, the one that arrives last (ticket n - 1), whatever the
    order the programs run in; `depart` leaves the counters at zero. (The interpreter runs programs one at a time,
    so an election of the first arrival would still end with the right sums: this is where it shows.)"""
    import sys

    import triton.language as tl

    # the interpreter resolves a kernel's helpers among its module's globals (not closures): lend them for this test
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "tl", tl, raising=False)
    monkeypatch.setattr(module, "_arrive", kernels[2].arrive, raising=False)
    monkeypatch.setattr(module, "_depart", kernels[2].depart, raising=False)

    @triton.jit  # decorated under the fixture's TRITON_INTERPRET=1: an interpreted kernel
    def election(cnt_ptr, ticket_ptr, wins_ptr, N):
        slot = tl.program_id(1)
        ticket = tl.atomic_add(ticket_ptr + slot, 1)      # the order of arrival, counted apart
        if _arrive(cnt_ptr, slot, N):
            tl.atomic_add(wins_ptr + 2 * slot, 1)         # how many programs were elected
            tl.store(wins_ptr + 2 * slot + 1, ticket)     # and at which arrival
            _depart(cnt_ptr, slot)

    for seed in range(3):
        cnt, tickets = torch.zeros(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)
        wins = torch.zeros(4, 2, dtype=torch.int32)
        with shuffled_programs(seed):
            election[(7, 4)](cnt, tickets, wins, 7)
        assert wins.tolist() == [[1, 6]] * 4 and tickets.tolist() == [7] * 4 and not cnt.any()


def test_arrival_pool_refuses_what_it_cannot_do(kernels, monkeypatch):
    """More counters than the pool holds, and a pool created during CUDA-graph capture, are named errors."""
    arrival = kernels[2]
    with pytest.raises(BadInput, match="POOL_COUNTERS"):
        arrival.counters("linear", torch.device("cpu"), arrival.POOL_COUNTERS + 1)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert arrival.pool_on(torch.device("cuda", 0)) is None  # this module copy never ran on CUDA
    with pytest.raises(BadInput, match="before capturing"):
        arrival.counters("linear", torch.device("cuda", 0), 4)


def test_bad_input(kernels):
    lin = kernels[0]
    w = QWeight.from_float(torch.randn(8, 256), Q.Q4_K)
    with pytest.raises(BadInput, match="features"):
        lin.linear(torch.randn(2, 128), w)
    with pytest.raises(BadInput, match="2-D"):
        lin.linear(torch.randn(2, 256), QWeight.from_float(torch.randn(2, 8, 256), Q.Q4_K))
    with pytest.raises(BadInput, match="x"):
        lin.linear(torch.randn(2, 256, dtype=torch.float64), w)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_embedding(kernels, poisoned, qtype):
    emb = kernels[1]
    g = torch.Generator().manual_seed(int(qtype) + 11)
    d = 256 if qtype in (Q.Q4_K, Q.Q6_K, Q.IQ1_S) else 96
    table = QWeight.from_float(torch.randn(37, d, generator=g) * 0.5, qtype)
    ids = torch.randint(0, 37, (9,), generator=g)
    ids[0], ids[-1] = 0, 36
    y = emb.embedding(table, ids, torch.float32)
    assert torch.equal(y, table.dequantize()[ids])  # float32 decode is exact
    assert emb.embedding(table, ids, torch.bfloat16).dtype == torch.bfloat16


def test_embedding_bad_id_reads_nothing(kernels, poisoned):
    emb = kernels[1]
    table = QWeight.from_float(torch.randn(5, 64), Q.Q8_0)
    y = emb.embedding(table, torch.tensor([1, 5, -1, 4]), torch.float32)
    assert torch.isnan(y[1]).all() and torch.isnan(y[2]).all()
    assert torch.equal(y[[0, 3]], table.dequantize()[[1, 4]])


def test_registered():
    """The implementations are in the plugin's list with the claims the module docstrings state."""
    import sparkops_triton

    names = {(op, name): claim for op, name, _, claim, _ in sparkops_triton.IMPLEMENTATIONS}
    assert names[("linear", "triton")].variant == "bf16"
    assert names[("linear", "triton_fp32")].variant is None
    lastblock = {op: (claim, sources) for op, name, _, claim, sources in sparkops_triton.IMPLEMENTATIONS
                 if name == "triton_lastblock"}
    # each claims bit-identity to its two-launch twin: the gate compares bytes with "triton" op by op, and the
    # model gate reruns the model with "triton" in its place (the twin's own tolerance claim then applies)
    assert {op: (claim.kind, claim.to) for op, (claim, _) in lastblock.items()} == {
        op: ("bit_identical", "triton") for op in ("linear", "moe_experts", "moe_router")}
    for op, (_, sources) in lastblock.items():
        assert "_arrival.py" in sources, f"{op}=triton_lastblock: the gate must hash the arrival counters' file"
    # the PDL GEMV: the same arithmetic as the last-block one, launched differently (an experiment, off by default)
    pdl = [(fn, claim, sources) for op, name, fn, claim, sources in sparkops_triton.IMPLEMENTATIONS
           if name == "triton_pdl" and op == "linear"]
    assert [(fn, claim.kind, claim.to) for fn, claim, _ in pdl] == [
        ("sparkops_triton.linear:linear_pdl", "bit_identical", "triton_lastblock")]
    assert {"_dequant.py", "_arrival.py"} <= set(pdl[0][2])
    # the norms that let a PDL-launched projection start (session 16; kda_norm, the fused KDA norm, after 19): the
    # same kernels, so the same bits; and the short conv launched with PDL (written after session 24: its window and
    # taps before the wait), the same arithmetic in the same order
    norms = {op: (claim.kind, claim.to) for op, name, _, claim, _ in sparkops_triton.IMPLEMENTATIONS
             if name == "triton_pdl" and op != "linear"}
    assert norms == {op: ("bit_identical", "triton") for op in ("add_rmsnorm", "gated_rmsnorm", "kda_norm",
                                                                 "short_conv")}
    # the deeper weight streams: the same arithmetic as the last-block kernels, loads issued earlier
    prefetch = {op: (fn, claim, sources) for op, name, fn, claim, sources in sparkops_triton.IMPLEMENTATIONS
                if name == "triton_prefetch"}
    assert {op: (fn, claim.kind, claim.to) for op, (fn, claim, _) in prefetch.items()} == {
        "linear": ("sparkops_triton.linear:linear_prefetch", "bit_identical", "triton_lastblock"),
        "moe_experts": ("sparkops_triton.moe_experts:moe_experts_prefetch", "bit_identical", "triton_lastblock"),
        "moe_router": ("sparkops_triton.moe_router:moe_router_prefetch", "bit_identical", "triton_lastblock")}
    assert all("_arrival.py" in sources for _, _, sources in prefetch.values())
    assert all("_dequant.py" in prefetch[op][2] for op in ("linear", "moe_experts"))  # the router reads no GGUF blocks
    # the flat Q4_K GEMVs: other sums, so the tolerance claim of "triton" (its "bf16", for the prefill GEMM)
    flat = {op: (fn, claim) for op, name, fn, claim, _ in sparkops_triton.IMPLEMENTATIONS if name == "triton_flat"}
    assert {op: (fn, claim.kind, claim.variant) for op, (fn, claim) in flat.items()} == {
        "linear": ("sparkops_triton.linear:linear_flat", "tolerance", "bf16"),
        "moe_experts": ("sparkops_triton.moe_experts:moe_experts_flat", "tolerance", "bf16")}
    assert ("embedding", "triton") in names
    assert names[("moe_experts", "triton")].variant == "bf16"
    # decode once to bf16, multiply on cuBLAS / torch's grouped GEMM: other sums than "triton"'s GEMM, so its "bf16"
    dqmm = {op: (fn, claim, sources) for op, name, fn, claim, sources in sparkops_triton.IMPLEMENTATIONS
            if name == "triton_dqmm"}
    assert {op: (fn, claim.kind, claim.variant) for op, (fn, claim, _) in dqmm.items()} == {
        "linear": ("sparkops_triton.linear:linear_dqmm", "tolerance", "bf16"),
        "moe_experts": ("sparkops_triton.moe_experts:moe_experts_dqmm", "tolerance", "bf16")}
    assert all("dequantize.py" in sources for _, _, sources in dqmm.values())


# ---------------------------------------------------------------------------------------------
# GPU (H200): the 48B shapes, checked and timed
# ---------------------------------------------------------------------------------------------

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on the H200)")


def random_weight(rng: np.random.Generator, rows: int, cols: int, qtype, device) -> QWeight:
    """Real random blocks (codes and scales drawn, never zeros) straight onto the device."""
    from sparkops.gguf.quants import random_blocks

    raw = random_blocks(rng, (rows, cols), qtype, 0.02)
    t = torch.from_numpy(raw)
    if qtype == Q.BF16:
        t = t.view(torch.bfloat16)
    return QWeight(t.to(device), qtype, (rows, cols))


def time_in_graph(fn, calls: int, reps: int = 20) -> float:
    """Median seconds per call of `fn(i)` for i in range(calls), captured once in a CUDA graph."""
    fn(0)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        fn(1 % calls)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(i)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / calls)
    return sorted(times)[len(times) // 2]


SHAPES_48B = [(2304, 4096), (4096, 2304), (1024, 2304), (163840, 2304)]  # [OUT, IN]: o_proj, q_proj, expert, lm_head


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.IQ1_S, Q.Q6_K, Q.Q8_0, Q.BF16], ids=lambda q: q.name)
@pytest.mark.parametrize("shape", SHAPES_48B, ids=lambda s: f"{s[0]}x{s[1]}")
def test_gpu_gemv_48b(qtype, shape):
    from sparkops_triton.linear import linear_fp32

    out, k = shape
    dev = torch.device("cuda")
    rng = np.random.default_rng(out + int(qtype))
    first = random_weight(rng, out, k, qtype, dev)
    copies = max(2, math.ceil((256 << 20) / first.nbytes))  # > 5x L2 in rotation
    ws = [first] + [QWeight(first.raw[torch.randperm(out, device=dev)], qtype, (out, k)) for _ in range(copies - 1)]
    x = torch.randn(1, k, device=dev)
    rows = torch.arange(0, out, max(1, out // 256), device=dev)
    y = linear_fp32(x, first)
    ref = x.cpu().double() @ QWeight(first.raw[rows].cpu(), qtype, (len(rows), k)).dequantize().double().T
    assert rel_err(y[:, rows], ref) < FP32_TOL
    sec = time_in_graph(lambda i: linear_fp32(x, ws[i]), copies)
    gbs = first.nbytes / sec / 1e9
    print(f"\nlinear triton GEMV {qtype.name} {out}x{k} T=1: {sec * 1e6:.1f} us, {gbs:.0f} GB/s, "
          f"{100 * gbs * 1e9 / ANCHOR_BW:.1f}% of 4.04 TB/s ({first.nbytes / 1e6:.1f} MB)")


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("t", [2, 8, 512])
def test_gpu_linear_batches(t):
    """T = 2, 8 (GEMV) and 512 (tensor-core GEMM), Q4_K at the q_proj shape: checked, and timed."""
    from sparkops_triton.linear import linear, linear_fp32

    dev = torch.device("cuda")
    w = random_weight(np.random.default_rng(t), 4096, 2304, Q.Q4_K, dev)
    x = torch.randn(t, 2304, device=dev)
    ref = x.cpu().double() @ w.dequantize().double().T
    assert rel_err(linear_fp32(x, w), ref) < FP32_TOL
    assert rel_err(linear(x, w), ref) < (FP32_TOL if t <= 8 else BF16_TOL)
    sec = time_in_graph(lambda i: linear(x, w), 8)
    print(f"\nlinear triton Q4_K 4096x2304 T={t}: {sec * 1e6:.1f} us, {2 * t * 4096 * 2304 / sec / 1e12:.2f} TFLOP/s")


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.IQ1_S, Q.Q6_K, Q.Q8_0, Q.BF16], ids=lambda q: q.name)
@pytest.mark.parametrize("shape", SHAPES_48B[:3], ids=lambda s: f"{s[0]}x{s[1]}")
def test_gpu_lastblock_is_bitwise_the_two_launch_gemv(qtype, shape):
    """linear_lastblock gives linear's bits at the 48B shapes (most split K on 132 SMs; lm_head never does),
    T = 1, 3, 8: eagerly, and replayed from CUDA graphs with new activations each replay (the arrival counters
    reset themselves, on the GPU's real memory ordering)."""
    from sparkops_triton.linear import gemv_plan, linear, linear_lastblock

    out, k = shape
    dev = torch.device("cuda")
    w = random_weight(np.random.default_rng(out + int(qtype)), out, k, qtype, dev)
    splits = []
    for t, dt in ((1, torch.bfloat16), (3, torch.bfloat16), (8, torch.bfloat16), (1, torch.float32)):
        splits.append(gemv_plan(qtype, t, out, k // 256, dev)[2])
        xs = [torch.randn(t, k, device=dev).to(dt) for _ in range(2)]

        def change(r, xs=xs):
            for x in xs:
                x.copy_(torch.randn_like(x, dtype=torch.float32))

        assert_same_bits_replayed(lambda i, xs=xs: linear(xs[i], w), lambda i, xs=xs: linear_lastblock(xs[i], w),
                                  change)
    print(f"\nlinear triton_lastblock {qtype.name} {out}x{k}: splits at T=1,3,8 {splits[:3]}: same bits")


def gemv_chain(fn, x: torch.Tensor, ws: list, neg_every: int = 0) -> tuple:
    """GEMVs back to back, each reading the previous one's output: x -> ws[0] -> ws[1] -> ...; the input of step
    i + 1 is the first IN(ws[i + 1]) features of step i's output (a view, no copy at T = 1; a copy otherwise).
    `neg_every` > 0 puts an exact torch kernel (negation) after every neg_every-th GEMV, so some GEMVs follow a
    kernel that is not theirs. Returns every step's output (the graph keeps them alive)."""
    outs = []
    for i, w in enumerate(ws):
        x = fn(x[:, :w.shape[1]], w)
        if neg_every and i % neg_every == neg_every - 1:
            x = x.neg()
        outs.append(x)
    return tuple(outs)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.IQ1_S, Q.Q6_K, Q.Q8_0, Q.BF16], ids=lambda q: q.name)
def test_gpu_pdl_is_bitwise_the_lastblock_gemv(qtype):
    """linear_pdl gives linear_lastblock's bits at the 48B shapes, T = 1, 3, 8: one GEMV per shape eagerly, then
    a chain of 8 dependent GEMVs (q_proj 4096x2304 and o_proj 2304x4096 alternating, both split K on 132 SMs, one
    counter pool; a negation after every third) eagerly and replayed from CUDA graphs holding two chains back to
    back (16 PDL GEMVs, most launched right behind another one: the overlapping case), new inputs each replay.
    A PDL GEMV reading x, its partials or its counters before griddepcontrol.wait would show here as wrong bits
    (or poisoned outputs); the programmatic edges must survive stream capture (CUDA >= 12.3)."""
    from sparkops_triton.linear import gemv_plan, linear_lastblock, linear_pdl

    dev = torch.device("cuda")
    rng = np.random.default_rng(40 + int(qtype))
    for out, k in SHAPES_48B:
        w = random_weight(rng, out, k, qtype, dev)
        for t in (1, 3, 8):
            x = torch.randn(t, k, device=dev).to(torch.bfloat16)
            want, got = linear_lastblock(x, w), linear_pdl(x, w)
            assert torch.isfinite(want).all() and same_bits(got, want), (out, k, t)
    ws = [random_weight(rng, *((4096, 2304) if i % 2 == 0 else (2304, 4096)), qtype, dev) for i in range(8)]
    splits = [gemv_plan(qtype, 1, w.shape[0], w.shape[1] // 256, dev)[2] for w in ws[:2]]
    for t in (1, 3, 8):
        xs = [torch.randn(t, 2304, device=dev).to(torch.bfloat16) for _ in range(2)]

        def change(r, xs=xs):
            for x in xs:
                x.copy_(torch.randn_like(x, dtype=torch.float32))

        assert_same_bits_replayed(lambda i, xs=xs: gemv_chain(linear_lastblock, xs[i], ws, 3),
                                  lambda i, xs=xs: gemv_chain(linear_pdl, xs[i], ws, 3), change)
    print(f"\nlinear triton_pdl {qtype.name}: one GEMV at {len(SHAPES_48B)} shapes and chains of 8 (splits at T=1 "
          f"{splits}), eager and graph-replayed: same bits as triton_lastblock")


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("t", [1, 8])
def test_gpu_pdl_chain_timing(t):
    """Does PDL pay? A chain of 20 dependent Q4_K 4096x2304 GEMVs (20 different weights, 106 MB: the L2 does not
    hold them) captured in one CUDA graph: triton (two launches when split), triton_lastblock and triton_pdl,
    microseconds per GEMV (median of the replays). Bits checked against triton_lastblock once."""
    from sparkops_triton.linear import gemv_plan, linear, linear_lastblock, linear_pdl

    dev = torch.device("cuda")
    rng = np.random.default_rng(77)
    ws = [random_weight(rng, 4096, 2304, Q.Q4_K, dev) for _ in range(20)]
    x = torch.randn(t, 2304, device=dev).to(torch.bfloat16)
    assert all(same_bits(a, b) for a, b in zip(gemv_chain(linear_lastblock, x, ws), gemv_chain(linear_pdl, x, ws)))
    splits = gemv_plan(Q.Q4_K, t, 4096, 9, dev)[2]
    times = {name: time_in_graph(lambda i, fn=fn: gemv_chain(fn, x, ws), 1) / len(ws)
             for name, fn in (("triton", linear), ("triton_lastblock", linear_lastblock), ("triton_pdl", linear_pdl))}
    print(f"\nlinear chain of {len(ws)} dependent Q4_K 4096x2304 GEMVs T={t} (splits {splits}), us per GEMV: "
          + ", ".join(f"{name} {sec * 1e6:.2f}" for name, sec in times.items())
          + f"; pdl/lastblock {times['triton_pdl'] / times['triton_lastblock']:.3f}")


#: the F16 GEMVs of a KDA layer in the 48B's decode step under [engine] fuse_projections and fuse_low_rank: the
#: f_a | g_a | beta down-projection (128 + 128 + 32 rows of the hidden 2304) and the f_b | g_b block-diagonal
#: up-projection ([[f_b, 0], [0, g_b]]: 2 x 4096 rows of the 2 x 128 codes); 20 KDA layers, 40 launches a token
F16_GATES_48B = [(288, 2304), (8192, 256)]
KDA_LAYERS_48B = 20


def f16_gate_weights(rng: np.random.Generator, dev) -> list:
    """A token's F16 gate weights, layer by layer [down_0, up_0, down_1, ...], each layer its own (110 MB in all: the
    L2 holds no layer's weights when the next token comes), the up-projection block-diagonal with zeros, as
    fusion.py builds it."""
    ws = []
    for _ in range(KDA_LAYERS_48B):
        ws.append(random_weight(rng, *F16_GATES_48B[0], Q.F16, dev))
        f_b, g_b = (random_weight(rng, 4096, 128, Q.F16, dev).raw for _ in range(2))
        up = torch.zeros(F16_GATES_48B[1], dtype=torch.float16, device=dev)
        up[:4096, :128], up[4096:, 128:] = f_b, g_b
        ws.append(QWeight(up, Q.F16, F16_GATES_48B[1]))
    return ws


@gpu
@pytest.mark.gpu
def test_gpu_pdl_f16_gate_gemvs_side_by_side():
    """linear=triton_pdl where the step selects triton_lastblock for F16 (the Q4_K and Q6_K types keep their own
    selections): a token's 40 F16 GEMVs (F16_GATES_48B, each layer's down-projection, its up-projection on the first
    256 columns of that one's output, then a torch negation standing for the kernels between the layer's gates and
    the next layer's: the down-projection follows a kernel that is not a PDL GEMV, as in the step) give
    triton_lastblock's bits eagerly and replayed from CUDA graphs with new inputs each replay, then are timed in one
    CUDA graph each way, the negations alone timed too and taken off both. With SPARKOPS_PEROP_DIR set the per-token
    sums go to perop-f16pdl-bfloat16.json, the rung's forecast (bench/perop_factor.py: triton_lastblock over
    triton_pdl on linear@F16). What the chain does not hold: in the step the side stream runs these GEMVs beside
    q/k/v, so their time a token is not all on the step's critical path."""
    from sparkops_triton._workloads import Timing, time_calls
    from sparkops_triton.linear import linear_lastblock, linear_pdl

    dev = torch.device("cuda")
    ws = f16_gate_weights(np.random.default_rng(2025), dev)
    for w in ws[:2]:
        x = torch.randn(1, w.shape[1], device=dev).to(torch.bfloat16)
        want, got = linear_lastblock(x, w), linear_pdl(x, w)
        assert torch.isfinite(want).all() and same_bits(got, want), w.shape
    xs = [torch.randn(1, F16_GATES_48B[0][1], device=dev).to(torch.bfloat16) for _ in range(2)]

    def change(r):
        for x in xs:
            x.copy_(torch.randn_like(x, dtype=torch.float32))

    assert_same_bits_replayed(lambda i: gemv_chain(linear_lastblock, xs[i], ws, 2),
                              lambda i: gemv_chain(linear_pdl, xs[i], ws, 2), change)
    nbytes = sum(w.nbytes for w in ws)
    chains = {name: time_calls(lambda x, fn=fn: gemv_chain(fn, x, ws, 2), [(xs[0],)], nbytes, replays=30)
              for name, fn in (("triton_lastblock", linear_lastblock), ("triton_pdl", linear_pdl))}
    y = torch.randn(1, F16_GATES_48B[1][0], device=dev).to(torch.bfloat16)
    negs = time_calls(lambda y: [y.neg() for _ in range(KDA_LAYERS_48B)], [(y,)], 0, replays=30)
    assert all(t.mode == "graph" for t in (*chains.values(), negs)), {n: t.mode for n, t in chains.items()}
    times = {name: Timing(t.us - negs.us, nbytes, "graph") for name, t in chains.items()}
    assert all(t.us > 0 for t in times.values()), (chains, negs)
    rows = [f"{n:<17} {t}   ({t.us / len(ws):.2f} us a GEMV; the chain {chains[n].us:.2f} us)"
            for n, t in times.items()]
    rows.append(f"negations alone  {negs.us:9.2f} us ({KDA_LAYERS_48B}, taken off each chain)")
    rows.append(f"pdl/lastblock    {times['triton_pdl'].us / times['triton_lastblock'].us:.3f}")
    record_perop("f16pdl", f"a token's {len(ws)} F16 gate GEMVs (down {F16_GATES_48B[0][0]}x{F16_GATES_48B[0][1]}, "
                 f"block-diagonal up {F16_GATES_48B[1][0]}x{F16_GATES_48B[1][1]}, {KDA_LAYERS_48B} KDA layers, 48B), "
                 "triton_lastblock against triton_pdl", times, 1, rows)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.IQ1_S, Q.Q6_K, Q.Q8_0, Q.BF16], ids=lambda q: q.name)
def test_gpu_prefetch_is_bitwise_the_lastblock_gemv(qtype):
    """linear_prefetch gives linear_lastblock's bits at the 48B shapes (lm_head included: 9 chunks a program), depths
    1, 2, 3, T = 1, 3, 8; and replayed from CUDA graphs (a chain of 8 split GEMVs) with new inputs each replay."""
    import sparkops_triton.linear as lin

    dev = torch.device("cuda")
    rng = np.random.default_rng(90 + int(qtype))
    saved = lin.FETCH_DEPTH
    try:
        for out, k in SHAPES_48B:
            w = random_weight(rng, out, k, qtype, dev)
            for t in (1, 3, 8):
                x = torch.randn(t, k, device=dev).to(torch.bfloat16)
                want = lin.linear_lastblock(x, w)
                assert torch.isfinite(want).all()
                for depth in (1, 2, 3):
                    lin.FETCH_DEPTH = depth
                    assert same_bits(lin.linear_prefetch(x, w), want), (depth, out, k, t)
        lin.FETCH_DEPTH = 3
        ws = [random_weight(rng, *((4096, 2304) if i % 2 == 0 else (2304, 4096)), qtype, dev) for i in range(8)]
        xs = [torch.randn(1, 2304, device=dev).to(torch.bfloat16) for _ in range(2)]

        def change(r):
            for x in xs:
                x.copy_(torch.randn_like(x, dtype=torch.float32))

        assert_same_bits_replayed(lambda i: gemv_chain(lin.linear_lastblock, xs[i], ws, 3),
                                  lambda i: gemv_chain(lin.linear_prefetch, xs[i], ws, 3), change)
    finally:
        lin.FETCH_DEPTH = saved
    print(f"\nlinear triton_prefetch {qtype.name}: {len(SHAPES_48B)} shapes x depths 1-3 x T=1,3,8 and a replayed "
          f"chain of 8: same bits as triton_lastblock")


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qtype,shape,copies", [(Q.Q6_K, (163840, 2304), 2), (Q.Q4_K, (4096, 2304), 20),
                                                (Q.Q4_K, (2304, 4096), 20)], ids=["lm_head-Q6_K", "q_proj-Q4_K",
                                                                                  "o_proj-Q4_K"])
def test_gpu_prefetch_timing(qtype, shape, copies):
    """Does the deeper stream pay for the GEMV? T = 1, `copies` weights in rotation (beyond the L2), one CUDA graph:
    triton_lastblock and triton_prefetch at depths 1, 2, 3, microseconds per GEMV (median of the replays)."""
    import sparkops_triton.linear as lin

    dev = torch.device("cuda")
    rng = np.random.default_rng(5)
    ws = [random_weight(rng, *shape, qtype, dev) for _ in range(copies)]
    x = torch.randn(1, shape[1], device=dev).to(torch.bfloat16)
    times = {"triton_lastblock": time_in_graph(lambda i: lin.linear_lastblock(x, ws[i]), copies)}
    saved = lin.FETCH_DEPTH
    try:
        for depth in (1, 2, 3):
            lin.FETCH_DEPTH = depth
            times[f"triton_prefetch@{depth}"] = time_in_graph(lambda i: lin.linear_prefetch(x, ws[i]), copies)
    finally:
        lin.FETCH_DEPTH = saved
    nbytes = ws[0].nbytes
    print(f"\nlinear {qtype.name} {shape[0]}x{shape[1]} T=1 ({nbytes / 1e6:.1f} MB), us per GEMV: "
          + ", ".join(f"{name} {sec * 1e6:.2f} ({100 * nbytes / sec / ANCHOR_BW:.0f}%)" for name, sec in times.items()))


@gpu
@pytest.mark.gpu
def test_gpu_flat_q4k_gemv_48b():
    """linear_flat at the 48B's Q4_K shapes (the lm_head's size too), T = 1 and 8: a row subset against float64; then
    each timed against triton_lastblock, T = 1, in one CUDA graph with weights in rotation beyond the L2."""
    from sparkops_triton.linear import linear_flat, linear_lastblock

    dev = torch.device("cuda")
    rng = np.random.default_rng(3)
    rows = []
    for (out, k), copies in zip(SHAPES_48B, (20, 20, 40, 2)):
        ws = [random_weight(rng, out, k, Q.Q4_K, dev) for _ in range(copies)]
        some = torch.arange(0, out, max(1, out // 64), device=dev)
        for t in (1, 8):
            # bf16-valued activations passed as float32, so that the output is float32 too: a bf16 output's own
            # rounding (~1e-3 relative, session 8's first run of this test) would hide what the GEMV computed
            x = torch.randn(t, k, device=dev).to(torch.bfloat16).float()
            ref = x.double().cpu() @ QWeight(ws[0].raw[some], Q.Q4_K, (len(some), k)).dequantize().double().T
            assert rel_err(linear_flat(x, ws[0])[:, some], ref) < 1e-5, (out, k, t)
        x = torch.randn(1, k, device=dev).to(torch.bfloat16)
        t_lb = time_in_graph(lambda i: linear_lastblock(x, ws[i]), copies)
        t_flat = time_in_graph(lambda i: linear_flat(x, ws[i]), copies)
        nbytes = ws[0].nbytes
        rows.append(f"{out}x{k} ({nbytes / 1e6:.1f} MB): lastblock {t_lb * 1e6:.2f} us "
                    f"({100 * nbytes / t_lb / ANCHOR_BW:.0f}%), flat {t_flat * 1e6:.2f} us "
                    f"({100 * nbytes / t_flat / ANCHOR_BW:.0f}%), flat/lastblock time {t_flat / t_lb:.3f}")
    print("\nlinear Q4_K T=1, triton_lastblock vs triton_flat:\n  " + "\n  ".join(rows))


#: prefill projections [OUT, IN] of the 48B's sizes: KDA q/k/v (fused), o_proj, the shared expert's gate (Q4_K) and
#: down (Q6_K), and a 4608-row one
DQMM_SHAPES = [(Q.Q4_K, (12288, 2304)), (Q.Q4_K, (2304, 4096)), (Q.Q4_K, (1024, 2304)), (Q.Q6_K, (2304, 1024)),
               (Q.Q4_K, (4608, 2304))]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qtype,shape", DQMM_SHAPES, ids=lambda v: getattr(v, "name", None) or "x".join(map(str, v)))
def test_gpu_dqmm_prefill_48b(qtype, shape):
    """"triton_dqmm" against the fused GEMM ("triton_lastblock"'s) at the 48B's prefill shapes: both bf16-accurate on
    a row subset against float64; timed side by side at T = 64, 512, 4096 (TFLOP/s of the product, and the share of
    the fused GEMM's time), in CUDA graphs with two weights in rotation."""
    from sparkops_triton.linear import linear_dqmm, linear_lastblock

    out, k = shape
    dev = torch.device("cuda")
    rng = np.random.default_rng(out + k)
    ws = [random_weight(rng, out, k, qtype, dev) for _ in range(2)]
    rows = torch.arange(0, out, max(1, out // 128), device=dev)
    sub = QWeight(ws[0].raw[rows].cpu(), qtype, (len(rows), k)).dequantize().double()
    for t in (64, 512, 4096):
        x = torch.randn(t, k, device=dev)
        ref = x[:8].cpu().double() @ sub.T
        for fn in (linear_dqmm, linear_lastblock):
            assert rel_err(fn(x, ws[0])[:8, rows], ref) < BF16_TOL, (fn.__name__, t)
        times = {fn.__name__: time_in_graph(lambda i, fn=fn: fn(x, ws[i]), 2, reps=10)
                 for fn in (linear_dqmm, linear_lastblock)}
        flop = 2 * t * out * k
        print(f"\nlinear prefill {qtype.name} {out}x{k} T={t}: dqmm {times['linear_dqmm'] * 1e6:.1f} us "
              f"({flop / times['linear_dqmm'] / 1e12:.1f} TFLOP/s), fused GEMM {times['linear_lastblock'] * 1e6:.1f} us "
              f"({flop / times['linear_lastblock'] / 1e12:.1f} TFLOP/s): dqmm/fused {times['linear_dqmm'] / times['linear_lastblock']:.3f}")
