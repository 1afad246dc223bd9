"""A pinned peer: the user's own llama.cpp `llama-bench`, run on the same GGUF at the same depths.

sparkops never builds or ships llama.cpp; `--peer llama.cpp=PATH` names an executable the user
has. It is run with `-o json` once per round, interleaved with sparkops's own rounds, and its
JSON is parsed (a JSON array of test objects; JSONL is accepted too). Each test object carries
n_prompt, n_gen, n_depth, avg_ts, stddev_ts, samples_ts, model_filename, backends, gpu_info,
build_commit. The peer's figure is checked like ours: it must report the depth and token counts
that were asked for, or it is refused.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BadInput, CheckFailed

#: peers sparkops knows how to drive
KNOWN = ("llama.cpp",)


class PeerFailed(CheckFailed):
    """The peer did not run, or did not report the test it was asked for."""


@dataclass(frozen=True)
class PeerSpec:
    name: str
    executable: Path
    extra_args: tuple[str, ...] = ()


def parse_peer_arg(text: str, extra_args: str | None = None) -> PeerSpec:
    """'llama.cpp=/path/to/llama-bench' -> PeerSpec (the file must exist and be executable)."""
    name, sep, path = text.partition("=")
    if not sep or not path:
        raise BadInput(f"--peer '{text}': expected NAME=PATH, "
                       f"e.g. --peer llama.cpp=/opt/llama.cpp/build/bin/llama-bench")
    if name not in KNOWN:
        raise BadInput(f"--peer '{name}': unknown peer; known peers: {', '.join(KNOWN)}")
    exe = Path(path).expanduser()
    if not exe.is_file():
        raise BadInput(f"--peer {name}={path}: no such file; point it at your llama-bench executable")
    import os

    if not os.access(exe, os.X_OK):
        raise BadInput(f"--peer {name}={path}: the file is not executable (chmod +x it)")
    return PeerSpec(name, exe, tuple(shlex.split(extra_args or "")))


@dataclass
class PeerFigure:
    peer: str
    phase: str  # "decode" (tg) | "prefill" (pp)
    n_prompt: int
    n_gen: int
    n_depth: int
    avg_ts: float
    stddev_ts: float
    samples_ts: list[float] = field(default_factory=list)
    model_filename: str = ""
    backends: str = ""
    gpu_info: str = ""
    build_commit: str = ""
    command: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _objects(text: str) -> list[dict[str, Any]]:
    text = text.strip()
    if not text:
        raise PeerFailed("llama-bench printed nothing on stdout (was it run with -o json?)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise PeerFailed(f"llama-bench's output is neither JSON nor JSON lines: {exc}; first line: "
                             f"{text.splitlines()[0][:200]!r}") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise PeerFailed("llama-bench's JSON is not a list of test objects")
    return data


def parse_llama_bench(text: str, peer: str = "llama.cpp", command: str = "") -> list[PeerFigure]:
    """Every test object in llama-bench's JSON output, as PeerFigures."""
    out = []
    for i, d in enumerate(_objects(text)):
        missing = [k for k in ("n_prompt", "n_gen", "avg_ts") if k not in d]
        if missing:
            raise PeerFailed(f"llama-bench test {i}: missing field(s) {missing}")
        n_prompt, n_gen = int(d["n_prompt"]), int(d["n_gen"])
        if "n_depth" not in d:
            raise PeerFailed(f"llama-bench test {i}: no n_depth field - this llama-bench predates -d/--n-depth, so "
                             f"the depth it measured at cannot be verified; use a newer build")
        phase = "decode" if n_gen > 0 and n_prompt == 0 else "prefill" if n_prompt > 0 and n_gen == 0 else "mixed"
        out.append(PeerFigure(peer=peer, phase=phase, n_prompt=n_prompt, n_gen=n_gen, n_depth=int(d["n_depth"]),
                              avg_ts=float(d["avg_ts"]), stddev_ts=float(d.get("stddev_ts", 0.0)),
                              samples_ts=[float(x) for x in d.get("samples_ts", [])],
                              model_filename=str(d.get("model_filename", "")), backends=str(d.get("backends", "")),
                              gpu_info=str(d.get("gpu_info", "")), build_commit=str(d.get("build_commit", "")),
                              command=command))
    return out


def command(spec: PeerSpec, gguf: Path, phase: str, depth: int, tokens: int, repetitions: int = 1) -> list[str]:
    """The llama-bench command line for one test: decode = tg N at depth D, prefill = pp T at depth D."""
    n_prompt, n_gen = (0, tokens) if phase == "decode" else (tokens, 0)
    return [str(spec.executable), "-m", str(gguf), "-p", str(n_prompt), "-n", str(n_gen), "-d", str(depth),
            "-r", str(repetitions), "-o", "json", *spec.extra_args]


def run(spec: PeerSpec, gguf: Path, phase: str, depth: int, tokens: int, *, repetitions: int = 1,
        timeout: float = 3600.0) -> PeerFigure:
    """Run the peer once for one test and return its figure, verified to be the test asked for."""
    argv = command(spec, gguf, phase, depth, tokens, repetitions)
    shown = " ".join(map(shlex.quote, argv))
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PeerFailed(f"{spec.name}: `{shown}` did not run: {exc}") from None
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise PeerFailed(f"{spec.name}: `{shown}` exited {proc.returncode}:\n{tail}")
    figures = parse_llama_bench(proc.stdout, spec.name, shown)
    want = (0, tokens) if phase == "decode" else (tokens, 0)
    match = [f for f in figures if (f.n_prompt, f.n_gen) == want and f.n_depth == depth]
    if not match:
        got = ", ".join(f"p={f.n_prompt} n={f.n_gen} d={f.n_depth}" for f in figures) or "nothing"
        raise PeerFailed(f"{spec.name}: asked for p={want[0]} n={want[1]} at depth {depth}, it reported {got}; "
                         f"a figure at another depth is not comparable and is refused")
    return match[0]
