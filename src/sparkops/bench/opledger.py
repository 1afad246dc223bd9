"""Per-op benchmark runs into the ledger: the side-by-side table and the targets, met or missed.

    row = opbench_row("opbench.json", targets=load_targets())   # pytest-benchmark JSON of `pytest bench/`

A run of `pytest bench/ --benchmark-only --benchmark-json=FILE` times every op x implementation that
passes the gate on that machine (bench/test_bench_*.py); each case's extra_info carries the time per
call and the bytes it moves. This module turns one such file into one ledger row of kind "opbench":
every case (workload group, implementation, us per call, GB/s, % of the read ceiling) and every target
of bench/targets.toml judged against the best implementation that ran its workload - met, missed (with
the measured figure and the target's recorded reason), or not measured. LADDER.md shows the latest
row of each benchmark file per machine, and every target judged over them.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BadInput
from . import ledger as L
from .provenance import now

#: the measured read ceiling of an H200 (anchors section 1; METHOD.md's copy kernel), used when the
#: caller gives none
H200_READ_GBS = 4040.0
TARGETS_FILE = "targets.toml"


@dataclass(frozen=True)
class Target:
    name: str
    group: str  # regex over the workload group
    impl: str  # regex over the implementation key ("attention=triton_splitk"); "" = any
    metric: str  # "pct_bandwidth" (>= value) | "us_per_call" (<= value)
    value: float
    min_bytes: float = 0.0  # only cases that move at least this many bytes per call
    why_missed: str = ""  # what the engineers found when it was missed (kept with the row)

    def matches(self, case: dict[str, Any]) -> bool:
        return (re.search(self.group, case["group"]) is not None
                and (not self.impl or re.search(self.impl, case["impl"]) is not None)
                and (case.get("bytes") or 0) >= self.min_bytes)

    def met(self, case: dict[str, Any]) -> bool:
        x = case.get(self.metric)
        if x is None:
            return False
        return x >= self.value if self.metric == "pct_bandwidth" else x <= self.value

    def better(self, a: dict[str, Any], b: dict[str, Any]) -> bool:
        """Is case a closer to (or further past) the target than case b?"""
        xa, xb = a.get(self.metric), b.get(self.metric)
        if xb is None:
            return xa is not None
        if xa is None:
            return False
        return _ahead(self.metric, xa, xb)


def _ahead(metric: str, xa: float, xb: float) -> bool:
    """Is figure xa nearer the target's good side than xb (higher % of bandwidth, or fewer us per call)?"""
    return xa > xb if metric == "pct_bandwidth" else xa < xb


def load_targets(path: str | Path | None = None) -> list[Target]:
    """The targets of `path`, else of the scoreboard directory's targets.toml, else of the checkout's."""
    if path is None:
        from ..paths import repo_root

        path = L.bench_dir() / TARGETS_FILE
        if not path.exists():
            path = repo_root() / "bench" / TARGETS_FILE
    path = Path(path)
    if not path.exists():
        raise BadInput(f"no targets file {path}; write one like bench/targets.toml")
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{path}: {exc}") from None
    out = []
    for i, t in enumerate(doc.get("target", [])):
        try:
            tgt = Target(t["name"], t["group"], t.get("impl", ""), t["metric"], float(t["value"]),
                         float(t.get("min_bytes", 0)), t.get("why_missed", "").strip())
        except KeyError as exc:
            raise BadInput(f"{path}: [[target]] number {i + 1} lacks {exc}") from None
        if tgt.metric not in ("pct_bandwidth", "us_per_call"):
            raise BadInput(f"{path}: target '{tgt.name}': metric must be pct_bandwidth or us_per_call")
        out.append(tgt)
    return out


def cases(doc: dict[str, Any], read_gbs: float) -> list[dict[str, Any]]:
    """One entry per benchmark of a pytest-benchmark JSON document (those without a time per call are left out)."""
    out = []
    for b in doc.get("benchmarks", []):
        x = b.get("extra_info") or {}
        us = x.get("us_per_call")
        if us is None:
            continue
        gbs = x.get("gb_per_s")
        out.append({"group": b.get("group") or b.get("name", "?"), "impl": x.get("impl", b.get("name", "?")),
                    "mode": x.get("mode"), "us_per_call": float(us), "gb_per_s": gbs,
                    "pct_bandwidth": 100.0 * gbs / read_gbs if gbs else None,
                    "tflops": x.get("tflops"), "bytes": x.get("bytes_per_call", x.get("bytes"))})
    return out


def judge(targets: list[Target], entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for t in targets:
        best = None
        for c in entries:
            if t.matches(c) and (best is None or t.better(c, best)):
                best = c
        if best is None:
            verdict, why = "not measured", "no implementation ran this workload in the run"
        elif t.met(best):
            verdict, why = "met", ""
        else:
            verdict, why = "missed", t.why_missed or "(no reason recorded in bench/targets.toml)"
        out.append({"target": t.name, "metric": t.metric, "value": t.value, "verdict": verdict, "why": why,
                    "best_impl": best["impl"] if best else None, "group": best["group"] if best else None,
                    "measured": best.get(t.metric) if best else None})
    return out


def opbench_row(path: str | Path, *, targets: list[Target], read_gbs: float | None = None,
                command: str = "") -> dict[str, Any]:
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"{path}: not a pytest-benchmark JSON file ({exc})") from None
    read_gbs = read_gbs or H200_READ_GBS
    entries = cases(doc, read_gbs)
    if not entries:
        raise BadInput(f"{path}: no benchmark with a time per call (was it made by `pytest bench/ --benchmark-only "
                       f"--benchmark-json=FILE`?)")
    date = now()
    machine = doc.get("machine_info") or {}
    commit = doc.get("commit_info") or {}
    devices = sorted({str(x) for b in doc.get("benchmarks", []) if (x := (b.get("extra_info") or {}).get("device"))}) \
        or ([str(machine["sparkops_device"])] if machine.get("sparkops_device") else [])
    return {"id": L.new_id(date), "kind": "opbench", "date": date, "run_date": doc.get("datetime"),
            "source": path.name, "node": machine.get("node"), "devices": devices, "read_ceiling_gbs": read_gbs,
            "commit": commit.get("id"), "dirty": commit.get("dirty"), "entries": entries,
            "targets": judge(targets, entries), "command": command}


def latest_per_source(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The standing (not retracted) latest row of each benchmark file on each machine: a run of one file does not
    hide another file's run. A run that names no device (recorded before runs named theirs) is superseded by a
    later run of the same file on the same node that names one: it cannot be told apart from that machine."""
    gone = L.retractions(rows)
    latest: dict[tuple[str, str, str], dict[str, Any]] = {}
    labelled_after: set[tuple[str, str]] = set()  # (file, node) with a device-naming run later in the ledger
    standing = [r for r in rows if r["kind"] == "opbench" and r["id"] not in gone]
    keep = []
    for r in reversed(standing):
        where = (str(r.get("source")), str(r.get("node")))
        if r.get("devices"):
            labelled_after.add(where)
        elif where in labelled_after:
            continue
        keep.append(r)
    for r in reversed(keep):
        latest[(str(r.get("source")), ",".join(r.get("devices") or []), str(r.get("node")))] = r
    return list(latest.values())


def combined_targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target judged over several runs (`latest_per_source`): met if any run met it, else the best measured
    miss (with its row), else not measured. A run that did not time a target's workload says nothing about it."""
    order: list[str] = []
    best: dict[str, dict[str, Any]] = {}
    for r in rows:
        for t in r.get("targets", []):
            name = t["target"]
            if name not in best:
                order.append(name)
                best[name] = {**t, "row": None}
            if t["verdict"] == "not measured":
                continue
            cur = best[name]
            if cur["row"] is None or _closer(t, cur):
                best[name] = {**t, "row": r["id"]}
    return [best[n] for n in order]


def _closer(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if (a["verdict"] == "met") != (b["verdict"] == "met"):
        return a["verdict"] == "met"
    return _ahead(a["metric"], a["measured"], b["measured"])
