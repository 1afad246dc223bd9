"""kda_norm=triton (KDA's recurrent step and its output norm in one kernel, a program a head), triton_pdl (the same,
letting the next kernel start), triton_split (kda's grid, the norm by each head's last program to arrive) and
triton_split_pdl (that, letting the next kernel start): the gate on the contract's cases and on awkward heads in
Triton's interpreter (CPU), the split form's bits whichever program arrives last; on a GPU, the contract on CUDA, the
triggering forms' bits, the 48B's decode step against the unfused
chain the step runs (kda=triton, then gated_rmsnorm=triton) and all of them timed side by side in CUDA graphs (the
rung's forecast)."""

import pytest
import torch

from tests.backends.test_triton_kda import kda_calls
from tests.backends.triton_support import (assert_pool_clean, check_case, interpreted_fixture, prove_contract,
                                           record_perop, same_bits, shuffled_programs)

OP = "kda_norm"
kernels = interpreted_fixture("kda_norm")


def norm_calls(h, d, steps, seed, **kw):
    """kda_calls' calls with an output gate each and one gain (a layer's) for all."""
    calls, state = kda_calls(h, d, steps, seed, **kw)
    g = torch.Generator().manual_seed(seed + 1)
    weight = torch.randn(d, generator=g)
    return [dict(c, gate=torch.randn(*c["q"].shape, generator=g) * 2, weight=weight, eps=1e-5) for c in calls], state


def test_contract_cases_in_interpreter(kernels):
    prove_contract(OP, "triton", kernels.kda_norm)


def test_split_contract_cases_in_interpreter(kernels):
    prove_contract(OP, "triton_split", kernels.kda_norm_split)


@pytest.mark.parametrize("name", ["triton", "triton_split"])
@pytest.mark.parametrize("h,d,steps", [(3, 40, (2, 1, 3)), (1, 16, (1,)), (2, 24, (5, 1)), (2, 200, (1, 2))])
def test_awkward_heads_in_interpreter(kernels, name, h, d, steps):
    """D not a power of two (the padded columns must add nothing to the norm), one head, a tiny head; D = 200 splits
    a head over 7 programs (a partial-sum table padded to 8)."""
    calls, state = norm_calls(h, d, steps, h * 100 + d)
    fn = kernels.kda_norm if name == "triton" else kernels.kda_norm_split
    check_case(OP, name, fn, calls, state, label=f"H{h}_D{d}")


def test_split_gives_the_same_bits_whichever_program_arrives_last_in_interpreter(kernels):
    """The head's last program adds its slices' sums in one fixed order: programs run in two shuffled orders give the
    bits of program order, outputs and state, and leave the arrival counters at zero."""
    from sparkops_triton import _arrival

    calls, state = norm_calls(3, 96, (1, 2), 13)
    runs = []
    for order in (None, 1, 2):
        s = state["state"].clone()
        if order is None:
            outs = [kernels.kda_norm_split(**c, state=s) for c in calls]
        else:
            with shuffled_programs(order) as shuffled:
                outs = [kernels.kda_norm_split(**c, state=s) for c in calls]
            assert shuffled, "the interpreter's launch loop was not shuffled"
        runs.append((outs, s))
        assert_pool_clean(_arrival)
    for outs, s in runs[1:]:
        assert all(same_bits(a, b) for a, b in zip(outs, runs[0][0])) and same_bits(s, runs[0][1])


def test_the_norm_sees_the_whole_head_in_interpreter(kernels):
    """One program holds a head's every value column, so the norm is over all D of them: scaling the values of one
    head's last 8 columns changes its first columns' outputs (a norm over a slice of the columns would not), and no
    other head's."""
    calls, state = norm_calls(2, 32, (1,), 3)
    base = kernels.kda_norm(**calls[0], state=state["state"].clone())
    v = calls[0]["v"].clone()
    v[:, 0, 24:] *= 40.0
    moved = kernels.kda_norm(**dict(calls[0], v=v), state=state["state"].clone())
    assert not torch.allclose(moved[:, 0, :8], base[:, 0, :8], rtol=1e-3)
    assert torch.equal(moved[:, 1], base[:, 1])


def test_the_triggering_form_is_the_same_function_in_interpreter(kernels):
    """triton_pdl only adds griddepcontrol.launch_dependents on the GPU; in the interpreter it is "triton" itself."""
    calls, state = norm_calls(3, 32, (2, 1), 5)
    s1, s2 = state["state"].clone(), state["state"].clone()
    for call in calls:
        assert torch.equal(kernels.kda_norm_trigger(**call, state=s1), kernels.kda_norm(**call, state=s2))
    assert torch.equal(s1, s2)


def test_the_triggering_split_form_is_the_split_form_in_interpreter(kernels):
    """triton_split_pdl only adds programmatic dependent launch on the GPU (launch_pdl, griddepcontrol's wait and
    trigger); in the interpreter it is "triton_split"."""
    calls, state = norm_calls(3, 40, (2, 1), 6)
    s1, s2 = state["state"].clone(), state["state"].clone()
    for call in calls:
        assert torch.equal(kernels.kda_norm_split_pdl(**call, state=s1), kernels.kda_norm_split(**call, state=s2))
    assert torch.equal(s1, s2)


def test_warps_keep_a_head_s_state_near_32_values_a_thread():
    from sparkops_triton.kda_norm import warps

    assert [warps(d) for d in (16, 32, 64, 128, 256)] == [1, 1, 4, 16, 16]


@pytest.mark.parametrize("name", ["kda_norm", "kda_norm_split"])
def test_a_gate_of_another_shape_is_named_and_leaves_the_state_alone(kernels, name):
    from sparkops.errors import BadInput

    calls, state = norm_calls(2, 16, (1,), 7)
    before = state["state"].clone()
    with pytest.raises(BadInput, match="gate"):
        getattr(kernels, name)(**dict(calls[0], gate=calls[0]["gate"][:, :1]), state=state["state"])
    assert torch.equal(state["state"], before)


# ---- on a GPU --------------------------------------------------------------------------------------------------

FORMS = {"triton": "kda_norm", "triton_pdl": "kda_norm_trigger", "triton_split": "kda_norm_split",
         "triton_split_pdl": "kda_norm_split_pdl"}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(FORMS))
def test_gpu_contract_cases(name):
    from sparkops_triton import kda_norm

    prove_contract(OP, name, getattr(kda_norm, FORMS[name]), "cuda", seeds=(0, 1))


def _on_cuda(calls, state, act=torch.bfloat16):
    def move(k, v):
        if not torch.is_tensor(v):
            return v
        return v.cuda() if k in ("a", "dt_bias", "weight") else v.cuda().to(act)
    return [{k: move(k, v) for k, v in c.items()} for c in calls], state["state"].cuda()


@pytest.mark.gpu
@pytest.mark.parametrize("name,base", [("triton_pdl", "triton"), ("triton_split_pdl", "triton_split")])
def test_gpu_the_triggering_form_gives_the_same_bits(name, base):
    """kda_norm=triton_pdl claims bit-identity to "triton", triton_split_pdl to "triton_split": three decode steps at
    the 48B's shape (bf16 activations), outputs and state."""
    from sparkops_triton import kda_norm

    trigger, plain = getattr(kda_norm, FORMS[name]), getattr(kda_norm, FORMS[base])
    calls, state = _on_cuda(*norm_calls(32, 128, (1, 1, 1), 21))
    s1, s2 = state.clone(), state.clone()
    for call in calls:
        got, want = trigger(**call, state=s1), plain(**call, state=s2)
        torch.cuda.synchronize()
        assert same_bits(got, want)
    assert same_bits(s1, s2)


@pytest.mark.gpu
def test_gpu_48b_decode_against_the_unfused_chain_and_timed():
    """At the 48B's decode shape (32 heads of 128, bf16): the fused step against kda=triton then gated_rmsnorm=triton
    (the chain rounds o to bf16 before its norm, so not bitwise: within 1e-4, and the states within 1e-10), then the
    chain, triton and triton_pdl timed on the same rotating sets, each in one CUDA graph. With SPARKOPS_PEROP_DIR set
    the per-token sums (20 KDA layers) go to perop-kdanorm-bfloat16.json, the rung's forecast: the chain's sum over
    the fastest fused form's (bench/perop_factor.py). The split form is held to the same bounds, its arrival counters
    left at zero after the replays."""
    from sparkops_triton import _arrival
    from sparkops_triton._workloads import kda_norm_args, time_calls
    from sparkops_triton.gated_rmsnorm import gated_rmsnorm
    from sparkops_triton.kda import kda
    from sparkops_triton.kda_norm import kda_norm, kda_norm_split, kda_norm_split_pdl, kda_norm_trigger

    from sparkops.gate.metrics import nmse

    calls, state = _on_cuda(*norm_calls(32, 128, (1, 1, 1), 23))
    for fn in (kda_norm, kda_norm_split):
        s_fused, s_chain = state.clone(), state.clone()
        for call in calls:
            core = {k: v for k, v in call.items() if k not in ("gate", "weight", "eps")}
            fused = fn(**call, state=s_fused)
            chain = gated_rmsnorm(kda(**core, state=s_chain), call["gate"], call["weight"], call["eps"])
            v = nmse("output", fused.float(), chain.float(), 1e-4)
            assert v.passed, f"{fn.__name__}: {v.line()}"
        v = nmse("state", s_fused, s_chain, 1e-10)
        assert v.passed, f"{fn.__name__}: {v.line()}"

    def chained(*a):
        return gated_rmsnorm(kda(*a[:10]), *a[10:])

    sets, nbytes = kda_norm_args(1)
    layers = 20  # the 48B's KDA layers
    times = {name: time_calls(fn, sets, nbytes) for name, fn in
             (("chain", chained), ("triton", kda_norm), ("triton_pdl", kda_norm_trigger),
              ("triton_split", kda_norm_split), ("triton_split_pdl", kda_norm_split_pdl))}
    alone = time_calls(kda, [s[:10] for s in sets], nbytes)
    assert all(t.mode == "graph" for t in times.values()), {n: t.mode for n, t in times.items()}
    assert_pool_clean(_arrival, str(sets[0][2].device))  # "cuda:0", as the pool is keyed
    rows = [f"{n:<11} {t}" for n, t in times.items()] + [f"kda alone   {alone}"]
    record_perop("kdanorm", "kda then gated_rmsnorm, against kda_norm (a KDA layer's decode step, 48B)", times,
                 layers, rows)
