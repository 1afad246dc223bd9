"""Prediction vs outcome: what `sparkops diagnose` said before a change, kept in the change's ledger row.

The ladder's discipline (seed, lectures 03-09): before each step, diagnose the baseline - which ceiling binds
and what lifting it would gain - then make the change and measure it. `sparkops diagnose ... --json-out D.json`
writes the diagnosis; `sparkops bench ... --prediction D.json` records, in each depth's row, the binding ceiling
and predicted gain of the baseline arm's step (eager or one CUDA graph, as the arm ran) beside the measured
ratio, so a reader sees where the diagnosis was right and where it was not. A prediction is never a figure:
nothing about the gate, the tier or the frontier depends on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import BadInput


def load(path: str | Path, depths: tuple[int, ...]) -> dict[int, dict[str, Any]]:
    """{depth: the diagnosis' verdict at that depth} from a `diagnose --json-out` file; every depth must be there."""
    p = Path(path)
    try:
        docs = json.loads(p.read_text())
    except FileNotFoundError:
        raise BadInput(f"--prediction {path}: no such file; write one with `sparkops diagnose ... --json-out "
                       f"{path}` on the baseline registry first") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"--prediction {path}: not JSON ({exc}); it must be what `diagnose --json-out` wrote") from None
    docs = docs if isinstance(docs, list) else [docs]
    by_depth: dict[int, dict[str, Any]] = {}
    for d in docs:
        if not isinstance(d, dict) or "verdict" not in d or "depth" not in d:
            raise BadInput(f"--prediction {path}: not a diagnosis (no depth / verdict); use `diagnose --json-out`")
        if d.get("paper"):
            raise BadInput(f"--prediction {path}: a diagnosis on paper predicts nothing measured; diagnose the "
                           f"baseline registry on the device (drop --paper)")
        v = d["verdict"]
        by_depth[int(d["depth"])] = {
            "source": str(path), "model": d.get("model"), "registry": d.get("registry"), "diagnosed": d.get("date"),
            "eager": {"binding": v.get("binding"), "predicted_gain": v.get("predicted_gain"),
                      "tok_s": v.get("measured_tok_s")},
            "graph": {"binding": v.get("graph_binding"), "predicted_gain": v.get("graph_predicted_gain"),
                      "tok_s": v.get("graph_tok_s")},
        }
    missing = [d for d in depths if d not in by_depth]
    if missing:
        raise BadInput(f"--prediction {path} diagnoses depth(s) {sorted(by_depth)}, not {missing}; diagnose every "
                       f"depth the bench times (`diagnose --depth {','.join(map(str, depths))}`)")
    return by_depth


def for_row(pred: dict[str, Any], model: str, baseline_mode: str, measured_ratio: float | None) -> dict[str, Any]:
    """The row's prediction: the diagnosis of the baseline arm's step as it ran (eager or graph)."""
    if pred.get("model") and pred["model"] != model:
        raise BadInput(f"--prediction {pred['source']} diagnoses {pred['model']}, the bench timed {model}")
    side = pred["graph" if baseline_mode == "graph" else "eager"]
    return {"source": pred["source"], "registry": pred["registry"], "diagnosed": pred["diagnosed"],
            "of": f"the baseline's {baseline_mode} step", "binding": side["binding"],
            "predicted_gain": side["predicted_gain"], "diagnosed_tok_s": side["tok_s"],
            "measured_ratio": measured_ratio}


def text(row: dict[str, Any], withdrawn: set[tuple[Any, Any]] = frozenset()) -> str:
    """'launch overhead: x4.99 predicted' for the ladder ('—' without a prediction). `withdrawn`: (registry, date)
    of diagnoses whose ledger rows were retracted; a prediction read from one of them says so."""
    p = row.get("prediction")
    if not p:
        return "—"
    gain = p.get("predicted_gain")
    out = f"{p.get('binding') or '?'}: x{gain:.3g} predicted" if gain else f"{p.get('binding') or '?'}"
    return out + (" (from a diagnosis since retracted)" if (p.get("registry"), p.get("diagnosed")) in withdrawn else "")


def withdrawn(rows: list[dict[str, Any]], gone: dict[str, Any]) -> set[tuple[Any, Any]]:
    """(registry, date) of every retracted diagnosis row: the predictions `text` marks."""
    return {(r.get("registry"), r.get("date")) for r in rows if r.get("kind") == "diagnosis" and r["id"] in gone}
