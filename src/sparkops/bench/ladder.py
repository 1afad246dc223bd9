"""LADDER.md, rendered from the ledger and the frontier (never edited by hand).

Three tables: the frontier (with the peer's latest figure beside it), every measured change in
order - including the ones that gained nothing, the regressions, and the retracted ones with the
reason - and the peer figures.
"""

from __future__ import annotations

from typing import Any

from . import ledger as L
from .frontier import Frontier
from .prediction import text as prediction_text, withdrawn as withdrawn_diagnoses


def _f(v: Any, digits: int = 4) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _short(commit: Any, dirty: Any) -> str:
    c = str(commit or "unknown")
    c = c[:10] if c != "unknown" else c
    return c + ("+dirty" if dirty else "")


def tier_text(row: dict[str, Any], gone: dict[str, dict[str, Any]]) -> str:
    t = row.get("tier") or "—"
    if row["id"] in gone:
        r = gone[row["id"]]
        return f"retracted (was {t}; {r['date'][:10]}: {r['why']})"
    return t


def _head(title: str, columns: str, align: str) -> list[str]:
    """A section's heading and its table's first two lines (columns "a | b", align "|---|---:|")."""
    return ["", f"## {title}", "", f"| {columns} |", align]


def _when(r: dict[str, Any]) -> str:
    return r["date"][:16].replace("T", " ")


def _routing(row: dict[str, Any]) -> str:
    """' (routing pinned: N flips)' for the candidate's gate of a row, when its gate pinned the routing."""
    gates = row.get("gates") or {}
    label = "B" if "B" in gates else "A"
    r = (gates.get(label) or {}).get("routing") or {}
    return f" (routing pinned: {r.get('flips', 0)} of {r.get('decisions', 0)} flipped)" if r.get("pinned") else ""


def render(rows: list[dict[str, Any]], frontier: Frontier, *, images: list[tuple[str, str]] = (),
           goals: list[Any] = (), kernel_goals: list[Any] = ()) -> str:
    gone = L.retractions(rows)
    withdrawn = withdrawn_diagnoses(rows, gone)
    out = ["# LADDER", "",
           "Generated from `bench/ledger.jsonl` and `bench/frontier.toml` by `sparkops ledger render` "
           "(every `sparkops bench` run re-renders it). Do not edit: edits are overwritten.", "",
           "A commit shown `+dirty` is what the measuring box's `.git` said: a GPU box keeps the session's first "
           "`.git` under newer files. `sparkops ledger provenance` names the commit whose sources each row ran, "
           "from the code digest the row carries.", ""]

    latest_peer: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["kind"] == "peer" and r["id"] not in gone:
            latest_peer[r["key"]] = r

    out += ["## Frontier (raise-only)", "",
            "| workload | best tok/s | registry | date | commit | row | peer tok/s | best / peer |",
            "|---|---:|---|---|---|---|---:|---:|"]
    entries = frontier.entries()
    for key in sorted(entries):
        e = entries[key]
        p = latest_peer.get(key)
        ratio = float(e["value"]) / p["peer_value"] if p and p.get("peer_value") else None
        peer = f"{_f(p['peer_value'])} ({p['peer']})" if p else "—"
        out.append(f"| `{key}` | {_f(float(e['value']))} | {_cell(e.get('registry', ''))} "
                   f"| {str(e.get('date', ''))[:10]} "
                   f"| {_short(e.get('commit'), e.get('dirty'))} | {e['row']} | {peer} | {_f(ratio, 3)} |")
    if not entries:
        out.append("| (none yet) | | | | | | | |")
    lowered = frontier.lowered()
    if lowered:
        out += ["", "Lowered (by a retraction, or by `ledger sync` over an unsteady figure):", ""]
        for x in lowered:
            how = (f"row {x['retracted_row']} retracted by {x['retraction_row']}: " if "retracted_row" in x
                   else "unsteady: ")  # an unsteady record's why names its row
            out.append(f"- `{x['key']}`: {_f(x['from'])} → {_f(x['to'])} ({str(x['date'])[:10]}, {how}"
                       f"{_cell(x['why'])})")

    if goals:
        from .goals import reading

        out += _head("The goal (bench/goals.toml: issue #10; roofline and llama.cpp from spec/anchors.md)",
                     "workload | best gated tok/s | of the roofline | x llama.cpp | target | met | row",
                     "|---|---:|---:|---:|---|---|---|")
        for g in reading(list(goals), entries):
            goal = g["goal"]
            out.append(f"| {_cell(goal.name)} | {_f(g['best'])} "
                       f"| {_f(100 * g['of_roofline'], 3) + '%' if g['of_roofline'] else '—'} "
                       f"| {_f(g['vs_llama_cpp'], 3) if g['vs_llama_cpp'] else '—'} "
                       f"| {_cell(goal.target_is)} ({goal.target:.0f} tok/s; roofline {goal.roofline:.0f}, "
                       f"llama.cpp {goal.llama_cpp:.0f}) | {'**yes**' if g['met'] else 'not yet'} "
                       f"| {g['row'] or '—'} |")
        from .goals import kernel_reading

        for g in kernel_reading(list(kernel_goals), [r for r in rows if r["id"] not in gone]):
            goal = g["goal"]
            seen = (f"fewest diagnosed: {_f(g['best'])} (row {g['row']}, {_cell(g['registry'] or '?')})"
                    if g["best"] is not None else "no measured diagnosis yet")
            out.append(f"| {_cell(goal.name)} | {seen} | | | <= {goal.target} kernels | "
                       f"{'**yes**' if g['met'] else 'not yet'} | {g['row'] or '—'} |")

    out += ["", "## Every measured change", "",
            "Tiers: **win** / **none** / **regression** from the ABAB pair ratios (median beyond the noise floor "
            "and a sign test over the pairs at p < 0.05), or against the frontier for a run without a baseline; "
            "**retracted** rows stay, with the reason.", "",
            "| # | date | row | change | metric | before → after | ratio | tier | diagnosis of before | worst KL / top-1 "
            "| command |",
            "|---:|---|---|---|---|---|---:|---|---|---|---|"]
    n = 0
    for r in rows:
        if r["kind"] != "measurement":
            continue
        n += 1
        kl = f"{_f(r.get('worst_kl'), 3)} / {_f(r.get('worst_top1'), 3)}{_routing(r)}"
        out.append(f"| {n} | {_when(r)} | {r['id']} | {_cell(r.get('change', ''))} "
                   f"| {_cell(r.get('metric', r.get('key')))} | {_f(r.get('before'))} → {_f(r.get('after'))} "
                   f"| {_f(r.get('ratio'), 3)} | {_cell(tier_text(r, gone))} | {_cell(prediction_text(r, withdrawn))} | {kl} "
                   f"| `{_cell(r.get('command', ''))}` |")
    if not n:
        out.append("| | (no measurements yet) | | | | | | | | | |")

    diagnoses = [r for r in rows if r["kind"] == "diagnosis"]
    if diagnoses:
        out += _head("Diagnoses (`sparkops diagnose --record`: the profiled step's figures, not gated bench figures)",
                     "date | row | model | depth | registry | eager tok/s | kernels / token | busy | binds (eager) "
                     "| in one CUDA graph | PNG",
                     "|---|---|---|---:|---|---:|---:|---:|---|---|---|")
        for r in diagnoses:
            gain, ggain = r.get("predicted_gain"), r.get("graph_predicted_gain")
            eager = f"{r.get('binding') or '?'}" + (f": x{gain:.3g} if lifted" if gain else "")
            graph = (f"{_f(r.get('graph_tok_s'))} tok/s, {r.get('graph_binding')}" +
                     (f": x{ggain:.3g} to the roofline" if ggain else "")) if r.get("graph_tok_s") else "—"
            busy = f"{100 * r['busy_fraction']:.0f}%" if r.get("busy_fraction") is not None else "—"
            status = f" (retracted: {gone[r['id']]['why']})" if r["id"] in gone else ""
            out.append(f"| {_when(r)} | {r['id']}{_cell(status)} | {_cell(r['model']['name'])} ({_cell(r['model'].get('mix'))}) "
                       f"| {r.get('depth')} | {_cell(r.get('registry') or 'on paper')} | {_f(r.get('measured_tok_s'))} "
                       f"| {_f(r.get('kernels_per_token'))} | {busy} | {_cell(eager)} | {_cell(graph)} "
                       f"| {_cell(', '.join(r.get('pngs') or []) or '—')} |")

    refusals = [r for r in rows if r["kind"] == "refusal"]
    if refusals:
        out += _head("Refused by the model gate (nothing was timed)",
                     "date | row | change | registry | worst depth | KL / top-1 | command", "|---|---|---|---|---:|---|---|")
        for r in refusals:
            kl = f"{_f(r.get('worst_kl'), 3)} / {_f(r.get('worst_top1'), 3)}"
            out.append(f"| {_when(r)} | {r['id']} | {_cell(r.get('change', ''))} "
                       f"| {_cell(r.get('registry', ''))} | {r.get('worst_depth', '')} | {kl} "
                       f"| `{_cell(r.get('command', ''))}` |")

    from .opledger import combined_targets, latest_per_source

    runs = latest_per_source(rows)
    if runs:
        out += _head("Per-op benchmarks: the targets (each judged on the latest run of every benchmark file)",
                     "target | verdict | measured | best implementation | row | why (when missed)",
                     "|---|---|---:|---|---|---|")
        for t in combined_targets(runs):
            unit = "%" if t["metric"] == "pct_bandwidth" else " us"
            measured = f"{_f(t['measured'], 3)}{unit}" if t["measured"] is not None else "—"
            out.append(f"| {_cell(t['target'])} | **{t['verdict']}** | {measured} | {_cell(t['best_impl'] or '—')} "
                       f"| {t['row'] or '—'} | {_cell(t['why'])} |")
    for r in runs:
        out += ["", f"### Per-op run `{_cell(r.get('source', '?'))}` on {', '.join(r.get('devices') or []) or 'an unnamed device'}"
                    f" ({r['id']}, run {str(r.get('run_date') or r['date'])[:16].replace('T', ' ')})", "",
                f"Read ceiling {_f(r['read_ceiling_gbs'])} GB/s. Command: `{_cell(r.get('command', ''))}`.", "",
                "| workload | implementation | us per call | GB/s | % of read ceiling | TFLOP/s |",
                "|---|---|---:|---:|---:|---:|"]
        for c in sorted(r["entries"], key=lambda c: (c["group"], c["us_per_call"])):
            out.append(f"| {_cell(c['group'])} | {_cell(c['impl'])} | {_f(c['us_per_call'], 4)} "
                       f"| {_f(c.get('gb_per_s'), 4)} | {_f(c.get('pct_bandwidth'), 3)} | {_f(c.get('tflops'), 4)} |")

    from .perop import render_rows

    out += render_rows(rows, _cell)

    peers = [r for r in rows if r["kind"] == "peer"]
    if peers:
        out += _head("Peer figures (same box, same GGUF, interleaved)",
                     "date | workload | peer | peer tok/s | sparkops tok/s | sparkops / peer | peer build | command",
                     "|---|---|---|---:|---:|---:|---|---|")
        for r in peers:
            figs = r.get("peer_figures") or [{}]
            build = figs[0].get("build_commit", "")
            status = " (retracted)" if r["id"] in gone else ""
            out.append(f"| {_when(r)} | `{r['key']}`{status} | {r['peer']} "
                       f"| {_f(r['peer_value'])} "
                       f"| {_f(r['value'])} | {_f(r.get('ratio'), 3)} | {_cell(build)} "
                       f"| `{_cell(r.get('command', ''))}` |")
    for alt, name in images:
        out += ["", f"![{alt}]({name})"]
    return "\n".join(out) + "\n"
