"""Reading compiled CUDA kernels (SASS, from nvdisasm) for what the source cannot promise: the order the machine issues
loads in. Used by tests/test_cuda_pdl_order.py and tests/test_cuda_load_schedule.py; no GPU needed, only nvcc and
nvdisasm.

The question it answers for a kernel launched with programmatic dependent launch (PDL): can a read-only load
(`LDG...CONSTANT`, what `__ldg` and `ld.global.nc` compile to) execute before the kernel's `griddepcontrol.wait`
(SASS `ACQBULK`)? Such a load promises the compiler that nothing writes the data while the kernel runs, so ptxas may
schedule it anywhere, above the wait included; under PDL the kernel before is still running and writing. GPU session
21 caught moe_router_rowwarp_pdl doing exactly this: its x loads were written after pdl_wait() in the source and sat
before ACQBULK in the SASS.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

#: the CuPy plugin's CUDA sources, and the architecture they are compiled for here (the H200's)
KERNEL_DIR = Path(__file__).resolve().parents[1] / "plugins" / "sparkops_cupy" / "kernels"
ARCH = "sm_90"

_FUNCTION = re.compile(r"^\.text\.(\S+):\s*$")
_LABEL = re.compile(r"^\s*(\.L\w+):\s*$")
_INSTRUCTION = re.compile(r"/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_TARGET = re.compile(r"`\((\.L\w+)\)")

#: the SASS of griddepcontrol.wait on sm_90
WAIT = "ACQBULK"


@dataclass(frozen=True)
class Instruction:
    address: int
    predicate: str  # "" when unconditional ("@P0", "@!P2", ...)
    opcode: str  # with its modifiers: "LDG.E.64.CONSTANT"
    operands: str

    @property
    def conditional(self) -> bool:
        return self.predicate not in ("", "@PT")

    @property
    def read_only_load(self) -> bool:
        """A global load through the read-only (non-coherent) path: __ldg / ld.global.nc."""
        return self.opcode.startswith("LDG") and ".CONSTANT" in self.opcode


@dataclass
class Function:
    name: str
    instructions: list[Instruction]
    labels: dict[str, int]  # label -> index of the instruction after it

    def successors(self, i: int) -> list[int]:
        """Where control can go after instruction i (the wait itself ends a path: past it, loads are safe)."""
        ins = self.instructions[i]
        base = ins.opcode.split(".")[0]
        nxt = [i + 1] if i + 1 < len(self.instructions) else []
        if base == WAIT:
            return []
        if base in ("EXIT", "RET"):
            return nxt if ins.conditional else []
        if base in ("BRA", "JMP", "BRX", "JMX"):
            targets = [self.labels[t] for t in _TARGET.findall(ins.operands) if t in self.labels]
            if not targets:  # an indirect branch: anywhere a label marks
                targets = sorted(set(self.labels.values()))
            divergent = ".DIV" in ins.opcode  # BRA.DIV: taken only when the warp diverges
            return targets + (nxt if ins.conditional or divergent else [])
        return nxt

    def loads_before_wait(self) -> list[Instruction]:
        """The read-only loads some path from the kernel's entry reaches without passing the wait."""
        return self.before_wait(lambda ins: ins.read_only_load)

    def before_wait(self, test) -> list[Instruction]:
        """The instructions passing `test` that some path from the kernel's entry reaches without passing the wait."""
        seen, stack, found = set(), [0] if self.instructions else [], []
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            if test(self.instructions[i]):
                found.append(self.instructions[i])
            stack.extend(self.successors(i))
        return sorted(found, key=lambda ins: ins.address)

    @property
    def waits(self) -> bool:
        return any(ins.opcode.split(".")[0] == WAIT for ins in self.instructions)


def parse(sass: str) -> dict[str, Function]:
    """Every function of an nvdisasm listing, by name."""
    out: dict[str, Function] = {}
    current: Function | None = None
    for line in sass.splitlines():
        m = _FUNCTION.match(line)
        if m:
            current = out.setdefault(m.group(1), Function(m.group(1), [], {}))
            continue
        if current is None:
            continue
        m = _LABEL.match(line)
        if m:
            current.labels[m.group(1)] = len(current.instructions)
            continue
        m = _INSTRUCTION.search(line)
        if m:
            current.instructions.append(Instruction(int(m.group(1), 16), (m.group(2) or "").strip(), m.group(3),
                                                    m.group(4)))
    return out


def nvdisasm() -> str | None:
    """nvdisasm from PATH, else the one the triton wheel ships (triton is a dev dependency on Linux)."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        candidate = Path(root) / "backends" / "nvidia" / "bin" / "nvdisasm"
        if candidate.is_file():
            return str(candidate)
    return None


def tools() -> tuple[str, str]:
    """(nvcc, nvdisasm); without them the test skips, or under CI=true fails (the CI image must provide them)."""
    nvcc, dis = shutil.which("nvcc"), nvdisasm()
    if nvcc and dis:
        return nvcc, dis
    msg = (f"{'nvcc' if not nvcc else 'nvdisasm'} not found: compiled CUDA code cannot be read; install the CUDA "
           f"toolkit (nvcc; nvdisasm also comes with the triton wheel)")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg + " (CI=true: the CI image must provide them)")
    pytest.skip(msg)


def listing(source: Path, out_dir: Path, entries: tuple[str, ...] = ()) -> dict[str, Function]:
    """Compile one source (its includes from KERNEL_DIR) for ARCH and read back every function of its SASS (of the
    kernels named in `entries` only, when given: nvcc_compile's ptxas --entry).

    The cubin is nvcc_compile()'s, made once a test run (tests/test_cuda_sources.py's compile of the same source,
    whose -Xptxas -v changes only the options string the cubin records, not one instruction), disassembled once a
    test run as well, and parsed once a process: each call gets Functions of its own (new instruction lists and label
    maps over the same frozen Instructions), so a test that changed what it was given changes no other test's."""
    nvcc, dis = tools()
    code, report, cubin = nvcc_compile(source, out_dir, nvcc, entries)
    assert code == 0, f"nvcc failed on {source.name}:\n{report}"
    sass = cubin.with_suffix(".sass")
    if sass not in _PARSED:
        _PARSED[sass] = parse(_once(sass, lambda: subprocess.run(
            [dis, str(cubin)], capture_output=True, text=True, timeout=300, check=True).stdout))
    return {name: Function(fn.name, list(fn.instructions), dict(fn.labels)) for name, fn in _PARSED[sass].items()}


def nvcc_compile(source: Path, out_dir: Path, nvcc: str, entries: tuple[str, ...] = ()) -> tuple[int, str, Path]:
    """(exit code, nvcc's output, the cubin) of `nvcc -arch=ARCH -cubin -std=c++17 -Xptxas -v -I KERNEL_DIR source`
    (-Xptxas -v: ptxas reports each kernel's registers, stack and spills), run once a test run for the same
    compiler, flags, source path and the bytes of the source and of every file it includes: kept in this process,
    and where pytest-xdist runs the tests, in a directory its workers share (a lock makes a second worker wait for
    the first one's compile rather than repeat it; moe_rowwarp.cu alone takes seconds, and four files read it).

    `entries`: the kernels ptxas generates code for (-Xptxas --entry=NAME each), where a test reads one kernel of a
    source it compiles for itself: the front end still compiles the whole file, ptxas then assembles only those
    kernels, each as it does in the whole file's compile (ptxas assembles an entry on its own: the same instructions,
    only its labels numbered from 0), in a fraction of the time.

    A stale cubin cannot be read: the files live in this run's temporary directory, and their name holds a sha256 of
    what decides the compile - the nvcc path and its --version text (the toolkit's release and build, whose headers
    and ptxas it runs), every flag, and the source's path and bytes with those of each file its `#include "..."`
    lines reach."""
    cmd = [nvcc, f"-arch={ARCH}", "-cubin", "-std=c++17", "-Xptxas", "-v",
           *(arg for name in entries for arg in ("-Xptxas", f"--entry={name}")), f"-I{KERNEL_DIR}"]
    key = hashlib.sha256("\0".join([_version(nvcc), *cmd, *_inputs(source)]).encode())
    stem = f"{source.stem}-{key.hexdigest()[:32]}"
    cubin = _store(out_dir) / f"{stem}.cubin"

    def run() -> str:
        proc = subprocess.run([*cmd, "-o", str(cubin), str(source)], capture_output=True, text=True, timeout=300)
        return f"{proc.returncode}\n{proc.stdout}{proc.stderr}"

    code, _, report = _once(cubin.with_suffix(".report"), run).partition("\n")
    return int(code), report, cubin


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def _inputs(source: Path) -> list[str]:
    """The source's resolved path and text, then each file its `#include "..."` lines reach (transitively, looked up
    as nvcc does: beside the including file, then in KERNEL_DIR), path and text; an include found nowhere by its
    name (nvcc fails on it)."""
    out: list[str] = []
    seen: set[Path] = set()
    todo = [source.resolve()]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        text = path.read_text()
        out += [str(path), text]
        for name in _INCLUDE.findall(text):
            found = next((d / name for d in (path.parent, KERNEL_DIR) if (d / name).is_file()), None)
            if found is None:
                out.append(f"missing {name}")
            else:
                todo.append(found.resolve())
    return out


@functools.cache
def _version(nvcc: str) -> str:
    """`nvcc --version`'s text (one run a process)."""
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60, check=True).stdout


#: what _once() made in this process, by file
_MADE: dict[Path, str] = {}
#: listing()'s parsed SASS in this process, by file (listing() hands out copies)
_PARSED: dict[Path, dict[str, Function]] = {}
#: where nvcc_compile() keeps its files outside xdist: the first test directory that asked (it lasts the session)
_LOCAL: list[Path] = []


def _once(path: Path, make) -> str:
    """make()'s text, kept in `path` (made under a lock there: another xdist worker may want it too), made once."""
    if path not in _MADE:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not path.exists():
                tmp = path.with_name(f"{path.name}.{os.getpid()}")
                tmp.write_text(make())
                os.replace(tmp, path)
        _MADE[path] = path.read_text()
    return _MADE[path]


def _store(out_dir: Path) -> Path:
    """Where nvcc_compile() keeps its files: a directory every pytest-xdist worker of this run sees (beside the
    workers' own basetemps, popen-gwN, so pytest removes it with them), else this process's first out_dir."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for parent in out_dir.resolve().parents:
            if parent.name.startswith("popen-gw"):
                return parent.parent / "nvcc-once"
    if not _LOCAL:
        _LOCAL.append(out_dir)
    return _LOCAL[0]


def load_runs(fn: Function) -> list[int]:
    """The lengths of the runs of global loads (LDG) issued with no multiply-add (FFMA) between them, in program
    order: how many loads a thread has in flight before it must wait on one."""
    runs, run = [], 0
    for ins in fn.instructions:
        if ins.opcode.startswith("LDG"):
            run += 1
        elif ins.opcode.startswith("FFMA") and run:
            runs.append(run)
            run = 0
    return runs + ([run] if run else [])


_REG = re.compile(r"(?<![\w.])(U?R\d+|U?P\d+)(\.64)?")
#: instructions whose first operand is not a destination register
_NO_DEST = ("ST", "STG", "STS", "STL", "RED", "BRA", "BAR", "EXIT", "RET", "BSYNC", "BSSY", "WARPSYNC", "CCTL",
            "MEMBAR", "ACQBULK", "NOP", "CALL", "YIELD")


def _width(opcode: str, operand: str) -> int:
    """Registers an operand spans: LDG.E.128's destination 4, .64 destinations and pairs 2, others 1."""
    if opcode.startswith("LDG"):
        return 4 if ".128" in opcode else 2 if ".64" in opcode else 1
    return 2 if operand.endswith(".64") or ".WIDE" in opcode else 1


def round_trips(instructions: list[Instruction]) -> int:
    """How many global-load round trips a warp waits out in turn along straight-line code (in program order, branches
    not taken): a load is issued only once every instruction before it has issued, and an instruction that uses a
    loaded value (directly or through what was computed from it) issues only after that load's round trip. So a load
    placed after any use of an earlier load starts one round trip later than that load: its level is one more than
    the highest level of the loads used before it. The answer is the highest level. What the source cannot promise
    and ptxas decides: session 38 found the PDL warp GEMV loading each round's x only after the round before's
    products (four levels, or more), which is the reason for the "xr" form (three)."""
    level: dict[int, int] = {}  # load index -> its level
    deps: dict[str, set[int]] = {}  # register -> the loads its value came from
    blocked = 0  # the highest level among the loads used so far
    n_load = 0
    for ins in instructions:
        base = ins.opcode.split(".")[0]
        regs = [(m.group(1), m.group(2) or "") for m in _REG.finditer(ins.operands)]
        dest_first = base not in _NO_DEST and not base.startswith(("ST", "RED", "ATOM")) and regs \
            and ins.operands.strip().startswith(regs[0][0])
        dests, sources = (regs[:1], regs[1:]) if dest_first else ([], regs)
        used: set[int] = set()
        pred = ins.predicate.strip().lstrip("@!")
        for name in [r for r, _ in sources] + ([pred] if pred and pred != "PT" else []):
            used |= deps.get(name, set())
        if used:
            blocked = max(blocked, max(level[i] for i in used))
        made = set(used)
        if base == "LDG":
            level[n_load] = blocked + 1
            made = {n_load}
            n_load += 1
        for name, suffix in dests:
            if name in ("RZ", "PT"):
                continue
            prefix, num = name.rstrip("0123456789"), int(name[len(name.rstrip("0123456789")):])
            for k in range(_width(ins.opcode, name + suffix)):
                deps[f"{prefix}{num + k}"] = made
    return max(level.values(), default=0)
