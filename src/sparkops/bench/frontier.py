"""bench/frontier.toml: the best gated figure per workload. Raise-only.

    [frontier."decode.kimi-linear-48b-a3b.q4_k_m.nvidia-h200.d=4096"]
    value = 231.4        # tok/s, higher is better
    row = "20261129-130502-3fa2c1"   # the ledger row that set it
    ...

A gated figure better than the entry raises it (with its commit, command and date); a worse one is
recorded as a regression (a counter and the row) and never lowers it. A figure whose rounds spread
beyond the noise band moves nothing ("unsteady", bench/record.py). There are two ways down, both logged
by the tooling as a [[lowered]] record that says from what, to what, and why:
- a retraction (`sparkops ledger retract`): the entry falls back to the best figure still standing;
- `sparkops ledger sync` over an entry an unsteady figure set (before that rule existed): the same fallback.
`lowering_problems(old, new)` is what the test suite runs over the file's git history: any value that
went down without such a record fails it.
Written through tomlkit (comments survive) and atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions

from ..atomic import write_atomic
from ..errors import BadInput

HEADER = [
    "bench/frontier.toml: the best gated figure sparkops has reached per workload (higher is better).",
    "RAISE-ONLY. Written by `sparkops bench` / `sparkops ledger`, never by hand: a better gated figure",
    "raises an entry; a worse one is counted as a regression and never lowers it. The only ways down are",
    "`sparkops ledger retract ROW --why ...` and `sparkops ledger sync` over an entry an unsteady figure",
    "set; both append a [[lowered]] record. tests/bench/test_frontier_raise_only.py fails any commit that",
    "lowers a value without one.",
    "Keys: PHASE.MODEL.MIX.BOX.d=DEPTH (decode) / PHASE.MODEL.MIX.BOX.t=TOKENS[@d=DEPTH] (prefill), with",
    ".cache=float8_e4m3fn on figures over an fp8 MLA cache (a lossy cache: its own workload).",
]

#: fields copied from the ledger row into an entry
ENTRY_FIELDS = ("unit", "commit", "dirty", "command", "date", "registry", "dtype", "worst_kl", "worst_top1",
                "device_name")


#: the key's suffix of a figure on an fp8 MLA cache (a lossy cache, sparkops/kvcache.py)
LOSSY_CACHE = ".cache=float8_e4m3fn"


def workload_key(phase: str, model: str, mix: str, box: str, depth: int, tokens: int, cache_dtype: str = "") -> str:
    """The frontier's key of a workload. A figure on an fp8 MLA cache is its own workload (LOSSY_CACHE on the key): it
    never raises, nor is counted a regression of, the same model on a cache in the activation dtype."""
    if phase == "decode":
        return with_cache(f"decode.{model}.{mix}.{box}.d={depth}", cache_dtype)
    return with_cache(f"prefill.{model}.{mix}.{box}.t={tokens}" + (f"@d={depth}" if depth else ""), cache_dtype)


def with_cache(key: str, cache_dtype: str | None) -> str:
    """`key` as the workload of a figure whose MLA cache was `cache_dtype` (a row's A and B may differ in it)."""
    bare = key[:-len(LOSSY_CACHE)] if key.endswith(LOSSY_CACHE) else key
    return bare + (LOSSY_CACHE if cache_dtype == "float8_e4m3fn" else "")


class Frontier:
    def __init__(self, path: Path, doc: tomlkit.TOMLDocument):
        self.path = Path(path)
        self.doc = doc

    # -- reading -------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> "Frontier":
        path = Path(path)
        if not path.exists():
            return cls(path, _empty())
        return cls(path, parse(path.read_text(), str(path)))

    def entries(self) -> dict[str, dict[str, Any]]:
        return {k: dict(v) for k, v in (self.doc.get("frontier") or {}).items()}

    def value(self, key: str) -> float | None:
        e = (self.doc.get("frontier") or {}).get(key)
        return float(e["value"]) if e is not None else None

    def lowered(self) -> list[dict[str, Any]]:
        return [dict(x) for x in self.doc.get("lowered", [])]

    # -- the raise-only rule -------------------------------------------------------------------
    def offer(self, key: str, value: float, row: dict[str, Any], *, noise: float) -> str:
        """Apply one gated figure: 'new', 'raised', 'held' (within noise below) or 'regression'."""
        if not value > 0:
            raise BadInput(f"frontier {key}: a figure must be a positive number, got {value!r}")
        table = self._table()
        old = table.get(key)
        if old is None:
            table[key] = self._entry(value, row)
            return "new"
        best = float(old["value"])
        if value > best:
            regressions = old.get("regressions", 0)
            entry = self._entry(value, row)
            entry["previous"] = best
            if regressions:
                entry["regressions"] = regressions
            table[key] = entry
            return "raised"
        if value < best * (1 - noise):
            old["regressions"] = int(old.get("regressions", 0)) + 1
            old["last_regression"] = row["id"]
            old["last_regression_value"] = _num(value)
            return "regression"
        return "held"

    def lower_by_retraction(self, key: str, retracted: str, retraction: dict[str, Any],
                            fallback: tuple[float, dict[str, Any]] | None) -> dict[str, Any] | None:
        """If `retracted` set `key`, fall back to the best standing figure (or drop the entry); log it."""
        old = self._table().get(key)
        if old is None or old.get("row") != retracted:
            return None
        return self._lower(key, fallback, {"retracted_row": retracted, "retraction_row": retraction["id"],
                                           "why": retraction["why"], "date": retraction["date"]})

    def lower_unsteady(self, key: str, fallback: tuple[float, dict[str, Any]] | None, why: str,
                       date: str) -> dict[str, Any]:
        """Lower the entry `key`, set by a figure whose rounds spread beyond what may move the frontier (record.steady),
        to the best steady figure standing (or drop it); log it in [[lowered]] as a retraction's lowering is."""
        return self._lower(key, fallback, {"unsteady_row": self._table()[key]["row"], "why": why, "date": date})

    def _lower(self, key: str, fallback: tuple[float, dict[str, Any]] | None, how: dict[str, Any]) -> dict[str, Any]:
        """Replace entry `key` by `fallback` (None: drop it) and append the [[lowered]] record (from, to, and `how`)."""
        table = self._table()
        record = {"key": key, "from": _num(float(table[key]["value"])), "to": _num(fallback[0]) if fallback else 0.0,
                  **how}
        if fallback is None:
            del table[key]
        else:
            table[key] = self._entry(fallback[0], fallback[1])
        if "lowered" not in self.doc:
            self.doc.add(tomlkit.nl())
            self.doc["lowered"] = tomlkit.aot()
        self.doc["lowered"].append(tomlkit.item(record))
        return record

    # -- writing -------------------------------------------------------------------------------
    def text(self) -> str:
        return tomlkit.dumps(self.doc)

    def save(self) -> None:
        text = self.text()
        parse(text, str(self.path))  # never write what we could not read back
        self.path.touch(exist_ok=True)  # a new file gets the umask's mode (write_atomic keeps an existing one's)
        write_atomic(self.path, text)

    def _table(self):
        if "frontier" not in self.doc:
            self.doc["frontier"] = tomlkit.table(is_super_table=True)
        return self.doc["frontier"]

    @staticmethod
    def _entry(value: float, row: dict[str, Any]):
        t = tomlkit.table()
        t["value"] = _num(value)
        t["row"] = row["id"]
        for f in ENTRY_FIELDS:
            v = row.get(f)
            if v is not None:
                t[f] = _num(v) if isinstance(v, float) else v
        return t


def _num(v: float) -> float:
    """Figures to 6 significant digits: stable text, no false precision."""
    return float(f"{float(v):.6g}")


def _empty() -> tomlkit.TOMLDocument:
    doc = tomlkit.document()
    for line in HEADER:
        doc.add(tomlkit.comment(line))
    doc.add(tomlkit.nl())
    doc["frontier"] = tomlkit.table(is_super_table=True)
    return doc


def parse(text: str, where: str) -> tomlkit.TOMLDocument:
    try:
        doc = tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise BadInput(f"{where}:{exc.line}:{exc.col}: malformed TOML: {exc}; restore the file from git") from None
    unknown = set(doc) - {"frontier", "lowered"}
    if unknown:
        raise BadInput(f"{where}: unknown top-level key(s) {sorted(unknown)}; the file holds [frontier.KEY] tables "
                       f"and [[lowered]] records only")
    for key, entry in (doc.get("frontier") or {}).items():
        if not isinstance(entry, dict) or not isinstance(entry.get("value"), (int, float)) or "row" not in entry:
            raise BadInput(f"{where}: [frontier.\"{key}\"] needs a numeric value and the ledger row that set it")
    return doc


def values_of(text: str | None) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """(key -> value, lowered records) of a frontier file's text (None or '' = empty)."""
    if not text:
        return {}, []
    doc = parse(text, "frontier.toml")
    return ({k: float(v["value"]) for k, v in (doc.get("frontier") or {}).items()},
            [dict(x) for x in doc.get("lowered", [])])


def lowering_problems(old_text: str | None, new_text: str | None) -> list[str]:
    """Every way `new` lowers `old` without the tooling's record: the raise-only rule as a check.

    A value that went down (or an entry that vanished) needs a new [[lowered]] record with that key,
    from = the old value and to = the new one (0 for a removed entry); the [[lowered]] list itself is
    append-only.
    """
    old, old_low = values_of(old_text)
    new, new_low = values_of(new_text)
    problems = []
    if new_low[:len(old_low)] != old_low:
        problems.append("the [[lowered]] records were edited or removed (they are append-only)")
    fresh = new_low[len(old_low):]
    for key, before in old.items():
        after = new.get(key, 0.0)
        if after >= before:
            continue
        ok = any(r.get("key") == key and abs(float(r.get("from", -1)) - before) <= 1e-9 * max(1.0, before)
                 and abs(float(r.get("to", -1)) - after) <= 1e-9 * max(1.0, after) for r in fresh)
        if not ok:
            shown = "removed" if key not in new else f"lowered to {after:g}"
            problems.append(f"{key}: {before:g} {shown} without a [[lowered]] record from the tooling "
                            f"(the frontier is raise-only; use `sparkops ledger retract ROW --why ...`)")
    return problems


def git_versions(root: Path, rel: str) -> list[tuple[str, str]] | None:
    """(commit, text) of every committed version of `rel`, oldest first; None without git or history."""
    import shutil
    import subprocess

    git = shutil.which("git")
    if not git or not (Path(root) / ".git").exists():
        return None

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([git, "-C", str(root), *args], capture_output=True, text=True, timeout=60)

    log = run("log", "--format=%H", "--", rel)
    if log.returncode != 0:
        return None
    versions = []
    for commit in reversed(log.stdout.split()):
        shown = run("show", f"{commit}:{rel}")
        versions.append((commit, shown.stdout if shown.returncode == 0 else ""))  # "" = deleted there
    return versions


def history_problems(root: Path, rel: str, working_text: str | None) -> list[str] | None:
    """The raise-only rule over the file's whole git history, then the working tree against HEAD's
    version; None when there is no history to check."""
    versions = git_versions(root, rel)
    if not versions:
        return None
    problems = []
    for (_, old), (commit, new) in zip(versions, versions[1:]):
        problems += [f"commit {commit[:10]}: {p}" for p in lowering_problems(old, new)]
    if working_text is not None:
        problems += [f"working tree: {p}" for p in lowering_problems(versions[-1][1], working_text)]
    return problems
