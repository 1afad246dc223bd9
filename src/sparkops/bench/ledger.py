"""bench/ledger.jsonl: every measured change, one JSON object per line, append-only.

Row kinds:
  measurement  a gated figure (or an A/B pair of them) at one workload: before -> after, the ratio,
               the tier (win / none / regression), the worst-depth KL and top-1, the command, the box
  peer         the pinned peer's figure at the same workload, interleaved with ours, and the ratio
  retraction   `retracts` = an earlier row's id, `why`; the earlier row is never edited or removed
  refusal      a registry the model gate refused before anything was timed: its verdict and the command,
               and no figure (a refused change is on record, not only in a log)
  opbench      one per-op benchmark run (pytest bench/ --benchmark-json): every op x implementation side by
               side, and each target of bench/targets.toml met, missed (figure and reason) or not measured
  perop        `sparkops ledger perop`: a GPU test's side-by-side record (bench/perop.py) - each implementation's
               time a token on the same argument sets, the command that reproduces it; what a rung's forecast reads
  diagnosis    `sparkops diagnose --record`: at one depth, the binding ceiling and the predicted gain of lifting
               it, with the profiled step's figures (not gated bench figures: the frontier never reads them)

Rows are appended under an exclusive lock with one write() of the whole line, then fsync'd, so a
reader never sees half a row and two writers never interleave. Nothing ever rewrites old lines.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import secrets
from pathlib import Path
from typing import Any

from ..errors import BadInput
from ..paths import repo_root
from .provenance import now

LEDGER = "ledger.jsonl"
FRONTIER = "frontier.toml"
LADDER = "LADDER.md"
KINDS = ("measurement", "peer", "retraction", "refusal", "opbench", "diagnosis", "perop")
TIERS = ("win", "none", "regression", "retracted")


#: the bench directory's writer lock: one recording (ledger rows, the frontier's read-modify-write, the render) at a
#: time, so two benches finishing together (two GPUs' lanes on one bench directory) cannot lose a frontier raise
LOCK = ".bench.lock"


class writer_lock:
    """`with writer_lock(bench_dir):` - an exclusive flock on bench_dir/.bench.lock for the block (blocking)."""

    def __init__(self, d: str | Path):
        self.path = Path(d) / LOCK

    def __enter__(self) -> "writer_lock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: Any) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def bench_dir(arg: str | Path | None = None) -> Path:
    """Where the scoreboard lives: --bench-dir, else $SPARKOPS_BENCH_DIR, else the checkout's bench/."""
    if arg:
        return Path(arg)
    env = os.environ.get("SPARKOPS_BENCH_DIR")
    return Path(env) if env else repo_root() / "bench"


def new_id(date: str | None = None) -> str:
    stamp = (date or now())[:19].replace("-", "").replace(":", "").replace("T", "-")
    return f"{stamp}-{secrets.token_hex(3)}"


def read(path: str | Path) -> list[dict[str, Any]]:
    """Every row, in file order; a malformed line is an error naming the line (never skipped)."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    seen: set[str] = set()
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{path}:{i}: not a JSON object ({exc}); the ledger is append-only - restore the line "
                           f"from git rather than editing it") from None
        if not isinstance(row, dict) or row.get("kind") not in KINDS or not isinstance(row.get("id"), str):
            raise BadInput(f"{path}:{i}: a ledger row needs an 'id' and a 'kind' in {list(KINDS)}")
        if row["id"] in seen:
            raise BadInput(f"{path}:{i}: row id {row['id']} appears twice")
        seen.add(row["id"])
        rows.append(row)
    return rows


def append(path: str | Path, row: dict[str, Any]) -> dict[str, Any]:
    """Append one row atomically (see the module docstring); returns it."""
    path = Path(path)
    if row.get("kind") not in KINDS or not row.get("id"):
        raise ValueError(f"not a ledger row: {row!r}")
    line = (json.dumps(_finite(row), sort_keys=False, default=_jsonable, allow_nan=False) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as fh:
                fh.seek(size - 1)
                if fh.read(1) != b"\n":
                    raise BadInput(f"{path}: the last line is not terminated (a torn write?); fix it before "
                                   f"appending (the ledger is never rewritten by the tools)")
        if any(r["id"] == row["id"] for r in read(path)):
            raise BadInput(f"{path}: row id {row['id']} already exists")
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(f"short write to {path} ({written} of {len(line)} bytes)")
        os.fsync(fd)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    return row


def _finite(v: Any) -> Any:
    """NaN / Inf become None (JSON has no spelling for them; a row must stay readable everywhere)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def _jsonable(v: Any) -> Any:
    if isinstance(v, Path):
        return str(v)
    if hasattr(v, "as_dict"):
        return v.as_dict()
    return str(v)


def find(rows: list[dict[str, Any]], ref: str) -> dict[str, Any]:
    """A row by its id or a unique prefix of it."""
    hits = [r for r in rows if r["id"] == ref] or [r for r in rows if r["id"].startswith(ref)]
    if not hits:
        raise BadInput(f"no ledger row '{ref}'; `sparkops ledger show` lists the ids")
    if len(hits) > 1:
        shown = ", ".join(r["id"] for r in hits[:5])
        raise BadInput(f"'{ref}' matches {len(hits)} rows ({shown}); give more of the id")
    return hits[0]


def retractions(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{retracted row id: the retraction row}."""
    return {r["retracts"]: r for r in rows if r["kind"] == "retraction"}


def retraction_row(rows: list[dict[str, Any]], ref: str, why: str, command: str) -> dict[str, Any]:
    """The row that retracts `ref` (validated: it exists, is a figure, is not already retracted)."""
    if not why or not why.strip():
        raise BadInput("a retraction needs --why: say what was wrong with the measurement")
    target = find(rows, ref)
    if target["kind"] == "retraction":
        raise BadInput(f"row {target['id']} is itself a retraction; retractions cannot be retracted")
    done = retractions(rows).get(target["id"])
    if done is not None:
        raise BadInput(f"row {target['id']} was already retracted by {done['id']}: {done['why']}")
    date = now()
    return {"id": new_id(date), "kind": "retraction", "date": date, "retracts": target["id"], "why": why.strip(),
            "key": target.get("key"), "command": command}


def standing(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Measurement rows that have not been retracted."""
    gone = retractions(rows)
    return [r for r in rows if r["kind"] == "measurement" and r["id"] not in gone]
