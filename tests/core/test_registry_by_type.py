"""Per-type selections: `sparkops swap linear@Q6_K=IMPL` sends the op's calls whose weight has that GGUF type to
another implementation ([ops.OP.DEVICE.by_type.TYPE]), proven like any selection; the plan shows it, dispatch picks
per call, and a type's implementation that cannot run makes the plan refuse (no fallback of its own)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.bench import registry_diff as rd
from sparkops.dispatch import Ops
from sparkops.errors import RegistryError
from sparkops.gguf.quants import random_blocks
from sparkops.plugins import load_catalog
from sparkops.qweight import QWeight
from sparkops.registry.file import Registry
from sparkops.registry.plan import make_plan
from tests.helpers import REPO, run_cli


@pytest.fixture
def reg_path(tmp_path):
    p = tmp_path / "registry.toml"
    p.write_text((REPO / "registry.toml").read_text())
    return p


def _weight(qtype, rows=32, cols=256, seed=0) -> QWeight:
    raw = random_blocks(np.random.default_rng(seed), (rows, cols), qtype, 0.02)
    data = torch.from_numpy(raw) if qtype != Q.F32 else torch.from_numpy(raw.view(np.float32).reshape(rows, cols))
    return QWeight(data, qtype, (rows, cols))


def test_swap_writes_a_type_table_and_the_plan_runs_it_for_that_type_only(reg_path, monkeypatch):
    r = run_cli("swap", "linear@Q8_0=numpy", "--device", "cpu", "--registry", str(reg_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "numpy" in r.stdout and "Q8_0" in r.stdout
    reg = Registry.load(reg_path)
    assert reg.selection("linear", "cpu").impl == "torch"  # the op's selection is untouched
    assert {t: s.impl for t, s in reg.type_selections("linear", "cpu").items()} == {"Q8_0": "numpy"}
    plan = make_plan(reg, load_catalog(), "cpu")
    entry = plan.entries["linear"]
    assert plan.ok and entry.runs.name == "torch" and entry.by_type["Q8_0"].name == "numpy"
    assert entry.describe_runs() == "torch; Q8_0: numpy" and "by_type.Q8_0" in entry.reason

    seen = []
    for impl in (entry.runs, entry.by_type["Q8_0"]):  # spies in place of the resolved functions
        real = impl.resolve()
        monkeypatch.setattr(impl, "_resolved",
                            lambda *a, real=real, name=impl.name, **kw: seen.append(name) or real(*a, **kw))
    ops = Ops(plan)
    x = torch.randn(2, 256)
    ops.linear(x, _weight(Q.Q8_0))
    ops.linear(x, weight=_weight(Q.F32))
    ops.linear(x, _weight(Q.Q4_K))
    assert seen == ["numpy", "torch", "torch"]

    r = run_cli("plan", "--device", "cpu", "--registry", str(reg_path))
    assert r.returncode == 0 and "Q8_0: numpy" in r.stdout
    r = run_cli("swap", "linear@Q8_0=-", "--device", "cpu", "--registry", str(reg_path))
    assert r.returncode == 0, r.stderr
    assert Registry.load(reg_path).type_selections("linear", "cpu") == {}


def test_a_type_selection_is_proven_by_the_gate_like_any_other(reg_path):
    assert run_cli("swap", "linear=numpy", "--device", "cpu", "--registry", str(reg_path)).returncode == 0
    r = run_cli("swap", "linear@Q4_K=torch", "--device", "cpu", "--registry", str(reg_path))
    assert r.returncode == 0, r.stdout + r.stderr
    sel = Registry.load(reg_path).type_selections("linear", "cpu")["Q4_K"]
    assert sel.impl == "torch" and sel.check["passed"] and sel.check["impl"] == "torch"
    assert make_plan(Registry.load(reg_path), load_catalog(), "cpu").entries["linear"].by_type["Q4_K"].name == "torch"


@pytest.mark.parametrize("pair,why", [
    ("attention@Q4_K=numpy", "cannot be chosen per weight type"),
    ("linear@Q5_K=numpy", "unknown GGUF type 'Q5_K'"),
    ("linear=-", "removes a per-type selection"),
    ("linear@=numpy", "is not OP=IMPL or OP@TYPE=IMPL"),
    ("linear@Q4_K=-", "needs --device"),
])
def test_bad_type_swaps_exit_2_and_change_nothing(reg_path, pair, why):
    before = reg_path.read_bytes()
    r = run_cli("swap", pair, "--registry", str(reg_path))
    assert r.returncode == 2 and why in r.stderr, r.stdout + r.stderr
    assert reg_path.read_bytes() == before


def test_a_type_selection_that_cannot_run_or_is_unproven_makes_the_plan_refuse(reg_path):
    text = reg_path.read_text()
    reg_path.write_text(text + '\n[ops.linear.cpu.by_type.Q6_K]\nimpl = "triton"\n')
    plan = make_plan(Registry.load(reg_path), load_catalog(), "cpu")
    err = plan.entries["linear"].error
    assert not plan.ok and "[ops.linear.cpu.by_type.Q6_K]" in err and "linear=triton is unavailable here" in err
    assert "sparkops swap linear@Q6_K=- --device cpu" in err
    reg_path.write_text(text + '\n[ops.linear.cpu.by_type.Q6_K]\nimpl = "torch"\n')  # no check record
    err = make_plan(Registry.load(reg_path), load_catalog(), "cpu").entries["linear"].error
    assert "no valid check record" in err and "sparkops swap linear@Q6_K=torch --device cpu" in err


@pytest.mark.parametrize("table,match", [
    ('[ops.attention.cpu.by_type.Q4_K]\nimpl = "numpy"\n', "cannot be chosen per weight type"),
    ('[ops.linear.cpu.by_type.Q5_K]\nimpl = "numpy"\n', "unknown GGUF type 'Q5_K'"),
    ('[ops.linear.cpu.by_type.Q4_K]\nimpl = "numpy"\nfallback = "reference"\n', "no fallback of its own"),
    ('[ops.linear.cpu.by_type.Q4_K]\nkernel = "numpy"\n', "impl = \"NAME\" is required"),
])
def test_malformed_type_tables_are_named(reg_path, table, match):
    reg_path.write_text(reg_path.read_text() + "\n" + table)
    with pytest.raises(RegistryError, match=match):
        Registry.load(reg_path)


def test_two_registries_differing_in_one_type_selection(reg_path, tmp_path):
    other = tmp_path / "b.toml"
    other.write_text(reg_path.read_text())
    assert run_cli("swap", "linear@Q6_K=numpy", "--device", "cpu", "--registry", str(other)).returncode == 0
    diff = rd.differences(reg_path, other, "cpu")
    assert diff == {"linear@Q6_K": ["(none)", "numpy"]}
    rd.expect_changes(diff, "linear@Q6_K", reg_path, other)


def test_bisect_tries_a_differing_type_selection_alone(reg_path, tmp_path):
    from sparkops.gate.bisect import differing, one_swap

    cand = tmp_path / "cand.toml"
    cand.write_text(reg_path.read_text())
    assert run_cli("swap", "linear@Q6_K=numpy", "--device", "cpu", "--registry", str(cand)).returncode == 0
    diffs = differing(Registry.load(cand), Registry.load(reg_path), "cpu")
    assert diffs == [("linear@Q6_K", "numpy", None)]
    trial = one_swap(Registry.load(reg_path), "linear@Q6_K", "cpu", "numpy")
    assert trial.selection("linear", "cpu").impl == "torch"
    assert {t: s.impl for t, s in trial.type_selections("linear", "cpu").items()} == {"Q6_K": "numpy"}


def test_a_type_selection_needs_the_ops_selection_first(tmp_path):
    empty = tmp_path / "empty.toml"
    r = run_cli("swap", "linear@Q6_K=numpy", "--device", "cpu", "--registry", str(empty))
    assert r.returncode == 2 and "has no implementation yet" in r.stderr and "linear=IMPL" in r.stderr
    assert not empty.exists()
    r = run_cli("swap", "linear@Q6_K=numpy", "linear=numpy", "--device", "cpu", "--registry", str(empty))
    assert r.returncode == 0, r.stderr
    assert Registry.load(empty).type_selections("linear", "cpu")["Q6_K"].impl == "numpy"


@pytest.mark.parametrize("args,why", [
    (("linear@Q6_K=-", "--device", "cpu"), "no per-type selection for Q6_K to remove"),
    (("linear@Q6_K=numpy", "--device", "cpu", "--fallback", "error"), "--fallback sets the op's policy"),
])
def test_a_removal_of_nothing_and_a_fallback_for_a_type_are_refused(reg_path, args, why):
    before = reg_path.read_bytes()
    r = run_cli("swap", *args, "--registry", str(reg_path))
    assert r.returncode == 2 and why in r.stderr, r.stdout + r.stderr
    assert reg_path.read_bytes() == before


def test_moe_experts_is_chosen_per_type_by_its_gate_weight(reg_path, monkeypatch):
    """A model of another mix keeps a kernel that reads its blocks (GPU session 25: IQ1_S experts under a Q4_K-only
    kernel's stated policy ran at 6.5 tok/s): moe_experts@IQ1_S sends the calls whose w_gate is IQ1_S elsewhere."""
    r = run_cli("swap", "moe_experts@IQ1_S=numpy", "--device", "cpu", "--registry", str(reg_path))
    assert r.returncode == 0, r.stdout + r.stderr
    plan = make_plan(Registry.load(reg_path), load_catalog(), "cpu")
    entry = plan.entries["moe_experts"]
    assert entry.by_type["IQ1_S"].name == "numpy" and entry.runs.name != "numpy"
    seen = []
    for impl in (entry.runs, entry.by_type["IQ1_S"]):
        monkeypatch.setattr(impl, "_resolved", lambda *a, name=impl.name, **kw: seen.append(name))
    ops = Ops(plan)
    x, ids, weights = torch.randn(1, 256), torch.zeros(1, 2, dtype=torch.int64), torch.ones(1, 2)
    for qtype in (Q.IQ1_S, Q.Q4_K):
        w = _weight(qtype)
        ops.moe_experts(x, weights, ids, w, w, w, None, None, None)
    ops.moe_experts(x, weights, ids, w_gate=_weight(Q.IQ1_S), w_up=w, w_down=w, s_gate=None, s_up=None, s_down=None)
    assert seen == ["numpy", entry.runs.name, "numpy"]
