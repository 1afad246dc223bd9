"""What a two-arm bench changes: the ops (and [engine] options) whose selection differs between A and B.

A rung's row says "attention=X" in words; the arms' registries say what really differs. Session 8 timed a rung
whose B registry had been made over an older base: it swapped the attention and also lacked the router change A
had, and the row's 1.001 measured both at once. `differences` names every difference from the registry files
before anything runs, and `expect_changes` refuses a bench whose arms differ elsewhere than the ops it was told
the change touches (`sparkops bench --changes OP[,OP]`); each row records the difference its arms ran with.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import BadInput
from ..registry.file import Registry

ENGINE = "[engine]"


def differences(a: str | Path, b: str | Path, device: str) -> dict[str, list[str]]:
    """{op: [A's implementation, B's]} for every op whose selection on `device` differs ("op@TYPE" for a per-type
    selection), and {"[engine]": [A's options, B's]} for the [engine] options that differ; an op one file leaves
    out reads "(none)"."""
    ra, rb = Registry.load(a), Registry.load(b)
    ops = sorted(set(ra.doc.get("ops", {})) | set(rb.doc.get("ops", {})))
    out: dict[str, list[str]] = {}
    for op in ops:
        sa, sb = ra.selection(op, device), rb.selection(op, device)
        ia, ib = (sa.impl if sa else "(none)"), (sb.impl if sb else "(none)")
        if ia != ib:
            out[op] = [ia, ib]
        ta, tb = ra.type_selections(op, device), rb.type_selections(op, device)
        for qtype in sorted(set(ta) | set(tb)):  # per-type selections: "linear@Q6_K"
            xa, xb = (ta[qtype].impl if qtype in ta else "(none)"), (tb[qtype].impl if qtype in tb else "(none)")
            if xa != xb:
                out[f"{op}@{qtype}"] = [xa, xb]
    ea, eb = ra.engine_options(), rb.engine_options()
    changed = sorted(k for k in set(ea) | set(eb) if ea.get(k) != eb.get(k))  # only the options that differ
    if changed:
        out[ENGINE] = [_on({k: ea.get(k) for k in changed}), _on({k: eb.get(k) for k in changed})]
    return out


def selection_differences(a: dict[str, str], b: dict[str, str]) -> dict[str, list[str]]:
    """The same over two arms' recorded selections (what each op ran: `harness.selections`)."""
    return {op: [a.get(op, "(none)"), b.get(op, "(none)")] for op in sorted(set(a) | set(b))
            if a.get(op, "(none)") != b.get(op, "(none)")}


def expect_changes(diff: dict[str, list[str]], changes: str, a: str | Path, b: str | Path) -> None:
    """Refuse unless the arms differ in exactly the named ops ("engine" names the [engine] table)."""
    want = {ENGINE if c.strip() in ("engine", ENGINE) else c.strip() for c in changes.split(",") if c.strip()}
    if not want:
        raise BadInput("--changes: name the ops the change touches, e.g. --changes attention (or engine)")
    got = set(diff)
    if got != want:
        extra, missing = sorted(got - want), sorted(want - got)
        said = "; ".join(f"{_name(op)}: {diff[op][0]} -> {diff[op][1]}" for op in sorted(got)) or "nothing"
        raise BadInput(f"--changes {changes}: the registries {a} (A) and {b} (B) differ in {said}"
                       + (f"; not named: {', '.join(map(_name, extra))}" if extra else "")
                       + (f"; named but the same in both: {', '.join(map(_name, missing))}" if missing else "")
                       + ". A row must time one change: make B from A with that change alone (sparkops swap)")


def describe(diff: dict[str, list[str]]) -> str:
    return ", ".join(f"{_name(op)} ({x} -> {y})" for op, (x, y) in diff.items()) or "nothing (the same selections)"


def _name(op: str) -> str:
    """How a difference is spelled to a person: "engine" for the [engine] table (rich would eat the brackets)."""
    return "engine" if op == ENGINE else op


def _on(options: dict[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(options.items())) or "(defaults)"
