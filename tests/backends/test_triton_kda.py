"""kda=triton (recurrent, the fused decode step) and kda=triton_chunked (prefill): the gate on the contract's
cases and on awkward lengths and strong decay in Triton's interpreter (CPU); on a GPU, the same on CUDA,
the decode step at the 48B shape replayed in a CUDA graph against its state-bytes roofline, and the
chunked prefill at T=32768 against fla's chunk_kda (4.59 ms per layer, anchors.md section 4)."""

import pytest
import torch

from tests.backends.triton_support import (
    check_case,
    interpreted_fixture,
    prove_contract,
)

OP = "kda"
recurrent = interpreted_fixture("kda")
chunked = interpreted_fixture("kda_chunked")


def kda_calls(h, d, steps, seed, gate_std=1.0, log_a=(-1.0, 1.0), state_std=0.1):
    g = torch.Generator().manual_seed(seed)
    lo, hi = log_a
    a = -torch.exp(torch.rand(h, generator=g) * (hi - lo) + lo)
    dt_bias = torch.randn(h * d, generator=g) * 0.5
    calls = [dict(q=torch.randn(t, h, d, generator=g), k=torch.randn(t, h, d, generator=g),
                  v=torch.randn(t, h, d, generator=g), g=torch.randn(t, h, d, generator=g) * gate_std,
                  beta=torch.randn(t, h, generator=g) * 2, a=a, dt_bias=dt_bias, scale=d ** -0.5, l2_eps=1e-6)
             for t in steps]
    return calls, {"state": torch.randn(h, d, d, generator=g) * state_std}


def test_recurrent_contract_cases_in_interpreter(recurrent):
    prove_contract(OP, "triton", recurrent.kda)


def test_chunked_contract_cases_in_interpreter(chunked):
    prove_contract(OP, "triton_chunked", chunked.kda_chunked)


@pytest.mark.parametrize("h,d,steps", [(1, 16, (16, 1)), (3, 16, (65, 15, 64)), (2, 24, (40,))])
def test_chunked_awkward_lengths_in_interpreter(chunked, h, d, steps):
    """The recurrent/chunked threshold exactly, one past a chunk, a full chunk after a short call, D not a
    power of 2."""
    calls, state = kda_calls(h, d, steps, h * 100 + d + sum(steps))
    check_case(OP, "triton_chunked", chunked.kda_chunked, calls, state, label=f"H{h}_D{d}")


def test_chunked_survives_decay_that_overflows_a_factorised_exp_in_interpreter(chunked):
    """Γ inside one chunk falls below -709 (exp(-Γ) would overflow even float64): masked before exp, the
    kernel must stay finite and right (spec 3.4, FlashKDA#7)."""
    calls, state = kda_calls(2, 16, (130,), 7, gate_std=6.0, log_a=(2.0, 2.5), state_std=0.3)
    c = calls[0]
    gate = c["a"][:, None] * torch.nn.functional.softplus(c["g"] + c["dt_bias"].view(2, 16))
    assert gate[:64].sum(0).min() < -709  # the case really is that strong
    check_case(OP, "triton_chunked", chunked.kda_chunked, calls, state, label="strong_decay")


def test_chunked_unrolled_diagonal_is_bitwise_the_loop_in_interpreter(chunked, monkeypatch):
    """DIAG_UNROLL (a tune study variant) moves loads, not arithmetic: the same bits as the runtime loop."""
    calls, state = kda_calls(2, 16, (70,), 5)
    args = dict(calls[0])
    outs = []
    for unroll in (False, True):
        monkeypatch.setattr(chunked, "DIAG_UNROLL", unroll)
        s = state["state"].clone()
        outs.append((chunked.kda_chunked(**args, state=s), s))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


def test_chunked_bf16_scratch_passes_the_contract_and_stays_near_float32_in_interpreter(chunked, monkeypatch):
    """SCRATCH_BF16 (a tune study variant): W, Qg, Kg kept in bfloat16 between the two kernels. The contract still
    holds, both forms, and the outputs and states stay within NMSE 1e-4 of the float32 scratch's (bfloat16 rounding
    of three operands whose products are tf32 anyway); the scratch really is bfloat16 (the outputs differ)."""
    calls, state = kda_calls(2, 24, (16, 70), 17)
    base = []
    for call in calls:
        s = state["state"].clone()
        base.append((chunked.kda_chunked(**call, state=s), s))
    monkeypatch.setattr(chunked, "SCRATCH_BF16", True)
    prove_contract(OP, "triton_chunked", chunked.kda_chunked)
    prove_contract(OP, "triton_chunked_split", chunked.kda_chunked_split)
    differs = False
    for call, (o_ref, s_ref) in zip(calls, base):
        for fn in (chunked.kda_chunked, chunked.kda_chunked_split):
            s = state["state"].clone()
            o = fn(**call, state=s)
            for got, want in ((o, o_ref), (s, s_ref)):
                err = float(((got.double() - want.double()) ** 2).sum() / (want.double() ** 2).sum())
                assert err < 1e-4, (fn.__name__, err)
            differs = differs or not torch.equal(o, o_ref)
    assert differs, "SCRATCH_BF16 changed nothing: the scratch was not bfloat16"


def test_chunked_split_contract_cases_in_interpreter(chunked):
    prove_contract(OP, "triton_chunked_split", chunked.kda_chunked_split)


def test_chunked_split_tf32_contract_cases_in_interpreter(chunked):
    prove_contract(OP, "triton_chunked_split_tf32", chunked.kda_chunked_split_tf32)


def test_chunked_split_tf32_bf16scratch_contract_cases_in_interpreter(chunked):
    prove_contract(OP, "triton_chunked_split_tf32_bf16scratch", chunked.kda_chunked_split_tf32_bf16scratch)


def test_chunked_split_tf32_bf16scratch_hands_the_state_kernel_bfloat16(chunked, monkeypatch):
    """The variant's state kernel reads W, Qg, Kg in bfloat16 (the tf32 variant's in float32), whatever the module's
    SCRATCH_BF16 study switch says; U and the state stay float32. Its outputs stay within the contract of the
    float32-scratch tf32 variant's (NMSE 1e-4: bf16 keeps 8 bits of each operand)."""
    seen = []
    kernel = chunked._chunk_state_kernel

    class Spy:
        def __getitem__(self, grid):
            launch = kernel[grid]

            def call(w, u, qg, kg, *args, **kw):
                seen.append((w.dtype, u.dtype, qg.dtype, kg.dtype))
                return launch(w, u, qg, kg, *args, **kw)
            return call
    monkeypatch.setattr(chunked, "_chunk_state_kernel", Spy())
    calls, state = kda_calls(2, 16, (40, 70), 9)
    outs = {}
    for fn in (chunked.kda_chunked_split_tf32, chunked.kda_chunked_split_tf32_bf16scratch):
        s = state["state"].clone()
        outs[fn.__name__] = [fn(**c, state=s) for c in calls] + [s]
    bf, f32 = torch.bfloat16, torch.float32
    assert seen == [(f32, f32, f32, f32)] * 2 + [(bf, f32, bf, bf)] * 2, seen
    for got, want in zip(outs["kda_chunked_split_tf32_bf16scratch"], outs["kda_chunked_split_tf32"]):
        err = float(((got.double() - want.double()) ** 2).sum() / (want.double() ** 2).sum())
        assert err < 1e-4, err
    monkeypatch.setattr(chunked, "SCRATCH_BF16", True)  # the study switch does not reach the tf32 variant
    chunked.kda_chunked_split_tf32(**calls[0], state=state["state"].clone())
    assert seen[-1] == (bf, f32, bf, bf)
    monkeypatch.setattr(chunked, "SCRATCH_BF16", False)
    chunked.kda_chunked_split_tf32_bf16scratch(**calls[0], state=state["state"].clone())
    assert seen[-1] == (bf, f32, bf, bf)


def test_chunked_split_tf32_launches_its_prepare_products_in_tf32(chunked, monkeypatch):
    """The variant differs from "triton_chunked_split" only in the prepare products' precision: every prepare
    kernel that takes PREC gets "tf32", the state kernel keeps DOT_PRECISION (the interpreter cannot tell tf32 from
    float32, so the launch arguments are what can be checked here)."""
    seen = {}
    for name in ("_split_products_kernel", "_split_inverse_kernel", "_split_wu_kernel", "_chunk_state_kernel"):
        kernel = getattr(chunked, name)

        class Spy:
            def __init__(self, kernel, name):
                self.kernel, self.name = kernel, name

            def __getitem__(self, grid):
                launch = self.kernel[grid]

                def call(*args, **kw):
                    seen[self.name] = kw["PREC"]
                    return launch(*args, **kw)
                return call
        monkeypatch.setattr(chunked, name, Spy(kernel, name))
    calls, state = kda_calls(2, 16, (40,), 5)
    chunked.kda_chunked_split_tf32(**calls[0], state=state["state"].clone())
    assert seen == {"_split_products_kernel": "tf32", "_split_inverse_kernel": "tf32", "_split_wu_kernel": "tf32",
                    "_chunk_state_kernel": chunked.DOT_PRECISION}, seen
    chunked.kda_chunked_split(**calls[0], state=state["state"].clone())
    assert seen["_split_products_kernel"] == chunked.PREPARE_PRECISION != "tf32", seen


@pytest.mark.parametrize("h,d,steps,gate_std", [(2, 16, (70,), 1.0), (2, 24, (16, 70), 1.0), (2, 16, (130,), 6.0)])
def test_chunked_split_is_bitwise_the_one_kernel_form_in_interpreter(chunked, h, d, steps, gate_std):
    """The four-launch prepare computes every value with the same helpers in the same order: the same bits as the one
    prepare kernel, outputs and states, over ragged chunks, D not a power of two, and decay strong enough to
    overflow a factorised exp."""
    calls, state = kda_calls(h, d, steps, 31 + h + d, gate_std=gate_std)
    states = [state["state"].clone(), state["state"].clone()]
    for call in calls:
        one = chunked.kda_chunked(**call, state=states[0])
        split = chunked.kda_chunked_split(**call, state=states[1])
        assert torch.isfinite(one).all() and torch.equal(one, split), call["q"].shape
    assert torch.equal(states[0], states[1])


def test_recurrent_awkward_heads_in_interpreter(recurrent):
    calls, state = kda_calls(3, 40, (2, 1, 3), 11)
    check_case(OP, "triton", recurrent.kda, calls, state, label="H3_D40")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["triton", "triton_chunked", "triton_chunked_split", "triton_chunked_split_tf32",
                                  "triton_chunked_split_tf32_bf16scratch"])
def test_gpu_contract_cases(name):
    from sparkops_triton import kda, kda_chunked

    fn = kda.kda if name == "triton" else getattr(kda_chunked, name.replace("triton_", "kda_"))
    prove_contract(OP, name, fn, "cuda", seeds=(0, 1))


@pytest.mark.gpu
def test_gpu_48b_decode_step_in_a_cuda_graph():
    from sparkops_triton._workloads import kda_args, time_calls
    from sparkops_triton.kda import kda
    from sparkops_triton.kda_chunked import kda_chunked

    calls, state = kda_calls(32, 128, (1, 1, 1), 5)
    check_case(OP, "triton", kda, calls, state, device="cuda", label="48b_decode")
    sets, nbytes = kda_args(1)
    for name, fn in (("triton", kda), ("triton_chunked", kda_chunked)):
        t = time_calls(fn, sets, nbytes)
        print(f"\nkda={name} decode step H=32 D=128 (state 2 MiB r+w): {t}   goal: <= 2 us per layer (2x roofline)")
        assert t.mode == "graph", "the decode step must be capturable in a CUDA graph"


@pytest.mark.gpu
def test_gpu_48b_chunked_prefill_against_recurrent_and_fla():
    from sparkops_triton._workloads import kda_args, time_calls
    from sparkops_triton.kda import kda
    from sparkops_triton.kda_chunked import kda_chunked

    from sparkops.gate.metrics import nmse

    (args,), _ = kda_args(4096, n_sets=1, seed=9)
    s_rec, s_chk = args[7].clone(), args[7].clone()
    o_rec = kda(*args[:7], s_rec, *args[8:])
    o_chk = kda_chunked(*args[:7], s_chk, *args[8:])
    v_out, v_state = nmse("output", o_chk.float(), o_rec.float(), 1e-3), nmse("state", s_chk, s_rec, 1e-3)
    print(f"\nkda chunked vs recurrent, T=4096 at 48B sizes: {v_out.line()} / {v_state.line()}")
    assert v_out.passed and v_state.passed
    for t in (4096, 32768):
        sets, nbytes = kda_args(t, n_sets=2)
        timing = time_calls(kda_chunked, sets, nbytes, graph=False, replays=5)
        print(f"kda=triton_chunked prefill T={t}: {timing.us / 1e3:.3f} ms per layer "
              f"({t / timing.us:.2f} M tokens/s; fla chunk_kda at T=32768: 4.59 ms)")


#: each prefill form against the one it was derived from: (form, its base, NMSE bound on output and state, must it be
#: faster). The split form computes the one kernel's float32 sums in other kernels (not bitwise once compiled, session
#: 11), so 1e-5, a hundred times tighter than the op's 1e-3 against the reference; tf32 prepare products keep 10
#: mantissa bits (measured 2.3e-6) and bfloat16 scratch 8 (2.5e-7), so 1e-4. The last two are registered for speed
#: alone, so each must be faster than its base (2% noise allowed)
DERIVED_FORMS = [
    ("triton_chunked_split", "triton_chunked", 1e-5, False),
    ("triton_chunked_split_tf32", "triton_chunked_split", 1e-4, True),
    ("triton_chunked_split_tf32_bf16scratch", "triton_chunked_split_tf32", 1e-4, True),
]


@pytest.mark.gpu
@pytest.mark.parametrize("form,base,bound,faster", DERIVED_FORMS, ids=[f[0] for f in DERIVED_FORMS])
def test_gpu_48b_chunked_form_agrees_with_its_base_and_is_timed(form, base, bound, faster):
    """A prefill form against its base at the 48B's sizes: the distance printed and bounded at T=4096 and 16384
    (whether bitwise said too), then both timed side by side per layer at T=16384 and 32768 (session 12: split/one
    0.78, tf32/split 0.85, bf16 scratch/tf32 0.865)."""
    from sparkops_triton import kda_chunked
    from sparkops_triton._workloads import kda_args, time_calls

    from sparkops.gate.metrics import nmse

    fn, fn_base = (getattr(kda_chunked, name.replace("triton_", "kda_")) for name in (form, base))
    for t in (4096, 16384):
        (args,), _ = kda_args(t, n_sets=1, seed=11)
        s_base, s_form = args[7].clone(), args[7].clone()
        o_base = fn_base(*args[:7], s_base, *args[8:])
        o_form = fn(*args[:7], s_form, *args[8:])
        same = torch.equal(o_base, o_form) and torch.equal(s_base, s_form)
        v_out = nmse("output", o_form.float(), o_base.float(), bound)
        v_state = nmse("state", s_form, s_base, bound)
        print(f"\nkda {form} vs {base}, T={t}: {'bitwise' if same else 'not bitwise'}; {v_out.line()} / "
              f"{v_state.line()}")
        assert v_out.passed and v_state.passed, f"T={t}"
    for t in (16384, 32768):
        sets, nbytes = kda_args(t, n_sets=2)
        before = time_calls(fn_base, sets, nbytes, graph=False, replays=5)
        after = time_calls(fn, sets, nbytes, graph=False, replays=5)
        print(f"\nkda prefill T={t} per layer: {base} {before.us / 1e3:.3f} ms, {form} {after.us / 1e3:.3f} ms "
              f"(ratio {after.us / before.us:.3f})")
        if faster:
            assert after.us < before.us * 1.02, f"T={t}: {form} is not faster than {base}"


@pytest.mark.gpu
def test_gpu_48b_chunked_kernels_timed_one_by_one():
    """Where a 32768-token KDA layer's time goes, kernel by kernel (torch.profiler's device times, the median of 3
    calls), for both prepare forms: the split form's four phases (norms, products, inverse, W/U) and the state kernel.
    The next optimization of the prepare picks its phase from this table (session 11: the one-kernel prepare took
    201 of the 48B forward's 925 ms). Every kernel must show up with a positive time."""
    import statistics

    from sparkops_triton._workloads import kda_args
    from sparkops_triton.kda_chunked import (
        kda_chunked,
        kda_chunked_split,
        kda_chunked_split_tf32,
        kda_chunked_split_tf32_bf16scratch,
    )
    from torch.profiler import ProfilerActivity, profile

    from sparkops.bench.diagnose import tally

    (args,), _ = kda_args(32768, n_sets=1, seed=13)
    for name, fn, kernels in (("triton_chunked", kda_chunked, ("_chunk_prepare_kernel", "_chunk_state_kernel")),
                              ("triton_chunked_split", kda_chunked_split,
                               ("_split_norms_kernel", "_split_products_kernel", "_split_inverse_kernel",
                                "_split_wu_kernel", "_chunk_state_kernel")),
                              ("triton_chunked_split_tf32", kda_chunked_split_tf32,
                               ("_split_norms_kernel", "_split_products_kernel", "_split_inverse_kernel",
                                "_split_wu_kernel", "_chunk_state_kernel")),
                              ("triton_chunked_split_tf32_bf16scratch", kda_chunked_split_tf32_bf16scratch,
                               ("_split_norms_kernel", "_split_products_kernel", "_split_inverse_kernel",
                                "_split_wu_kernel", "_chunk_state_kernel"))):
        fn(*args[:7], args[7].clone(), *args[8:])  # compiled before the profile
        torch.cuda.synchronize()
        per_call: dict[str, list[float]] = {k: [] for k in kernels}
        for _ in range(3):
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                fn(*args[:7], args[7].clone(), *args[8:])
                torch.cuda.synchronize()
            by_name = tally(prof.events())[2]  # {kernel name: (seconds, launches)}: diagnose's own reading
            for k in kernels:
                per_call[k].append(sum(sec for n, (sec, _) in by_name.items() if k in n))
        med = {k: statistics.median(v) for k, v in per_call.items()}
        print(f"\nkda={name} T=32768 per layer, by kernel (ms): "
              + ", ".join(f"{k} {sec * 1e3:.3f}" for k, sec in med.items()) + f"; sum {sum(med.values()) * 1e3:.3f}")
        assert all(sec > 0 for sec in med.values()), med
