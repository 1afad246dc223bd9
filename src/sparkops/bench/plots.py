"""The pictures: the ladder over time (bench/ladder.png), the roofline with measured points, time per op.

matplotlib (Agg, no display) is imported here only; everything else works without it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import ledger as L  # noqa: E402
from .ceilings import Ceilings  # noqa: E402

MAX_PANELS = 6


def ladder_png(rows: list[dict[str, Any]], path: str | Path) -> bool:
    """One panel per workload (the most measured first): every figure over time, retracted ones
    crossed out, and the frontier as a step line. False (nothing drawn) when there are no figures."""
    gone = L.retractions(rows)
    by_key: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["kind"] == "measurement":
            by_key.setdefault(r["key"], []).append(r)
    if not by_key:
        return False
    keys = sorted(by_key, key=lambda k: (-len(by_key[k]), k))[:MAX_PANELS]
    fig, axes = plt.subplots(len(keys), 1, figsize=(9, 2.6 * len(keys)), squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        best, xs, frontier = 0.0, [], []
        for i, r in enumerate(by_key[key]):
            retracted = r["id"] in gone
            for f in r.get("figures", []):
                v = float(f["value"])
                ax.scatter([i], [v], marker="x" if retracted else "o", color="grey" if retracted else
                           {"win": "tab:green", "regression": "tab:red"}.get(r.get("tier"), "tab:blue"), zorder=3)
                if not retracted:
                    best = max(best, v)
            xs.append(i)
            frontier.append(best)
        ax.step(xs, frontier, where="post", color="black", linewidth=1, label="frontier")
        ax.set_title(key, fontsize=9)
        ax.set_ylabel("tok/s")
        ax.set_xticks(xs)
        ax.set_xticklabels([r["date"][5:16].replace("T", "\n") for r in by_key[key]], fontsize=6)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7, loc="lower right")
    fig.suptitle("sparkops ladder: green win, blue none, red regression, x retracted", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def roofline_labels(points: list[dict[str, Any]], ceilings: Ceilings) -> list[tuple[float, float, str]]:
    """One label a spot: each point's label and share of its ceiling, points within ~2% of each other on both axes
    (an A and B arm that tied) joined in one label, so no text is drawn over another."""
    bw, peak = ceilings.read_bandwidth, ceilings.matmul_flops
    spots: list[list[dict[str, Any]]] = []
    for p in points:
        if not (p.get("intensity", 0) > 0 and p.get("achieved_flops", 0) > 0):
            continue  # no place on log axes (nor a dot there: matplotlib leaves it out)
        at = (math.log10(p["intensity"]), math.log10(p["achieved_flops"]))
        for group in spots:
            first = (math.log10(group[0]["intensity"]), math.log10(group[0]["achieved_flops"]))
            if abs(at[0] - first[0]) < 0.01 and abs(at[1] - first[1]) < 0.01:  # within ~2.3% on both axes
                group.append(p)
                break
        else:
            spots.append([p])
    out = []
    for group in spots:
        texts = []
        for p in group:
            ceiling = min(bw * p["intensity"], peak)
            texts.append(f"{p['label']} ({100 * (p['achieved_flops'] / ceiling if ceiling else 0.0):.1f}%)")
        out.append((group[0]["intensity"], group[0]["achieved_flops"], " / ".join(texts)))
    return out


def roofline_png(points: list[dict[str, Any]], ceilings: Ceilings, path: str | Path, title: str = "") -> None:
    """Log-log roofline: FLOP/s against FLOP/byte, the measured ceilings, and each point
    ({'label', 'intensity', 'achieved_flops'}), labelled with its share of its ceiling (roofline_labels)."""
    bw, peak = ceilings.read_bandwidth, ceilings.matmul_flops
    xs = [p["intensity"] for p in points if p.get("intensity")] or [1.0]
    lo, hi = min(xs + [peak / bw]) / 10, max(xs + [peak / bw]) * 10
    fig, ax = plt.subplots(figsize=(8, 5.5))
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(grid, [min(bw * x, peak) for x in grid], color="black", linewidth=1.5,
            label=f"roofline: {bw / 1e9:.4g} GB/s, {peak / 1e12:.4g} TFLOP/s ({ceilings.matmul_dtype})")
    for p in points:
        ax.scatter([p["intensity"]], [p["achieved_flops"]], zorder=3)
    for x, y, text in roofline_labels(points, ceilings):
        ax.annotate(text, (x, y), fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(title or f"roofline on {ceilings.device}", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def roofline_png_from_rows(rows: list[dict[str, Any]], path: str | Path) -> bool:
    """The roofline of the most recent box in the ledger, with the latest standing figure per workload."""
    standing = [r for r in L.standing(rows) if r.get("ceilings") and r.get("cost") and r.get("roofline")]
    if not standing:
        return False
    box = standing[-1].get("device_slug")
    latest: dict[str, dict[str, Any]] = {}
    for r in standing:
        if r.get("device_slug") == box:
            latest[r["key"]] = r
    c = dict(standing[-1]["ceilings"])
    ceilings = Ceilings(**{k: c[k] for k in Ceilings.__dataclass_fields__ if k in c})
    points = []
    for key, r in latest.items():
        intensity = _prefill_intensity_now(r)
        for label, rp in r["roofline"].items():
            if rp.get("achieved_flops"):
                parts = key.split(".")  # kind.model.mix.box.point: the mix tells two models' points apart
                mix = f" {parts[2]}" if len(parts) == 5 else ""
                points.append({"label": f"{parts[0]}{mix} {parts[-1]} {label}",
                               "intensity": intensity or rp["intensity"], "achieved_flops": rp["achieved_flops"]})
    roofline_png(points, ceilings, path, f"latest figures on {box}")
    return True


def _prefill_intensity_now(row: dict[str, Any]) -> float | None:
    """A prefill row's FLOP per byte under today's cost model, for a preset's quant mix; None otherwise (the row's
    own figure is used). Rows recorded before session 11's fix of `costs.token_cost` charged every query every
    earlier cache row, an intensity ~40x too low at 32768 tokens; the FLOPs (and so the achieved FLOP/s) were right."""
    if row.get("phase") != "prefill":
        return None
    from ..config import load_preset
    from .costs import token_cost

    model = row.get("model") or {}
    try:
        cost = token_cost(load_preset(model.get("name", "")), "prefill", tokens=int(row["tokens"]),
                          depth=int(row.get("depth") or 0), mix=model.get("mix"))
    except Exception:  # noqa: BLE001 - not a preset, or no mix on record: the row's own figure stands
        return None
    return cost.intensity


def ops_png(by_op: dict[str, dict[str, float]], path: str | Path, title: str = "") -> None:
    """Horizontal bars: milliseconds per op (the most first), each labelled with its share of the total."""
    ops = sorted(by_op, key=lambda o: by_op[o]["seconds"])
    ms = [1e3 * by_op[o]["seconds"] for o in ops]
    total = sum(ms) or 1.0
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(ops) + 1.2))
    ax.barh(ops, ms, color="tab:blue")
    for y, v in enumerate(ms):
        ax.text(v, y, f" {v:.3g} ms ({100 * v / total:.0f}%)", va="center", fontsize=8)
    ax.set_xlabel("ms")
    ax.set_xlim(0, max(ms, default=1.0) * 1.3)
    ax.set_title(title, fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
