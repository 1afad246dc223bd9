"""bench/gpu_test_shard.py: the GPU test files in shards of about equal recorded time, and the record itself."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.helpers import REPO

spec = importlib.util.spec_from_file_location("gpu_test_shard", REPO / "bench" / "gpu_test_shard.py")
shard_mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(shard_mod)


def test_every_file_lands_in_exactly_one_shard_and_the_shards_are_even():
    files = [f"tests/t{i}.py" for i in range(12)]
    seconds = {f: float(s) for f, s in zip(files, (90, 60, 40, 30, 20, 10, 5, 5, 3, 2, 1, 1))}
    for n in (1, 2, 3):
        parts = [shard_mod.shard(files, seconds, i, n, marked=lambda f: True) for i in range(1, n + 1)]
        assert sorted(f for p in parts for f in p) == sorted(files)
        loads = [sum(seconds[f] for f in p) for p in parts]
        assert max(loads) - min(loads) <= max(seconds.values()) / 2 or n == 1, loads
        assert parts == [shard_mod.shard(files, seconds, i, n, marked=lambda f: True) for i in range(1, n + 1)]


def test_a_file_with_no_record_costs_the_median_if_it_marks_gpu_tests_else_its_collection():
    files = ["tests/a.py", "tests/b.py", "tests/new_gpu.py", "tests/cpu_only.py"]
    seconds = {"tests/a.py": 10.0, "tests/b.py": 30.0}
    # the median of the recorded (20) goes to the new GPU file: it joins a's shard, not b's
    one = shard_mod.shard(files, seconds, 1, 2, marked=lambda f: "gpu" in f)
    two = shard_mod.shard(files, seconds, 2, 2, marked=lambda f: "gpu" in f)
    assert "tests/b.py" in one and {"tests/a.py", "tests/new_gpu.py"} <= set(two)
    assert shard_mod.UNMARKED_SECONDS < 1


def test_the_shards_cover_the_repositorys_test_files_but_the_two_gpu_ones():
    files = shard_mod.test_files()
    assert "tests/backends/test_triton_moe.py" in files and not any(f.startswith("tests/parallel/") for f in files)
    parts = [shard_mod.shard(files, json.loads(shard_mod.SECONDS.read_text()), i, 2) for i in (1, 2)]
    assert sorted(parts[0] + parts[1]) == files and not set(parts[0]) & set(parts[1])


def test_the_seconds_come_from_junit_xml_per_file(tmp_path, monkeypatch):
    monkeypatch.setattr(shard_mod, "collected_gpu_tests", lambda files: {f: 1 for f in files})
    xml = tmp_path / "run.xml"
    xml.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest">'
                   '<testcase classname="tests.backends.test_triton_moe" name="a" time="1.5"/>'
                   '<testcase classname="tests.backends.test_triton_moe" name="b" time="2.0"/>'
                   '<testcase classname="tests.bench.test_gpu_test_shard.TestSomething" name="c" time="0.25"/>'
                   '<testcase classname="nowhere.test_gone" name="d" time="9"/>'
                   '</testsuite></testsuites>')
    assert shard_mod.seconds_from_junit([xml]) == {"tests/backends/test_triton_moe.py": 3.5,
                                                    "tests/bench/test_gpu_test_shard.py": 0.25}
    out = tmp_path / "seconds.json"
    out.write_text(json.dumps({"tests/old.py": 4.0, "tests/backends/test_triton_moe.py": 99.0}))
    assert shard_mod.main(["--record", str(xml), "--seconds", str(out)]) == 0
    assert json.loads(out.read_text()) == {"tests/backends/test_triton_moe.py": 3.5,
                                           "tests/bench/test_gpu_test_shard.py": 0.25, "tests/old.py": 4.0}


@pytest.mark.parametrize("bad", ["3/2", "0/2", "half", "1/0"])
def test_a_bad_shard_is_refused_with_the_form_to_write(bad, capsys):
    with pytest.raises(SystemExit) as e:
        shard_mod.main([bad])
    assert e.value.code == 2 and bad in capsys.readouterr().err


def _xml(tmp_path, name, cases):
    """A JUnit XML of `cases` test cases, (classname, seconds) each."""
    xml = tmp_path / name
    xml.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest">' + "".join(
        f'<testcase classname="{c}" name="t{i}" time="{t}"/>' for i, (c, t) in enumerate(cases))
        + "</testsuite></testsuites>")
    return xml


def test_a_file_run_only_in_part_is_not_recorded_and_said(tmp_path, monkeypatch, capsys):
    """A rung's proof runs a few of a file's tests (-k): their seconds would stand for the whole file's and unbalance
    the shards (session 22: test_cupy_kernels.py 171.75 -> 0.95 s). The whole is what pytest collects here, else the
    case count recorded with the file's seconds (a module that skips at import here: cupy on CPU)."""
    moe, kern = "tests.backends.test_triton_moe", "tests.backends.test_cupy_kernels"
    collected = {"tests/backends/test_triton_moe.py": 3, "tests/backends/test_cupy_kernels.py": 0}
    monkeypatch.setattr(shard_mod, "collected_gpu_tests", lambda files: {f: collected[f] for f in files})
    seconds, cases = tmp_path / "gpu-test-seconds.json", tmp_path / "gpu-test-cases.json"
    seconds.write_text(json.dumps({"tests/backends/test_triton_moe.py": 50.0}))
    # the whole shard: both files recorded, with their case counts
    whole = _xml(tmp_path, "whole.xml", [(moe, 10)] * 3 + [(kern, 30)] * 4)
    assert shard_mod.main(["--record", str(whole), "--seconds", str(seconds)]) == 0
    assert json.loads(seconds.read_text()) == {"tests/backends/test_cupy_kernels.py": 120.0,
                                               "tests/backends/test_triton_moe.py": 30.0}
    assert json.loads(cases.read_text()) == {"tests/backends/test_cupy_kernels.py": 4,
                                             "tests/backends/test_triton_moe.py": 3}
    capsys.readouterr()
    # a -k run: one of each file's tests. Neither is recorded; each is named with its counts
    part = _xml(tmp_path, "part.xml", [(moe, 1), (kern, 1)])
    assert shard_mod.main(["--record", str(part), "--seconds", str(seconds)]) == 0
    out = capsys.readouterr().out
    assert "not recorded: tests/backends/test_triton_moe.py: the XML ran 1 of its 3" in out
    assert "not recorded: tests/backends/test_cupy_kernels.py: the XML ran 1 of its 4" in out
    assert json.loads(seconds.read_text())["tests/backends/test_cupy_kernels.py"] == 120.0
    # tests removed from a file: --whole records it anyway, and its new count
    assert shard_mod.main(["--record", str(part), "--seconds", str(seconds),
                           "--whole", "tests/backends/test_cupy_kernels.py"]) == 0
    assert json.loads(seconds.read_text())["tests/backends/test_cupy_kernels.py"] == 1.0
    assert json.loads(cases.read_text())["tests/backends/test_cupy_kernels.py"] == 1


def test_the_collection_counts_gpu_tests_per_file():
    counts = shard_mod.collected_gpu_tests(["tests/bench/test_gpu_test_shard.py",
                                            "tests/backends/test_triton_swiglu.py"])
    assert counts["tests/bench/test_gpu_test_shard.py"] == 0  # no GPU test in this file
    assert counts["tests/backends/test_triton_swiglu.py"] >= 1
