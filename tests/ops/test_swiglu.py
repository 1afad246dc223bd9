"""swiglu: every implementation against the reference; the reference against torch's silu; no
overflow for large gate logits."""

import torch
import torch.nn.functional as F

from sparkops_numpy.swiglu import swiglu

from ._check import check_against_reference, rel_l2

OP = "swiglu"


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


def test_reference_matches_torch_silu():
    g = torch.Generator().manual_seed(8)
    gate, up = torch.randn(5, 300, generator=g, dtype=torch.float64) * 4, torch.randn(5, 300, generator=g,
                                                                                    dtype=torch.float64)
    out = swiglu(gate, up)
    assert out.dtype == torch.float64
    assert rel_l2(out, F.silu(gate) * up) < 1e-14


def test_extreme_gates_stay_finite(impl_fn):
    gate = torch.tensor([[-1e4, -80.0, -3.0, 0.5, 80.0, 1e4]])
    up = torch.tensor([[1.5, -2.0, 0.25, 3.0, -1.0, 0.5]])
    out = impl_fn(gate, up)
    assert torch.isfinite(out).all()
    assert rel_l2(out, F.silu(gate.double()) * up.double()) < 1e-6


def test_output_dtype_is_gate_dtype():
    out = swiglu(torch.randn(2, 8).to(torch.bfloat16), torch.randn(2, 8).to(torch.bfloat16))
    assert out.dtype == torch.bfloat16
