"""Read a step timeline (bench/probes/step_timeline.py's JSON): what each kernel adds to the step's critical path.

A kernel's tail is its end minus the end of the main-stream kernel before it. Under PDL a kernel starts before the
one before it ends, so its duration overstates what it costs the step and its own time (step_timeline's) spreads
overlap over both. The tail is what the chain waits for after the kernel before has finished. Kernels off the main
path (the side stream's gate GEMVs, whose names --side lists) are left out of the chain. Printed a row per
(kernel, kernel before) pair: the median tail, how far into the kernel before it started, its median duration, and
how many launches a replay.

A main-stream kernel that reads the side stream's outputs starts only after the side stream's join, so its real
predecessor may be a side kernel. Where a side kernel that started after the kernel before's start ended by the
kernel's own start (0.5 us of slack), the row also says when the last such one ended, from the kernel before's end
("side done +X"): near zero or later, removing or fusing away the kernel before would leave the kernel waiting on the
side stream, not save its tail. GPU session 33 learned this the hard way: the short conv "added 4.8 us" after the
tall GEMV, but the side stream's low-rank GEMV ended 0.16 us after it, and folding the conv into the recurrence lost
0.943 (bench/gpu-runs/2026-12-05-session33/README.md).

    python3 bench/probes/timeline_tails.py TIMELINE.json [--registry NAME] [--side _gemv_kernel] [--json]

GPU session 32 read the stack's H100 replay this way (bench/gpu-runs/2026-12-05-session32/README.md): the KDA layers'
o_proj adds 8.6 us after the recurrence, the MLA layers' same GEMV 6.3 us from a cold start.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


#: how long after a side kernel's end a main-stream kernel may start and still count as waiting on it (us)
JOIN_SLACK_US = 0.5


def tails(kernels: list[list], side: tuple[str, ...]) -> list[dict]:
    """Rows (kernel, before, launches, tail_us, start_after_us, duration_us, side_done_us), medians over the launches,
    largest total tail first. kernels: step_timeline's [name, stream, start_us, end_us, own_us] in start order.
    side_done_us: the median over the launches that had one of (the last end of a side kernel that started after the
    kernel before did and ended by the kernel's start + JOIN_SLACK_US) minus the kernel before's end; None if none
    had one."""
    chain = [k for k in kernels if not k[0].startswith(side)]
    off = [k for k in kernels if k[0].startswith(side)]
    groups: dict[tuple[str, str], list[tuple[float, float, float, float | None]]] = defaultdict(list)
    for before, k in zip(chain, chain[1:]):
        ends = [s[3] for s in off if s[2] >= before[2] and s[3] <= k[2] + JOIN_SLACK_US]
        done = max(ends) - before[3] if ends else None
        groups[(k[0], before[0])].append((k[3] - before[3], k[2] - before[2], k[3] - k[2], done))
    rows = []
    for (name, prev), v in groups.items():
        dones = [d for *_, d in v if d is not None]
        rows.append({"kernel": name, "before": prev, "launches": len(v),
                     "tail_us": statistics.median(t for t, _, _, _ in v),
                     "start_after_us": statistics.median(s for _, s, _, _ in v),
                     "duration_us": statistics.median(d for _, _, d, _ in v),
                     "side_done_us": statistics.median(dones) if dones else None,
                     "total_tail_us": sum(t for t, _, _, _ in v)})
    return sorted(rows, key=lambda r: -r["total_tail_us"])


class TimelineError(ValueError):
    """A file that is not step_timeline.py's JSON, or lacks the registry asked for: the message names which."""


def read_timeline(path: Path, registry: str | None, tool: str) -> tuple[str, list[list]]:
    """(registry, its replay's kernels [name, stream, start_us, end_us, own_us] in start order) from step_timeline.py's
    --out JSON; the first registry in the file unless `registry` names one. TimelineError, naming the problem and the
    file, for anything else (`tool` prefixes the message)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TimelineError(f"{tool}: cannot read {path} as a timeline ({exc}); give step_timeline.py's --out JSON")
    regs = data.get("registries") if isinstance(data, dict) else None
    if not regs:
        raise TimelineError(f"{tool}: {path} holds no replayed registry (is it step_timeline.py's --out?)")
    name = registry or next(iter(regs))
    if name not in regs:
        raise TimelineError(f"{tool}: no registry {name!r} in {path}; it has: {', '.join(regs)}")
    kernels = regs[name].get("kernels") if isinstance(regs[name], dict) else None
    if not isinstance(kernels, list) or not all(isinstance(k, list) and len(k) >= 4 for k in kernels):
        raise TimelineError(f"{tool}: {name!r} in {path} has no kernel list of [name, stream, start_us, end_us, ...] "
                            f"rows (is it step_timeline.py's --out?)")
    return name, kernels


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timeline", type=Path, help="step_timeline.py's --out JSON")
    ap.add_argument("--registry", help="which registry's replay (default: the first in the file)")
    ap.add_argument("--side", action="append", default=None,
                    help="a kernel-name prefix off the main path (repeatable; default _gemv_kernel)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    try:
        name, kernels = read_timeline(args.timeline, args.registry, "timeline_tails")
    except TimelineError as exc:
        print(exc, file=sys.stderr)
        return 2
    rows = tails(kernels, tuple(args.side or ["_gemv_kernel"]))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{name}: what each kernel adds after the main-stream kernel before it (medians a launch, us)")
    for r in rows:
        side = "" if r["side_done_us"] is None else f", side done {r['side_done_us']:+6.2f}"
        print(f"  {r['kernel'][:40]:40s} after {r['before'][:30]:30s} x{r['launches']:<3d} tail {r['tail_us']:7.2f}"
              f"  (starts {r['start_after_us']:6.2f} into it, runs {r['duration_us']:6.2f}{side})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
