"""The goal, read against the frontier: bench/goals.toml says per workload the roofline, llama.cpp's figure on
the same box and the target; LADDER.md shows how far the best gated figure is from each.

A goal is met only by a frontier entry, and only gated figures enter the frontier, so a goal can never be met by
an ungated or refused number. Nothing here writes: it is a reading of the record.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BadInput

GOALS = "goals.toml"


@dataclass(frozen=True)
class Goal:
    name: str
    key: str  # the frontier's workload key
    roofline: float  # tok/s
    llama_cpp: float  # tok/s, the peer on the same box
    target: float  # tok/s
    target_is: str  # the target in words (">= 60% of the roofline")


@dataclass(frozen=True)
class KernelGoal:
    """At most `target` kernels per decode token, read from the ledger's diagnosis rows of that model."""

    name: str
    model: str
    mix: str
    target: int


def _doc(p: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{p}: malformed TOML ({exc}); fix it or restore it from git") from None


def load_kernel_goals(path: str | Path) -> list[KernelGoal]:
    """The [[kernel_goal]] tables of a goals.toml ([] when there is none)."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for i, g in enumerate(_doc(p).get("kernel_goal", []), 1):
        try:
            out.append(KernelGoal(str(g["name"]), str(g["model"]), str(g["mix"]), int(g["target"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInput(f"{p}: kernel_goal {i} needs name, model, mix and target (an integer): {exc}") from None
    return out


def kernel_reading(goals: list[KernelGoal], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per kernel goal: the fewest kernels per token any measured diagnosis of that model found, and its row."""
    out = []
    for g in goals:
        seen = [r for r in rows if r.get("kind") == "diagnosis" and not r.get("paper")
                and r.get("kernels_per_token") is not None and (r.get("model") or {}).get("name") == g.model
                and (r.get("model") or {}).get("mix") == g.mix]
        best = min(seen, key=lambda r: r["kernels_per_token"], default=None)
        out.append({"goal": g, "best": best["kernels_per_token"] if best else None, "row": best["id"] if best else None,
                    "registry": best.get("registry") if best else None,
                    "met": best is not None and best["kernels_per_token"] <= g.target})
    return out


def load(path: str | Path) -> list[Goal]:
    """The goals of a bench directory's goals.toml ([] when there is none)."""
    p = Path(path)
    if not p.exists():
        return []
    doc = _doc(p)
    out = []
    for i, g in enumerate(doc.get("goal", []), 1):
        try:
            out.append(Goal(str(g["name"]), str(g["key"]), float(g["roofline"]), float(g["llama_cpp"]),
                            float(g["target"]), str(g.get("target_is", f">= {g['target']} tok/s"))))
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInput(f"{p}: goal {i} needs name, key, roofline, llama_cpp and target (numbers): {exc}") from None
    return out


def reading(goals: list[Goal], frontier_entries: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per goal: the best gated figure (or None), its share of the roofline, x llama.cpp, and met / not yet."""
    out = []
    for g in goals:
        e = frontier_entries.get(g.key)
        best = float(e["value"]) if e else None
        out.append({"goal": g, "best": best, "row": e.get("row") if e else None,
                    "of_roofline": best / g.roofline if best else None,
                    "vs_llama_cpp": best / g.llama_cpp if best else None,
                    "met": best is not None and best >= g.target})
    return out
