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


def listing(source: Path, out_dir: Path) -> dict[str, Function]:
    """Compile one source (its includes from KERNEL_DIR) for ARCH and read back every function of its SASS.

    The listing is parsed afresh on every call, from SASS compiled once a test run for the same compiler, flags,
    source text and KERNEL_DIR headers (several tests read moe_rowwarp.cu's, each nvcc run of it takes seconds):
    kept in this process, and where pytest-xdist runs the tests, in a directory its workers share (a lock makes a
    second worker wait for the first one's compile rather than repeat it)."""
    nvcc, dis = tools()
    cmd = [nvcc, f"-arch={ARCH}", "-cubin", "-std=c++17", f"-I{KERNEL_DIR}"]
    key = hashlib.sha256("\0".join([*cmd, dis, str(source.resolve()), source.read_text(),
                                     *(h.name + h.read_text() for h in sorted(KERNEL_DIR.glob("*.cuh")))]).encode())
    key = key.hexdigest()[:32]
    if key not in _SASS:
        shared = _shared_dir(out_dir)
        if shared is None:
            _SASS[key] = _compile(cmd, dis, source, out_dir)
        else:
            shared.mkdir(parents=True, exist_ok=True)
            done = shared / f"{source.stem}-{key}.sass"
            with open(shared / f"{source.stem}-{key}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not done.exists():
                    tmp = shared / f"{done.name}.{os.getpid()}"
                    tmp.write_text(_compile(cmd, dis, source, out_dir))
                    os.replace(tmp, done)
            _SASS[key] = done.read_text()
    return parse(_SASS[key])


#: SASS listings compiled in this process, by listing()'s key
_SASS: dict[str, str] = {}


def _compile(cmd: list[str], dis: str, source: Path, out_dir: Path) -> str:
    """nvcc CMD of source into out_dir, and nvdisasm's listing of the cubin."""
    cubin = out_dir / (source.stem + ".cubin")
    proc = subprocess.run([*cmd, "-o", str(cubin), str(source)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"nvcc failed on {source.name}:\n{proc.stdout}{proc.stderr}"
    return subprocess.run([dis, str(cubin)], capture_output=True, text=True, timeout=300, check=True).stdout


def _shared_dir(out_dir: Path) -> Path | None:
    """A directory every pytest-xdist worker of this run sees (beside the workers' own basetemps, popen-gwN, so
    pytest removes it with them); None outside xdist (one process: its own cache is enough)."""
    for parent in out_dir.resolve().parents:
        if parent.name.startswith("popen-gw") and os.environ.get("PYTEST_XDIST_WORKER"):
            return parent.parent / "sass-listings"
    return None


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
