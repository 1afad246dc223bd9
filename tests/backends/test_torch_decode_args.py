"""The CUDA decode-shaped tests (test_torch_cuda.py) build one call's arguments for every op with a CUDA torch form.
Those tests run only on a GPU; this one runs the same builders on the CPU, so an op added without its arguments fails
in CI rather than on the lent GPU (kda_norm did, in GPU session 21)."""

from __future__ import annotations

import pytest
import torch

from sparkops.ops import get_contract
from tests.backends.test_torch_cuda import DECODE_IMPLS, as_tuple, call, decode_args, resolve, variant_of


@pytest.mark.parametrize("op,name,fn", DECODE_IMPLS, ids=[f"{op}={name}" for op, name, _ in DECODE_IMPLS])
def test_decode_args_build_a_call_the_torch_form_takes(op, name, fn):
    args = decode_args(op, device="cpu", variant=variant_of(op, name))
    missing = set(get_contract(op).param_names) - set(args)
    assert not missing, f"{op}: decode_args lacks {sorted(missing)}"
    outs = as_tuple(call(op, resolve(fn), args))
    assert all(torch.isfinite(o.float()).all() for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point())
