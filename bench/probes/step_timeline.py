"""Probe: one replayed decode step, kernel by kernel - when each ran, on which stream, what ran at the same time, and
where the device sat idle. A lead for the decode ladder, not a ledger row (bench/GPU-PROBES.md keeps it).

Why. `sparkops diagnose` sums each op's kernel time from an eager step; the captured step's wall is one number. Two
questions need the replayed step itself. Session 19's side stream ([engine] side_stream) put a KDA layer's three F16
gate GEMVs on a second stream and gained a quarter of its forecast: did they run beside q/k/v, or after it, and did
they slow it? And the step's 2.6 ms hold ~2.5 ms of kernel time: how much of the rest is gaps between dependent
kernels, and after which kernels?

What. For each registry: the model filled to --depth (by --fill-registry when given), the decode step captured as one
CUDA graph, warmed, then --replays replays each under its own torch.profiler session (CUPTI records the kernels of a
graph replay with device timestamps and their stream). Per replay: the span from the first kernel's start to the last
one's end, the union of kernel intervals (busy), the summed kernel time (above busy by what ran concurrently), the
idle gaps and the largest of them with the kernels around each, the time per stream, and for kernels off the main
stream (the stream with the most kernels) the share of their time during which a main-stream kernel ran. The medians
over replays go to --out, with the median replay's kernels (name, stream, start, end, own time), so that a later
question of the same replay needs no GPU; --png draws the first --window µs of one replay per registry, a row a
stream. Each registry after the first is compared with it kernel by kernel (`moved`): the kernels whose own time
(`own_us`: what each adds to the busy time) and whose summed time moved most, and the launches that went or came -
what a pair's ratio cannot say about where its time went. Own time is the one to read under PDL: session 24's first
comparison summed intervals only, and a PDL kernel's interval holds the wait inside its predecessor.

Streams: in a replayed graph the stream ids are the graph executor's, not the capture's; a graph with branches (the
side stream) spreads its kernels over several (session 24: "off the main stream" 2498 of 2837 µs), so the per-stream
figures describe the executor's mapping, not which kernels were captured on the side stream.

    python3 bench/probes/step_timeline.py --model k48.gguf --registry A.toml [--registry B.toml] \\
        [--fill-registry F.toml] [--depth 0] [--replays 5] --out timeline.json [--png timeline.png]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import NamedTuple

#: the gaps a replay's summary lists, largest first
TOP_GAPS = 12


class Kernel(NamedTuple):
    """One device activity of a replay: its name, stream and interval (µs, the profiler's clock)."""

    name: str
    stream: int
    start: float
    end: float

    @property
    def us(self) -> float:
        return self.end - self.start


def union_us(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of [start, end) intervals."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def _overlap_with(k: Kernel, others: list[Kernel]) -> float:
    """How long, within k's interval, at least one of `others` ran (others sorted by start)."""
    spans = [(max(k.start, o.start), min(k.end, o.end)) for o in others if o.start < k.end and o.end > k.start]
    return union_us(spans)


def summarize(kernels: list[Kernel], top_gaps: int = TOP_GAPS) -> dict:
    """The replay's span, busy time, summed kernel time, idle gaps (the largest, with the kernels around each), time a
    stream, and the share of the off-main-stream kernels' time that a main-stream kernel overlapped."""
    if not kernels:
        raise ValueError("no kernels in the replay: the profiler saw none (a graph replay without CUPTI's graph "
                         "kernel records?)")
    ks = sorted(kernels, key=lambda k: (k.start, k.end))
    span = max(k.end for k in ks) - ks[0].start
    busy = union_us([(k.start, k.end) for k in ks])
    total = sum(k.us for k in ks)
    gaps: list[tuple[float, str, str]] = []
    reach, last = ks[0].end, ks[0]
    for k in ks[1:]:
        if k.start > reach:
            gaps.append((k.start - reach, last.name, k.name))
        if k.end >= reach:
            reach, last = k.end, k
    streams: dict[int, dict] = {}
    for k in ks:
        s = streams.setdefault(k.stream, {"kernels": 0, "us": 0.0})
        s["kernels"] += 1
        s["us"] += k.us
    main = max(streams, key=lambda s: streams[s]["kernels"])
    on_main = [k for k in ks if k.stream == main]
    off_main = [k for k in ks if k.stream != main]
    off_us = sum(k.us for k in off_main)
    beside = sum(_overlap_with(k, on_main) for k in off_main)
    return {
        "kernels": len(ks), "span_us": span, "busy_us": busy, "kernel_sum_us": total,
        "concurrent_us": total - busy, "idle_us": span - busy,
        "gaps": len(gaps), "gap_us": sum(g for g, _, _ in gaps),
        "largest_gaps": [{"us": g, "after": a, "before": b} for g, a, b in sorted(gaps, reverse=True)[:top_gaps]],
        "main_stream": main, "streams": {str(s): v for s, v in sorted(streams.items())},
        "off_main_us": off_us, "off_main_beside_main_us": beside,
        "off_main_beside_main_share": beside / off_us if off_us else None,
    }


def own_us(kernels: list[Kernel]) -> list[float]:
    """Each kernel's own time: what it adds to the replay's busy time, taken in start order (the part of its interval
    after every kernel that started before it had ended). They sum to `summarize`'s busy_us.

    Why. A kernel launched with programmatic dependent launch starts while the kernel before it still runs and waits
    there, so its recorded interval holds its predecessor's tail: summed intervals count that twice (session 24: 2843
    µs of kernels in a 2225 µs replay). Own time gives the waiting to the kernel that was still working, and a side
    stream's kernel only the time it ran past what had started before it: the replay's critical path, kernel by
    kernel, as the step's span sees it. Returned in the order of `kernels`."""
    order = sorted(range(len(kernels)), key=lambda i: (kernels[i].start, kernels[i].end))
    out = [0.0] * len(kernels)
    reach = None
    for i in order:
        k = kernels[i]
        # every earlier-starting kernel began at or before k.start, so their union covers [k.start, reach] whole
        frm = k.start if reach is None else max(k.start, reach)
        out[i] = max(0.0, k.end - frm)
        reach = k.end if reach is None else max(reach, k.end)
    return out


def by_name(kernels: list[Kernel]) -> dict[str, dict]:
    """{kernel name: launches, summed µs and own µs (`own_us`)} of one replay."""
    out: dict[str, dict] = {}
    for k, own in zip(kernels, own_us(kernels)):
        d = out.setdefault(k.name, {"launches": 0, "us": 0.0, "own_us": 0.0})
        d["launches"] += 1
        d["us"] += k.us
        d["own_us"] += own
    return out


def moved(base: dict[str, dict], other: dict[str, dict], top: int = 15, key: str = "us") -> list[dict]:
    """The kernels whose time (`key`: "us", summed intervals, or "own_us", own time) a replay moved most from `base`
    to `other` (two `by_name` tables), largest change first: a kernel found in one replay only counts as 0 µs and 0
    launches in the other. What a step's win came from, kernel by kernel (session 23's 1.095 over session 22's step:
    which kernels got faster, which launches went). Own time is the one whose changes add up to the span's."""
    rows = []
    for name in set(base) | set(other):
        a, b = base.get(name, {"launches": 0, key: 0.0}), other.get(name, {"launches": 0, key: 0.0})
        rows.append({"name": name, "launches": [a["launches"], b["launches"]], key: [a[key], b[key]],
                     "delta_us": b[key] - a[key]})
    rows.sort(key=lambda r: (-abs(r["delta_us"]), r["name"]))
    return rows[:top]


def median_summary(replays: list[dict]) -> dict:
    """The median over replays of every number of `summarize` (the largest gaps and streams of the median-span one)."""
    keys = [k for k, v in replays[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    out = {k: statistics.median(r[k] for r in replays if r[k] is not None) for k in keys
           if any(r[k] is not None for r in replays)}
    mid = sorted(replays, key=lambda r: r["span_us"])[len(replays) // 2]
    out.update({"largest_gaps": mid["largest_gaps"], "streams": mid["streams"], "main_stream": mid["main_stream"]})
    share = [r["off_main_beside_main_share"] for r in replays if r["off_main_beside_main_share"] is not None]
    out["off_main_beside_main_share"] = statistics.median(share) if share else None
    out["replays"] = len(replays)
    return out


def _profiled_replay(step) -> list[Kernel]:
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return [Kernel(e.name, int(e.device_resource_id or 0), float(e.time_range.start), float(e.time_range.end))
            for e in prof.events() if e.device_type == DeviceType.CUDA]


def _time_registry(weights, registry: str, fill: str | None, depth: int, replays: int, seed: int,
                   device: str = "cuda"):
    """(per-replay kernels, the step's registry selections) of `registry`'s captured step at `depth` (`device` is
    CUDA's but for the CPU test of everything around the capture and the profiler)."""
    import torch

    from sparkops.bench import diagnose as D
    from sparkops.bench.gating import default_dtype
    from sparkops.bench.harness import selections
    from sparkops.engine.decode_step import DecodeStep

    warm = 3
    need = warm + replays + 4  # the capture's warm-up steps, the warm replays, the profiled ones
    dtype = default_dtype(registry, device)  # the path: default_dtype loads it (session 24's first run gave it the
    # loaded Registry and failed before any kernel ran)
    engine, filler = D.engines(weights, registry, fill, device=device, dtype=dtype, cache_dtype=None,
                               max_context=depth + need + 8)
    _, toks = D.filled(engine, depth, need, seed, filler)
    step = DecodeStep(engine)
    step.token.copy_(toks[:1])
    step.capture()
    for _ in range(warm):
        step()
    out = [_profiled_replay(step) for _ in range(replays)]
    sel = selections(engine)
    del step, engine, filler
    if device == "cuda":
        torch.cuda.empty_cache()
    return out, sel


def kernel_rows(kernels: list[Kernel]) -> list[list]:
    """A replay's kernels in start order as [name, stream, start, end, own] rows, µs from its first start: what the
    JSON keeps, so that a later question of the same replay needs no GPU."""
    own = own_us(kernels)
    t0 = min(k.start for k in kernels)
    rows = [[k.name, k.stream, round(k.start - t0, 3), round(k.end - t0, 3), round(o, 3)]
            for k, o in zip(kernels, own)]
    return sorted(rows, key=lambda r: (r[2], r[3]))


def draw(timelines: dict[str, list[Kernel]], window_us: float, path: str) -> None:
    """A Gantt of the first `window_us` of one replay per registry: a row a stream, a bar a kernel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(timelines), 1, figsize=(14, 1.6 + 1.2 * len(timelines)), squeeze=False)
    for ax, (label, ks) in zip(axes[:, 0], timelines.items()):
        t0 = min(k.start for k in ks)
        streams = sorted({k.stream for k in ks})
        for row, s in enumerate(streams):
            bars = [(k.start - t0, k.us) for k in ks if k.stream == s and k.start - t0 < window_us]
            ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=f"C{row}", edgecolors="black", linewidth=0.3)
        ax.set_yticks(range(len(streams)), [f"stream {s}" for s in streams])
        ax.set_xlim(0, window_us)
        ax.set_title(label, fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("µs from the replay's first kernel")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _refusal(args) -> str | None:
    """Why these arguments cannot be timed (each registry readable, none twice, the model a file or a preset), or
    None."""
    from pathlib import Path

    from sparkops.config import preset_names
    from sparkops.errors import SparkopsError
    from sparkops.registry.file import Registry

    twice = sorted({r for r in args.registry if args.registry.count(r) > 1})
    if twice:
        return f"--registry {', '.join(twice)} given twice; name each registry once"
    for reg in args.registry + ([args.fill_registry] if args.fill_registry else []):
        try:
            Registry.load(reg)
        except SparkopsError as e:
            return str(e)
    if not Path(args.model).exists() and args.model not in preset_names():
        return (f"--model {args.model}: no such file and no such preset (the presets: {', '.join(preset_names())}); "
                f"synthesize one with `sparkops synth`")
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a GGUF file or a preset")
    ap.add_argument("--registry", action="append", required=True, help="a registry to time (repeat to compare)")
    ap.add_argument("--fill-registry", help="fill the context with this registry (as diagnose and bench do)")
    ap.add_argument("--depth", type=int, default=0)
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--png", help="draw the first --window µs of a replay per registry here")
    ap.add_argument("--window", type=float, default=150.0, help="µs drawn (default 150: about two layers)")
    args = ap.parse_args(argv)
    if args.depth < 0 or args.replays < 1 or args.window <= 0:
        ap.error(f"--depth must be at least 0, --replays at least 1 and --window above 0 (got {args.depth}, "
                 f"{args.replays}, {args.window})")
    why = _refusal(args)  # before the CUDA check and the model's load (minutes at the 48B): a typo costs nothing
    if why:
        print(f"step_timeline probe: {why}", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("step_timeline probe: needs a CUDA device", file=sys.stderr)
        return 2
    from sparkops.engine import load_model

    weights = load_model(args.model).to("cuda")
    results, drawn = {}, {}
    for reg in args.registry:
        replays, sel = _time_registry(weights, reg, args.fill_registry, args.depth, args.replays, args.seed)
        summaries = [summarize(r) for r in replays]
        med = median_summary(summaries)
        mid = min(range(len(replays)), key=lambda i: abs(summaries[i]["span_us"] - med["span_us"]))
        results[reg] = {"summary": med, "by_name": by_name(replays[mid]), "selections": sel,
                        "kernels": kernel_rows(replays[mid])}
        drawn[reg] = replays[mid]
        s = med
        share = s["off_main_beside_main_share"]
        print(f"{reg}: {s['kernels']:.0f} kernels, span {s['span_us']:.1f} us, busy {s['busy_us']:.1f}, "
              f"kernels summed {s['kernel_sum_us']:.1f} (concurrent {s['concurrent_us']:.1f}), idle "
              f"{s['idle_us']:.1f} in {s['gaps']:.0f} gaps; off the main stream {s['off_main_us']:.1f} us"
              + (f", {100 * share:.0f}% of it beside a main-stream kernel" if share is not None else ""))
        for g in s["largest_gaps"][:5]:
            print(f"    gap {g['us']:.2f} us after {g['after'][:60]} before {g['before'][:60]}")
    first = args.registry[0]
    comparisons = {}
    for reg in args.registry[1:]:  # kernel by kernel against the first registry: where the difference in span went
        a, b = results[first]["summary"], results[reg]["summary"]
        print(f"{reg} against {first}: span {a['span_us']:.1f} -> {b['span_us']:.1f} us, busy {a['busy_us']:.1f} -> "
              f"{b['busy_us']:.1f}, kernels summed {a['kernel_sum_us']:.1f} -> {b['kernel_sum_us']:.1f}, idle "
              f"{a['idle_us']:.1f} -> {b['idle_us']:.1f}")
        comparisons[reg] = {}
        for key, what in (("own_us", "own time (what each adds to busy; the changes sum to busy's)"),
                          ("us", "summed intervals (a PDL kernel's include its wait)")):
            rows = moved(results[first]["by_name"], results[reg]["by_name"], key=key)
            comparisons[reg][key] = rows
            print(f"  the kernels that moved most by {what}, us a replay, launches:")
            for r in rows:
                print(f"    {r['delta_us']:+8.1f}  {r[key][0]:7.1f} -> {r[key][1]:7.1f}  "
                      f"({r['launches'][0]} -> {r['launches'][1]})  {r['name'][:90]}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"model": args.model, "depth": args.depth, "replays": args.replays, "registries": results,
                       "against_first": comparisons}, f, indent=1)
    if args.png:
        draw(drawn, args.window, args.png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
