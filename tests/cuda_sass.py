"""Reading compiled CUDA kernels (SASS, from nvdisasm) for what the source cannot promise: the order the machine issues
loads in. Used by tests/test_cuda_pdl_order.py; no GPU needed, only nvcc and nvdisasm.

The question it answers for a kernel launched with programmatic dependent launch (PDL): can a read-only load
(`LDG...CONSTANT`, what `__ldg` and `ld.global.nc` compile to) execute before the kernel's `griddepcontrol.wait`
(SASS `ACQBULK`)? Such a load promises the compiler that nothing writes the data while the kernel runs, so ptxas may
schedule it anywhere, above the wait included; under PDL the kernel before is still running and writing. GPU session
21 caught moe_router_rowwarp_pdl doing exactly this: its x loads were written after pdl_wait() in the source and sat
before ACQBULK in the SASS.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

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
        seen, stack, found = set(), [0] if self.instructions else [], []
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            if self.instructions[i].read_only_load:
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
