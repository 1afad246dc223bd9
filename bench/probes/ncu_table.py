"""Nsight Compute's text report (ncu's default output, one block per profiled kernel) as one table: a row per
kernel launch, the figures that say what binds a decode GEMV side by side.

    python3 bench/probes/ncu_table.py NCU.log [--json OUT.json]

Session 14 read these by hand from 14 kernels' sections; stage `probe_ncu` now writes this table beside the log.
Columns: the kernel and its grid, duration, DRAM and SM throughput (% of peak), achieved occupancy, warps a scheduler
(active / eligible), cycles between a warp's instructions, registers, and - when the report has them (`--metrics`) -
the warp instructions the launch issued and the warps stalled per issue-active cycle, by reason. A figure the report
lacks is left empty.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

#: a kernel's header line in ncu's text report: "  name (gx, gy, gz)x(bx, by, bz), Context 1, Stream 7, ..."
_HEADER = re.compile(r"^\s{2}(\S+)\s+\((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\)", re.MULTILINE)
#: (column, the report's row label)
FIGURES = [
    ("us", "Duration"),
    ("dram_pct", "DRAM Throughput"),
    ("sm_pct", "Compute (SM) Throughput"),
    ("occupancy_pct", "Achieved Occupancy"),
    ("warps_active", "Active Warps Per Scheduler"),
    ("warps_eligible", "Eligible Warps Per Scheduler"),
    ("cycles_per_issue", "Warp Cycles Per Issued Instruction"),
    ("registers", "Registers Per Thread"),
]
#: the instructions a launch issued, summed over its warps (`--metrics smsp__inst_executed.sum`): over a GEMV's weights
#: x 32 lanes, its instructions a weight, the figure that says whether issue can bind
_INST = re.compile(r"smsp__inst_executed\.sum\s+\S+\s+([\d.,]+)")
#: the stall metrics' common form (`--metrics smsp__average_warps_issue_stalled_<REASON>_per_issue_active.ratio`)
_STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio\s+\S+\s+([\d.,]+)")
_UNIT_SCALE = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def parse(text: str) -> list[dict]:
    """One dict per kernel block of the report, in the order profiled."""
    heads = list(_HEADER.finditer(text))
    rows = []
    for i, h in enumerate(heads):
        body = text[h.end():heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        row: dict = {"kernel": h.group(1), "grid": int(h.group(2)) * int(h.group(3)) * int(h.group(4)),
                     "block": int(h.group(5)) * int(h.group(6)) * int(h.group(7))}
        for key, label in FIGURES:
            m = re.search(r"\n\s+" + re.escape(label) + r"\s+(\S+)\s+([\d.,]+)", body)
            if not m:
                continue
            value = _number(m.group(2))
            if key == "us":  # ncu picks the unit per kernel (ns, us, ms)
                value *= _UNIT_SCALE.get(m.group(1), float("nan"))
            row[key] = int(value) if key == "registers" else value
        inst = _INST.search(body)
        if inst:
            row["warp_inst"] = int(_number(inst.group(1)))
        stalls = {m.group(1): _number(m.group(2)) for m in _STALL.finditer(body)}
        if stalls:
            row["stalls"] = stalls
        rows.append(row)
    return rows


def render(rows: list[dict]) -> str:
    cols = ["kernel", "grid", "block"] + [k for k, _ in FIGURES] + ["warp_inst"]
    reasons = sorted({r for row in rows for r in row.get("stalls", {})},
                     key=lambda r: -max(row.get("stalls", {}).get(r, 0.0) for row in rows))[:6]
    head = cols + [f"stall:{r}" for r in reasons]

    def cell(row, c):
        if c.startswith("stall:"):
            v = row.get("stalls", {}).get(c[6:])
        else:
            v = row.get(c)
        if v is None:
            return ""
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    lines = [[cell(row, c) for c in head] for row in rows]
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    out += ["  ".join(v.ljust(w) for v, w in zip(line, widths)) for line in lines]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path, help="ncu's text output (a log of `ncu ... python3 ...`)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    if not args.report.is_file():
        print(f"ncu_table: no report at {args.report}", file=sys.stderr)
        return 2
    rows = parse(args.report.read_text(errors="replace"))
    if not rows:
        print(f"ncu_table: {args.report} holds no kernel section (did ncu profile anything?)", file=sys.stderr)
        return 1
    print(render(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
