"""short_conv_kda_norm=triton_split (kda_norm=triton_split's grid convolving its own q, k, v from the projected q|k|v
row; the head's last program rolls its q/k window rows) and triton_split_pdl (the same launched with PDL): the gate on
the contract's cases and on awkward heads and windows in Triton's interpreter (CPU), the bits of the unfused Triton
chain there, the same bits whichever program arrives last; on a GPU, the contract on CUDA, the PDL form's bits, the
48B's decode step against the unfused chain the step runs (short_conv=triton, then kda_norm=triton_split_pdl),
replayed from a CUDA graph, and all of them timed side by side in CUDA graphs (the rung's forecast)."""

import pytest
import torch

from sparkops.errors import BadInput
from tests.backends.triton_support import (assert_pool_clean, check_case, interpreted_fixture, prove_contract,
                                           record_perop, same_bits, shuffled_programs)

OP = "short_conv_kda_norm"
kernels = interpreted_fixture("short_conv_kda_norm")


@pytest.fixture
def chain_and_fused():
    """The fused module and the unfused chain's two (short_conv, kda_norm), interpreted together."""
    from sparkops_triton._runtime import interpreted

    with interpreted("short_conv_kda_norm", "short_conv", "kda_norm") as mods:
        yield mods
NORM_ARGS = ("g", "beta", "a", "dt_bias", "scale", "l2_eps", "gate", "weight", "eps")


def fused_calls(h, d, w, steps, seed, fresh=False):
    """Calls of the fused op on random inputs (x of spread 2, taps 0.5, as the contract's), and its two states."""
    g = torch.Generator().manual_seed(seed)
    p = h * d
    cw = torch.randn(3 * p, w, generator=g) * 0.5
    a = -torch.exp(torch.rand(h, generator=g) * 2 - 1)
    dt_bias = torch.randn(p, generator=g) * 0.5
    weight = torch.randn(d, generator=g)
    calls = [dict(x=torch.randn(t, 3 * p, generator=g) * 2, conv_weight=cw, g=torch.randn(t, h, d, generator=g),
                  beta=torch.randn(t, h, generator=g) * 2, a=a, dt_bias=dt_bias, scale=d ** -0.5, l2_eps=1e-6,
                  gate=torch.randn(t, h, d, generator=g) * 2, weight=weight, eps=1e-5) for t in steps]
    states = {"window": torch.zeros(w - 1, 3 * p) if fresh else torch.randn(w - 1, 3 * p, generator=g) * 2,
              "state": torch.zeros(h, d, d) if fresh else torch.randn(h, d, d, generator=g) * 0.1}
    return calls, states


def clone(states):
    return {k: v.clone() for k, v in states.items()}


def test_contract_cases_in_interpreter(kernels):
    """The contract's cases but its 130-token prefill and its 48B-shaped heads (serial in T and 128 programs, ~30 s
    of the interpreter's time between them; the GPU test runs every case)."""
    prove_contract(OP, "triton_split", kernels.short_conv_kda_norm_split,
                   skip=lambda name: "steps130" in name or name.startswith("H32_D128"))


@pytest.mark.parametrize("h,d,w,steps", [(3, 40, 4, (2, 1, 3)), (1, 16, 4, (1,)), (2, 24, 2, (5, 1)),
                                         (2, 200, 4, (1, 2)), (2, 32, 1, (3, 1)), (1, 32, 4, (2, 1, 1, 9)),
                                         (1, 32, 3, (1, 1, 4))])
def test_awkward_heads_and_windows_in_interpreter(kernels, h, d, w, steps):
    """D not a power of two (padded channels add nothing to the L2-norms or the norm), one head, a tiny head; D = 200
    splits a head over 7 programs; a window of no rows (W = 1); calls shorter than the window (2 and 1 tokens after
    a window of 3 rows: the new window mixes old rows and x's)."""
    calls, states = fused_calls(h, d, w, steps, h * 100 + d + w)
    check_case(OP, "triton_split", kernels.short_conv_kda_norm_split, calls, states, label=f"H{h}_D{d}_W{w}")


@pytest.mark.parametrize("conv", ["short_conv", "short_conv_pdl"])
@pytest.mark.parametrize("steps", [(1, 1, 1), (3, 1), (8,)])
def test_the_unfused_triton_chain_s_bits_in_interpreter(chain_and_fused, steps, conv):
    """short_conv=triton (the step's) or triton_pdl, then kda_norm=triton_split (interpreted) on bfloat16 activations:
    the same output bits, window and state. The fused kernel does their arithmetic in their order; in the interpreter
    (NumPy, no FMA contraction) that is bit for bit."""
    fused_mod, conv_mod, norm_mod = chain_and_fused
    calls, states = fused_calls(4, 32, 4, steps, 17)
    calls = [{k: v.to(torch.bfloat16) if k in ("x", "g", "beta", "gate") else v for k, v in c.items()} for c in calls]
    fused, chain = clone(states), clone(states)
    p = 4 * 32
    for call in calls:
        got = fused_mod.short_conv_kda_norm_split(**call, **fused)
        qkv = getattr(conv_mod, conv)(call["x"], call["conv_weight"], chain["window"])  # [T, 3P] bf16
        t = qkv.shape[0]
        q, k, v = (qkv[:, j * p:(j + 1) * p].reshape(t, 4, 32) for j in range(3))
        want = norm_mod.kda_norm_split(q, k, v, **{n: call[n] for n in NORM_ARGS}, state=chain["state"])
        assert got.dtype == torch.bfloat16 and same_bits(got, want)
    assert same_bits(fused["window"], chain["window"]) and same_bits(fused["state"], chain["state"])


def test_the_same_bits_whichever_program_arrives_last_in_interpreter(kernels):
    """The head's last program adds the slices' sums in one fixed order and rolls the q/k window rows after every
    program of the head read them: programs run in two shuffled orders give the bits of program order, outputs and
    both states, and leave the arrival counters at zero."""
    from sparkops_triton import _arrival

    calls, states = fused_calls(3, 96, 4, (1, 2), 13)
    runs = []
    for order in (None, 1, 2):
        st = clone(states)
        if order is None:
            outs = [kernels.short_conv_kda_norm_split(**c, **st) for c in calls]
        else:
            with shuffled_programs(order) as shuffled:
                outs = [kernels.short_conv_kda_norm_split(**c, **st) for c in calls]
            assert shuffled, "the interpreter's launch loop was not shuffled"
        runs.append((outs, st))
        assert_pool_clean(_arrival)
    for outs, st in runs[1:]:
        assert all(same_bits(a, b) for a, b in zip(outs, runs[0][0]))
        assert same_bits(st["window"], runs[0][1]["window"]) and same_bits(st["state"], runs[0][1]["state"])


def test_the_pdl_form_is_the_split_form_in_interpreter(kernels):
    """triton_split_pdl only adds programmatic dependent launch on the GPU; in the interpreter it is "triton_split"."""
    calls, states = fused_calls(3, 40, 4, (2, 1), 6)
    s1, s2 = clone(states), clone(states)
    for call in calls:
        assert torch.equal(kernels.short_conv_kda_norm_split_pdl(**call, **s1),
                           kernels.short_conv_kda_norm_split(**call, **s2))
    assert torch.equal(s1["window"], s2["window"]) and torch.equal(s1["state"], s2["state"])


def test_a_column_slice_of_a_wider_projection_is_read_in_place_in_interpreter(kernels):
    """x may be the q|k|v columns of a fused projection's output (row stride past 3P): the same result as a copy."""
    calls, states = fused_calls(2, 16, 4, (3,), 8)
    x = calls[0]["x"]
    wide = torch.cat([x, torch.randn(3, 50)], dim=1)[:, :x.shape[1]]  # [T, 3P] view, row stride 3P + 50
    s1, s2 = clone(states), clone(states)
    got = kernels.short_conv_kda_norm_split(**dict(calls[0], x=wide), **s1)
    want = kernels.short_conv_kda_norm_split(**calls[0], **s2)
    assert torch.equal(got, want) and torch.equal(s1["window"], s2["window"])


@pytest.mark.parametrize("bad", ["x", "conv_weight", "window", "gate", "weight", "beta"])
def test_a_wrong_argument_is_named_and_leaves_both_states_alone(kernels, bad):
    calls, states = fused_calls(2, 16, 4, (1,), 7)
    call = calls[0]
    before = clone(states)
    wrong = {"x": call["x"][:, :-3], "conv_weight": call["conv_weight"][:-1], "window": states["window"][:-1],
             "gate": call["gate"][:, :1], "weight": call["weight"][:-1], "beta": call["beta"][:, :1]}[bad]
    args = dict(call, **states)
    args[bad] = wrong
    with pytest.raises(BadInput, match=bad):
        kernels.short_conv_kda_norm_split(**args)
    assert all(torch.equal(states[n], before[n]) for n in states)


def test_more_taps_than_the_kernel_holds_are_refused_before_any_write(kernels):
    """The kernel holds each tap and window row in a register vector of its own, 4 at most (Kimi-Linear's conv):
    5 taps are named with the fix, and neither state is written."""
    calls, states = fused_calls(2, 16, 5, (1,), 10)
    before = clone(states)
    with pytest.raises(BadInput, match="5 taps.*at most|holds 1 to 4"):
        kernels.short_conv_kda_norm_split(**calls[0], **states)
    assert all(torch.equal(states[n], before[n]) for n in states)


def test_a_window_not_in_float32_is_refused(kernels):
    calls, states = fused_calls(2, 16, 4, (1,), 9)
    with pytest.raises(BadInput, match="window"):
        kernels.short_conv_kda_norm_split(**calls[0], window=states["window"].half(), state=states["state"])


# ---- on a GPU --------------------------------------------------------------------------------------------------

FORMS = {"triton_split": "short_conv_kda_norm_split", "triton_split_pdl": "short_conv_kda_norm_split_pdl"}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(FORMS))
def test_gpu_contract_cases(name):
    from sparkops_triton import short_conv_kda_norm

    prove_contract(OP, name, getattr(short_conv_kda_norm, FORMS[name]), "cuda", seeds=(0, 1))


def _on_cuda(calls, states, act=torch.bfloat16):
    def move(k, v):
        if not torch.is_tensor(v):
            return v
        return v.cuda().to(act) if k in ("x", "g", "beta", "gate") else v.cuda()
    return [{k: move(k, v) for k, v in c.items()} for c in calls], {k: v.cuda() for k, v in states.items()}


def _chain(x, conv_weight, window, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps):
    """The step's unfused pair (cuda-s39-q8-tall.toml, the x16 step's and the stack's alike): short_conv=triton over the
    q|k|v row (the PDL conv was never a rung), then kda_norm=triton_split_pdl."""
    from sparkops_triton.kda_norm import kda_norm_split_pdl
    from sparkops_triton.short_conv import short_conv

    t, h, d = g.shape
    p = h * d
    qkv = short_conv(x, conv_weight, window)  # [T, 3P]
    q, k, v = (qkv[:, j * p:(j + 1) * p].view(t, h, d) for j in range(3))
    return kda_norm_split_pdl(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, gate, weight, eps)


@pytest.mark.gpu
def test_gpu_the_pdl_form_gives_the_same_bits():
    """triton_split_pdl claims bit-identity to "triton_split": three decode steps and a call of 8 at the 48B's shape
    (bf16 activations), outputs and both states."""
    from sparkops_triton import short_conv_kda_norm as m

    calls, states = _on_cuda(*fused_calls(32, 128, 4, (1, 1, 1, 8), 21))
    s1, s2 = clone(states), clone(states)
    for call in calls:
        got, want = m.short_conv_kda_norm_split_pdl(**call, **s1), m.short_conv_kda_norm_split(**call, **s2)
        torch.cuda.synchronize()
        assert same_bits(got, want)
    assert same_bits(s1["window"], s2["window"]) and same_bits(s1["state"], s2["state"])


@pytest.mark.gpu
def test_gpu_48b_decode_against_the_unfused_chain_replayed_and_timed():
    """At the 48B's decode shape (32 heads of 128, W 4, bf16): each fused form against the chain the step runs, three
    steps eagerly and then replayed from one CUDA graph after a producer kernel writing x (the window and state carried
    from replay to replay): the output within 1e-4 and the states within 1e-10 of the chain's (printed: whether they
    were its bits); the arrival counters left at zero. Then the chain and both forms timed on the same rotating sets,
    each in one CUDA graph; with SPARKOPS_PEROP_DIR set the per-token sums (20 KDA layers) go to
    perop-convkda-bfloat16.json, the rung's forecast: the chain's sum over triton_split_pdl's (bench/perop_factor.py).
    Not asserted: that the fused form is faster - the rung says that; the line printed says which won."""
    from sparkops_triton import _arrival
    from sparkops_triton import short_conv_kda_norm as m
    from sparkops_triton._workloads import conv_kda_norm_args, time_calls

    from sparkops.gate.metrics import nmse

    calls, states = _on_cuda(*fused_calls(32, 128, 4, (1, 1, 1), 23))
    bitwise = {}
    for name, fn in FORMS.items():
        fn = getattr(m, fn)
        s_fused, s_chain = clone(states), clone(states)
        same = True
        for call in calls:
            fused, chain = fn(**call, **s_fused), _chain(**call, **s_chain)
            v = nmse("output", fused.float(), chain.float(), 1e-4)
            assert v.passed, f"{name}: {v.line()}"
            same &= same_bits(fused, chain)
        for sname in ("window", "state"):
            v = nmse(sname, s_fused[sname], s_chain[sname], 1e-10)
            assert v.passed, f"{name}: {v.line()}"
            same &= same_bits(s_fused[sname], s_chain[sname])
        # replayed: a graph of (a copy writing x, the fused op) against the same graph of the chain
        outs = {}
        for label, op, st in ((name, fn, s_fused), ("chain", _chain, s_chain)):
            x_buf = torch.empty_like(calls[0]["x"])
            src = calls[0]["x"]
            out_holder = []
            graph = torch.cuda.CUDAGraph()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                x_buf.copy_(src)
                op(**dict(calls[0], x=x_buf), **clone(st))  # warm-up on throwaway states
            torch.cuda.current_stream().wait_stream(stream)
            with torch.cuda.graph(graph):
                x_buf.copy_(src)
                out_holder.append(op(**dict(calls[0], x=x_buf), **st))
            seq = []
            for _ in range(3):
                graph.replay()
                seq.append(out_holder[0].clone())
            torch.cuda.synchronize()
            outs[label] = (seq, st)
        for a, b in zip(outs[name][0], outs["chain"][0]):
            v = nmse("replayed output", a.float(), b.float(), 1e-4)
            assert v.passed, f"{name}: {v.line()}"
            same &= same_bits(a, b)
        v = nmse("replayed state", outs[name][1]["state"], outs["chain"][1]["state"], 1e-10)
        assert v.passed, f"{name}: {v.line()}"
        assert torch.isfinite(outs[name][0][-1].float()).all()
        bitwise[name] = same
    assert_pool_clean(_arrival, "cuda:0")
    print("\nthe fused forms against the unfused chain: " + ", ".join(
        f"{n} {'the same bits' if s else 'within the tolerance, not the same bits'}" for n, s in bitwise.items()))

    sets, nbytes = conv_kda_norm_args(1)
    layers = 20  # the 48B's KDA layers
    times = {"chain": time_calls(_chain, sets, nbytes)}
    times.update({name: time_calls(getattr(m, fn), sets, nbytes) for name, fn in FORMS.items()})
    assert all(t.mode == "graph" for t in times.values()), {n: t.mode for n, t in times.items()}
    assert_pool_clean(_arrival, str(sets[0][0].device))
    rows = [f"{n:<17} {t}" for n, t in times.items()]
    record_perop("convkda", "short_conv then kda_norm, against short_conv_kda_norm (a KDA layer's decode step, 48B)",
                 times, layers, rows)
    c, f = times["chain"].us, times["triton_split_pdl"].us
    print(f"short_conv_kda_norm=triton_split_pdl against the chain: x{c / f:.3f} "
          f"({'faster' if f < c else 'NOT faster'}: {f:.2f} against {c:.2f} us a layer)")
