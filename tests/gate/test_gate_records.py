"""Check records: the engine runs a selection only while its record holds, and says what to run when not.

A record stops holding when the implementation's source changes, when it was made on another device
class, when the check failed, when the pinned reference, the claim or the op's tolerance row changed,
or (bit-identity) when the claimed-equal implementation changed. A new check lets it run again.
"""

from __future__ import annotations

import importlib
import importlib.util
import textwrap
import uuid

import pytest

import sparkops.cli.check_cmd as check_cmd
import sparkops.cli.swap_cmd as swap_cmd
from sparkops.cli import main
from sparkops.dispatch import Ops
from sparkops.errors import CheckFailed
from sparkops.gate import tolerances
from sparkops.gate.check import prove
from sparkops.gate.records import record_problem, source_files
from sparkops.plugins import load_catalog
from sparkops.registry.file import Registry
from sparkops.registry.plan import make_plan

EDITABLE = textwrap.dedent('''
    """A correct swiglu in its own file, so a test can edit the source of a selected implementation."""
    import torch.nn.functional as F

    from sparkops.plugins import hookimpl, tolerance


    def swiglu(gate, up):
        return (F.silu(gate.float()) * up.float()).to(gate.dtype)


    @hookimpl
    def register_implementations(register):
        register(op="swiglu", name="editable", backend="torch", devices=("cpu",), fn=swiglu, claim=tolerance())
''')


@pytest.fixture
def editable(tmp_path, monkeypatch):
    """(catalog with swiglu=editable, the file that defines it); swap/check in-process use this catalog."""
    path = tmp_path / f"editable_swiglu_{uuid.uuid4().hex[:8]}.py"
    path.write_text(EDITABLE)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    catalog = load_catalog(extra=[("editable", module)])
    monkeypatch.setattr(swap_cmd, "load_catalog", lambda: catalog)
    monkeypatch.setattr(check_cmd, "load_catalog", lambda: catalog)
    return catalog, path


def _registry_with(tmp_path, catalog, key, record=None):
    op, name = key.split("=")
    reg = Registry.empty(tmp_path / "registry.toml")
    reg.set(op, "cpu", name, check=record)
    reg.save()
    return Registry.load(reg.path)


def _problem(reg, catalog, op):
    entry = make_plan(reg, catalog, "cpu").entries[op]
    return entry.error


def test_no_record_is_refused_with_what_to_run(tmp_path, catalog):
    reg = _registry_with(tmp_path, catalog, "swiglu=fixture_ok")
    error = _problem(reg, catalog, "swiglu")
    assert "no check record" in error and "sparkops swap swiglu=fixture_ok --device cpu" in error
    with pytest.raises(CheckFailed, match="swiglu"):
        Ops(make_plan(reg, catalog, "cpu"))


def test_swap_then_edit_the_source_then_check_again(tmp_path, editable):
    catalog, path = editable
    registry = tmp_path / "registry.toml"
    assert main(["swap", "swiglu=editable", "--registry", str(registry)]) == 0
    Ops(make_plan(Registry.load(registry), catalog, "cpu"))  # runs: the record holds

    path.write_text(path.read_text().replace("return (F.silu", "return (F.silu  # tuned\n            "))
    plan = make_plan(Registry.load(registry), catalog, "cpu")
    assert "its source changed since it was checked" in plan.entries["swiglu"].error
    assert "run `sparkops swap swiglu=editable --device cpu`" in plan.entries["swiglu"].error
    with pytest.raises(CheckFailed, match="source changed"):
        Ops(plan)  # what the engine does when it is built

    assert main(["check", "swiglu=editable", "--write", "--registry", str(registry)]) == 0
    Ops(make_plan(Registry.load(registry), catalog, "cpu"))  # a new check lets it run again


def test_an_edit_to_a_helper_module_it_imports_makes_the_record_stale(tmp_path, monkeypatch):
    """The hash covers the modules of its own package that the implementation imports, transitively."""
    pkg = f"helper_pkg_{uuid.uuid4().hex[:8]}"
    root = tmp_path / pkg
    (root / "kernels").mkdir(parents=True)
    (root / "__init__.py").write_text(textwrap.dedent('''
        from sparkops.plugins import hookimpl, tolerance


        @hookimpl
        def register_implementations(register):
            register(op="swiglu", name="with_helper", backend="torch", devices=("cpu",),
                     fn=__name__ + ".swiglu:swiglu", claim=tolerance(), sources=("kernels/swiglu.cu",))
    '''))
    (root / "swiglu.py").write_text("from ._math import silu\n\n\ndef swiglu(gate, up):\n"
                                    "    return (silu(gate.float()) * up.float()).to(gate.dtype)\n")
    (root / "_math.py").write_text("from . import _consts\n\n\ndef silu(x):\n    return x * x.sigmoid()\n")
    (root / "_consts.py").write_text("ONE = 1.0\n")
    (root / "kernels" / "swiglu.cu").write_text("// a kernel source read at run time\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(pkg)
    catalog = load_catalog(extra=[("helper", module)])
    impl = catalog.get("swiglu", "with_helper")
    names = [n for n, _ in source_files(impl)]
    assert names == [f"{pkg}/_consts.py", f"{pkg}/_math.py", f"{pkg}/kernels/swiglu.cu", f"{pkg}/swiglu.py"]
    record = prove(impl, "cpu", catalog).record
    assert record["passed"] and record_problem(impl, record, "cpu") is None
    for edited in ("_consts.py", "kernels/swiglu.cu"):
        path = root / edited
        before = path.read_text()
        path.write_text(before + "\n// edited\n" if edited.endswith(".cu") else before + "TWO = 2.0\n")
        assert record_problem(impl, record, "cpu") == "its source changed since it was checked"
        path.write_text(before)
        assert record_problem(impl, record, "cpu") is None


def test_records_from_another_device_class_or_a_failed_check_are_refused(tmp_path, catalog, session):
    record = prove(catalog.get("swiglu", "fixture_ok"), "cpu", catalog, session=session).record
    impl = catalog.get("swiglu", "fixture_ok")
    assert record_problem(impl, record, "cpu", catalog) is None
    assert "checked on 'cuda', not 'cpu'" in record_problem(impl, {**record, "device_class": "cuda"}, "cpu")
    assert "its recorded check failed" in record_problem(impl, {**record, "passed": False}, "cpu")
    assert "no cases" in record_problem(impl, {**record, "cases": 0}, "cpu")
    assert "not swiglu=fixture_ok" in record_problem(impl, {**record, "impl": "memorized"}, "cpu")
    reg = _registry_with(tmp_path, catalog, "swiglu=fixture_ok", {**record, "device_class": "cuda"})
    assert "checked on 'cuda'" in _problem(reg, catalog, "swiglu")


def test_a_changed_reference_lock_invalidates_records(tmp_path, catalog, session, private_lock):
    record = prove(catalog.get("swiglu", "fixture_ok"), "cpu", catalog, session=session).record
    reg = _registry_with(tmp_path, catalog, "swiglu=fixture_ok", record)
    assert _problem(reg, catalog, "swiglu") is None

    text = private_lock.read_text()
    private_lock.write_text(text.replace("prompt_seed = ", "prompt_seed = 1", 1))  # the pinned reference changed
    assert "reference.lock) changed" in _problem(reg, catalog, "swiglu")
    private_lock.write_text(text + "\n# a comment is not a change of the reference\n")
    assert _problem(reg, catalog, "swiglu") is None


def test_a_changed_claim_or_tolerance_row_invalidates_records(catalog, session, monkeypatch):
    impl = catalog.get("swiglu", "fixture_ok")
    record = prove(impl, "cpu", catalog, session=session).record
    assert "claim changed" in record_problem(impl, {**record, "claim": "within tolerance of the reference (bf16)"},
                                             "cpu")
    tighter = {**tolerances.OP_RULES["swiglu"], "fp32": tolerances.Rule("nmse", 1e-12)}
    monkeypatch.setitem(tolerances.OP_RULES, "swiglu", tighter)
    assert "tolerance table changed" in record_problem(impl, record, "cpu")


def test_a_bit_identity_record_goes_stale_when_its_target_changes(catalog, session):
    impl = catalog.get("add_rmsnorm", "fused_exact")
    record = prove(impl, "cpu", catalog, session=session).record
    assert record_problem(impl, record, "cpu", catalog) is None
    stale = {**record, "target_source_hash": "0" * 64}
    assert "add_rmsnorm=chain, which it claims to be bit-identical to, changed" in \
        record_problem(impl, stale, "cpu", catalog)


def test_a_record_goes_stale_when_its_ops_cases_change(catalog, session, monkeypatch):
    """A record keeps the digest of the op's cases it was proven on (cases_digest: the source of the op's case
    sweep): new cases - one the implementation's own kernels take, say - make every record of that op stale, so the
    next swap or mend proves it on them."""
    import sparkops.gate.cases as cases_mod
    import sparkops.gate.records as records_mod

    impl = catalog.get("swiglu", "fixture_ok")
    record = prove(impl, "cpu", catalog, session=session).record
    assert record["cases_digest"] == cases_mod.cases_digest("swiglu")
    assert record_problem(impl, record, "cpu") is None
    assert "the op's cases changed" in record_problem(impl, {**record, "cases_digest": "0" * 64}, "cpu")
    # a record from before records kept the digest holds while the op's cases are those of that time, and no longer
    legacy = {k: v for k, v in record.items() if k != "cases_digest"}
    monkeypatch.setitem(records_mod.CASES_BEFORE_RECORDS_KEPT_THEM, "swiglu", record["cases_digest"])
    assert record_problem(impl, legacy, "cpu") is None
    monkeypatch.setitem(records_mod.CASES_BEFORE_RECORDS_KEPT_THEM, "swiglu", "1" * 64)
    assert "src/sparkops/ops/swiglu.py" in record_problem(impl, legacy, "cpu")


def test_the_cases_digest_follows_the_case_sources(monkeypatch, tmp_path):
    """The digest reads the module that defines the op's cases and ops/_cases.py: the same bytes, the same digest;
    another sweep, another digest."""
    import sparkops.gate.cases as cases_mod

    first = cases_mod.cases_digest("linear")
    assert first == cases_mod.cases_digest("linear") and first != cases_mod.cases_digest("swiglu")
    source = tmp_path / "linear_cases.py"
    source.write_text("def cases(seed):\n    return []\n")
    spec = importlib.util.spec_from_file_location("linear_cases_elsewhere", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Contract:
        cases = staticmethod(module.cases)

    monkeypatch.setattr(cases_mod, "get_contract", lambda op: Contract)
    cases_mod._cases_digest.cache_clear()
    try:
        other = cases_mod.cases_digest("linear")
        source.write_text("def cases(seed):\n    return [1]\n")
        cases_mod._cases_digest.cache_clear()
        assert other != first and cases_mod.cases_digest("linear") != other
    finally:
        cases_mod._cases_digest.cache_clear()


def test_the_legacy_digests_are_those_the_records_before_them_were_proven_on():
    """CASES_BEFORE_RECORDS_KEPT_THEM names every op that existed when records began to keep their cases' digest (an op
    added since - add_rmsnorm_router, short_conv_kda_norm, moe_experts_add_rmsnorm, linear_add_rmsnorm - has no record
    without one, so none to hold), and each op whose cases did not change since (all but linear's and moe_experts',
    which gained one-token cases in session 27) still matches it: an unchanged op's old records hold, a changed op's do
    not."""
    from sparkops.gate.cases import cases_digest
    from sparkops.gate.records import CASES_BEFORE_RECORDS_KEPT_THEM
    from sparkops.ops import OP_NAMES

    added_since = {"add_rmsnorm_router", "short_conv_kda_norm", "moe_experts_add_rmsnorm", "linear_add_rmsnorm"}
    assert set(CASES_BEFORE_RECORDS_KEPT_THEM) == set(OP_NAMES) - added_since
    changed = {op for op in CASES_BEFORE_RECORDS_KEPT_THEM if cases_digest(op) != CASES_BEFORE_RECORDS_KEPT_THEM[op]}
    assert {"linear", "moe_experts"} <= changed


def _lock_update(path, changed: list[str]) -> None:
    """A later version of the lock as `sparkops reference update` writes one: a pin changed (a row of the table
    tightened) and a history entry saying what changed."""
    import tomlkit

    from sparkops.gate import lockref

    doc = tomlkit.parse(path.read_text())
    row = doc["thresholds"]["ops"]["rmsnorm"]["fp32"]
    row["limit"] = float(row["limit"]) / 2
    path.write_text(tomlkit.dumps(doc))
    history = doc["history"]
    history.append({"date": "2026-12-07T00:00:00+00:00", "reason": "a test's update",
                    "digest": lockref.reference_digest(path), "changed": changed})
    path.write_text(tomlkit.dumps(doc))


@pytest.mark.parametrize("changed,holds", [
    (["thresholds (tightened or extended)"], True),  # the table: each record's own row is held apart
    (["reference of rmsnorm", "thresholds (tightened or extended)"], True),  # another op's reference
    (["model: top_logits"], True),  # the model pins: no op record reads them
    (["reference of swiglu"], False),  # this op's reference
    (["core files read by the references"], False),
    (["numpy 2.1.0 -> 2.2.0"], False),
])
def test_a_lock_update_keeps_the_records_it_did_not_touch(tmp_path, catalog, session, private_lock, changed, holds):
    record = prove(catalog.get("swiglu", "fixture_ok"), "cpu", catalog, session=session).record
    reg = _registry_with(tmp_path, catalog, "swiglu=fixture_ok", record)
    _lock_update(private_lock, changed)
    problem = _problem(reg, catalog, "swiglu")
    assert (problem is None) == holds, problem
    if not holds:
        assert "reference.lock) changed" in problem


def test_a_record_outlives_no_lock_edited_by_hand_after_an_update(tmp_path, catalog, session, private_lock):
    """The history vouches only for the versions `reference update` wrote: pins edited since its last entry leave
    every record stale, as the digest alone always did."""
    record = prove(catalog.get("swiglu", "fixture_ok"), "cpu", catalog, session=session).record
    reg = _registry_with(tmp_path, catalog, "swiglu=fixture_ok", record)
    _lock_update(private_lock, ["thresholds (tightened or extended)"])
    assert _problem(reg, catalog, "swiglu") is None
    text = private_lock.read_text()
    private_lock.write_text(text.replace("prompt_seed = ", "prompt_seed = 1", 1))
    assert "reference.lock) changed" in _problem(reg, catalog, "swiglu")
