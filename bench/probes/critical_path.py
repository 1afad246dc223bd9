"""Forecast a decode step's span from its measured timeline: what if some kernels ran shorter, longer, or not at all?

Why. Per-op Amdahl (bench/prediction.py) charges a change with the time its ops take. That forecast every rung of
sessions 12-22 within ~0.01, then failed where the step stopped being one line: with PDL and a side stream, a
kernel's time is not what the step waits for. GPU session 33 folded the short conv into the KDA recurrence on a
per-op x1.68 and lost 0.943 in the step: the recurrence waited for the side stream's join, not for the conv
(bench/gpu-runs/2026-12-05-session33/README.md). timeline_tails.py reads that off a timeline by eye; this replays it.

The model. step_timeline.py's JSON holds one replay's kernels ([name, stream, start_us, end_us, own_us] in start
order). Their dependencies are rebuilt from what the forward does:
  - the main line (every kernel not named by --side) is a chain, each kernel after the one before;
  - side kernels (the KDA layers' gate GEMVs, branches.py) form runs; a run forks from the last main kernel that
    ended by its first kernel's start (JOIN_SLACK_US of slack: the norm whose output it reads), each kernel of a run
    follows the one before it, and the run lasts until the main line starts a norm again (FORK_KINDS: a kernel
    named like one; the next layer's, before which the forward forks anew); it joins into the first main kernel that starts after its last kernel ends (less the slack: the
    one that reads its outputs, the recurrence);
  - a kernel ends its *tail* after the last of its dependencies ends: tail = end - max(dependency ends), as
    measured. Under PDL a kernel starts before its predecessor ends, so its duration overstates what the line waits
    for; the tail is what it adds once everything it needs is there.
Replayed unchanged, the model gives the measured span exactly (a check the tool prints). A what-if changes tails:
  --remove SEL          the kernels are gone (tail 0: what depended on them now waits for what they waited for)
  --tail SEL=US         their tail becomes US (e.g. a fused kernel's tail read off its own step's timeline)
  --scale SEL=F         their tail is divided by F (a per-op speed-up applied to what the line waits for)
  --shift SEL=US        their tail shrinks by US
SEL is a kernel-name prefix, PREFIX<BEFORE: those whose first dependency (the main-line kernel before, or for a
side kernel the side kernel or fork before it) starts with BEFORE, and/or PREFIX>AFTER: those the next main-line
kernel of which starts with AFTER (the KDA layers' tall GEMV is the one before _short_conv_kernel). Each option repeats; --each also prints every
change alone. The forecast is the ratio of spans (measured over what-if): the step's tok/s ratio if the replay's
span is the token's time, which at one CUDA graph a token it nearly is. `--json` writes what
`sparkops bench ... --forecast FILE` keeps in the ledger row of the timeline's depth.

    python3 bench/probes/critical_path.py TIMELINE.json [--registry NAME] [--side _gemv_kernel] \\
        [--remove _short_conv_kernel] [--tail '_kda_recurrent_kernel=10.9'] [--each] [--json]

What the model cannot know: a kernel that gets faster may let its PDL dependents start later relative to it, and
two kernels that run beside each other share the SMs and the DRAM, so removing one can speed the other; neither is
in a tail. The forecast bounds a change's effect on the critical path; it does not measure it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timeline_tails import JOIN_SLACK_US, TimelineError, read_timeline  # noqa: E402  (a sibling script)


@dataclass
class Node:
    """One kernel of the replay and what it waits for."""
    i: int
    name: str
    start: float
    end: float
    side: bool
    deps: list[int] = field(default_factory=list)  # indices of the kernels it waits for, the first its "before"
    tail: float = 0.0  # end - max(dependency ends), as measured


#: the main-line kernels after which the forward forks side work: a KDA layer forks its gate projections after the
#: layer's norm (branches.py), so a run of side kernels lasts until the main line starts a norm again
FORK_KINDS = ("rmsnorm",)


def build(kernels: list[list], side: tuple[str, ...], fork_kinds: tuple[str, ...] = FORK_KINDS) -> list[Node]:
    """The replay's kernels as a dependency graph (module docstring), in start order, tails measured."""
    nodes = [Node(i, k[0], float(k[2]), float(k[3]), k[0].startswith(side)) for i, k in
             enumerate(sorted(kernels, key=lambda k: (k[2], k[3])))]
    main = [n for n in nodes if not n.side]
    for before, n in zip(main, main[1:]):
        n.deps.append(before.i)

    runs: list[tuple[Node | None, list[Node]]] = []  # (fork, the run's kernels)
    for s in (n for n in nodes if n.side):
        if runs:
            _, run = runs[-1]
            # the run goes on until the main line starts a norm again (the next layer's: its next fork)
            again = next((m for m in main if m.start > run[0].start and any(f in m.name for f in fork_kinds)), None)
            if again is None or s.start < again.start:
                s.deps.append(run[-1].i)
                run.append(s)
                continue
        forks = [m for m in main if m.end <= s.start + JOIN_SLACK_US]
        fork = forks[-1] if forks else None
        if fork is not None:
            s.deps.append(fork.i)
        runs.append((fork, [s]))
    for _, run in runs:  # each run joins the first main kernel to start once its last kernel has ended
        target = next((m for m in main if m.start >= run[-1].end - JOIN_SLACK_US), None)
        if target is not None:
            target.deps.append(run[-1].i)
    for n in nodes:
        n.tail = n.end - max((nodes[d].end for d in n.deps), default=0.0)
    return nodes


def replay(nodes: list[Node], tails: dict[int, float] | None = None) -> float:
    """The span (us from the first start) with the measured tails, or `tails` where given."""
    tails = tails or {}
    origin = min(n.start for n in nodes)
    ends: dict[int, float] = {}
    for n in nodes:  # start order is a topological order: every dependency started before its dependent
        ready = max((ends[d] for d in n.deps), default=origin)
        ends[n.i] = ready + tails.get(n.i, n.tail)
    return max(ends.values()) - origin


def select(nodes: list[Node], sel: str) -> list[Node]:
    """The kernels SEL names: PREFIX[<BEFORE][>AFTER] (module docstring)."""
    head, _, after = sel.partition(">")
    prefix, _, before = head.partition("<")
    nxt: dict[int, Node] = {}  # each kernel's first dependent on the main line
    for n in nodes:
        if not n.side and n.deps:
            nxt.setdefault(n.deps[0], n)
    return [n for n in nodes if n.name.startswith(prefix)
            and (not before or (n.deps and nodes[n.deps[0]].name.startswith(before)))
            and (not after or (n.i in nxt and nxt[n.i].name.startswith(after)))]


@dataclass
class Change:
    kind: str  # remove, tail, scale, shift
    sel: str
    value: float = 0.0

    def text(self) -> str:
        return self.sel if self.kind == "remove" else f"{self.sel}={self.value:g}"

    def apply(self, nodes: list[Node], tails: dict[int, float]) -> int:
        hit = select(nodes, self.sel)
        for n in hit:
            old = tails.get(n.i, n.tail)
            tails[n.i] = {"remove": 0.0, "tail": self.value, "scale": old / self.value if self.value else old,
                          "shift": max(0.0, old - self.value)}[self.kind]
        return len(hit)


def parse_change(kind: str, text: str) -> Change:
    if kind == "remove":
        return Change(kind, text)
    sel, eq, value = text.rpartition("=")
    try:
        v = float(value)
    except ValueError:
        v = None
    if not eq or not sel or v is None:
        raise SystemExit(f"critical_path: --{kind} takes SEL=NUMBER, not {text!r}")
    if kind == "scale" and v <= 0:
        raise SystemExit(f"critical_path: --scale {text!r}: the factor must be positive (a speed-up is > 1)")
    return Change(kind, sel, v)


def forecast(nodes: list[Node], changes: list[Change]) -> dict:
    """The span with every change applied, and the ratio measured / what-if."""
    tails: dict[int, float] = {}
    hits = {c.text(): c.apply(nodes, tails) for c in changes}
    span = replay(nodes, tails)
    base = replay(nodes)
    return {"changes": [f"--{c.kind} {c.text()}" for c in changes], "launches": hits, "span_us": span,
            "ratio": base / span if span else float("nan")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timeline", type=Path, help="step_timeline.py's --out JSON")
    ap.add_argument("--registry", help="which registry's replay (default: the first in the file)")
    ap.add_argument("--side", action="append", default=None,
                    help="a kernel-name prefix off the main line (repeatable; default _gemv_kernel)")
    for kind in ("remove", "tail", "scale", "shift"):
        ap.add_argument(f"--{kind}", action="append", default=[], metavar="SEL" if kind == "remove" else "SEL=N")
    ap.add_argument("--each", action="store_true", help="also forecast each change alone")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    try:
        name, kernels = read_timeline(args.timeline, args.registry, "critical_path")
    except TimelineError as exc:
        print(exc, file=sys.stderr)
        return 2
    changes = [parse_change(kind, t) for kind in ("remove", "tail", "scale", "shift") for t in getattr(args, kind)]
    nodes = build(kernels, tuple(args.side or ["_gemv_kernel"]))
    measured = max(n.end for n in nodes) - min(n.start for n in nodes)
    depth = None
    try:
        depth = json.loads(args.timeline.read_text()).get("depth")
    except (OSError, ValueError, AttributeError):
        pass
    out = {"timeline": str(args.timeline), "depth": depth, "registry": name, "kernels": len(nodes),
           "measured_span_us": measured, "model_span_us": replay(nodes),
           "joins": sum(1 for n in nodes if not n.side and any(nodes[d].side for d in n.deps))}
    empty = [c.text() for c in changes if not select(nodes, c.sel)]
    if empty:
        print(f"critical_path: no kernel of {name} matches {', '.join(map(repr, empty))}", file=sys.stderr)
        return 2
    if changes:
        out["all"] = forecast(nodes, changes)
        if args.each and len(changes) > 1:
            out["each"] = [forecast(nodes, [c]) for c in changes]
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{name}: {len(nodes)} kernels, {out['joins']} side joins; span measured {measured:.1f} us, "
          f"the model's {out['model_span_us']:.1f}")
    for f in out.get("each", []) + ([out["all"]] if changes else []):
        hits = ", ".join(f"{k} x{v}" for k, v in f["launches"].items())
        print(f"  {' '.join(f['changes'])}: span {f['span_us']:.1f} us, forecast x{f['ratio']:.4f} ({hits})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
