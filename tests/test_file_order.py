"""tests/file_order.py: `pytest -n 2` steals work between its workers unless told another --dist, and runs the test files
longest first, each file's tests in their own order."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tests.file_order import SECONDS, longest_first, steal_work


def _config(numprocesses, dist):
    return SimpleNamespace(option=SimpleNamespace(numprocesses=numprocesses, dist=dist))


def test_a_run_with_workers_and_no_dist_steals_work():
    config = _config(2, "no")
    steal_work(config)
    assert config.option.dist == "worksteal"


def test_a_dist_asked_for_and_a_run_without_workers_are_left_alone():
    for numprocesses, dist in ((2, "load"), (2, "loadfile"), (None, "no"), (0, "no")):
        config = _config(numprocesses, dist)
        steal_work(config)
        assert config.option.dist == dist


def test_files_run_longest_first_and_each_files_tests_in_their_order():
    items = [SimpleNamespace(nodeid=n) for n in ("a.py::t1", "b.py::t1", "a.py::t2", "c.py::t1", "b.py::t2",
                                                 "d.py::t1")]
    longest_first(items, {"b.py": 9.0, "a.py": 3.5, "d.py": 0.1})
    assert [i.nodeid for i in items] == ["b.py::t1", "b.py::t2", "a.py::t1", "a.py::t2", "d.py::t1", "c.py::t1"]


def test_the_recorded_seconds_are_a_table_of_test_files():
    seconds = json.loads(SECONDS.read_text())
    assert seconds and all(f.startswith("tests/") and f.endswith(".py") for f in seconds)
    assert all(isinstance(s, (int, float)) and s >= 0 for s in seconds.values())
