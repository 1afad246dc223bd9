"""kda_lowrank_norm=triton_split (kda_norm=triton_split's grid forming the decay logits and the output gate itself from
f_a's and g_a's codes) and triton_split_pdl (that, launched with PDL): the gate on the contract's cases and on awkward
heads and ranks in Triton's interpreter (CPU), the same bits whichever program arrives last, codes that are column
slices of a wider projection, refusals that leave the state alone; on a GPU, the contract on CUDA, the PDL form's bits,
a CUDA graph replayed, and the 48B's decode step against the chain the step runs (the f_b and g_b GEMVs, then
kda_norm=triton_split_pdl), all timed side by side in CUDA graphs (the rung's forecast)."""

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.qweight import QWeight
from tests.backends.test_triton_kda_norm import norm_calls
from tests.backends.triton_support import (assert_pool_clean, assert_same_bits_replayed, check_case,
                                           interpreted_fixture, prove_contract, record_perop, same_bits,
                                           shuffled_programs)

OP = "kda_lowrank_norm"
kernels = interpreted_fixture("kda_lowrank_norm")


def lowrank_calls(h, d, p, steps, seed, qtype=Q.F16, spread=1.0):
    """norm_calls' calls with the decay logits and the gate made by up-projections ([H*D, P] of `qtype`) from [P]
    codes instead of given, scaled so that g and the gate keep norm_calls' spreads (1 and 2)."""
    calls, state = norm_calls(h, d, steps, seed)
    g = torch.Generator().manual_seed(seed + 7)
    f_b = QWeight.from_float(torch.randn(h * d, p, generator=g) * spread / p ** 0.5, qtype, name="f_b")
    g_b = QWeight.from_float(torch.randn(h * d, p, generator=g) * 2.0 / p ** 0.5, qtype, name="g_b")
    out = []
    for c in calls:
        t = c["q"].shape[0]
        rest = {k: v for k, v in c.items() if k not in ("g", "gate")}
        out.append(dict(rest, f=torch.randn(t, p, generator=g), f_b=f_b, ga=torch.randn(t, p, generator=g), g_b=g_b))
    return out, state


def test_split_contract_cases_in_interpreter(kernels):
    prove_contract(OP, "triton_split", kernels.kda_lowrank_norm_split)


@pytest.mark.parametrize("h,d,p,steps", [(3, 40, 24, (2, 1)), (1, 16, 16, (1,)), (2, 24, 40, (3, 1)),
                                         (2, 200, 72, (1,))])
def test_awkward_heads_and_ranks_in_interpreter(kernels, h, d, p, steps):
    """D not a power of two (padded key rows and columns must add nothing), one head, a rank above the head dim and
    not a multiple of the rank's chunk (BLOCK_P), D = 200 over 7 programs."""
    calls, state = lowrank_calls(h, d, p, steps, h * 100 + d + p)
    check_case(OP, "triton_split", kernels.kda_lowrank_norm_split, calls, state, label=f"H{h}_D{d}_P{p}")


@pytest.mark.parametrize("qtype", [Q.F32, Q.BF16])
def test_other_float_weight_types_in_interpreter(kernels, qtype):
    calls, state = lowrank_calls(2, 32, 32, (1, 2), 9, qtype=qtype)
    check_case(OP, "triton_split", kernels.kda_lowrank_norm_split, calls, state, label=qtype.name)


def test_the_decay_reads_every_key_row_of_the_head_in_interpreter(kernels):
    """Each program forms its head's whole decay [D] (the state block's rows are all of D): changing f_b's rows of
    the head's last key channels changes every value column's output of that head, and no other head's."""
    calls, state = lowrank_calls(2, 64, 32, (1,), 4)
    base = kernels.kda_lowrank_norm_split(**calls[0], state=state["state"].clone())
    rows = calls[0]["f_b"].raw.clone()
    rows[56:64] += 3.0  # head 0, key channels 56..63
    moved_w = QWeight(rows, calls[0]["f_b"].qtype, calls[0]["f_b"].shape, name="f_b")
    moved = kernels.kda_lowrank_norm_split(**dict(calls[0], f_b=moved_w), state=state["state"].clone())
    assert not torch.allclose(moved[:, 0, :32], base[:, 0, :32], rtol=1e-4)  # program 0 of head 0 (columns 0..31)
    assert torch.equal(moved[:, 1], base[:, 1])


def test_the_same_bits_whichever_program_arrives_last_in_interpreter(kernels):
    """The head's last program norms the row with the gate slices the others stored: programs run in shuffled orders
    give the bits of program order, outputs and state, and leave the arrival counters at zero."""
    from sparkops_triton import _arrival

    calls, state = lowrank_calls(3, 96, 48, (1, 2), 13)
    runs = []
    for order in (None, 1, 2):
        s = state["state"].clone()
        if order is None:
            outs = [kernels.kda_lowrank_norm_split(**c, state=s) for c in calls]
        else:
            with shuffled_programs(order) as shuffled:
                outs = [kernels.kda_lowrank_norm_split(**c, state=s) for c in calls]
            assert shuffled, "the interpreter's launch loop was not shuffled"
        runs.append((outs, s))
        assert_pool_clean(_arrival)
    for outs, s in runs[1:]:
        assert all(same_bits(a, b) for a, b in zip(outs, runs[0][0])) and same_bits(s, runs[0][1])


def test_codes_as_column_slices_of_a_wider_projection_in_interpreter(kernels):
    """The engine hands f and ga as column views of the fused f_a | g_a | beta projection (row stride > P): the same
    bits as contiguous codes, with no copy."""
    calls, state = lowrank_calls(2, 32, 32, (2, 1), 5)
    s1, s2 = state["state"].clone(), state["state"].clone()
    for call in calls:
        t = call["f"].shape[0]
        wide = torch.randn(t, 2 * 32 + 5)
        wide[:, :32], wide[:, 32:64] = call["f"], call["ga"]
        views = dict(call, f=wide[:, :32], ga=wide[:, 32:64])
        assert views["f"].stride(0) == 69
        assert torch.equal(kernels.kda_lowrank_norm_split(**views, state=s1),
                           kernels.kda_lowrank_norm_split(**call, state=s2))
    assert torch.equal(s1, s2)


def test_the_triggering_form_is_the_split_form_in_interpreter(kernels):
    """triton_split_pdl only adds programmatic dependent launch on the GPU; in the interpreter it is "triton_split"."""
    calls, state = lowrank_calls(3, 40, 24, (2, 1), 6)
    s1, s2 = state["state"].clone(), state["state"].clone()
    for call in calls:
        assert torch.equal(kernels.kda_lowrank_norm_split_pdl(**call, state=s1),
                           kernels.kda_lowrank_norm_split(**call, state=s2))
    assert torch.equal(s1, s2)


@pytest.mark.parametrize("change,match", [
    (lambda c: dict(c, f=c["f"][:, :-1]), "'f'"),
    (lambda c: dict(c, ga=c["ga"].repeat(1, 2)[:, ::2]), "'ga' has stride 2"),
    (lambda c: dict(c, g_b=QWeight.from_float(torch.randn(c["g_b"].shape[0], 8), Q.F16, name="g_b")), "rank"),
    (lambda c: dict(c, f_b=QWeight.from_float(torch.randn(c["f_b"].shape[0] - 32, 32), Q.F16, name="f_b")), "rows"),
    (lambda c: dict(c, f_b=c["f_b"].raw), "QWeight"),
    (lambda c: dict(c, weight=c["weight"][:-1]), "weight"),
])
def test_bad_arguments_are_named_and_leave_the_state_alone(kernels, change, match):
    from sparkops.errors import BadInput

    calls, state = lowrank_calls(2, 32, 32, (1,), 7)
    before = state["state"].clone()
    with pytest.raises(BadInput, match=match):
        kernels.kda_lowrank_norm_split(**change(calls[0]), state=state["state"])
    assert torch.equal(state["state"], before)


def test_a_quantized_up_projection_is_refused_with_the_fix(kernels):
    from sparkops.errors import BadInput

    calls, state = lowrank_calls(1, 256, 256, (1,), 8)
    q8 = QWeight.from_float(torch.randn(256, 256), Q.Q8_0, name="f_b")
    with pytest.raises(BadInput, match="float up-projection"):
        kernels.kda_lowrank_norm_split(**dict(calls[0], f_b=q8), state=state["state"])


# ---- on a GPU --------------------------------------------------------------------------------------------------

FORMS = {"triton_split": "kda_lowrank_norm_split", "triton_split_pdl": "kda_lowrank_norm_split_pdl"}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(FORMS))
def test_gpu_contract_cases(name):
    from sparkops_triton import kda_lowrank_norm

    prove_contract(OP, name, getattr(kda_lowrank_norm, FORMS[name]), "cuda", seeds=(0, 1))


def _on_cuda(calls, state, act=torch.bfloat16):
    def move(k, v):
        if isinstance(v, QWeight):
            return v.to("cuda")
        if not torch.is_tensor(v):
            return v
        return v.cuda() if k in ("a", "dt_bias", "weight") else v.cuda().to(act)
    return [{k: move(k, v) for k, v in c.items()} for c in calls], state["state"].cuda()


def _48b(seed, steps=(1, 1, 1)):
    """Three decode steps at the 48B's shape: 32 heads of 128, rank 128, F16 up-projections, bf16 activations."""
    return _on_cuda(*lowrank_calls(32, 128, 128, steps, seed))


@pytest.mark.gpu
def test_gpu_the_triggering_form_gives_the_same_bits():
    """kda_lowrank_norm=triton_split_pdl claims bit-identity to "triton_split": outputs and state over three steps."""
    from sparkops_triton.kda_lowrank_norm import kda_lowrank_norm_split, kda_lowrank_norm_split_pdl

    calls, state = _48b(21)
    s1, s2 = state.clone(), state.clone()
    for call in calls:
        got, want = kda_lowrank_norm_split_pdl(**call, state=s1), kda_lowrank_norm_split(**call, state=s2)
        torch.cuda.synchronize()
        assert same_bits(got, want)
    assert same_bits(s1, s2)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(FORMS))
def test_gpu_graph_replays_give_the_eager_bits(name):
    """Captured in a CUDA graph (two launches back to back on one counter pool) and replayed with new codes written
    in place: the eager bits every replay, the counters back at zero (a counter left set would leave a row unnormed).
    The state is fresh each call (a clone), so eager and replayed calls see the same one."""
    from sparkops_triton import kda_lowrank_norm

    fn = getattr(kda_lowrank_norm, FORMS[name])
    calls, state = _48b(22, steps=(1, 1))
    states = [state.clone() for _ in calls]

    def call(i):
        s = states[i].clone()
        return fn(**calls[i], state=s), s

    def change(r):
        for c in calls:
            c["f"].copy_(torch.randn_like(c["f"]))
            c["ga"].copy_(torch.randn_like(c["ga"]))

    assert_same_bits_replayed(call, call, change)


@pytest.mark.gpu
def test_gpu_48b_decode_against_the_unfused_chain_and_timed():
    """At the 48B's decode shape: the fused step against the chain the step runs (f_b and g_b through
    linear=triton_lastblock, rounded to bf16, then kda_norm=triton_split_pdl): within 1e-4 NMSE, the states within 1e-6
    (the chain rounds g and the gate to bf16; the fused form keeps them float32); and against the same chain on float32
    codes (its g and gate float32 too: only the summation order differs) within 1e-7 (both outputs bf16: a value on a
    rounding boundary flips by one bf16 step, GPU session 23 measured 3.5e-9) and 1e-11. Then the chain, kda_norm alone, the
    two GEMVs alone and both fused forms timed on the same rotating sets, each in one CUDA graph. With
    SPARKOPS_PEROP_DIR set the per-token sums (20 KDA layers) go to perop-kdalowrank-bfloat16.json, the rung's
    forecast (bench/perop_factor.py: "kda_norm" over the fused form for the op it replaces, "gates" for the two
    GEMVs' launches it takes away)."""
    from sparkops_triton import _arrival
    from sparkops_triton._workloads import kda_lowrank_norm_args, time_calls
    from sparkops_triton.kda_lowrank_norm import kda_lowrank_norm_split, kda_lowrank_norm_split_pdl
    from sparkops_triton.kda_norm import kda_norm_split_pdl
    from sparkops_triton.linear import linear_lastblock

    from sparkops.gate.metrics import nmse

    def gates(f, f_b, ga, g_b):
        return linear_lastblock(f, f_b), linear_lastblock(ga, g_b)  # [T, H*D] each, in f's dtype

    def chained(q, k, v, f, f_b, beta, a, dt_bias, state, scale, l2_eps, ga, g_b, weight, eps):
        g, gate = gates(f, f_b, ga, g_b)
        t, h, d = v.shape
        return kda_norm_split_pdl(q, k, v, g.view(t, h, d), beta, a, dt_bias, state, scale, l2_eps, gate.view(t, h, d),
                                  weight, eps)

    def float_codes(call):  # the chain with float32 codes: its GEMVs then give float32 g and gate, nothing rounded
        return dict(call, f=call["f"].float(), ga=call["ga"].float())

    calls, state = _48b(23)
    for fn in (kda_lowrank_norm_split, kda_lowrank_norm_split_pdl):
        s_fused, s_chain, s_exact = state.clone(), state.clone(), state.clone()
        for call in calls:
            fused = fn(**call, state=s_fused)
            for what, got, limit in (("bf16 chain", chained(**dict(call, state=s_chain)), 1e-4),
                                     ("float32 chain", chained(**dict(float_codes(call), state=s_exact)), 1e-7)):
                v = nmse(f"output against the {what}", fused.float(), got.float(), limit)
                assert v.passed, f"{fn.__name__}: {v.line()}"
        for what, s, limit in (("bf16 chain", s_chain, 1e-6), ("float32 chain", s_exact, 1e-11)):
            v = nmse(f"state against the {what}", s_fused, s, limit)
            assert v.passed, f"{fn.__name__}: {v.line()}"

    sets, nbytes = kda_lowrank_norm_args(1)
    layers = 20  # the 48B's KDA layers
    times = {name: time_calls(fn, sets, nbytes) for name, fn in
             (("chain", chained), ("triton_split", kda_lowrank_norm_split),
              ("triton_split_pdl", kda_lowrank_norm_split_pdl))}
    times["kda_norm"] = time_calls(kda_norm_split_pdl, [_norm_args(s) for s in sets], nbytes)
    times["gates"] = time_calls(gates, [(s[3], s[4], s[11], s[12]) for s in sets], nbytes)
    assert all(t.mode == "graph" for t in times.values()), {n: t.mode for n, t in times.items()}
    assert_pool_clean(_arrival, str(sets[0][2].device))  # "cuda:0", as the pool is keyed
    rows = [f"{n:<16} {t}" for n, t in times.items()]
    record_perop("kdalowrank", "f_b and g_b GEMVs then kda_norm, against kda_lowrank_norm (a KDA layer's decode step, "
                 "48B)", times, layers, rows)


def _norm_args(s):
    """kda_norm's arguments for one of kda_lowrank_norm_args' sets: the decay logits and gate as the chain makes them
    (given, bf16), so kda_norm alone is timed on what it reads in the step."""
    q, k, v, f, f_b, beta, a, dtb, state, scale, l2_eps, ga, g_b, weight, eps = s
    t, h, d = v.shape
    g = torch.randn(t, h, d, device=v.device, dtype=v.dtype)
    gate = torch.randn(t, h, d, device=v.device, dtype=v.dtype)
    return (q, k, v, g, beta, a, dtb, state, scale, l2_eps, gate, weight, eps)
