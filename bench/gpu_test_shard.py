"""Split the GPU test files into shards of about equal time, from the seconds each file took last time.

    python3 bench/gpu_test_shard.py 1/2            # the test files of shard 1 of 2, one per line
    python3 bench/gpu_test_shard.py --record X.xml [X.xml ...]   # update the seconds from pytest's JUnit XML

Why: the single-GPU tests take ~5 minutes on one H200 and a device call ends at 10; session 10 split them by
alternating file names, one half took 81 s and the other over 300 (stopped), and a third call re-ran what was
left. Shards balanced by the recorded seconds (longest file first onto the lighter shard) keep two lanes even.
The seconds live in bench/gpu-test-seconds.json, per test file; a file with no record counts as the median of the
others if it marks GPU tests (a new one), else as UNMARKED_SECONDS (collection alone). Every test file under tests/
but tests/parallel (two GPUs at once: the suite's `parallel` stage) is in exactly one shard; pytest's `-m gpu` then
runs its GPU tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
SECONDS = REPO / "bench" / "gpu-test-seconds.json"
#: what a test file with no GPU test costs a shard (pytest imports and collects it)
UNMARKED_SECONDS = 0.2
#: the tests that need two GPUs at once (their own stage)
TWO_GPU_TESTS = "tests/parallel"


def test_files(root: Path = REPO) -> list[str]:
    """Every test file under tests/ but TWO_GPU_TESTS, relative to the repository, sorted."""
    return sorted(str(p.relative_to(root)) for p in (root / "tests").rglob("test_*.py")
                  if not str(p.relative_to(root)).startswith(TWO_GPU_TESTS + "/"))


def marks_gpu_tests(path: str, root: Path = REPO) -> bool:
    return "mark.gpu" in (root / path).read_text(encoding="utf-8", errors="replace")


def file_of(classname: str, root: Path = REPO) -> str | None:
    """The test file a JUnit classname ("tests.backends.test_x" or "tests.backends.test_x.TestClass") names."""
    parts = classname.split(".")
    for n in range(len(parts), 0, -1):
        path = Path(*parts[:n]).with_suffix(".py")
        if (root / path).is_file():
            return str(path)
    return None


def seconds_from_junit(xmls: list[Path], root: Path = REPO) -> dict[str, float]:
    """Seconds per test file, summed over the test cases of the JUnit XML files (a file in several sums once each)."""
    out: dict[str, float] = {}
    for xml in xmls:
        for case in ET.parse(xml).getroot().iter("testcase"):
            f = file_of(case.get("classname", ""), root)
            if f is not None:
                out[f] = out.get(f, 0.0) + float(case.get("time") or 0.0)
    return out


def shard(files: list[str], seconds: dict[str, float], index: int, count: int,
          marked: Callable[[str], bool] = marks_gpu_tests) -> list[str]:
    """The files of shard `index` (1-based) of `count`: longest first, each onto the shard with the least time so far
    (ties: the lower shard, then the file name), so the shards are deterministic and about equal."""
    if not 1 <= index <= count:
        raise ValueError(f"shard {index}/{count}: the index must lie in 1..{count}")
    known = [s for f, s in seconds.items() if f in files]
    new_gpu_file = statistics.median(known) if known else 1.0
    cost = {f: seconds[f] if f in seconds else new_gpu_file if marked(f) else UNMARKED_SECONDS for f in files}
    load = [0.0] * count
    chosen: list[list[str]] = [[] for _ in range(count)]
    for f in sorted(files, key=lambda f: (-cost[f], f)):
        i = min(range(count), key=lambda j: (load[j], j))
        load[i] += cost[f]
        chosen[i].append(f)
    return sorted(chosen[index - 1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_test_shard", description=__doc__.splitlines()[0])
    ap.add_argument("shard", nargs="?", help="I/N: the files of shard I of N")
    ap.add_argument("--record", nargs="+", type=Path, metavar="XML", help="update the seconds from JUnit XML files")
    ap.add_argument("--seconds", type=Path, default=SECONDS, help=f"the seconds file (default {SECONDS.name})")
    args = ap.parse_args(argv)
    if args.record:
        old = json.loads(args.seconds.read_text()) if args.seconds.exists() else {}
        new = seconds_from_junit(args.record)
        merged = {**old, **{f: round(s, 2) for f, s in new.items()}}
        args.seconds.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
        print(f"recorded the seconds of {len(new)} test file(s) in {args.seconds}")
        return 0
    if not args.shard:
        ap.error("give I/N (e.g. 1/2) or --record XML ...")
    try:
        index, count = (int(x) for x in args.shard.split("/"))
        files = shard(test_files(), json.loads(args.seconds.read_text()) if args.seconds.exists() else {}, index, count)
    except ValueError as exc:
        ap.error(f"{args.shard}: {exc}" if "/" in args.shard else f"{args.shard}: write I/N, e.g. 1/2")
    print("\n".join(files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
