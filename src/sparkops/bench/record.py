"""From a finished, gated run to the scoreboard: ledger rows, the frontier, the rendered ladder.

One measurement row per workload point (per depth): before -> after, ratio and tier; every
gated figure in it (A's and B's) is offered to the frontier under the raise-only rule. With a
peer, one peer row per point as well. Retractions and imports live here too, because they are the
only other things that move the frontier.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import ledger as L
from .frontier import Frontier, with_cache, workload_key
from .harness import BenchRun, Point
from .provenance import now
from .timing import MIN_EFFECT, Spread, noise_floor, tier_against


def _metric(p: Point) -> str:
    if p.phase == "decode":
        return f"decode tok/s @ d={p.depth} ({p.tokens} steps)"
    return f"prefill tok/s, {p.tokens}-token prompt" + (f" @ d={p.depth}" if p.depth else "")


def _box(run: BenchRun) -> dict[str, Any]:
    e = run.env
    return {"command": run.command, "commit": e.get("commit"), "dirty": e.get("dirty"),
            "code_digest": e.get("code_digest"), "device": e.get("device"),
            "device_name": e.get("device_name"), "device_slug": e.get("device_slug"), "clocks": e.get("clocks"),
            "clocks_after": e.get("clocks_after"), "versions": e.get("versions"), "host": e.get("host")}


def measurement_row(run: BenchRun, p: Point, frontier: Frontier, change: str,
                    prediction: dict[str, Any] | None = None,
                    forecast: dict[str, Any] | None = None) -> dict[str, Any]:
    date = now()
    cand = p.arms["B"] if "B" in p.arms else p.arms["A"]
    key = workload_key(p.phase, run.model["name"], run.model["mix"], run.env["device_slug"], p.depth, p.tokens,
                       cand.cache_dtype)
    gate = run.gates[cand.label]
    figures = [{"label": a.label, "registry": a.registry, "mode": a.mode, "dtype": a.dtype,
                "cache_dtype": a.cache_dtype, "value": a.median,
                "rates": a.rates,
                "iqr": [a.spread.lo, a.spread.hi], "roofline_fraction": a.roofline.get("fraction"),
                "selections": a.selections, **({"passed": a.passed} if a.passed else {})}
               for a in p.arms.values()]
    differs = None
    if "B" in p.arms:
        from .registry_diff import selection_differences

        differs = selection_differences(p.arms["A"].selections, p.arms["B"].selections)
        before, after = p.arms["A"].median, p.arms["B"].median
        ratios = p.ratios or []
        ratio, tier = Spread.of(ratios).median, p.tier
        noise = noise_floor(ratios)
    else:
        before, after = frontier.value(key), cand.median
        ratio = after / before if before else None
        tier = tier_against(after, before, cand.spread)
        ratios = []
        noise = max(MIN_EFFECT, cand.spread.relative_iqr)
    if prediction is not None:
        from .prediction import for_row

        prediction = for_row(prediction, run.model["name"], p.arms["A"].mode, ratio if "B" in p.arms else None)
    if forecast is not None:
        from .prediction import forecast_for_row

        forecast = forecast_for_row(forecast, p.depth, ratio if "B" in p.arms else None)
    return {
        "id": L.new_id(date), "kind": "measurement", "date": date, "change": change, "key": key,
        "phase": p.phase, "depth": p.depth, "tokens": p.tokens, "model": run.model, "metric": _metric(p),
        "unit": "tok/s", "before": before, "after": after, "ratio": ratio, "tier": tier, "noise": noise,
        "differs": differs,
        "registry": how_run(cand.registry, cand.mode), "dtype": cand.dtype,
        "worst_kl": gate.worst_kl, "worst_top1": gate.worst_top1, "worst_depth": gate.worst_depth,
        "gates": {label: g.as_dict() for label, g in run.gates.items()},
        "figures": figures, "pair_ratios": ratios, "order": p.order, "warmup_order": p.warmup_order,
        "repeats": run.request.repeats, "warmup": run.request.warmup, "seed": run.request.seed,
        "chunk": run.request.chunk,
        "fill_registry": str(run.request.fill_registry) if run.request.fill_registry else None,
        "depth_proof": {a.label: a.proof for a in p.arms.values()},
        **({"chunk_proof": {a.label: a.chunking for a in p.arms.values()}} if p.phase == "prefill" else {}),
        "roofline": {a.label: a.roofline for a in p.arms.values()}, "cost": p.cost.as_dict(),
        "ceilings": run.ceilings.as_dict(), **_box(run),
        **({"prediction": prediction} if prediction is not None else {}),
        **({"forecast": forecast} if forecast is not None else {}),
    }


def refusal_row(req: Any, model: dict[str, Any], env: dict[str, Any], refused: Any, command: str,
                change: str | None) -> dict[str, Any]:
    """The record of a refusal - the model gate's, or the chunk proof's (`refused.proof`) - which registry, its
    verdict, the command; no figure of any kind."""
    date = now()
    v = refused.verdict
    regs = {label: str(path) for label, path in req.registries}
    if req.fill_registry:
        regs["fill"] = str(req.fill_registry)
    return {"id": L.new_id(date), "kind": "refusal", "date": date, "phase": req.phase, "depths": list(req.depths),
            "tokens": req.tokens, "model": model, "change": change or f"registry {refused.label}",
            "refused": refused.label, "registries": regs,
            "registry": regs["fill"] if str(refused.label).startswith("fill") else regs.get(refused.label or "", ""),
            "gate": v.as_dict() if v is not None else None, "why": str(refused).splitlines()[0],
            "worst_kl": v.worst_kl if v else None, "worst_top1": v.worst_top1 if v else None,
            "worst_depth": v.worst_depth if v else None, "command": command, "commit": env.get("commit"),
            "dirty": env.get("dirty"), "code_digest": env.get("code_digest"), "device": env.get("device"),
            "device_name": env.get("device_name"), "versions": env.get("versions"),
            **({"chunk_proof": refused.proof.as_dict()} if getattr(refused, "proof", None) is not None else {})}


def record_refusal(row: dict[str, Any], bench: str | Path | None = None) -> dict[str, Any]:
    d = L.bench_dir(bench)
    with L.writer_lock(d):
        L.append(d / L.LEDGER, row)
        render_all(d)
    return row


def peer_row(run: BenchRun, p: Point, measured: dict[str, Any]) -> dict[str, Any]:
    date = now()
    ours = measured["after"]
    theirs = Spread.of(p.peer_rates).median
    return {"id": L.new_id(date), "kind": "peer", "date": date, "key": measured["key"], "phase": p.phase,
            "depth": p.depth, "tokens": p.tokens, "metric": measured["metric"], "unit": "tok/s",
            "peer": run.request.peer.name if run.request.peer else "?", "peer_value": theirs,
            "peer_rates": p.peer_rates, "value": ours, "ratio": ours / theirs if theirs else None,
            "measurement_row": measured["id"], "peer_figures": p.peer_figures, "order": p.order,
            "model": run.model, **_box(run)}


def how_run(registry: str, mode: str | None) -> str:
    """The registry a figure ran, with its decode mode when that was a CUDA graph."""
    return str(registry) + (" (graph)" if mode == "graph" else "")


def _how(figure: dict[str, Any]) -> str:
    return how_run(figure["registry"], figure.get("mode"))


#: A figure moves the frontier only if its rounds agree: the relative IQR of its rates is at most the noise band. The
#: median of rounds that spread wider is as likely a lucky draw as a measurement. Session 14 saw an arm at 394.0 tok/s
#: whose rounds spread 387-405, where the same registry measured ~388 three times. Such a figure stays in the ledger
#: and keeps its row; the frontier answers it "unsteady".
FRONTIER_MAX_SPREAD = MIN_EFFECT


def figure_spread(f: dict[str, Any]) -> float | None:
    """A figure's rounds' relative IQR ((q3 - q1) / median), or None for a figure recorded without one."""
    iqr, value = f.get("iqr"), float(f["value"])
    if not iqr or iqr[0] is None or iqr[1] is None or value <= 0:
        return None
    return (float(iqr[1]) - float(iqr[0])) / value


def steady(f: dict[str, Any]) -> bool:
    """May this figure move the frontier (FRONTIER_MAX_SPREAD)? A figure without a recorded spread may."""
    spread = figure_spread(f)
    return spread is None or spread <= FRONTIER_MAX_SPREAD * (1 + 1e-9)


def _entry_figure(row: dict[str, Any], value: float) -> dict[str, Any] | None:
    """The figure of `row` whose value is a frontier entry's `value`."""
    return next((f for f in row.get("figures", []) if abs(float(f["value"]) - value) <= 1e-5 * value), None)


def offer_row(frontier: Frontier, row: dict[str, Any]) -> dict[str, str]:
    """Offer every steady figure of a measurement row to the frontier; {label: outcome} ("unsteady" for a figure whose
    rounds spread beyond FRONTIER_MAX_SPREAD: not offered)."""
    out = {}
    for f in row.get("figures", []):
        if not steady(f):
            out[f["label"]] = "unsteady"
            continue
        meta = {**row, "registry": _how(f), "dtype": f["dtype"]}
        key = with_cache(row["key"], f.get("cache_dtype"))  # each figure on its own cache's workload
        out[f["label"]] = frontier.offer(key, float(f["value"]), meta, noise=float(row.get("noise", MIN_EFFECT)))
    return out


def record_run(run: BenchRun, bench: str | Path | None = None, change: str | None = None,
               render: bool = True, predictions: dict[int, dict[str, Any]] | None = None,
               forecast: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Append the run's rows, raise the frontier where earned, re-render LADDER.md; returns the rows.
    `predictions`: {depth: the baseline's diagnosis} (bench.prediction), kept in each depth's row; `forecast`: a
    critical-path forecast (bench.prediction.load_forecast), kept in its depth's row."""
    d = L.bench_dir(bench)
    with L.writer_lock(d):  # the frontier's load .. save is a read-modify-write: one recording at a time
        return _record_run(run, d, change, render, predictions, forecast)


def _record_run(run: BenchRun, d: Path, change: str | None, render: bool,
                predictions: dict[int, dict[str, Any]] | None,
                forecast: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    frontier = Frontier.load(d / L.FRONTIER)
    regs = [str(p) for _, p in run.request.registries]
    regs = [how_run(r, "graph" if label in run.request.graph else "eager")
            for r, (label, _) in zip(regs, run.request.registries)]
    change = change or (f"{regs[1]} vs {regs[0]}" if len(regs) == 2 else f"{regs[0]} (no baseline)")
    rows = []
    made = [measurement_row(run, p, frontier, change, (predictions or {}).get(p.depth), forecast)
            for p in run.points]
    for p, row in zip(run.points, made):  # every row made (and checked) before the first is written
        row["frontier"] = offer_row(frontier, row)
        L.append(d / L.LEDGER, row)  # the row first: a frontier entry must point at an existing row
        rows.append(row)
        if p.peer_rates:
            rows.append(L.append(d / L.LEDGER, peer_row(run, p, row)))
    frontier.save()
    if render:
        render_all(d)
    return rows


def best_standing(rows: list[dict[str, Any]], key: str) -> tuple[float, dict[str, Any]] | None:
    """The best steady figure for `key` among rows not retracted, with the row (per figure's registry)."""
    best = None
    for r in L.standing(rows):
        if with_cache(r.get("key") or "", None) != with_cache(key, None):
            continue
        for f in r.get("figures", []):
            if not steady(f) or with_cache(r["key"], f.get("cache_dtype")) != key:
                continue
            if best is None or float(f["value"]) > best[0]:
                best = (float(f["value"]), {**r, "registry": _how(f), "dtype": f["dtype"]})
    return best


def retract(bench: str | Path | None, ref: str, why: str, command: str) -> tuple[dict[str, Any], dict | None]:
    """Append a retraction of row `ref`; if that row set a frontier entry, lower it (logged). Re-render."""
    d = L.bench_dir(bench)
    with L.writer_lock(d):
        return _retract(d, ref, why, command)


def _retract(d: Path, ref: str, why: str, command: str) -> tuple[dict[str, Any], dict | None]:
    rows = L.read(d / L.LEDGER)
    r = L.retraction_row(rows, ref, why, command)
    L.append(d / L.LEDGER, r)
    rows.append(r)
    frontier = Frontier.load(d / L.FRONTIER)
    lowered = None
    if r.get("key"):
        lowered = frontier.lower_by_retraction(r["key"], r["retracts"], r, best_standing(rows, r["key"]))
        if lowered:
            frontier.save()
    render_all(d)
    return r, lowered


def import_rows(bench: str | Path | None, source: str | Path) -> list[dict[str, Any]]:
    """Append rows of another ledger (e.g. the GPU box's) that this one lacks; apply them to the frontier."""
    d = L.bench_dir(bench)
    with L.writer_lock(d):
        return _import_rows(d, source)


def _import_rows(d: Path, source: str | Path) -> list[dict[str, Any]]:
    mine = {r["id"] for r in L.read(d / L.LEDGER)}
    frontier = Frontier.load(d / L.FRONTIER)
    added = []
    theirs = L.read(source)
    gone = L.retractions(theirs)
    for r in theirs:
        if r["id"] in mine:
            continue
        L.append(d / L.LEDGER, r)
        added.append(r)
        if r["kind"] == "measurement" and r["id"] not in gone:
            offer_row(frontier, r)
        elif r["kind"] == "retraction" and r.get("key"):
            frontier.lower_by_retraction(r["key"], r["retracts"], r, best_standing(L.read(d / L.LEDGER), r["key"]))
    frontier.save()
    render_all(d)
    return added


def consistency_problems(bench: str | Path | None) -> list[str]:
    """Does frontier.toml agree with the ledger? Every entry is a standing row's figure, and no standing
    figure beats its entry (a hand-lowered or hand-raised value shows up here even without git)."""
    d = L.bench_dir(bench)
    rows = L.read(d / L.LEDGER)
    by_id = {r["id"]: r for r in rows}
    gone = L.retractions(rows)
    problems = []
    frontier = Frontier.load(d / L.FRONTIER)
    for key, e in frontier.entries().items():
        row = by_id.get(e["row"])
        if row is None:
            problems.append(f"{key}: set by row {e['row']}, which is not in the ledger")
            continue
        if e["row"] in gone:
            problems.append(f"{key}: set by row {e['row']}, which was retracted ({gone[e['row']]['why']})")
        vals = [float(f["value"]) for f in row.get("figures", [])]
        if row.get("key") != key or not any(abs(v - float(e["value"])) <= 1e-5 * v for v in vals):
            problems.append(f"{key}: value {e['value']} is not a figure of row {e['row']} ({vals})")
        fig = _entry_figure(row, float(e["value"]))
        if fig is not None and not steady(fig):
            problems.append(f"{key}: set by a figure of row {e['row']} whose rounds spread "
                            f"{100 * figure_spread(fig):.1f}%, beyond the {100 * FRONTIER_MAX_SPREAD:.0f}% a figure "
                            f"needs to move the frontier; run `sparkops ledger sync`")
        best = best_standing(rows, key)
        if best and best[0] > float(e["value"]) * (1 + 1e-5):
            problems.append(f"{key}: the ledger has a standing figure {best[0]:.6g} (row {best[1]['id']}) above the "
                            f"frontier's {e['value']}; run `sparkops ledger sync`")
    return problems


def sync(bench: str | Path | None) -> tuple[list[str], list[dict[str, Any]]]:
    """Bring the frontier to the ledger: lower (logged in [[lowered]]) every entry an unsteady figure set to the best
    steady figure still standing, then raise every entry to the best steady standing figure (repairs an interrupted
    write). (raised keys, lowered records)."""
    d = L.bench_dir(bench)
    with L.writer_lock(d):
        return _sync(d)


def _sync(d: Path) -> tuple[list[str], list[dict[str, Any]]]:
    rows = L.read(d / L.LEDGER)
    by_id = {r["id"]: r for r in rows}
    frontier = Frontier.load(d / L.FRONTIER)
    lowered = []
    for key, e in list(frontier.entries().items()):
        row = by_id.get(e["row"])
        fig = _entry_figure(row, float(e["value"])) if row else None
        if fig is None or steady(fig):
            continue
        why = (f"row {e['row']}'s figure {float(e['value']):g} came from rounds that spread "
               f"{100 * figure_spread(fig):.1f}% (IQR {fig['iqr'][0]:g}..{fig['iqr'][1]:g}), beyond the "
               f"{100 * FRONTIER_MAX_SPREAD:.0f}% a figure needs to move the frontier")
        lowered.append(frontier.lower_unsteady(key, best_standing(rows, key), why, now()))
    raised = []
    for key in sorted({r["key"] for r in L.standing(rows)}):
        best = best_standing(rows, key)
        # above the entry by more than its stored rounding (6 significant digits; consistency_problems' margin): an
        # entry is not "raised" to its own figure
        if best and (frontier.value(key) is None or best[0] > frontier.value(key) * (1 + 1e-5)):
            frontier.offer(key, best[0], best[1], noise=MIN_EFFECT)
            raised.append(key)
    frontier.save()
    render_all(d)
    return raised, lowered


def render_all(bench: str | Path) -> None:
    """LADDER.md, and the plots when matplotlib is installed."""
    from ..atomic import write_atomic
    from .ladder import render

    d = Path(bench)
    rows = L.read(d / L.LEDGER)
    frontier = Frontier.load(d / L.FRONTIER)
    images = []
    try:
        from . import plots
    except ImportError:  # matplotlib is a dev extra: the table is the record, the pictures a courtesy
        plots = None
    if plots is not None:
        if plots.ladder_png(rows, d / "ladder.png"):
            images.append(("the ladder over time", "ladder.png"))
        if plots.roofline_png_from_rows(rows, d / "roofline.png"):
            images.append(("roofline with the latest figures", "roofline.png"))
    (d / L.LADDER).touch(exist_ok=True)  # a new file gets the umask's mode (write_atomic keeps an existing one's)
    from .goals import GOALS, load as load_goals, load_kernel_goals

    write_atomic(d / L.LADDER, render(rows, frontier, images=images, goals=load_goals(d / GOALS),
                                      kernel_goals=load_kernel_goals(d / GOALS)))
