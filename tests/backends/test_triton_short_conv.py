"""short_conv=triton: the gate on the contract's cases and awkward windows in Triton's interpreter (CPU);
the same on CUDA, and the 48B shapes timed (decode as a CUDA graph), on a GPU."""

import pytest
import torch

from tests.backends.triton_support import check_case, interpreted_fixture, prove_contract

OP, NAME = "short_conv", "triton"
kernels = interpreted_fixture("short_conv")


def calls(c, w, steps, seed, fresh=False):
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(c, w, generator=g) * 0.5
    state = torch.zeros(w - 1, c) if fresh else torch.randn(w - 1, c, generator=g)
    return [dict(x=torch.randn(t, c, generator=g) * 2, weight=weight) for t in steps], {"state": state}


def test_contract_cases_in_interpreter(kernels):
    prove_contract(OP, NAME, kernels.short_conv)


@pytest.mark.parametrize("c,w,steps", [(5, 4, (1, 2, 1)), (130, 4, (40, 1)), (33, 2, (3, 17)), (7, 1, (2,)),
                                       (300, 6, (2, 1, 19))])
def test_awkward_windows_in_interpreter(kernels, c, w, steps):
    """Calls shorter than the window (the old window survives in part), one tap, more time blocks than one."""
    cs, state = calls(c, w, steps, c * 13 + w)
    check_case(OP, NAME, kernels.short_conv, cs, state, label=f"C{c}_W{w}")


def test_state_is_updated_in_place_in_interpreter(kernels):
    cs, state = calls(64, 4, (5,), 1)
    s = state["state"]
    ptr = s.data_ptr()
    kernels.short_conv(cs[0]["x"], cs[0]["weight"], s)
    assert s.data_ptr() == ptr and torch.equal(s, cs[0]["x"][-3:].float())


@pytest.mark.gpu
def test_gpu_contract_cases_and_48b_timing():
    from sparkops_triton._workloads import short_conv_args, time_calls
    from sparkops_triton.short_conv import short_conv

    prove_contract(OP, NAME, short_conv, "cuda", seeds=(0, 1))
    cs, state = calls(4096, 4, (70, 1, 1), 3)
    check_case(OP, NAME, short_conv, cs, state, device="cuda", label="48b_channels")
    for t in (1, 4096):
        sets, nbytes = short_conv_args(t)
        timing = time_calls(short_conv, sets, nbytes)
        print(f"\n{OP}=triton T={t} C=4096 W=4 bf16: {timing}")
        assert t > 1 or timing.mode == "graph", "the decode step must be capturable in a CUDA graph"


@pytest.mark.parametrize("c,w", [(256 * 3, 4), (300, 4), (37, 6), (8, 1), (64, 2), (33, 5)])
def test_the_pdl_form_is_the_same_bits_at_one_token_and_longer_in_interpreter(kernels, c, w):
    """triton_pdl's one-token path (window and taps prefetched, each tap taken by a sum of one value and zeros) and
    its longer path give the plain kernel's bytes, output and new window, over consecutive calls. 768 channels: whole
    channel blocks (three of 256 at one token, six of 128 longer), no ragged one, as at the 48B's 12288 (the GPU
    test's shape, which took 48 and 96 programs a call here: the same paths); 300, 37, 33: ragged last blocks."""
    cs, state = calls(c, w, (1, 1, 3, 1), c + w)
    s_plain, s_pdl = state["state"].clone(), state["state"].clone()
    for call in cs:
        y_plain = kernels.short_conv(call["x"], call["weight"], s_plain)
        y_pdl = kernels.short_conv_pdl(call["x"], call["weight"], s_pdl)
        assert torch.equal(y_plain.view(torch.int32), y_pdl.view(torch.int32)), call["x"].shape
        assert torch.equal(s_plain.view(torch.int32), s_pdl.view(torch.int32))


def test_pdl_contract_cases_in_interpreter(kernels):
    prove_contract(OP, "triton_pdl", kernels.short_conv_pdl)


@pytest.mark.gpu
def test_gpu_pdl_form_bits_replayed_and_timed_beside_the_plain_one():
    """On CUDA: triton_pdl's bytes against triton's at the 48B's fused q/k/v conv (12288 channels), eager and
    replayed from CUDA graphs between a writer of x (as the step's GEMV is), then both timed at one token."""
    from sparkops_triton._workloads import time_calls
    from sparkops_triton.short_conv import short_conv, short_conv_pdl

    from tests.backends.triton_support import record_perop

    prove_contract(OP, "triton_pdl", short_conv_pdl, "cuda", seeds=(0, 1))
    g = torch.Generator(device="cuda").manual_seed(5)
    c = 3 * 4096
    weight = torch.randn(c, 4, device="cuda", generator=g) * 0.5
    src = torch.randn(8, c, device="cuda", generator=g).bfloat16()
    x = torch.empty(1, c, device="cuda", dtype=torch.bfloat16)
    outs = {}
    for name, fn in (("triton", short_conv), ("triton_pdl", short_conv_pdl)):
        state = torch.randn(3, c, device="cuda", generator=torch.Generator(device="cuda").manual_seed(9))
        k = torch.zeros(1, dtype=torch.long, device="cuda")
        graph = torch.cuda.CUDAGraph()
        try:
            x.copy_(src[0:1])
            fn(x, weight, state)  # warm (compiles) outside the capture
            state.copy_(torch.randn(3, c, device="cuda", generator=torch.Generator(device="cuda").manual_seed(9)))
            ys = []
            with torch.cuda.graph(graph):
                x.copy_(torch.index_select(src, 0, k))  # the kernel before writes x
                y = fn(x, weight, state)
                k.add_(1)
            for _ in range(5):
                graph.replay()
                ys.append(y.clone())
            outs[name] = (torch.stack(ys), state.clone())
        finally:
            graph.reset()
    (ya, sa), (yb, sb) = outs["triton"], outs["triton_pdl"]
    assert torch.equal(ya.view(torch.int16), yb.view(torch.int16))
    assert torch.equal(sa.view(torch.int32), sb.view(torch.int32))
    # timed at one token over rotating sets in one CUDA graph each way (each call after the one before, as the PDL
    # form waits), a token's 20 calls the record (perop-convpdl-bfloat16.json: the rung's forecast on short_conv)
    sets = [(torch.randn(1, c, device="cuda", generator=g).bfloat16(), weight,
             torch.randn(3, c, device="cuda", generator=g)) for _ in range(16)]
    nbytes = 2 * c * 2 + c * 4 * 4 + 2 * 3 * c * 4
    times = {name: time_calls(fn, sets, nbytes)
             for name, fn in (("triton", short_conv), ("triton_pdl", short_conv_pdl))}
    assert all(t.mode == "graph" for t in times.values()), {n: t.mode for n, t in times.items()}
    rows = [f"{n:<11} {t}" for n, t in times.items()]
    rows.append(f"pdl/plain   {times['triton_pdl'].us / times['triton'].us:.3f}")
    record_perop("convpdl", f"the fused q/k/v short conv at one token ({c} channels, 4 taps, 48B), triton against "
                 "triton_pdl, 20 calls a token", times, 20, rows)
