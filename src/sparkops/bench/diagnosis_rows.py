"""Diagnoses in the ledger: `sparkops diagnose ... --record` keeps, per depth, which ceiling binds and what
lifting it would gain, beside the figures it was read from, so the ladder's "why" is on record with its "what".

A diagnosis row holds no figure the frontier reads: its tok/s are what the profiled step measured while being
diagnosed (eager, and replayed as one CUDA graph), not a gated bench figure. LADDER.md lists them in their own
table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import ledger as L


def row(doc: dict[str, Any], command: str, env: dict[str, Any]) -> dict[str, Any]:
    """The ledger row of one diagnosis (one depth): `doc` as `sparkops diagnose --json` prints it."""
    v = doc.get("verdict") or {}
    prof = doc.get("profile") or {}
    date = doc.get("date") or env.get("date")
    return {"id": L.new_id(date), "kind": "diagnosis", "date": date,
            "model": {"name": doc.get("model"), "mix": doc.get("mix")}, "depth": doc.get("depth"),
            "device": doc.get("device"), "paper": bool(doc.get("paper")), "registry": doc.get("registry"),
            "binding": v.get("binding"), "predicted_gain": v.get("predicted_gain"), "why": v.get("why"),
            "roofline_tok_s": v.get("roofline_tok_s"), "measured_tok_s": v.get("measured_tok_s"),
            "fraction_of_roofline": v.get("fraction_of_roofline"),
            "graph_binding": v.get("graph_binding"), "graph_predicted_gain": v.get("graph_predicted_gain"),
            "graph_tok_s": v.get("graph_tok_s"), "graph_why": v.get("graph_why"),
            "kernels_per_token": prof.get("kernels"), "busy_fraction": prof.get("busy_fraction"),
            "by_op": prof.get("by_op"), "by_kernel": prof.get("by_kernel"),
            "pngs": [Path(p).name for p in doc.get("pngs", [])],
            "command": command, "commit": env.get("commit"), "dirty": env.get("dirty"),
            "code_digest": env.get("code_digest"), "device_name": env.get("device_name")}


def record(docs: list[dict[str, Any]], command: str, env: dict[str, Any],
           bench: str | Path | None = None) -> list[dict[str, Any]]:
    """Append one row per diagnosis and re-render the ladder; returns the rows."""
    from .record import render_all

    d = L.bench_dir(bench)
    d.mkdir(parents=True, exist_ok=True)
    rows = [L.append(d / L.LEDGER, row(doc, command, env)) for doc in docs]
    render_all(d)
    return rows
