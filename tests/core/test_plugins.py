"""Plugins: discovered through entry points, loaded one by one, contracts enforced at registration."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import types

import pytest

from sparkops.plugins import hookimpl, load_catalog, tolerance
from tests.helpers import REPO, fake_distribution, run_cli

BUILTIN = {"numpy", "torch", "triton", "cupy"}


def test_builtin_plugins_come_from_entry_points():
    cat = load_catalog()
    found = {p.name: p for p in cat.plugins}
    assert BUILTIN <= set(found)
    for name in BUILTIN:
        assert found[name].distribution == "sparkops", "built-ins must ship through the sparkops distribution"
        assert found[name].status == "ok", found[name].error


def test_every_op_has_its_reference():
    cat = load_catalog()
    from sparkops.ops import CONTRACTS

    for op, contract in CONTRACTS.items():
        ref = cat.reference(op)
        assert ref.backend == "numpy" and ref.available, op


def _module(name: str, register_body: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.hookimpl = hookimpl
    mod.tolerance = tolerance
    exec(f"@hookimpl\ndef register_implementations(register):\n{register_body}", mod.__dict__)
    return mod


def test_signature_mismatch_is_rejected_with_plugin_op_and_reason():
    mod = _module("bad_sig", "    register(op='swiglu', name='wrong', backend='torch', devices=('cpu',),"
                             " fn=lambda up, gate: up, claim=tolerance())")
    cat = load_catalog(extra=[("badsig", mod)])
    info = next(p for p in cat.plugins if p.name == "badsig")
    assert "wrong" not in cat.implementations("swiglu")
    assert len(info.rejected) == 1
    msg = info.rejected[0]
    assert "plugin 'badsig'" in msg and "op 'swiglu'" in msg and "'up'" in msg and "'gate'" in msg


def test_extra_defaulted_parameters_are_allowed_but_missing_ones_are_not():
    ok = _module("ok_extra", "    register(op='swiglu', name='tuned', backend='torch', devices=('cpu',),"
                             " fn=lambda gate, up, block=128: gate, claim=tolerance())")
    missing = _module("missing", "    register(op='swiglu', name='short', backend='torch', devices=('cpu',),"
                                 " fn=lambda gate: gate, claim=tolerance())")
    cat = load_catalog(extra=[("ok", ok), ("missing", missing)])
    assert "tuned" in cat.implementations("swiglu")
    assert "short" not in cat.implementations("swiglu")
    assert "missing parameter 'up'" in next(p for p in cat.plugins if p.name == "missing").rejected[0]


def test_unknown_op_and_duplicate_names_are_rejected():
    mod = _module("dups", "    register(op='nosuchop', name='x', backend='torch', devices=('cpu',), fn=lambda: 0,"
                          " claim=tolerance())\n"
                          "    register(op='swiglu', name='numpy', backend='torch', devices=('cpu',),"
                          " fn=lambda gate, up: gate, claim=tolerance())")
    cat = load_catalog(extra=[("dups", mod)])
    rejected = next(p for p in cat.plugins if p.name == "dups").rejected
    assert any("unknown op 'nosuchop'" in r for r in rejected)
    assert any("already taken by plugin 'numpy'" in r for r in rejected)
    assert cat.get("swiglu", "numpy").plugin == "numpy"


def test_registration_that_raises_marks_only_that_plugin_failed():
    mod = _module("boom", "    raise RuntimeError('kaboom during registration')")
    cat = load_catalog(extra=[("boom", mod)])
    boom = next(p for p in cat.plugins if p.name == "boom")
    assert boom.status == "failed" and "kaboom" in boom.error
    assert cat.reference("linear").available


@pytest.fixture(scope="module")
def broken_plugin_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("broken")
    return fake_distribution(root, "sparkops-broken", {"broken": "sparkops_broken_plugin"},
                             {"sparkops_broken_plugin": "raise ImportError('this plugin is broken on purpose')\n"})


@pytest.mark.parametrize("args", [["plugins"], ["ops"], ["plan"], ["plugins", "--json"]])
def test_a_plugin_that_raises_at_import_does_not_stop_the_tools(broken_plugin_path, args):
    r = run_cli(*args, extra_path=[broken_plugin_path])
    assert r.returncode == 0, r.stderr
    text = r.stdout + r.stderr
    assert "broken" in text
    if args[0] == "plugins":
        assert "this plugin is broken on purpose" in text  # the traceback's message, by name


def test_swap_works_with_a_broken_plugin_present(broken_plugin_path, tmp_path):
    reg = tmp_path / "registry.toml"
    reg.write_text((REPO / "registry.toml").read_text())
    r = run_cli("swap", "swiglu=numpy", "--registry", str(reg), extra_path=[broken_plugin_path])
    assert r.returncode == 0, r.stderr
    assert "plugin 'broken' failed to load" in r.stderr


def test_third_party_plugin_installs_with_pip_and_shows_everywhere(tmp_path):
    target, source = tmp_path / "site", tmp_path / "src"
    shutil.copytree(REPO / "examples" / "sparkops-example-plugin", source)  # pip builds in place: not in the repo
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                          "--target", str(target), str(source)],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr
    plugins = json.loads(run_cli("plugins", "--json", extra_path=[target]).stdout)
    example = next(p for p in plugins if p["name"] == "example")
    assert example["status"] == "ok" and example["distribution"] == "sparkops-example-plugin"
    assert example["implementations"] == ["swiglu=example_swiglu"]
    ops = json.loads(run_cli("ops", "swiglu", "--json", extra_path=[target]).stdout)
    assert "example_swiglu" in {i["name"] for i in ops["swiglu"]["implementations"]}
    plan = json.loads(run_cli("plan", "--json", extra_path=[target]).stdout)
    assert "example_swiglu" in plan["ops"]["swiglu"]["others"]
