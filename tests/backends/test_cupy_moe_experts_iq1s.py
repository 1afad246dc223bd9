"""cupy_rowwarp_pdl_q8_iq1s and cupy_rowwarp_pdl_q8h_iq1s for moe_experts, one token's IQ1_S experts on Q8 activations
(kernels/moe_iq1s_q8.cu), on CUDA: the 48B's shape (256 experts, top-8, a shared expert of 1024) and small ones (one
super-block a down row, a shared expert wider than a routed one, no shared expert, one routed expert), every
activation dtype, within the act_q8 claim of the NumPy reference; a few tokens each as its own one-token call; an
invalid expert id gives NaN, not another expert's output; the same bits call after call and in a CUDA graph; the
calls its stated policy hands on go to the torch plugin. Skipped with a reason where there is no CUDA device or no
CuPy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.gate.tolerances import rule_for
from sparkops.gguf.quants import random_blocks
from sparkops.plugins import load_catalog
from sparkops.qweight import QWeight

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")

from sparkops_cupy._policies import iq1s_experts_passes  # noqa: E402
from sparkops_cupy.moe_experts_iq1s import moe_experts_rowwarp_pdl_q8_iq1s as experts  # noqa: E402
from sparkops_cupy.moe_experts_iq1s import moe_experts_rowwarp_pdl_q8h_iq1s as experts_h8  # noqa: E402
from sparkops_cupy.moe_experts_iq1s import moe_experts_rowwarp_pdl_q8h_iq1s_sg as experts_h8_sg  # noqa: E402
from sparkops_cupy.moe_experts_iq1s import moe_experts_rowwarp_pdl_q8h_iq1s_staged as experts_staged  # noqa: E402
from sparkops_cupy.moe_experts_iq1s import (  # noqa: E402
    moe_experts_rowwarp_pdl_q8h_iq1s_staged_flat as experts_staged_flat)
from sparkops_cupy.moe_experts_iq1s import (  # noqa: E402
    moe_experts_rowwarp_pdl_q8h_iq1s_staged_pair as experts_staged_pair)
from sparkops_cupy.moe_experts_iq1s import moe_experts_rowwarp_pdl_q8h_iq1s_t2 as experts_t2  # noqa: E402

#: the implementations: the pair of 16-row blocks, the one whose gate/up writes the hidden vector in Q8, and (session
#: 51) that one with the grid in shared memory, with its down's rows and hidden vector staged too, that with a gate/up
#: of two octets a row, that with the down's (slot, super-block) pairs dealt over the octets, and that over the
#: experts repacked two bits a weight (t2)
FORMS = {"q8": experts, "q8h": experts_h8, "q8h_sg": experts_h8_sg, "staged": experts_staged,
         "staged_pair": experts_staged_pair, "staged_flat": experts_staged_flat, "t2": experts_t2}
#: the forms that claim the q8h pair's bits
Q8H_BITS = ("q8h_sg", "staged")

DEV = torch.device("cuda")


def qweight(rng, shape, qtype, std) -> QWeight:
    return QWeight(torch.from_numpy(np.ascontiguousarray(random_blocks(rng, shape, qtype, std))).to(DEV), qtype, shape)


def args(seed, d, f, e, k, fs, qtype=Q.IQ1_S, dtype=torch.float32):
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    w = dict(w_gate=qweight(rng, (e, f, d), qtype, d ** -0.5), w_up=qweight(rng, (e, f, d), qtype, d ** -0.5),
             w_down=qweight(rng, (e, d, f), qtype, f ** -0.5))
    if fs:
        w.update(s_gate=qweight(rng, (fs, d), qtype, d ** -0.5), s_up=qweight(rng, (fs, d), qtype, d ** -0.5),
                 s_down=qweight(rng, (d, fs), qtype, fs ** -0.5))
    else:
        w.update(s_gate=None, s_up=None, s_down=None)
    ids = torch.randperm(e, generator=g)[:k].reshape(1, k)
    x, weights = torch.randn(1, d, generator=g), torch.rand(1, k, generator=g) + 0.1
    return x.to(DEV, dtype), weights.to(DEV), ids.to(DEV), w


def reference(x, weights, ids, w):
    cpu = {n: (v.to("cpu") if v is not None else None) for n, v in w.items()}
    return load_catalog().reference("moe_experts").resolve()(x.float().cpu(), weights.cpu(), ids.cpu(), **cpu)


def nmse(got, want) -> float:
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    assert torch.isfinite(got).all(), "NaN/Inf in the output (unwritten or overflowing values)"
    return float(((got - want) ** 2).sum() / (want ** 2).sum())


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d,f,e,k,fs", [(2304, 1024, 256, 8, 1024), (512, 256, 6, 3, 512), (1280, 768, 9, 5, 0),
                                        (256, 512, 4, 1, 1024)])
def test_one_tokens_iq1s_experts_are_within_the_act_q8_claim(dtype, d, f, e, k, fs, form):
    experts = FORMS[form]
    x, weights, ids, w = args(d + f + k, d, f, e, k, fs, dtype=dtype)
    got = experts(x, weights, ids, **w)
    assert got.shape == (1, d) and got.dtype == dtype
    limit = max(rule_for("moe_experts", "act_q8").limit,
                rule_for("moe_experts", "bf16").limit if dtype != torch.float32 else 0)
    want = reference(x, weights, ids, w)
    assert nmse(got, want) <= limit
    # each output row on its own too: a row the down skipped or took from another slot cannot hide in the sum
    err = (got.double().cpu() - want.double()).abs()[0]
    assert float(err.max()) <= 0.5 * float(want.double().pow(2).mean().sqrt())


@pytest.mark.parametrize("form", list(FORMS))
def test_an_invalid_expert_id_gives_nan_not_another_experts_output(form):
    experts = FORMS[form]
    x, weights, ids, w = args(1, 512, 256, 6, 3, 256)
    ids[0, 1] = 6  # one past the last expert
    assert torch.isnan(experts(x, weights, ids, **w)).all()


@pytest.mark.parametrize("form", list(FORMS))
def test_the_same_bits_call_after_call_and_in_a_cuda_graph(form):
    experts = FORMS[form]
    x, weights, ids, w = args(2, 2304, 1024, 256, 8, 1024, dtype=torch.bfloat16)
    first = experts(x, weights, ids, **w)
    assert torch.equal(experts(x, weights, ids, **w), first)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = experts(x, weights, ids, **w)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, first)


@pytest.mark.parametrize("form", list(FORMS))
def test_the_calls_it_hands_on_go_to_the_torch_plugin_as_its_stated_policy_says(form):
    from sparkops_torch.moe_experts import moe_experts as torch_experts

    experts = FORMS[form]

    x, weights, ids, w = args(3, 512, 256, 6, 3, 256, qtype=Q.Q4_K)
    assert "torch" in iq1s_experts_passes(x, weights, ids, **w) and "Q4_K" in iq1s_experts_passes(x, weights, ids, **w)
    assert torch.equal(experts(x, weights, ids, **w), torch_experts(x, weights, ids, **w))
    x, weights, ids, w = args(4, 512, 256, 6, 3, 256)
    x9, weights9, ids9 = x.repeat(9, 1), weights.repeat(9, 1), ids.repeat(9, 1)
    assert "9 tokens" in iq1s_experts_passes(x9, weights9, ids9, **w)
    assert torch.equal(experts(x9, weights9, ids9, **w), torch_experts(x9, weights9, ids9, **w))
    assert iq1s_experts_passes(x, weights, ids, **w) is None


@pytest.mark.parametrize("form", list(FORMS))
def test_a_few_tokens_are_each_their_own_one_token_call(form):
    """Up to MAX_T tokens run one after another (the op's gate cases have two): each token's row is its one-token
    call's, bit for bit, and the whole within the claim."""
    experts = FORMS[form]
    x, weights, ids, w = args(5, 512, 256, 8, 3, 256, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(5)
    x3 = torch.cat([x, torch.randn(2, 512, generator=g).to(DEV, x.dtype)])
    weights3 = torch.cat([weights, (torch.rand(2, 3, generator=g) + 0.1).to(DEV)])
    ids3 = torch.cat([ids, torch.stack([torch.randperm(8, generator=g)[:3] for _ in range(2)]).to(DEV)])
    assert iq1s_experts_passes(x3, weights3, ids3, **w) is None
    got = experts(x3, weights3, ids3, **w)
    assert got.shape == (3, 512)
    for t in range(3):
        assert torch.equal(got[t:t + 1], experts(x3[t:t + 1], weights3[t:t + 1], ids3[t:t + 1], **w))
    limit = max(rule_for("moe_experts", "act_q8").limit, rule_for("moe_experts", "bf16").limit)
    assert nmse(got, reference(x3, weights3, ids3, w)) <= limit


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d,f,e,k,fs", [(2304, 1024, 256, 8, 1024), (512, 256, 6, 3, 512), (1280, 768, 9, 5, 0),
                                        (2304, 256, 4, 1, 1024)])
@pytest.mark.parametrize("form", Q8H_BITS)
def test_the_shared_grid_forms_give_the_q8h_pairs_bits(dtype, d, f, e, k, fs, form):
    """The nibble grid's sums, a down of 8 rows a block, its rows and hidden vector staged or not: each output the same
    arithmetic (kernels/moe_iq1s_q8.cu), so the same bits. D is a multiple of 256 (gate/up's rows are whole
    super-blocks), so the down's blocks of 8 rows are always whole; (2304, 256) is a hidden vector of one super-block a
    slot, (1280, 768, ..., 0) one without a shared expert."""
    x, weights, ids, w = args(d + f + k + 11, d, f, e, k, fs, dtype=dtype)
    got = FORMS[form](x, weights, ids, **w)
    assert torch.equal(got, experts_h8(x, weights, ids, **w))
    assert torch.isfinite(got).all()


@pytest.mark.parametrize("form", ["staged", "staged_flat", "t2"])
def test_the_staged_downs_take_the_most_experts_a_token(form):
    """MAX_K routed experts: a staged down's shared memory holds MAX_K slots of 8 rows (the 48B's widths)."""
    from sparkops_cupy.moe_experts_iq1s import MAX_K

    x, weights, ids, w = args(29, 2304, 1024, 64, MAX_K, 1024, dtype=torch.bfloat16)
    got = FORMS[form](x, weights, ids, **w)
    if form in Q8H_BITS:
        assert torch.equal(got, experts_h8(x, weights, ids, **w))
    assert nmse(got, reference(x, weights, ids, w)) <= max(rule_for("moe_experts", "act_q8").limit,
                                                          rule_for("moe_experts", "bf16").limit)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d,f,e,k,fs", [(2304, 1024, 256, 8, 1024), (512, 256, 6, 3, 512), (1280, 768, 9, 5, 0),
                                        (256, 512, 4, 1, 1024)])
def test_the_t2_pair_gives_the_flat_staged_pairs_bits(dtype, d, f, e, k, fs):
    """The t2 codes are the grid's g + 1 (kernels/iq1s_t2.cuh), dotted and added in staged_flat's order: its bits."""
    x, weights, ids, w = args(d + f + k + 13, d, f, e, k, fs, dtype=dtype)
    got = experts_t2(x, weights, ids, **w)
    assert torch.equal(got, experts_staged_flat(x, weights, ids, **w))
    assert torch.isfinite(got).all()
