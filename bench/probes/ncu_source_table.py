"""Read Nsight Compute's source page (`ncu --page source --print-source sass --csv`, stage probe_ncu_source) into where
a kernel's warps waited: the stall samples by reason over the whole kernel, then the instructions holding the most
samples, each with its index in the SASS, its main reason and how often it executed.

    python3 bench/probes/ncu_source_table.py probe-ncu-source.log [--top 12] [--json out.json]

The log may hold the probe's own lines before ncu's CSV; the table starts at the header row whose first cell is
"Address".
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"


def read_source_page(path: Path) -> tuple[list[str], list[list[str]]]:
    """(header, instruction rows) of the source page's CSV in `path`."""
    rows = list(csv.reader(path.read_text(errors="replace").splitlines()))
    at = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if at is None:
        raise ValueError(f"{path}: no source-page table (no header row starting 'Address'); was ncu run with "
                         f"--page source --csv?")
    header = rows[at]
    if SAMPLES not in header:
        raise ValueError(f"{path}: the source page has no '{SAMPLES}' column; run ncu with --section "
                         f"WarpStateStats --section SourceCounters")
    return header, [r for r in rows[at + 1:] if len(r) == len(header)]


def summarize(header: list[str], rows: list[list[str]], top: int) -> dict:
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def n(row: list[str], name: str) -> int:
        try:
            return int(float(row[col[name]]))
        except ValueError:  # "-" for a count that does not apply
            return 0

    total = sum(n(r, SAMPLES) for r in rows)
    by_reason = {s: sum(n(r, s) for r in rows) for s in reasons}
    ranked = sorted(range(len(rows)), key=lambda i: -n(rows[i], SAMPLES))[:top]
    return {
        "instructions": len(rows),
        "samples": total,
        "by_reason": dict(sorted(by_reason.items(), key=lambda kv: -kv[1])),
        "top": [{"index": i, "sass": rows[i][col["Source"]].strip(), "samples": n(rows[i], SAMPLES),
                 "reason": max(reasons, key=lambda s: n(rows[i], s)) if reasons else "",
                 "executed": n(rows[i], "Instructions Executed") if "Instructions Executed" in col else 0}
                for i in ranked],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--json", type=Path, help="write the summary here too")
    args = ap.parse_args(argv)
    if args.top < 1:
        ap.error(f"--top must be at least 1 (got {args.top})")
    try:
        summary = summarize(*read_source_page(args.log), args.top)
    except (OSError, ValueError) as e:
        print(f"ncu_source_table: {e}", file=sys.stderr)
        return 2
    total = summary["samples"] or 1
    print(f"{args.log}: {summary['instructions']} instructions, {summary['samples']} stall samples")
    for reason, v in list(summary["by_reason"].items())[:8]:
        print(f"  {reason:24s} {v:6d}  {100 * v / total:5.1f}%")
    print("  index  samples  share  reason               executed  SASS")
    for t in summary["top"]:
        print(f"  {t['index']:5d}  {t['samples']:7d}  {100 * t['samples'] / total:4.1f}%  {t['reason']:20s} "
              f"{t['executed']:8d}  {t['sass'][:60]}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
