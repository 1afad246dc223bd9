"""A side-by-side record's columns kernel by kernel: which kernel of a chain got longer, and which started later.

Why. A per-op record (perop.py) gives each column one number, a chain's time a call. GPU sessions 36-37 timed the norm
folds at ~15 us a layer over the plain MoE down (~6 over the o_proj GEMV) with every arrival and scratch form alike:
one number cannot say whether the fused kernel itself runs longer or the kernel after it starts later. With
SPARKOPS_PEROP_KERNELS set as well as SPARKOPS_PEROP_DIR, a side-by-side test replays each column's graph once more
under the profiler (CUPTI gives each kernel's device interval) and writes kernels-NAME.json beside perop-NAME.json
(a lead, not a ledger row: `ledger perop` reads only perop-*.json).

Per column, from one replay of `calls` calls on one stream, kernels in start order:
  - dur_us: the kernel's interval (under PDL it holds the wait inside its predecessor);
  - own_us: its end less the latest end before it (what it adds to the chain: session 24's own time);
  - gap_us: its start less that latest end (negative: it started early, inside its predecessor);
and per kernel name the count a call and the medians of the three, with the chain's span a call.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Iterable

from ..errors import BadInput
from .perop import PEROP_DIR

#: with this variable set (and PEROP_DIR), the side-by-side tests write kernels-NAME.json
PEROP_KERNELS = "SPARKOPS_PEROP_KERNELS"


def wanted() -> bool:
    """Whether the running side-by-side should profile its columns: SPARKOPS_PEROP_KERNELS set. Set without
    SPARKOPS_PEROP_DIR (where the file goes) it is refused, not ignored."""
    if not os.environ.get(PEROP_KERNELS):
        return False
    if not os.environ.get(PEROP_DIR):
        raise BadInput(f"{PEROP_KERNELS} is set but {PEROP_DIR} is not: set {PEROP_DIR} to the directory that "
                       f"kernels-NAME.json (and perop-NAME.json) should go to, or unset {PEROP_KERNELS}")
    return True


def summarize(kernels: Iterable[tuple[str, float, float]], calls: int) -> dict:
    """One column's kernels (name, start, end in µs, one replay of `calls` calls) by name: {"span_us_per_call",
    "kernels": {name: {"per_call", "dur_us", "own_us", "gap_us"}}}, the names in order of first start."""
    if calls < 1:
        raise ValueError(f"calls must be at least 1, not {calls}")
    ks = sorted(kernels, key=lambda k: (k[1], k[2]))
    if not ks:
        raise ValueError("no kernels: the profiler saw none in the replay")
    by: dict[str, dict[str, list[float]]] = {}
    latest = None
    for name, start, end in ks:
        if end < start:
            raise ValueError(f"kernel {name}: ends ({end}) before it starts ({start})")
        row = by.setdefault(name, {"dur": [], "own": [], "gap": []})
        row["dur"].append(end - start)
        if latest is None:
            row["own"].append(end - start)
        else:
            row["own"].append(max(0.0, end - max(start, latest)))
            row["gap"].append(start - latest)
        latest = end if latest is None else max(latest, end)
    span = (max(k[2] for k in ks) - ks[0][1]) / calls
    return {"span_us_per_call": span, "kernels": {
        name: {"per_call": len(r["dur"]) / calls, "dur_us": statistics.median(r["dur"]),
               "own_us": statistics.median(r["own"]), "gap_us": statistics.median(r["gap"]) if r["gap"] else None}
        for name, r in by.items()}}


def write_kernels(name: str, title: str, columns: dict[str, dict]) -> Path | None:
    """Write $SPARKOPS_PEROP_DIR/kernels-NAME.json ({"title", "columns": {column: summarize(...)}}, with the running
    test's node id); nothing unless wanted(). Returns the path written."""
    if not wanted():
        return None
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    path = Path(os.environ[PEROP_DIR], f"kernels-{name}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"title": title, "test": test, "columns": columns}, indent=1))
    return path


def render(columns: dict[str, dict], width: int = 48) -> str:
    """The columns as text: a line a kernel name (count a call, median interval, own time and gap before it)."""
    lines = []
    for col, s in columns.items():
        lines.append(f"{col}: {s['span_us_per_call']:.2f} us a call")
        for kname, k in s["kernels"].items():
            gap = "-" if k["gap_us"] is None else f"{k['gap_us']:+.2f}"
            lines.append(f"  {kname[:width]:<{width}} x{k['per_call']:.2f}  dur {k['dur_us']:6.2f}  "
                         f"own {k['own_us']:6.2f}  gap {gap}")
    return "\n".join(lines)
