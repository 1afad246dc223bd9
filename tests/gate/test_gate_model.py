"""The model-level gate: k3-nano under a candidate registry against the pinned golden logits.

Each deliberately wrong implementation, selected into an otherwise correct registry (the torch
plugin's float32 ops), is refused by the model gate: by KL and top-1 at its worst depth, by NaN
logits where an output was left unwritten (the candidate runs poisoned), and by the model-level
bit-identity rerun where a fused op differs only in its last bits.
"""

from __future__ import annotations

import pytest

from sparkops.cli import main
from sparkops.gate.model_gate import model_check
from sparkops.ops import OP_NAMES
from sparkops.registry.file import Registry

from .test_gate_wrong_impls import WRONG

#: a single token (a chunk's first), one past a 64-token KDA chunk; two decoded tokens after each.
#: Every wrong implementation already shows at depth 1 (a prefill, then decode steps), so the
#: refusals are checked there; the controls also cross the chunk boundary.
DEPTHS = (1, 65)
STEPS = 2


@pytest.fixture(scope="module")
def weights():
    from sparkops.engine import load_model

    return load_model("k3-nano")


def torch_registry(path, device="cpu", **override) -> Registry:
    """Every op on the torch plugin's float32 implementation (quantize_act, sample: the reference), then overrides."""
    reg = Registry.empty(path)
    for op in OP_NAMES:
        reg.set(op, device, "numpy" if op in ("quantize_act", "sample") and device == "cpu" else "torch")
    for op, name in override.items():
        reg.set(op, device, name)
    return reg


def _check(registry, catalog, weights, depths=DEPTHS):
    return model_check("k3-nano", registry, depths=depths, decode_steps=STEPS, catalog=catalog, weights=weights)


def test_the_torch_plugin_passes_against_the_pinned_golden_logits(tmp_path, catalog, weights):
    out = _check(torch_registry(tmp_path / "r.toml"), catalog, weights)
    assert out.passed and not out.lock_problems, out.report  # the golden run agreed with reference.lock
    assert out.variant == "fp32" and [r.depth for r in out.depths] == list(DEPTHS)
    assert all(r.positions == d + STEPS for r, d in zip(out.depths, DEPTHS))
    assert any("no valid check record" in u for u in out.unproven)  # said, not hidden


@pytest.mark.parametrize("key", WRONG)
def test_the_model_gate_refuses_each_wrong_implementation(tmp_path, catalog, weights, key):
    op, name = key.split("=")
    out = _check(torch_registry(tmp_path / "r.toml", **{op: name}), catalog, weights, depths=(1,))
    assert not out.passed, out.report
    if key == "add_rmsnorm=fused_lastbit":  # logits agree to ~1e-12 in KL: only the bytes show it
        assert all(r.passed for r in out.depths)
        assert [(b.impl, b.passed) for b in out.bit_identity] == [("fused_lastbit", False)]
    elif key == "moe_router=no_selection_bias":  # its flips would be pinned away: the pin itself refuses it
        assert out.routing.inconsistent > 0 and "not a top-k of the router's own scores" in out.summary
    elif key == "swiglu=last_row_unwritten":
        assert out.worst.kl_max == float("inf")  # NaN poison reached the logits
    else:
        assert out.worst is not None and not out.worst.passed
    assert "FAIL" in out.summary


def test_a_true_fusion_passes_the_model_level_bit_identity(tmp_path, catalog, weights):
    out = _check(torch_registry(tmp_path / "r.toml", add_rmsnorm="fused_exact"), catalog, weights)
    assert out.passed, out.report
    assert [(b.impl, b.target, b.passed) for b in out.bit_identity] == [("fused_exact", "chain", True)]


def _reruns(monkeypatch):
    """The labels of the bit-identity reruns model_check makes (run_depths wrapped)."""
    import sparkops.gate.model_gate as mg

    labels, real = [], mg.run_depths

    def counted(*a, **k):
        if k.get("label", "").startswith("bit-identity"):
            labels.append(k["label"])
        return real(*a, **k)

    monkeypatch.setattr(mg, "run_depths", counted)
    return labels


def test_true_claims_on_two_ops_take_one_joint_rerun(tmp_path, catalog, weights, monkeypatch):
    """Two true bit-identity claims (add_rmsnorm, swiglu): one rerun with both targets in place proves both."""
    labels = _reruns(monkeypatch)
    out = _check(torch_registry(tmp_path / "r.toml", add_rmsnorm="fused_exact", swiglu="twin"), catalog, weights)
    assert out.passed, out.report
    assert labels == ["bit-identity, all 2 claims' targets in place at once"]
    assert [(b.op, b.impl, b.target, b.passed) for b in out.bit_identity] == [
        ("add_rmsnorm", "fused_exact", "chain", True), ("swiglu", "twin", "fixture_ok", True)]
    assert all("one rerun with all 2 claims' targets in place" in b.detail for b in out.bit_identity)


def test_a_false_claim_beside_a_true_one_is_named_by_the_reruns_alone(tmp_path, catalog, weights, monkeypatch):
    """The joint rerun differs (add_rmsnorm=fused_lastbit differs in its last bits), so each claim is rerun alone:
    the false one fails the gate, the true one passes, and both say why they were rerun."""
    labels = _reruns(monkeypatch)
    out = _check(torch_registry(tmp_path / "r.toml", add_rmsnorm="fused_lastbit", swiglu="twin"), catalog, weights,
                 depths=(1,))
    assert not out.passed and all(r.passed for r in out.depths), out.report
    assert labels == ["bit-identity, all 2 claims' targets in place at once",
                      "bit-identity, add_rmsnorm=fused_lastbit vs chain", "bit-identity, swiglu=twin vs fixture_ok"]
    assert [(b.impl, b.passed) for b in out.bit_identity] == [("fused_lastbit", False), ("twin", True)]
    assert all(b.detail.startswith("the joint rerun differed, so each claim was rerun alone") for b in out.bit_identity)
    assert "logits differ at depth 1" in out.bit_identity[0].detail


def test_check_model_cli(tmp_path, catalog, monkeypatch, capsys):
    import sparkops.plugins

    import sparkops.gate.model_gate as mg

    monkeypatch.setattr(sparkops.plugins, "load_catalog", lambda extra=None: catalog)  # what model_check loads
    monkeypatch.setattr(mg, "_GOLDEN", {})  # a golden cached by an earlier test in this process is not announced
    monkeypatch.setattr(mg, "_TAPES", {})
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    torch_registry(good).save()
    torch_registry(bad, attention="kv_off_by_one").save()
    args = ["check", "--model", "k3-nano", "--depths", "1", "--decode-steps", "2", "--registry"]
    assert main(args + [str(good)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    # each run announced and timed on stderr (a NumPy golden of the 48B at depth 16384 runs for hours: session 11
    # waited 200 s on a silent one); the golden is cached per process, so it is announced once
    assert "model gate: golden run on the float64 NumPy reference" in err and "--golden-registry" in err
    assert "TFLOP at ~" in err and "GFLOP/s (a float64 matmul here) - at least" in err  # its cost, said up front
    assert err.index("TFLOP at ~") < err.index("golden run on the float64 NumPy reference (CPU; ")
    assert f"model gate: candidate under {good} on cpu: depth 1 done in" in err
    assert main(args + [str(bad)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "worst depth" in out and "FAIL" in out
    assert main(args + [str(good), "--dtype", "bfloat16"]) == 0  # bf16 activations: judged by the bf16 rule
    assert "(bf16:" in " ".join(capsys.readouterr().out.split())
    assert main(["check", "rmsnorm=torch", "--dtype", "float32"]) == 2  # --dtype belongs to the model gate


def test_a_golden_run_that_disagrees_with_the_lock_fails_the_gate(tmp_path, catalog, weights, private_lock):
    import re

    text = private_lock.read_text()
    first = re.search(r"top_logits = \[([-0-9.e]+),", text)
    private_lock.write_text(text.replace(first.group(0), f"top_logits = [{float(first.group(1)) + 0.5!r},", 1))
    out = _check(torch_registry(tmp_path / "r.toml"), catalog, weights)
    assert not out.passed and any("depth 1 position 0" in p for p in out.lock_problems), out.report


@pytest.mark.parametrize("key", ["attention=kv_off_by_one", "moe_router=missing_scale"])
def test_the_gate_on_the_captured_step_still_refuses(tmp_path, catalog, weights, key):
    op, name = key.split("=")
    out = model_check("k3-nano", torch_registry(tmp_path / "r.toml", **{op: name}), depths=(1,), decode_steps=STEPS,
                      catalog=catalog, weights=weights, captured=True)
    assert not out.passed, out.report


def test_bisect_names_the_selection_that_fails(tmp_path, catalog, weights):
    from sparkops.gate.bisect import bisect_registry

    base = torch_registry(tmp_path / "base.toml")
    cand = torch_registry(tmp_path / "cand.toml", attention="kv_off_by_one", rmsnorm="numpy")
    trials = bisect_registry("k3-nano", cand, base, device="cpu", weights=weights, depths=(1,), decode_steps=STEPS,
                             catalog=catalog)
    assert [(t.op, t.impl, t.base_impl, t.passed) for t in trials] == [
        ("rmsnorm", "numpy", "torch", True), ("attention", "kv_off_by_one", "torch", False)]
    assert base.selection("attention", "cpu").impl == "torch"  # the trials never touched the base


def test_bisect_cli(tmp_path, catalog, monkeypatch, capsys):
    import sparkops.plugins

    monkeypatch.setattr(sparkops.plugins, "load_catalog", lambda extra=None: catalog)
    base, bad = tmp_path / "base.toml", tmp_path / "bad.toml"
    torch_registry(base).save()
    torch_registry(bad, moe_router="missing_scale").save()
    args = ["check", "--model", "k3-nano", "--depths", "1", "--decode-steps", "2", "--registry", str(bad),
            "--bisect", str(base)]
    assert main(args) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "moe_router" in out and "missing_scale" in out and "FAIL" in out
    assert main(["check", "--model", "k3-nano", "--registry", str(base), "--bisect", str(base)]) == 2
    assert main(["check", "--model", "k3-nano", "--registry", str(bad), "--bisect", str(tmp_path / "no.toml")]) == 2
    assert "--bisect" in " ".join(capsys.readouterr().err.split())
    assert main(["check", "--model", "k3-nano", "--cache-dtype", "int8"]) == 2
    assert "--cache-dtype int8" in " ".join(capsys.readouterr().err.split())
