"""moe_experts: every implementation against the reference; the reference against a plain loop over
experts in torch float64; only the chosen experts are read (poisoned unchosen experts) and, in the
reference, only they are dequantized."""

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.errors import BadInput
from sparkops.qweight import QWeight
from sparkops_numpy.moe_experts import moe_experts

from ._check import check_against_reference, qweight_values, rel_l2

OP = "moe_experts"


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


def make_moe(seed, t=5, d=64, f=32, e=6, k=2, qtype=Q.F32, shared=True):
    g = torch.Generator().manual_seed(seed)

    def qw(*shape, nm):
        return QWeight.from_float(torch.randn(*shape, generator=g) * shape[-1] ** -0.5, qtype, name=nm)

    ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)])
    return dict(x=torch.randn(t, d, generator=g), weights=torch.rand(t, k, generator=g) + 0.1, ids=ids,
                w_gate=qw(e, f, d, nm="gate_exps"), w_up=qw(e, f, d, nm="up_exps"), w_down=qw(e, d, f, nm="down_exps"),
                s_gate=qw(f, d, nm="gate_shexp") if shared else None, s_up=qw(f, d, nm="up_shexp") if shared else None,
                s_down=qw(d, f, nm="down_shexp") if shared else None)


def ffn(x, gate, up, down):
    return (torch.nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down.T


def torch_loop(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Token by token, slot by slot, over the fully dequantized stacks (float64)."""
    x = x.double()
    gate, up, down = (qweight_values(w) for w in (w_gate, w_up, w_down))
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for slot in range(ids.shape[1]):
            e = int(ids[t, slot])
            out[t] += float(weights[t, slot]) * ffn(x[t], gate[e], up[e], down[e])
    if s_gate is not None:
        out += ffn(x, qweight_values(s_gate), qweight_values(s_up), qweight_values(s_down))
    return out


@pytest.mark.parametrize("qtype,d,f,shared", [(Q.F32, 64, 32, True), (Q.F16, 64, 32, False), (Q.Q8_0, 64, 32, True),
                                              (Q.Q4_K, 256, 256, True), (Q.IQ1_S, 256, 256, False)],
                         ids=["F32", "F16", "Q8_0", "Q4_K", "IQ1_S"])
def test_reference_matches_a_loop_over_experts(qtype, d, f, shared):
    args = make_moe(int(qtype) + d, d=d, f=f, e=4, qtype=qtype, shared=shared)
    got = moe_experts(**args)
    assert got.dtype == torch.float32 and got.shape == args["x"].shape
    assert rel_l2(got, torch_loop(**args)) < 1e-6  # float32 output of float64 maths


def poison_unchosen(w: QWeight, chosen: set[int]) -> QWeight:
    """A copy of a stacked weight whose unchosen experts are NaN (floats) or 0xFF bytes (fp16 NaN scales)."""
    raw = w.raw.clone()
    for e in range(w.shape[0]):
        if e not in chosen:
            raw[e] = float("nan") if w.is_float else 0xFF
    return QWeight(raw, w.qtype, w.shape, w.name)


@pytest.mark.parametrize("qtype", [Q.F32, Q.Q8_0], ids=["F32", "Q8_0"])
def test_only_the_chosen_experts_are_read(impl_fn, qtype):
    args = make_moe(3, e=8, qtype=qtype)
    chosen = set(args["ids"].flatten().tolist())
    assert len(chosen) < 8
    clean = impl_fn(**args)
    poisoned = {**args, **{n: poison_unchosen(args[n], chosen) for n in ("w_gate", "w_up", "w_down")}}
    assert torch.isnan(qweight_values(poisoned["w_gate"])).any()  # the poison is really there
    assert torch.equal(impl_fn(**poisoned), clean)


def test_reference_dequantizes_only_chosen_expert_slices(monkeypatch):
    seen = []
    real = QWeight.dequantize

    def spy(self):
        seen.append((self.name, self.shape))
        return real(self)

    args = make_moe(4, e=8, qtype=Q.Q8_0)
    monkeypatch.setattr(QWeight, "dequantize", spy)
    moe_experts(**args)
    chosen = set(args["ids"].flatten().tolist())
    stacked = [s for s in seen if s[0].split("[")[0].endswith("_exps")]
    assert stacked and all(len(shape) == 2 for _, shape in stacked)
    assert {int(name.split("[")[1].rstrip("]")) for name, _ in stacked} == chosen


def test_shared_expert_is_added(impl_fn):
    args = make_moe(5)
    with_shared = impl_fn(**args)
    without = impl_fn(**{**args, "s_gate": None, "s_up": None, "s_down": None})
    shared = ffn(args["x"].double(), *(qweight_values(args[n]) for n in ("s_gate", "s_up", "s_down")))
    assert rel_l2(with_shared.double() - without.double(), shared) < 1e-5


def test_half_a_shared_expert_is_a_named_error():
    args = make_moe(6)
    with pytest.raises(BadInput, match="shared"):
        moe_experts(**{**args, "s_up": None})
    with pytest.raises(BadInput, match="ids"):
        moe_experts(**{**args, "ids": args["ids"] + 6})
