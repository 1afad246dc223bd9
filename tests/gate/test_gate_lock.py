"""reference.lock: verify recomputes every pin and passes on the checkout; it fails after tampering;
update is the only writer, keeps the reason and refuses to loosen; thresholds never loosen."""

from __future__ import annotations

import re

import pytest

from sparkops.cli import main
from sparkops.errors import BadInput, CheckFailed
from sparkops.gate import lockref, tolerances
from tests.helpers import REPO

CHECKOUT_LOCK = REPO / "reference.lock"


def test_thresholds_are_never_looser_than_the_pinned_ones():
    pinned = lockref.load(CHECKOUT_LOCK)["thresholds"]
    assert tolerances.loosenings(pinned) == []
    # and the comparison itself sees a loosening when there is one
    looser = {**pinned, "ops": {**pinned["ops"], "rmsnorm": {**pinned["ops"]["rmsnorm"],
                                                             "fp32": {"metric": "nmse", "limit": 1e-13, "tie": 0.0}}}}
    assert tolerances.loosenings(looser) == ["rmsnorm (fp32): limit 1e-11 is looser than the pinned 1e-13"]
    model = {**pinned, "model": {**pinned["model"], "fp32": {**pinned["model"]["fp32"], "top1_min": 1.5}}}
    assert any("top1_min" in p for p in tolerances.loosenings(model))


def test_reference_verify_passes_on_the_checkout():
    rep = lockref.verify(CHECKOUT_LOCK)
    assert rep.ok, rep.problems
    assert any(c.startswith("model k3-nano") for c in rep.checked)  # the golden logits were recomputed


def test_reference_verify_cli_passes_and_fails_after_tampering(tmp_path, capsys):
    assert main(["reference", "verify", "--lock", str(CHECKOUT_LOCK)]) == 0
    tampered = tmp_path / "tampered.lock"
    text = CHECKOUT_LOCK.read_text()
    first = re.search(r"top_logits = \[([-0-9.e]+),", text)
    value = float(first.group(1))
    tampered.write_text(text.replace(first.group(0), f"top_logits = [{value + 1e-3!r},", 1))
    assert main(["reference", "verify", "--lock", str(tampered)]) == 1
    out = capsys.readouterr()
    said, err = " ".join(out.out.split()), " ".join(out.err.split())  # rich wraps long lines
    assert "depth 1 position 0 (prefill): logit of token" in said
    assert "does not hold on this machine" in err and "sparkops reference update --reason" in err


@pytest.mark.parametrize("edit, message", [
    (lambda t: re.sub(r'(rmsnorm = \{impl = "numpy", source_hash = ")[0-9a-f]{4}', r"\g<1>0000", t),
     "rmsnorm: the source of its reference 'numpy' changed"),
    (lambda t: t.replace('fp32 = {metric = "nmse", limit = 1e-11', 'fp32 = {metric = "nmse", limit = 1e-13', 1),
     "threshold loosened: rmsnorm (fp32)"),
    (lambda t: re.sub(r'support_hash = "[0-9a-f]{4}', 'support_hash = "0000', t), "the core files the references read"),
])
def test_reference_verify_names_what_was_tampered_with(tmp_path, edit, message):
    tampered = tmp_path / "tampered.lock"
    tampered.write_text(edit(CHECKOUT_LOCK.read_text()))
    rep = lockref.verify(tampered, with_model=False)
    assert not rep.ok and any(message in p for p in rep.problems), rep.problems


def test_reference_verify_catches_changed_model_weights(tmp_path):
    tampered = tmp_path / "tampered.lock"
    tampered.write_text(re.sub(r'weights_digest = "[0-9a-f]{4}', 'weights_digest = "0000', CHECKOUT_LOCK.read_text()))
    rep = lockref.verify(tampered)
    assert any("differ from the pinned digest" in p for p in rep.problems)


def test_update_is_the_only_writer_keeps_the_reason_and_never_loosens(tmp_path, monkeypatch):
    lock = tmp_path / "fresh.lock"
    with pytest.raises(BadInput, match="--reason"):
        lockref.update("", lock, with_model=False)
    written, changes, _ = lockref.update("pin the references for the test", lock, with_model=False)
    assert written and changes == ["created"]
    text = lock.read_text()
    assert "# Why: the NumPy references ARE the definition" in text and "pin the references for the test" in text
    digest = lockref.reference_digest(lock)
    assert digest == lockref.load(lock)["history"][-1]["digest"]

    assert lockref.update("nothing changed, nothing written", lock, with_model=False)[0] is False
    assert lock.read_text() == text

    looser = {**tolerances.OP_RULES["swiglu"], "fp32": tolerances.Rule("nmse", 1e-9)}
    monkeypatch.setitem(tolerances.OP_RULES, "swiglu", looser)
    with pytest.raises(CheckFailed, match=r"swiglu \(fp32\): limit 1e-09 is looser than the pinned 1e-11"):
        lockref.update("try to loosen swiglu", lock, with_model=False)
    assert lock.read_text() == text

    tighter = {**tolerances.OP_RULES["swiglu"], "fp32": tolerances.Rule("nmse", 1e-12)}
    monkeypatch.setitem(tolerances.OP_RULES, "swiglu", tighter)
    written, changes, _ = lockref.update("tighten swiglu after measuring", lock, with_model=False)
    assert written and changes == ["thresholds (tightened or extended)"]
    history = lockref.load(lock)["history"]
    assert [h["reason"] for h in history] == ["pin the references for the test", "tighten swiglu after measuring"]
    assert lockref.reference_digest(lock) != digest  # a changed reference: records made before are stale


def test_the_digest_covers_the_pins_not_the_comments_or_the_history(tmp_path):
    lock = tmp_path / "fresh.lock"
    text = CHECKOUT_LOCK.read_text()
    lock.write_text("# a new comment\n" + text + '\n[[history]]\ndate = "x"\nreason = "y"\ndigest = "z"\nchanged = []\n')
    assert lockref.reference_digest(lock) == lockref.reference_digest(CHECKOUT_LOCK)
    lock.write_text(text.replace("decode_steps = 3", "decode_steps = 4"))
    assert lockref.reference_digest(lock) != lockref.reference_digest(CHECKOUT_LOCK)
    lock.write_text("this is [ not toml")
    assert lockref.reference_digest(lock) == "unreadable"
    with pytest.raises(BadInput, match="not valid TOML"):
        lockref.verify(lock)
