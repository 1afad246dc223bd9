"""bench/registry_keep.py: a carried registry is kept only where every check record in it still holds today; with
--mend, a record that no longer holds is proven again (once per implementation) and written, as a swap would."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import SimpleNamespace

from tests.helpers import REPO


def _keep(*paths, device="cpu", mend=False):
    return subprocess.run([sys.executable, "bench/registry_keep.py", "--device", device, *(["--mend"] if mend else []),
                           *map(str, paths)], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_a_registry_whose_records_hold_is_kept_and_a_stale_one_dropped_with_its_base(tmp_path):
    good, stale = tmp_path / "cuda-good.toml", tmp_path / "cuda-stale.toml"
    text = (REPO / "registry.toml").read_text()
    good.write_text(text)
    # the CPU swiglu's record as if its source had changed since it was checked
    i = text.index("[ops.swiglu.cpu.check]")
    j = text.index("source_hash = ", i)
    stale.write_text(text[:j] + 'source_hash = "' + "0" * 64 + '"' + text[text.index("\n", j):])
    (tmp_path / "cuda-stale.toml.base").write_text("the base\n")
    r = _keep(good, stale)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "kept cuda-good.toml" in r.stdout
    assert "dropped cuda-stale.toml: swiglu:" in r.stdout and "source changed" in r.stdout
    assert r.stdout.strip().endswith("1 of 2 carried registries kept")
    assert good.exists() and not stale.exists() and not (tmp_path / "cuda-stale.toml.base").exists()


def test_an_unreadable_registry_is_dropped_by_name(tmp_path):
    bad = tmp_path / "cuda-bad.toml"
    bad.write_text("[ops.swiglu.cpu\n")
    r = _keep(bad)
    assert r.returncode == 0 and "dropped cuda-bad.toml:" in r.stdout and not bad.exists()


# -- --mend: a stale record is proven again (once per implementation) and written as `sparkops swap` writes it ------
def _stale(text, op="swiglu"):
    """registry.toml's text with OP's CPU record as if its source had changed since it was checked."""
    i = text.index(f"[ops.{op}.cpu.check]")
    j = text.index("source_hash = ", i)
    return text[:j] + 'source_hash = "' + "0" * 64 + '"' + text[text.index("\n", j):]


def _plan_holds(path):
    from sparkops.plugins import load_catalog
    from sparkops.registry.file import Registry
    from sparkops.registry.plan import make_plan

    plan = make_plan(Registry.load(path), load_catalog(), "cpu")
    return plan.ok, [e.error for e in plan.entries.values() if e.error]


def _proof_lines(out, key):
    return [line for line in out.splitlines() if line.startswith(f"proof {key} (")]


def test_mend_reproves_a_stale_record_writes_it_and_keeps_the_registry(tmp_path):
    reg = tmp_path / "cuda-stale.toml"
    reg.write_text(_stale((REPO / "registry.toml").read_text()))
    (tmp_path / "cuda-stale.toml.base").write_text("the base\n")
    assert not _plan_holds(reg)[0]
    r = _keep(reg, mend=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "mended cuda-stale.toml: swiglu=torch re-proven" in r.stdout
    [line] = _proof_lines(r.stdout, "swiglu=torch")
    assert line.endswith(": PASS") and " s): swiglu=torch on cpu: " in line
    assert r.stdout.strip().endswith("1 of 1 carried registries kept")
    assert _plan_holds(reg) == (True, [])
    assert (tmp_path / "cuda-stale.toml.base").read_text() == "the base\n"  # what it was made over is unchanged
    text = reg.read_text()
    assert 'source_hash = "' + "0" * 64 not in text
    assert text.count('fallback = "reference"') == (REPO / "registry.toml").read_text().count('fallback = "reference"')


def test_without_mend_the_same_stale_registry_is_dropped_and_nothing_proven(tmp_path):
    reg = tmp_path / "cuda-stale.toml"
    reg.write_text(_stale((REPO / "registry.toml").read_text()))
    r = _keep(reg)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "dropped cuda-stale.toml: swiglu:" in r.stdout and "source changed" in r.stdout
    assert "proof " not in r.stdout and "mended" not in r.stdout
    assert r.stdout.strip().endswith("0 of 1 carried registries kept") and not reg.exists()


def test_one_proof_mends_every_registry_selecting_the_stale_implementation_plain_or_per_type(tmp_path):
    text = _stale((REPO / "registry.toml").read_text())
    a, b = tmp_path / "cuda-a.toml", tmp_path / "cuda-b.toml"
    a.write_text(text)
    b.write_text(text + '\n[ops.linear.cpu.by_type.Q4_K]\nimpl = "torch"\n')  # a type's selection with no record
    r = _keep(a, b, mend=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(_proof_lines(r.stdout, "swiglu=torch")) == 1 and len(_proof_lines(r.stdout, "linear=torch")) == 1
    assert "mended cuda-a.toml: swiglu=torch re-proven" in r.stdout
    assert "mended cuda-b.toml: linear@Q4_K=torch, swiglu=torch re-proven" in r.stdout
    assert r.stdout.strip().endswith("2 of 2 carried registries kept")
    assert _plan_holds(a) == (True, []) and _plan_holds(b) == (True, [])
    from sparkops.registry.file import Registry

    typed = Registry.load(b).type_selections("linear", "cpu")["Q4_K"]
    assert typed.impl == "torch" and typed.check["passed"] is True and typed.check["impl"] == "torch"


def test_mend_drops_unproven_a_registry_with_another_problem_than_a_stale_record(tmp_path):
    text = _stale((REPO / "registry.toml").read_text())  # a stale swiglu record, and a selection that cannot run here
    old = '[ops.rmsnorm.cpu]\nimpl = "torch"\nfallback = "reference"'
    assert old in text
    reg = tmp_path / "cuda-other.toml"
    reg.write_text(text.replace(old, '[ops.rmsnorm.cpu]\nimpl = "triton"\nfallback = "error"'))
    (tmp_path / "cuda-other.toml.base").write_text("the base\n")
    r = _keep(reg, mend=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "dropped cuda-other.toml:" in r.stdout and "rmsnorm=triton" in r.stdout
    assert "proof " not in r.stdout and "mended" not in r.stdout
    assert r.stdout.strip().endswith("0 of 1 carried registries kept")
    assert not reg.exists() and not (tmp_path / "cuda-other.toml.base").exists()


def _module():
    spec = importlib.util.spec_from_file_location("registry_keep", REPO / "bench" / "registry_keep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _failing_prove(calls):
    def prove(impl, device, catalog):
        calls.append(impl.key)
        record = {"op": impl.op, "impl": impl.name, "passed": False}
        return SimpleNamespace(passed=False, record=record, summary=f"{impl.key} on {device}: 9 cases, 3 failing: FAIL")
    return prove


def test_a_failed_proof_is_never_written_and_its_registries_are_dropped(tmp_path, monkeypatch, capsys):
    from sparkops.plugins import load_catalog
    from sparkops.registry.file import Registry

    rk = _module()
    text = _stale((REPO / "registry.toml").read_text())
    a, b = tmp_path / "cuda-a.toml", tmp_path / "cuda-b.toml"
    a.write_text(text)
    b.write_text(text)
    calls = []
    monkeypatch.setattr("sparkops.gate.check.prove", _failing_prove(calls))
    # mend() itself: nothing written where its proof failed, and why names the implementation and its summary
    catalog = load_catalog()
    stale = rk.stale_selections(a, catalog, "cpu")
    assert [s.label for s in stale] == ["swiglu=torch"]
    proofs = rk.prove_each(stale, catalog, "cpu")
    assert calls == ["swiglu=torch"] and not proofs["swiglu=torch"].passed
    why = rk.mend(a, stale, proofs, catalog, "cpu")
    assert why == "swiglu=torch failed its re-proof (swiglu=torch on cpu: 9 cases, 3 failing: FAIL)"
    assert a.read_text() == text
    # main --mend: one proof for both, no registry saved, both dropped with that reason
    calls.clear()
    capsys.readouterr()

    def never_save(self, path=None):
        raise AssertionError(f"a registry was written after a failed proof: {path or self.path}")

    monkeypatch.setattr(Registry, "save", never_save)
    assert rk.main(["--device", "cpu", "--mend", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert calls == ["swiglu=torch"] and len(_proof_lines(out, "swiglu=torch")) == 1
    for name in ("cuda-a.toml", "cuda-b.toml"):
        assert f"dropped {name}: swiglu=torch failed its re-proof (swiglu=torch on cpu: 9 cases, 3 failing: FAIL)" \
            in out
    assert out.strip().endswith("0 of 2 carried registries kept") and not a.exists() and not b.exists()


def test_a_proof_that_cannot_run_is_a_failed_one(tmp_path, monkeypatch, capsys):
    from sparkops.errors import CheckFailed

    def prove(impl, device, catalog):
        raise CheckFailed(f"{impl.key} cannot run here: no such device")

    rk = _module()
    reg = tmp_path / "cuda-a.toml"
    reg.write_text(_stale((REPO / "registry.toml").read_text()))
    monkeypatch.setattr("sparkops.gate.check.prove", prove)
    assert rk.main(["--device", "cpu", "--mend", str(reg)]) == 0
    out = capsys.readouterr().out
    assert "dropped cuda-a.toml: swiglu=torch failed its re-proof (the proof could not run: CheckFailed: " in out
    assert out.strip().endswith("0 of 1 carried registries kept") and not reg.exists()


def test_a_registry_that_would_run_an_op_on_its_fallback_is_dropped_not_kept(tmp_path):
    """A selection that cannot run here with fallback = "reference" leaves a plan that runs (the op on the NumPy
    reference), but not the registry that was made: it is dropped, naming the op and the fallback, with or without
    --mend, and nothing is proven for it."""
    text = (REPO / "registry.toml").read_text()
    old = '[ops.rmsnorm.cpu]\nimpl = "torch"\nfallback = "reference"'
    assert old in text, "registry.toml's CPU rmsnorm entry changed: update this test"
    for mend in (False, True):
        reg = tmp_path / f"cuda-fell-{mend}.toml"
        reg.write_text(text.replace(old, '[ops.rmsnorm.cpu]\nimpl = "triton"\nfallback = "reference"'))
        r = _keep(reg, mend=mend)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"dropped {reg.name}: rmsnorm: FALLBACK to the reference" in r.stdout, r.stdout
        assert not reg.exists() and "proof " not in r.stdout
