"""The CI resource check of the CuPy plugin's CUDA sources: every .cu file compiles for sm_90 with nvcc,
and no kernel spills registers or keeps a stack frame beyond the budget written above it.

Each kernel carries a comment `// budget: stack N, spills 0` right above its `extern "C" __global__`
definition. ptxas (`-Xptxas -v`) reports per function "N bytes stack frame, N bytes spill stores, N
bytes spill loads"; a spill is always a failure (it means local-memory traffic in a kernel that is
meant to live in registers), a stack frame larger than the budget is a failure, and so is a kernel
without a budget or a budget naming a kernel that no longer exists.

Without nvcc the check cannot run: under CI=true that is a failure (the CI image has nvcc), anywhere
else the tests skip and say why. Compiling needs no GPU.
"""

from __future__ import annotations

import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from tests.cuda_sass import nvcc_compile

KERNEL_DIR = Path(__file__).resolve().parents[1] / "plugins" / "sparkops_cupy" / "kernels"
SOURCES = sorted(KERNEL_DIR.glob("*.cu"))
ARCH = "sm_90"

_BUDGET = re.compile(r"//\s*budget:\s*stack\s+(\d+)\s*,\s*spills\s+(\d+)")
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:(?:__launch_bounds__|__maxnreg__)\s*\([^)]*\)\s+)?(\w+)\s*\(')
_PROPS = re.compile(r"Function properties for (\S+)\s*\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores, "
                    r"(\d+) bytes spill loads")
_ENTRY = re.compile(r"Compiling entry function '(\w+)'")


@dataclass(frozen=True)
class Budget:
    stack: int
    spills: int
    line: int


@dataclass(frozen=True)
class Usage:
    stack: int
    spill_stores: int
    spill_loads: int


def budgets(source: str) -> dict[str, Budget]:
    """kernel name -> the budget comment above its definition (the nearest one before it)."""
    out: dict[str, Budget] = {}
    pending: Budget | None = None
    for i, line in enumerate(source.splitlines(), 1):
        m = _BUDGET.search(line)
        if m:
            pending = Budget(int(m.group(1)), int(m.group(2)), i)
            continue
        k = _KERNEL.search(line)
        if k and pending is not None:
            out[k.group(1)] = pending
            pending = None
    return out


def kernels_defined(source: str) -> list[str]:
    return _KERNEL.findall(source)


def parse_ptxas(report: str) -> tuple[set[str], dict[str, Usage]]:
    """(entry function names, function name -> usage) from nvcc -Xptxas -v output."""
    entries = set(_ENTRY.findall(report))
    usage = {m.group(1): Usage(int(m.group(2)), int(m.group(3)), int(m.group(4))) for m in _PROPS.finditer(report)}
    return entries, usage


def _nvcc() -> str | None:
    return shutil.which("nvcc")


def _need_nvcc() -> str:
    nvcc = _nvcc()
    if nvcc is None:
        msg = ("nvcc is not on PATH: the CUDA sources of plugins/sparkops_cupy/kernels cannot be compiled and "
               "checked for register spills; install the CUDA toolkit (nvcc) on this machine")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg + " (CI=true: the CI image must provide nvcc)")
        pytest.skip(msg)
    return nvcc


@cache
def compile_report(path: Path, nvcc: str, tmp: str) -> tuple[int, str]:
    """(exit code, nvcc's combined output) of compiling one source to a cubin for sm_90 with -Xptxas -v
    (tests/cuda_sass.py's nvcc_compile: once a test run, the same compile the SASS tests read)."""
    code, report, _ = nvcc_compile(path, Path(tmp), nvcc)
    return code, report


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[Path, tuple[int, str]]:
    nvcc = _need_nvcc()
    tmp = str(tmp_path_factory.mktemp("cubins"))
    with ThreadPoolExecutor(max_workers=max(1, min(len(SOURCES), os.cpu_count() or 1))) as pool:
        results = pool.map(lambda p: compile_report(p, nvcc, tmp), SOURCES)
        return dict(zip(SOURCES, results))


def test_there_are_sources():
    assert SOURCES, f"no .cu files under {KERNEL_DIR}"


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_compiles_without_spills_within_budget(path: Path, reports):
    code, report = reports[path]
    assert code == 0, f"nvcc -arch={ARCH} failed on {path.name}:\n{report}"
    source = path.read_text()
    declared = budgets(source)
    defined = kernels_defined(source)
    entries, usage = parse_ptxas(report)
    problems = []
    for name in defined:
        if name not in declared:
            problems.append(f"kernel {name} has no '// budget: stack N, spills 0' comment above its definition")
    for name, b in declared.items():
        if b.spills != 0:
            problems.append(f"line {b.line}: kernel {name} declares {b.spills} bytes of spills; spills are never "
                            f"allowed, reduce its register use instead")
        if name not in entries:
            problems.append(f"line {b.line}: budget for kernel {name}, which ptxas did not compile (renamed?)")
    for name, u in usage.items():
        spills = u.spill_stores + u.spill_loads
        if spills:
            problems.append(f"{name}: {u.spill_stores} bytes spill stores, {u.spill_loads} bytes spill loads "
                            f"(must be 0): cut its live registers (fewer values in flight, smaller arrays)")
        allowed = declared[name].stack if name in declared else 0
        if u.stack > allowed:
            where = f"its budget (line {declared[name].line})" if name in declared else "0 (not a documented kernel)"
            problems.append(f"{name}: {u.stack} bytes stack frame, more than {where} allows ({allowed}); "
                            f"index register arrays only with compile-time constants, or raise the budget "
                            f"with a reason")
    assert entries, f"{path.name}: ptxas reported no kernels; the report was:\n{report}"
    assert not problems, f"{path.name}:\n  " + "\n  ".join(problems)


def test_budget_parser_reads_comment_above_kernel():
    src = ('// budget: stack 16, spills 0\nextern "C" __global__ void __launch_bounds__(256) k1(int a) {}\n'
           'extern "C" __global__ void k2(int a) {}\n')
    assert budgets(src) == {"k1": Budget(16, 0, 1)}
    assert kernels_defined(src) == ["k1", "k2"]


def test_ptxas_parser_reads_usage():
    report = ("ptxas info    : Compiling entry function 'k1' for 'sm_90'\n"
              "ptxas info    : Function properties for k1\n"
              "    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
              "ptxas info    : Used 255 registers\n")
    entries, usage = parse_ptxas(report)
    assert entries == {"k1"} and usage == {"k1": Usage(24, 8, 12)}
