"""Per-op side-by-side records: the GPU tests' timings that forecast a rung, and their ledger rows.

A side-by-side GPU test (tests/backends/test_cupy_timing.py, test_triton_*.py) times one op's implementations on the
same argument sets, one CUDA graph each, and with SPARKOPS_PEROP_DIR set writes perop-NAME.json:

    {"title": ..., "per_token_seconds": {impl: seconds a token}, "test": the pytest node id, ...}

bench/perop_factor.py turns a record into a rung's forecast (`--expect OP=FACTOR`). The record is a GPU measurement,
so it goes into the ledger too: `sparkops ledger perop FILE...` appends one row of kind "perop" per file - the
implementations' times a token, the fastest, the command that reproduces it, the device and the code that ran - and
LADDER.md lists them. The GPU suite records every file its stages wrote on the machine that ran them.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ..errors import BadInput
from . import ledger as L
from .provenance import code_digest, commit, now

#: the environment variable naming the directory the GPU tests write their records to
PEROP_DIR = "SPARKOPS_PEROP_DIR"


def write_record(name: str, title: str, per_token_seconds: dict[str, float], **extra: Any) -> Path | None:
    """Write $SPARKOPS_PEROP_DIR/perop-NAME.json (nothing without the variable) with the running test's node id, so
    that its ledger row can say how to reproduce it. Returns the path written."""
    out = os.environ.get(PEROP_DIR)
    if not out:
        return None
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]  # "path::name[id] (call)"
    path = Path(out, f"perop-{name}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"title": title, "per_token_seconds": per_token_seconds, "test": test, **extra},
                               indent=1))
    return path


def read_record(path: str | Path) -> dict[str, Any]:
    """A record, checked: a title and at least one implementation with a positive, finite time a token."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"{path}: not a per-op record ({exc}); records are the perop-*.json files the GPU tests write "
                       f"under ${PEROP_DIR}") from None
    times = doc.get("per_token_seconds") if isinstance(doc, dict) else None
    if not isinstance(times, dict) or not times or not isinstance(doc.get("title"), str):
        raise BadInput(f"{path}: a per-op record needs a 'title' and 'per_token_seconds' {{implementation: seconds}}")
    bad = [n for n, s in times.items() if not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0]
    if bad:
        raise BadInput(f"{path}: implementation(s) {bad} have no positive, finite time a token")
    return doc


def perop_row(path: str | Path, *, command: str = "", device_name: str = "", ran_commit: str = "") -> dict[str, Any]:
    """The ledger row of one record. `command` defaults to the pytest line of the test that wrote it (the record's
    'test'); `device_name` to this machine's GPU. The code is this checkout's (commit, digest) - record on the machine
    that ran the test, as the GPU suite does - or, for a record brought home, `ran_commit`'s (the digest of that
    commit's files, so `sparkops ledger provenance` matches it)."""
    path = Path(path)
    doc = read_record(path)
    test = doc.get("test") or ""
    if not command:
        if not test:
            raise BadInput(f"{path}: the record names no test; give the command that produced it (--command)")
        command = f"{PEROP_DIR}=DIR python3 -m pytest -m gpu '{test}'"
    if not device_name:
        import torch

        if not torch.cuda.is_available():
            raise BadInput(f"{path}: no CUDA device here to name; give the device the record was measured on "
                           f"(--device-name 'NVIDIA H200')")
        device_name = torch.cuda.get_device_name()
    times = {n: float(s) * 1e6 for n, s in doc["per_token_seconds"].items()}
    if ran_commit:
        from ..paths import repo_root
        from .sources import _git, digest_of_commit

        try:
            full = _git(repo_root(), "rev-parse", "--verify", "--quiet", f"{ran_commit}^{{commit}}").decode().strip()
            code = {"commit": full, "dirty": False, "code_digest": digest_of_commit(repo_root(), full)}
        except (RuntimeError, OSError) as exc:
            raise BadInput(f"--ran-commit {ran_commit}: not a commit of this checkout ({exc})") from None
    else:
        code = {**commit(), "code_digest": code_digest()}
    date = now()
    return {"id": L.new_id(date), "kind": "perop", "date": date, "record": path.name, "title": doc["title"],
            "dtype": doc.get("dtype"), "per_token_us": times, "fastest": min(times, key=times.get), "test": test,
            "command": command, "device_name": device_name, **code}


def render_rows(rows: list[dict[str, Any]], cell) -> list[str]:
    """LADDER.md's section: every standing per-op record, the fastest implementation in bold."""
    gone = L.retractions(rows)
    standing = [r for r in rows if r["kind"] == "perop" and r["id"] not in gone]
    if not standing:
        return []
    out = ["", "## Per-op side-by-sides (the GPU tests' records a rung's forecast reads)", "",
           "| date | row | record | what | us a token | device | command |", "|---|---|---|---|---|---|---|"]
    for r in standing:
        times = "; ".join((f"**{n} {t:.1f}**" if n == r["fastest"] else f"{n} {t:.1f}")
                          for n, t in sorted(r["per_token_us"].items(), key=lambda kv: kv[1]))
        out.append(f"| {str(r['date'])[:10]} | {r['id']} | {cell(r['record'])} | {cell(r['title'])} | {times} "
                   f"| {cell(r.get('device_name', ''))} | `{cell(r['command'])}` |")
    return out
