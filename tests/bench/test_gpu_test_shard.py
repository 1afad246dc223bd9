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


def test_the_seconds_come_from_junit_xml_per_file(tmp_path):
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
