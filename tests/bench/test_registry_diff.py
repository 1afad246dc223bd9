"""A two-arm bench times one change: what its registries differ in is named before it runs, checked against
--changes, and recorded in every row (session 8's wide-attention row compared a registry made over an older base:
two differences, one ratio)."""

from __future__ import annotations

import pytest

from sparkops.bench import ledger as L
from sparkops.bench import registry_diff as rd
from sparkops.cli import bench_cmd, main
from sparkops.errors import BadInput
from sparkops.registry.file import Registry


def _edit(path, op=None, impl=None, engine=None):
    reg = Registry.load(path)
    if op:
        reg.set(op, "cpu", impl, fallback="reference")
    if engine:
        reg.set_engines(engine)
    reg.save()


def test_the_same_selections_differ_in_nothing(registries):
    assert rd.differences(*registries, "cpu") == {}
    assert rd.describe({}) == "nothing (the same selections)"


def test_every_differing_op_and_the_engine_table_are_named(registries):
    a, b = registries
    _edit(b, "rmsnorm", "torch")
    _edit(b, "attention", "torch")
    _edit(b, engine={"fuse_projections": True})
    diff = rd.differences(a, b, "cpu")
    assert diff["rmsnorm"] == ["numpy", "torch"] and diff["attention"] == ["numpy", "torch"]
    assert diff["[engine]"] == ["fuse_projections=False", "fuse_projections=True"]  # the options that differ
    assert rd.differences(a, b, "cuda") == {"[engine]": diff["[engine]"]}  # no cuda selections in either


def test_expect_changes_refuses_a_second_difference_and_names_it(registries):
    a, b = registries
    _edit(b, "attention", "torch")
    _edit(b, "moe_router", "torch")
    diff = rd.differences(a, b, "cpu")
    with pytest.raises(BadInput, match=r"moe_router: numpy -> torch.*not named: moe_router"):
        rd.expect_changes(diff, "attention", a, b)
    with pytest.raises(BadInput, match="named but the same in both: linear"):
        rd.expect_changes(diff, "attention,moe_router,linear", a, b)
    rd.expect_changes(diff, "attention, moe_router", a, b)  # exactly these: accepted


def test_selection_differences_of_recorded_arms():
    a = {"attention": "triton_splitk", "moe_router": "triton_prefetch", "[engine]": "fuse_projections"}
    b = {"attention": "triton_splitk_wide", "moe_router": "triton_lastblock", "[engine]": "fuse_projections"}
    assert rd.selection_differences(a, b) == {"attention": ["triton_splitk", "triton_splitk_wide"],
                                               "moe_router": ["triton_prefetch", "triton_lastblock"]}


def test_bench_refuses_before_timing_when_the_arms_differ_elsewhere(nano, registries, monkeypatch, capsys, bench_dir):
    a, b = registries
    _edit(b, "rmsnorm", "torch")
    monkeypatch.setattr(bench_cmd, "load_weights", lambda spec: nano)
    timed = []
    from sparkops.bench import harness

    monkeypatch.setattr(harness, "run_bench", lambda *args, **kw: timed.append(1))
    argv = ["bench", "decode", "--model", "k3-nano", "--depth", "0", "--tokens", "2", "--repeats", "2",
            "--registry", str(a), "--vs", str(b), "--changes", "attention"]
    assert main(argv) != 0
    assert "rmsnorm: numpy -> torch" in capsys.readouterr().err and not timed
    assert not (bench_dir / L.LEDGER).exists()


def test_a_row_records_what_its_arms_differed_in(nano, registries, monkeypatch, capsys, bench_dir):
    a, b = registries
    _edit(b, engine={"fuse_projections": True})  # an [engine] option needs no check record to run
    monkeypatch.setattr(bench_cmd, "load_weights", lambda spec: nano)
    argv = ["bench", "decode", "--model", "k3-nano", "--depth", "0", "--tokens", "2", "--repeats", "2",
            "--warmup", "1", "--registry", str(a), "--vs", str(b), "--gate-depths", "1,4", "--changes", "engine"]
    assert main(argv) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "B differs from A in: engine (fuse_projections=False -> fuse_projections=True)" in err
    row = L.read(bench_dir / L.LEDGER)[0]
    assert list(row["differs"]) == ["[engine]"] and "--changes engine" in row["command"]
