"""registry.toml: validation with line numbers, comment-preserving atomic rewrites, plans and fallbacks."""

from __future__ import annotations

import json
import types

import pytest

from sparkops.errors import RegistryError, Unavailable
from sparkops.plugins import hookimpl, load_catalog, tolerance
from sparkops.registry.file import Registry
from sparkops.registry.plan import make_plan
from tests.helpers import REPO, run_cli


@pytest.fixture
def reg_path(tmp_path):
    p = tmp_path / "registry.toml"
    p.write_text((REPO / "registry.toml").read_text())
    return p


def test_the_shipped_registry_plans_on_cpu():
    plan = make_plan(Registry.load(REPO / "registry.toml"), load_catalog(), "cpu")
    assert plan.ok, [e.error for e in plan.entries.values() if e.error]


def test_malformed_toml_names_file_and_line(tmp_path):
    bad = tmp_path / "broken.toml"
    bad.write_text('[ops.linear.cpu]\nimpl = "numpy"\nfallback = \n')
    with pytest.raises(RegistryError, match=r"broken\.toml:3"):
        Registry.load(bad)
    r = run_cli("plan", "--registry", str(bad))
    assert r.returncode == 2
    assert "broken.toml:3" in r.stderr


@pytest.mark.parametrize("text, match", [
    ('[ops.nosuch.cpu]\nimpl = "numpy"\n', r":1: unknown op 'nosuch'; the ops are: embedding"),
    ('[ops.linear.tpu]\nimpl = "numpy"\n', r":1: .*unknown device class 'tpu'"),
    ('[ops.linear.cpu]\nimpl = "numpy"\nfallback = "maybe"\n', r"fallback = 'maybe'"),
    ('[ops.linear.cpu]\nimpl = 3\n', r"impl = \"NAME\" is required"),
    ('[ops.linear.cpu]\nimpl = "numpy"\ncolour = "red"\n', r"unknown key\(s\) \['colour'\]"),
    ('[other]\nx = 1\n', r"unknown top-level key"),
])
def test_structural_errors_are_named(tmp_path, text, match):
    p = tmp_path / "r.toml"
    p.write_text(text)
    with pytest.raises(RegistryError, match=match):
        Registry.load(p)


def test_unknown_implementation_in_the_file_lists_the_valid_ones(tmp_path):
    p = tmp_path / "r.toml"
    p.write_text('# a comment\n[ops.attention.cpu]\nimpl = "warp_drive"\n')
    with pytest.raises(RegistryError, match=r"r\.toml:2: .*'warp_drive' of 'attention'; its implementations are: .*numpy"):
        make_plan(Registry.load(p), load_catalog(), "cpu")


def test_swap_keeps_comments_and_writes_atomically(reg_path):
    reg_path.write_text("# keep me\n" + reg_path.read_text().replace('[ops.swiglu.cpu]', '# swiglu note\n[ops.swiglu.cpu]'))
    reg = Registry.load(reg_path)
    reg.set("swiglu", "cuda", "numpy", fallback="reference")
    reg.save()
    text = reg_path.read_text()
    assert text.startswith("# keep me") and "# swiglu note" in text
    assert Registry.load(reg_path).selection("swiglu", "cuda").impl == "numpy"
    assert not list(reg_path.parent.glob(".registry.toml.*.tmp")), "temp file left behind"


def test_swap_nonexistent_exits_2_names_op_lists_impls_and_leaves_file_unchanged(reg_path):
    before = reg_path.read_bytes()
    r = run_cli("swap", "attention=nonexistent", "--registry", str(reg_path))
    assert r.returncode == 2
    assert "attention" in r.stderr and "numpy" in r.stderr and "numpy_naive" in r.stderr
    assert reg_path.read_bytes() == before


@pytest.mark.parametrize("pair", ["nosuchop=numpy", "attention", "=numpy", "attention="])
def test_every_bad_swap_exits_2_and_leaves_the_file_unchanged(reg_path, pair):
    before = reg_path.read_bytes()
    r = run_cli("swap", pair, "--registry", str(reg_path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert reg_path.read_bytes() == before


def test_a_good_swap_and_a_bad_one_together_change_nothing(reg_path):
    before = reg_path.read_bytes()
    r = run_cli("swap", "swiglu=numpy", "attention=nonexistent", "--registry", str(reg_path))
    assert r.returncode == 2
    assert reg_path.read_bytes() == before


def _unavailable_plugin():
    mod = types.ModuleType("gone")

    @hookimpl
    def register_implementations(register):
        register(op="swiglu", name="gone", backend="warp", devices=("cpu", "cuda"), fn="nowhere:fn",
                 claim=tolerance(), unavailable="the warp backend is not installed")

    mod.register_implementations = register_implementations
    return mod


@pytest.mark.parametrize("policy", ["reference", "error"])
def test_fallback_policy_is_applied_and_shown(tmp_path, policy):
    p = tmp_path / "r.toml"
    p.write_text((REPO / "registry.toml").read_text())
    reg = Registry.load(p)
    reg.set("swiglu", "cpu", "gone", fallback=policy)
    cat = load_catalog(extra=[("gone", _unavailable_plugin())])
    plan = make_plan(reg, cat, "cpu")
    entry = plan.entries["swiglu"]
    if policy == "reference":
        assert plan.ok and entry.fallback_taken and entry.runs.name == "numpy"
        assert "FALLBACK" in entry.reason and "warp backend is not installed" in entry.reason
        assert plan.fallbacks == ["swiglu"]
    else:
        assert not plan.ok and entry.runs is None
        with pytest.raises(Unavailable, match="swiglu: .*warp backend is not installed.*policy: error"):
            plan.require()


def test_cpu_implementation_on_cuda_plan_is_a_counted_round_trip():
    reg = Registry.empty(REPO / "x.toml")
    for op in ("swiglu",):
        reg.set(op, "cuda", "numpy", fallback="error")
    plan = make_plan(reg, load_catalog(), "cuda")
    e = plan.entries["swiglu"]
    assert e.round_trip and "host round trip" in e.reason
    # ops with no cuda entry fall back to the reference, visibly
    assert plan.entries["linear"].fallback_taken and "no [ops.linear.cuda] entry" in plan.entries["linear"].reason


def test_plan_json_lists_why_other_candidates_were_not_selected():
    r = run_cli("plan", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    selected = Registry.load(REPO / "registry.toml").selection("kda", "cpu").impl
    assert data["ops"]["kda"]["runs"] == f"kda={selected}"
    assert "not selected" in data["ops"]["kda"]["others"]["numpy_chunked"]


def test_plan_with_missing_registry_file_is_a_clear_error(tmp_path):
    r = run_cli("plan", "--registry", str(tmp_path / "nope.toml"))
    assert r.returncode == 2 and "no such registry file" in r.stderr
