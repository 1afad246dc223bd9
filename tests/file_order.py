"""How `pytest -n 2` shares the tests between its two workers: by work stealing, the test files longest first.

xdist's default (load) hands each worker tests in collection order, several at a time, and a worker keeps what it was
handed: measured on this project's suite, one worker ran its queue alone for the last ~55 s of a run. Under work
stealing (`--dist worksteal`) a worker whose queue runs dry takes half of the other's, so the two finish within a
test of each other; set here where the run asked for workers and no --dist (the README's command), not in the
pytest options, which would break a run on a machine without pytest-xdist (the GPU image's). The files then run in the
order of their last measured time, longest first, so that what is left to share at the end is short tests: in
directory order the run ended with the SASS tests' nvcc compiles and tests/test_worker_threads.py's nested
`pytest -n 2`, 20-50 s each.

tests/file-seconds.json holds each file's seconds (setup, call and teardown of its tests, summed) as a run measured
them; `pytest -n 2 --record-seconds` writes it anew from that run. A file it does not list (a new one) counts as
none and runs after the listed ones, in collection order; the order within a file is collection order. The order
decides only when a test runs, never what it checks.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

SECONDS = Path(__file__).with_name("file-seconds.json")


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def steal_work(config) -> None:
    """--dist worksteal for a run with workers (-n) and no --dist of its own (xdist would make it load)."""
    option = config.option
    if getattr(option, "numprocesses", None) and getattr(option, "dist", None) == "no":
        option.dist = "worksteal"


def longest_first(items: list, seconds: dict[str, float] | None = None) -> None:
    """Reorder pytest's items in place: files by their seconds (SECONDS' by default), longest first."""
    if seconds is None:
        seconds = json.loads(SECONDS.read_text()) if SECONDS.is_file() else {}
    items.sort(key=lambda item: -seconds.get(_file(item.nodeid), 0.0))  # stable: collection order within a file


class Recorder:
    """--record-seconds: sums each test's durations by file in the process that reports the run (xdist's controller
    gets its workers' reports) and writes SECONDS at the session's end."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[_file(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session) -> None:
        ordered = dict(sorted(((f, round(s, 1)) for f, s in self.seconds.items()), key=lambda kv: (-kv[1], kv[0])))
        SECONDS.write_text(json.dumps(ordered, indent=1) + "\n")
