"""The gate on CUDA: placement on the device, poisoning of CUDA allocations, bytes compared from the
device, the record's device name and compute capability, and the model gate on the GPU."""

from __future__ import annotations

import pytest
import torch

from sparkops.gate.check import prove

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("key, expected", [
    ("swiglu=last_row_unwritten", "NaN"),
    ("add_rmsnorm=fused_lastbit", "differ in their bits from chain"),
    ("attention=kv_off_by_one", "state 'cache'"),
    ("linear=tp_reduce_twice", "output: nmse 1 "),
    ("short_conv=stale_window", "state 'state'"),
])
def test_wrong_implementations_are_refused_on_cuda(catalog, key, expected):
    op, name = key.split("=")
    outcome = prove(catalog.get(op, name), "cuda", catalog)
    assert not outcome.passed and expected in outcome.report, outcome.report


@pytest.mark.parametrize("key", ["swiglu=fixture_ok", "add_rmsnorm=fused_exact", "attention=fixture_ok"])
def test_controls_pass_on_cuda_and_record_the_device(catalog, key):
    op, name = key.split("=")
    outcome = prove(catalog.get(op, name), "cuda", catalog)
    assert outcome.passed, outcome.report
    rec = outcome.record
    major, minor = torch.cuda.get_device_capability()
    assert rec["device_class"] == "cuda" and rec["compute_capability"] == f"{major}.{minor}"
    assert rec["device_name"] == torch.cuda.get_device_name() and rec["versions"]["cuda"] != "none"


def test_the_model_gate_on_cuda(tmp_path, catalog):
    from sparkops.gate.model_gate import model_check

    from .test_gate_model import torch_registry

    good = model_check("k3-nano", torch_registry(tmp_path / "a.toml", "cuda"), device="cuda", depths=(1, 65),
                       decode_steps=2, catalog=catalog)
    assert good.passed and good.selections["attention"] == "attention=torch", good.report
    for key in ("attention=kv_off_by_one", "swiglu=last_row_unwritten", "add_rmsnorm=fused_lastbit"):
        op, name = key.split("=")
        bad = model_check("k3-nano", torch_registry(tmp_path / "b.toml", "cuda", **{op: name}), device="cuda",
                          depths=(1,), decode_steps=2, catalog=catalog)
        assert not bad.passed and bad.selections[op] == key, bad.report
