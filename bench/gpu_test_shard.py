"""Split the GPU test files into shards of about equal time, from the seconds each file took last time.

    python3 bench/gpu_test_shard.py 1/2            # the test files of shard 1 of 2, one per line
    python3 bench/gpu_test_shard.py --record X.xml [X.xml ...]   # update the seconds from pytest's JUnit XML
                                                                  # (whole files only: see partial_files)

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
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
SECONDS = REPO / "bench" / "gpu-test-seconds.json"
#: how many test cases each file's recorded seconds summed (beside SECONDS: a later XML with fewer ran part of it)
CASES = REPO / "bench" / "gpu-test-cases.json"
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


def junit_cases(xmls: list[Path], root: Path = REPO):
    """(test file, seconds) for every test case of the JUnit XML files whose class names a test file here."""
    for xml in xmls:
        for case in ET.parse(xml).getroot().iter("testcase"):
            f = file_of(case.get("classname", ""), root)
            if f is not None:
                yield f, float(case.get("time") or 0.0)


def seconds_from_junit(xmls: list[Path], root: Path = REPO) -> dict[str, float]:
    """Seconds per test file, summed over the test cases of the JUnit XML files (a file in several sums once each)."""
    out: dict[str, float] = {}
    for f, seconds in junit_cases(xmls, root):
        out[f] = out.get(f, 0.0) + seconds
    return out


def cases_from_junit(xmls: list[Path], root: Path = REPO) -> dict[str, int]:
    """How many test cases of each test file the JUnit XML files hold (run, failed or skipped)."""
    out: dict[str, int] = {}
    for f, _ in junit_cases(xmls, root):
        out[f] = out.get(f, 0) + 1
    return out


def collected_gpu_tests(files: list[str], root: Path = REPO) -> dict[str, int]:
    """How many GPU tests (`-m gpu`, what a shard runs) pytest collects in each file, here (collection needs no GPU)."""
    if not files:
        return {}
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu",
                           "-p", "no:cacheprovider", *files], cwd=root, capture_output=True, text=True)
    out = {f: 0 for f in files}
    for line in proc.stdout.splitlines():
        f = line.split("::", 1)[0]
        if "::" in line and f in out:
            out[f] += 1
    return out


def partial_files(xmls: list[Path], known: dict[str, int] | None = None,
                  collect: Callable[[list[str]], dict[str, int]] | None = None,
                  root: Path = REPO) -> dict[str, tuple[int, int]]:
    """{file: (cases in the XML, cases of the whole file)} for the files the XML ran only in part. A run picked by -k
    (a rung's proof) sums a few of a file's tests, and its seconds would stand for the whole file's: session 22
    recorded test_cupy_kernels.py's 17 attention tests, 0.95 s, over the whole file's 171.75 before this check.
    The whole file's count is what pytest collects here with -m gpu, or, where that is nothing (a module that skips
    at import without its backend: cupy on a CPU machine), the count recorded with its seconds (`known`)."""
    ran = cases_from_junit(xmls, root)
    here = (collect or collected_gpu_tests)(sorted(ran))
    whole = {f: here.get(f) or (known or {}).get(f, 0) for f in ran}
    return {f: (n, whole[f]) for f, n in ran.items() if n < whole[f]}


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
    ap.add_argument("--seconds", type=Path, default=SECONDS, help=f"the seconds file (default {SECONDS.name}; the "
                    f"case counts beside it, {CASES.name})")
    ap.add_argument("--whole", nargs="+", default=[], metavar="FILE",
                    help="with --record: files to record even with fewer cases than their whole (tests removed)")
    args = ap.parse_args(argv)
    if args.record:
        old = json.loads(args.seconds.read_text()) if args.seconds.exists() else {}
        cases_file = args.seconds.with_name(CASES.name)
        known = json.loads(cases_file.read_text()) if cases_file.exists() else {}
        new = seconds_from_junit(args.record)
        ran = cases_from_junit(args.record)
        for f, (n, total) in sorted(partial_files(args.record, known).items()):
            if f in args.whole:
                continue
            print(f"not recorded: {f}: the XML ran {n} of its {total} GPU tests (a -k selection?); its seconds would "
                  f"stand for the whole file's (--whole {f} records it anyway)")
            new.pop(f)
        merged = {**old, **{f: round(s, 2) for f, s in new.items()}}
        args.seconds.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
        counts = {**known, **{f: ran[f] for f in new}}
        cases_file.write_text(json.dumps(dict(sorted(counts.items())), indent=1) + "\n")
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
