"""Prediction vs outcome: what `sparkops diagnose` said before a change, kept in the change's ledger row.

The ladder's discipline (seed, lectures 03-09): before each step, diagnose the baseline - which ceiling binds
and what lifting it would gain - then make the change and measure it. `sparkops diagnose ... --json-out D.json`
writes the diagnosis; `sparkops bench ... --prediction D.json` records, in each depth's row, the binding ceiling
and predicted gain of the baseline arm's step (eager or one CUDA graph, as the arm ran) beside the measured
ratio, so a reader sees where the diagnosis was right and where it was not. A prediction is never a figure:
nothing about the gate, the tier or the frontier depends on it.

The diagnosis' own gain is the whole gap to the roofline (or the launch bill), which no single change lifts.
`--expect OP=FACTOR` states what the change does per op ("attention runs 1.66x faster", from a per-op
benchmark); the row then also records the step's gain that implies, by Amdahl on the diagnosed per-op device
times: step - sum(op time x (1 - 1/FACTOR)). `OP@DEPTH=FACTOR` sets one depth's factor (per-op speed-ups often
differ with the context). Session 5's fusion row showed why: diagnosed "x7.69 to the roofline", measured 1.14.

A prefill bench takes a prefill diagnosis (`diagnose --prefill-chunk N`, N the bench's --chunk): the chunks it
diagnosed (say at depths 0 and T - N, a prompt's first and last) stand for the prompt's, their per-op times summed,
so `--expect kda=3.4` predicts a prompt's speed-up the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import BadInput


def parse_expect(text: str | None) -> dict[tuple[str, int | None], float]:
    """'attention=1.66,linear@0=1.2,linear@Q6_K=2.4' -> {(op, depth or None): factor}; a factor is the op's
    speed-up (> 0). OP@TYPE (a weight type: the calls of a per-type selection, `swap linear@Q6_K=...`) names the
    op "OP@TYPE", whose time the diagnosis keeps apart (diagnose.by_op_of); it cannot be given with its whole op."""
    from ..registry.file import TYPE_NAMES

    out: dict[tuple[str, int | None], float] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        key, eq, val = part.partition("=")
        op, at, where = key.strip().partition("@")
        d = None
        try:
            factor = float(val)
            if at and where in TYPE_NAMES:
                op = f"{op}@{where}"
            elif at:
                d = int(where)
        except ValueError:
            factor = float("nan")
        if not eq or not op or not factor > 0:
            raise BadInput(f"--expect {part!r}: write OP=FACTOR, OP@DEPTH=FACTOR or OP@TYPE=FACTOR (TYPE one of "
                           f"{', '.join(TYPE_NAMES)}), FACTOR the op's speed-up (> 0), e.g. attention=1.66, "
                           f"attention@131072=1.66 or linear@Q6_K=2.4")
        out[(op, d)] = factor
    whole = {op for op, _ in out if "@" not in op}
    both = sorted(op for op, _ in out if "@" in op and op.split("@")[0] in whole)
    if both:
        raise BadInput(f"--expect names {', '.join(both)} and its whole op too: the typed calls are part of it; "
                       f"give the op's factor or its types', not both")
    return out


def load(paths: str | Path | list, depths: tuple[int, ...], expect: str | None = None) -> dict[int, dict[str, Any]]:
    """{depth: the diagnosis at that depth} from `diagnose --json-out` files (one or several, each depth in one of
    them); every depth must be there. `expect` (`parse_expect`): each depth's per-op factors, checked against the
    ops the diagnosis timed."""
    by_depth: dict[int, dict[str, Any]] = {}
    for path in ([paths] if isinstance(paths, (str, Path)) else list(paths)):
        for d, pred in _load_one(path).items():
            if d in by_depth:
                raise BadInput(f"--prediction: depth {d} is diagnosed in both {by_depth[d]['source']} and {path}; "
                               f"pass one diagnosis per depth")
            by_depth[d] = pred
    missing = [d for d in depths if d not in by_depth]
    if missing:
        raise BadInput(f"--prediction {', '.join(map(str, paths if isinstance(paths, list) else [paths]))} "
                       f"diagnoses depth(s) {sorted(by_depth)}, not {missing}; diagnose every depth the bench times "
                       f"(`diagnose --depth {','.join(map(str, depths))}`)")
    factors = parse_expect(expect)
    stray = sorted({str(d) for _, d in factors if d is not None and d not in depths})
    if stray:
        raise BadInput(f"--expect names depth(s) {', '.join(stray)}, which this bench does not time ({depths})")
    for d in depths:
        per_op = {op: f for (op, at), f in factors.items() if at is None}
        per_op.update({op: f for (op, at), f in factors.items() if at == d})
        if per_op:
            unknown = sorted(set(per_op) - set(by_depth[d]["by_op"]))
            if unknown:
                raise BadInput(f"--expect {', '.join(unknown)}: the diagnosis at depth {d} timed no such op (it timed "
                               f"{', '.join(sorted(by_depth[d]['by_op'])) or 'none'})")
            by_depth[d]["expect"] = per_op
    return by_depth


def _load_one(path: str | Path) -> dict[int, dict[str, Any]]:
    return _decode_docs(path, _read(path))


def _read(path: str | Path) -> list[dict[str, Any]]:
    """The diagnosis documents of a `diagnose --json-out` file (each checked to be one)."""
    p = Path(path)
    try:
        docs = json.loads(p.read_text())
    except FileNotFoundError:
        raise BadInput(f"--prediction {path}: no such file; write one with `sparkops diagnose ... --json-out "
                       f"{path}` on the baseline registry first") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"--prediction {path}: not JSON ({exc}); it must be what `diagnose --json-out` wrote") from None
    docs = docs if isinstance(docs, list) else [docs]
    for d in docs:
        if not isinstance(d, dict) or "verdict" not in d or "depth" not in d:
            raise BadInput(f"--prediction {path}: not a diagnosis (no depth / verdict); use `diagnose --json-out`")
        if d.get("paper"):
            raise BadInput(f"--prediction {path}: a diagnosis on paper predicts nothing measured; diagnose the "
                           f"baseline registry on the device (drop --paper)")
    return docs


def _decode_docs(path: str | Path, docs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    by_depth: dict[int, dict[str, Any]] = {}
    for d in docs:
        if d.get("phase") == "prefill":
            raise BadInput(f"--prediction {path}: a prefill diagnosis (diagnose --prefill-chunk) predicts a prefill "
                           f"bench, not a decode step; diagnose the baseline's decode step (without --prefill-chunk)")
        v = d["verdict"]
        prof = d.get("profile") or {}
        by_depth[int(d["depth"])] = {
            "source": str(path), "model": d.get("model"), "registry": d.get("registry"), "diagnosed": d.get("date"),
            "eager": {"binding": v.get("binding"), "predicted_gain": v.get("predicted_gain"),
                      "tok_s": v.get("measured_tok_s"), "wall_s": prof.get("wall_s")},
            "graph": {"binding": v.get("graph_binding"), "predicted_gain": v.get("graph_predicted_gain"),
                      "tok_s": v.get("graph_tok_s"), "wall_s": v.get("graph_wall_s")},
            "by_op": op_seconds(prof.get("by_op") or {}),
        }
    return by_depth


def op_seconds(by_op: dict[str, Any]) -> dict[str, float]:
    """{op: seconds} of a diagnosis' profile, with "op@TYPE" entries for the ops it timed per weight type."""
    out = {}
    for op, x in by_op.items():
        out[op] = float(x.get("seconds", 0.0))
        for qtype, y in (x.get("by_type") or {}).items():
            out[f"{op}@{qtype}"] = float(y.get("seconds", 0.0))
    return out


def load_prefill(paths: str | Path | list, depths: tuple[int, ...], chunk: int | None,
                 expect: str | None = None) -> dict[int, dict[str, Any]]:
    """A prefill row's prediction, {depth: it} for every depth the bench times: the baseline's prefill diagnosis
    (`diagnose --prefill-chunk N --json-out`), its chunks at every diagnosed depth taken together as the "step" (a
    prompt runs chunks at depths 0 .. T - N; the diagnosed ones, typically the first and the last, stand for them):
    their summed per-op device times and walls, their joint predicted gain (summed walls over summed predicted
    walls). `chunk`: the bench's --chunk, which must be the diagnosed chunk size. `expect`: OP=FACTOR per op (no
    @DEPTH: the factors apply to every chunk)."""
    docs = []
    for path in ([paths] if isinstance(paths, (str, Path)) else list(paths)):
        docs += [(str(path), d) for d in _read(path)]
    for path, d in docs:
        if d.get("phase") != "prefill":
            raise BadInput(f"--prediction {path}: a decode diagnosis predicts a decode step, not this prefill; "
                           f"diagnose the baseline with --prefill-chunk {chunk or 'N'}")
        if chunk is None or int(d.get("chunk") or 0) != int(chunk):
            raise BadInput(f"--prediction {path}: diagnosed chunks of {d.get('chunk')} tokens, but the bench prefills "
                           f"{'in one forward (no --chunk)' if chunk is None else f'in chunks of {chunk}'}; diagnose "
                           f"with --prefill-chunk equal to the bench's --chunk")
    at = sorted(int(d["depth"]) for _, d in docs)
    if len(set(at)) != len(at):
        raise BadInput(f"--prediction: a chunk depth is diagnosed twice ({at}); pass one diagnosis per depth")
    walls = [float((d.get("profile") or {}).get("wall_s") or 0.0) for _, d in docs]
    if not all(w > 0 for w in walls):
        raise BadInput("--prediction: a prefill diagnosis without a measured chunk time (profile.wall_s) predicts "
                       "nothing; diagnose on the device the bench runs on")
    by_op: dict[str, float] = {}
    for _, d in docs:
        for op, sec in op_seconds((d.get("profile") or {}).get("by_op") or {}).items():
            by_op[op] = by_op.get(op, 0.0) + sec
    gains = [float(d["verdict"].get("predicted_gain") or 0.0) for _, d in docs]
    predicted = sum(walls) / sum(w / g for w, g in zip(walls, gains)) if all(g > 0 for g in gains) else None
    first = docs[0][1]
    registries = {d.get("registry") for _, d in docs}
    if len(registries) > 1:
        raise BadInput(f"--prediction: the chunks were diagnosed under different registries ({sorted(map(str, registries))}); "
                       f"diagnose the baseline's")
    side = {"binding": docs[-1][1]["verdict"].get("binding"), "predicted_gain": predicted,
            "tok_s": chunk * len(docs) / sum(walls), "wall_s": sum(walls)}
    pred = {"source": ", ".join(sorted({p for p, _ in docs})), "model": first.get("model"),
            "registry": first.get("registry"), "diagnosed": max(str(d.get("date")) for _, d in docs),
            "eager": side, "graph": side, "by_op": by_op,
            "of": f"the baseline's {chunk}-token chunks at depth{'s' if len(at) > 1 else ''} "
                  f"{', '.join(map(str, at))}"}
    factors = parse_expect(expect)
    if any(d is not None for _, d in factors):
        raise BadInput("--expect OP@DEPTH=FACTOR: a prefill prediction applies one factor per op to every chunk; "
                       "write OP=FACTOR")
    if factors:
        per_op = {op: f for (op, _), f in factors.items()}
        unknown = sorted(set(per_op) - set(by_op))
        if unknown:
            raise BadInput(f"--expect {', '.join(unknown)}: the prefill diagnosis timed no such op (it timed "
                           f"{', '.join(sorted(by_op)) or 'none'})")
        pred["expect"] = per_op
    return {d: dict(pred) for d in depths}


def load_forecast(path: str | Path) -> dict[str, Any]:
    """A step's forecast from bench/probes/critical_path.py --json: the span of a measured timeline replayed with the
    change's what-ifs (kernels removed, re-tailed, scaled), as {source, timeline, registry, depth, changes, ratio}.
    Kept in the row of the timeline's depth beside Amdahl's (--expect) and the measured ratio: session 33's fusion
    lost 0.943 where Amdahl on its ops said ~1.04 and this model, on the same timeline, x0.954."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"--forecast {path}: cannot read it as JSON ({exc}); give bench/probes/critical_path.py "
                       f"TIMELINE --json ...'s output") from None
    whole = doc.get("all") if isinstance(doc, dict) else None
    ratio = whole.get("ratio") if isinstance(whole, dict) else None
    if not isinstance(ratio, (int, float)) or not ratio > 0:
        raise BadInput(f"--forecast {path}: no forecast in it (critical_path.py writes one under \"all\" when it is "
                       f"given at least one --remove, --tail, --scale or --shift)")
    return {"source": str(path), "timeline": doc.get("timeline"), "registry": doc.get("registry"),
            "depth": doc.get("depth"), "changes": list(whole.get("changes") or []), "ratio": float(ratio)}


def forecast_for_row(forecast: dict[str, Any] | None, depth: int,
                     measured_ratio: float | None) -> dict[str, Any] | None:
    """The forecast as the row of `depth` keeps it (with the measured ratio beside it), or None: a timeline is one
    depth's replay, so its forecast goes in that depth's row only (a forecast of no stated depth in every row)."""
    if forecast is None or (forecast.get("depth") is not None and forecast["depth"] != depth):
        return None
    return {**forecast, "measured_ratio": measured_ratio}


def check_step_times(preds: dict[int, dict[str, Any]], baseline_mode: str) -> None:
    """Refuse, before any timing, an --expect whose diagnosis lacks the step time of the baseline arm's mode."""
    for d, pred in preds.items():
        if pred.get("expect") and not pred[baseline_mode].get("wall_s"):
            raise BadInput(f"--expect: the diagnosis in {pred['source']} at depth {d} has no {baseline_mode} step "
                           f"time to apply it to (the baseline arm runs {baseline_mode}; diagnose it on the device "
                           f"the bench runs on{', where its step could be captured' if baseline_mode == 'graph' else ''})")


def amdahl(step_s: float, by_op: dict[str, float], expect: dict[str, float]) -> float:
    """The step's speed-up if each op in `expect` ran FACTOR times faster and nothing else changed."""
    saved = sum(by_op[op] * (1 - 1 / f) for op, f in expect.items())
    return step_s / max(step_s - saved, 1e-9 * step_s)  # op times that overlap could sum past the step


def for_row(pred: dict[str, Any], model: str, baseline_mode: str, measured_ratio: float | None) -> dict[str, Any]:
    """The row's prediction: the diagnosis of the baseline arm's step as it ran (eager or graph)."""
    if pred.get("model") and pred["model"] != model:
        raise BadInput(f"--prediction {pred['source']} diagnoses {pred['model']}, the bench timed {model}")
    side = pred["graph" if baseline_mode == "graph" else "eager"]
    out = {"source": pred["source"], "registry": pred["registry"], "diagnosed": pred["diagnosed"],
           "of": pred.get("of") or f"the baseline's {baseline_mode} step", "binding": side["binding"],
           "predicted_gain": side["predicted_gain"], "diagnosed_tok_s": side["tok_s"],
           "measured_ratio": measured_ratio}
    expect = pred.get("expect")
    if expect:
        if not side.get("wall_s"):
            raise BadInput(f"--expect: the diagnosis in {pred['source']} has no {baseline_mode} step time to apply "
                           f"it to (diagnose on the device the bench runs on)")
        out["expect"] = dict(expect)
        out["change_predicted_gain"] = amdahl(side["wall_s"], pred["by_op"], expect)
    return out


def text(row: dict[str, Any], withdrawn: set[tuple[Any, Any]] = frozenset()) -> str:
    """'launch overhead: x4.99 predicted' for the ladder ('—' without a prediction). `withdrawn`: (registry, date)
    of diagnoses whose ledger rows were retracted; a prediction read from one of them says so."""
    p = row.get("prediction")
    if not p:
        f = row.get("forecast")
        return f"critical path x{f['ratio']:.3f} forecast" if f else "—"
    gain = p.get("predicted_gain")
    out = f"{p.get('binding') or '?'}: x{gain:.3g} predicted" if gain else f"{p.get('binding') or '?'}"
    if p.get("change_predicted_gain"):
        ops = ", ".join(f"{op} x{f:.3g}" for op, f in p["expect"].items())
        out = f"{p.get('binding') or '?'}; expected {ops} per op: x{p['change_predicted_gain']:.3g} predicted"
    out += " (from a diagnosis since retracted)" if (p.get("registry"), p.get("diagnosed")) in withdrawn else ""
    f = row.get("forecast")
    return out + (f"; critical path x{f['ratio']:.3f} forecast" if f else "")


def withdrawn(rows: list[dict[str, Any]], gone: dict[str, Any]) -> set[tuple[Any, Any]]:
    """(registry, date) of every retracted diagnosis row: the predictions `text` marks."""
    return {(r.get("registry"), r.get("date")) for r in rows if r.get("kind") == "diagnosis" and r["id"] in gone}
