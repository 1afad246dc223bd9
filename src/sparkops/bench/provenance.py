"""Where and how a figure was measured: device, clocks, library versions, commit, command, date.

A number without these is an anecdote. Everything here is read once per run and stored with the
figure (ledger row, frontier entry), so a reader can tell whether two figures are comparable:
same box, same clocks, same libraries, same code.
"""

from __future__ import annotations

import datetime as _dt
import platform
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from ..paths import repo_root

#: what nvidia-smi is asked for (one CSV line per GPU); never anything that changes the card's settings
_SMI_FIELDS = ("name", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem", "power.draw",
               "temperature.gpu", "driver_version", "persistence_mode")


def now() -> str:
    """UTC, to the second, ISO 8601."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def device_name(device: str) -> str:
    """The device's own name ('NVIDIA H200', 'cpu x86_64')."""
    if device == "cuda":
        return torch.cuda.get_device_name()
    return f"cpu {platform.processor() or platform.machine() or ''}".strip()


def device_slug(device: str) -> str:
    """A short, key-safe name of the box class a figure belongs to: 'cpu', 'nvidia-h200', ...

    Frontier keys carry it: a figure from another GPU model must never raise (or be compared with)
    this box's frontier.
    """
    if device != "cuda":
        return "cpu"
    name = device_name(device).lower()
    for junk in (" nvl", " sxm", " pcie", "-sxm", "-pcie", " 141gb", " 80gb", " hbm3", " hbm3e"):
        name = name.replace(junk, "")
    return "-".join(name.replace("_", " ").split())


def clocks(device: str) -> dict[str, str]:
    """nvidia-smi's view of the GPU right now (clocks, power, temperature), or 'unknown' everywhere.

    Read-only query; sparkops never sets clocks (the card is measured as found).
    """
    if device != "cuda":
        return {"query": "n/a (cpu)"}
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {"query": "unknown (no nvidia-smi)"}
    try:
        index = torch.cuda.current_device()
        out = subprocess.run([smi, f"--id={index}", f"--query-gpu={','.join(_SMI_FIELDS)}",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"query": f"unknown ({type(exc).__name__})"}
    if out.returncode != 0 or not out.stdout.strip():
        return {"query": f"unknown (nvidia-smi exit {out.returncode})"}
    values = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(_SMI_FIELDS, values)) | {"query": "nvidia-smi"}


def library_versions() -> dict[str, str]:
    """python, torch, numpy, CUDA, triton, cupy, sparkops (the gate's list: what can change a number)."""
    from ..gate.records import library_versions as versions

    return versions()


#: the code a figure depends on: the engine and every plugin's sources and kernels
CODE_GLOBS = ("src/sparkops/**/*.py", "plugins/**/*.py", "plugins/**/*.cu", "plugins/**/*.cuh")


def code_digest(root: Path | None = None, globs: tuple[str, ...] = CODE_GLOBS) -> str:
    """sha256 over the paths and bytes of the sources that run (CODE_GLOBS), in path order.

    A commit id says which code ran only where the checkout's git history is the one the row was made
    from; a copy of the tree on another machine may carry an older .git. This digest is computed from the
    files themselves, so `git checkout C && python -c "...code_digest()"` confirms a row's commit C."""
    root = root or repo_root()
    files = sorted({p for g in globs for p in root.glob(g) if p.is_file() and "__pycache__" not in p.parts})
    return digest_of((p.relative_to(root).as_posix(), p.read_bytes()) for p in files)


def digest_of(files: Iterable[tuple[str, bytes]]) -> str:
    """sha256 over (posix path, bytes) pairs, in the order given: code_digest's hash, also of a commit's blobs
    (bench/sources.py), so the two cannot drift apart."""
    import hashlib

    h = hashlib.sha256()
    for path, data in files:
        h.update(path.encode() + b"\0")
        h.update(data + b"\0")
    return h.hexdigest()


def commit() -> dict[str, Any]:
    """The checkout's commit and whether the working tree differs from it ('unknown' without git)."""
    root = repo_root()
    git = shutil.which("git")
    if not git or not (root / ".git").exists():
        return {"commit": "unknown", "dirty": None}
    try:
        head = subprocess.run([git, "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=20)
        status = subprocess.run([git, "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None}
    if head.returncode != 0:
        return {"commit": "unknown", "dirty": None}
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None}


def display_path(path: str | Path) -> str:
    """A path as stored in a record: relative to the checkout when inside it (portable between boxes)."""
    p = Path(path)
    try:
        return p.resolve().relative_to(repo_root()).as_posix()
    except (ValueError, OSError):
        return str(p)


def command_line(argv: list[str] | None = None) -> str:
    """The command as a person would retype it."""
    args = sys.argv[1:] if argv is None else argv
    return " ".join(["sparkops", *map(shlex.quote, args)])


def environment(device: str) -> dict[str, Any]:
    """Everything above in one dict, as stored with a measurement."""
    return {"device": device, "device_name": device_name(device), "device_slug": device_slug(device),
            "clocks": clocks(device), "versions": library_versions(), **commit(), "code_digest": code_digest(),
            "date": now(),
            "host": platform.node()}
