"""reference.lock: the pinned reference every implementation and every benchmark is judged against.

What it pins (each section says why in the file itself):
  [reference]   the reference implementation of every op and the sha256 of its source (and of the
                core files the references read: the GGUF dequantizer, the sampling RNG, QWeight),
                and the numpy version they ran with;
  [thresholds]  a copy of the tolerance table (ops and model rows): the never-loosen test and
                `reference update` compare the live table with it;
  [model]       the model preset and the digest of its weights, the seeded prompt token ids, the
                checked depths, and the golden logits of the reference registry (float64 NumPy) at
                every checked position: the top-k ids and values, and a sketch of the whole row
                (plus a sketch of all prefill rows per depth);
  [[history]]   every update: when, why (the --reason), and the resulting digest.

`reference_digest()` is the sha256 of the pinned content (everything but the history and the
comments); every check record stores it, so changing the reference invalidates the records.
`verify()` recomputes everything and compares; `update(reason)` is the only writer, refuses to
pin a looser threshold, and keeps the reason.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tomlkit
import tomlkit.exceptions

from ..atomic import write_atomic
from ..errors import BadInput, CheckFailed
from ..ops import OP_NAMES, get_contract
from ..paths import repo_root
from .digests import same_sketch, sketch
from .tolerances import loosenings, pinned_table

FORMAT = 1
TOPK = 8
#: golden values are compared within this fraction of the row's largest |logit|. The engine hands
#: logits back as float32 even from a float64 run, so values agree to float32 rounding (6e-8), not
#: to float64's; 1e-6 leaves room for a last-bit flip and still catches any real change.
VALUE_RTOL = 1e-6
#: the model the lock pins, and the core files (besides each op's own sources) the references read
PINNED_MODEL = "k3-nano"
SUPPORT_FILES = ("sparkops/gguf/quants.py", "sparkops/sampling_rng.py", "sparkops/qweight.py")


def lock_path() -> Path:
    """reference.lock at the checkout's root; SPARKOPS_REFERENCE_LOCK points elsewhere (tests, forks)."""
    env = os.environ.get("SPARKOPS_REFERENCE_LOCK")
    return Path(env) if env else repo_root() / "reference.lock"


def load(path: Path | None = None) -> dict[str, Any] | None:
    """The lock as plain data, None when there is none; a clear error when it is not TOML.

    Parsed once per version of the file (the plan asks for the digest once per selected op)."""
    path = Path(path or lock_path())
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return copy.deepcopy(_parsed(str(path.resolve()), st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=8)
def _parsed(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    try:
        return tomlkit.parse(Path(path).read_text()).unwrap()
    except tomlkit.exceptions.ParseError as exc:
        raise BadInput(f"{path}:{exc.line}:{exc.col}: reference.lock is not valid TOML ({exc}); restore it from "
                       f"git, or rewrite it with `sparkops reference update --reason \"...\"`") from None


def _canonical(pins: dict[str, Any]) -> str:
    body = {k: v for k, v in pins.items() if k != "history"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def digest_of(pins: dict[str, Any]) -> str:
    return hashlib.sha256(_canonical(pins).encode()).hexdigest()


def reference_digest(path: Path | None = None) -> str | None:
    """sha256 of the pinned content of reference.lock (not its comments or history); None without a lock."""
    try:
        pins = load(path)
    except BadInput:
        return "unreadable"  # a broken lock matches no record
    return None if pins is None else digest_of(pins)


#: what a lock change that leaves an op's check records standing may have changed: the tolerance table (each
#: record's own row is held to the table apart, records._rule_problem) and the model pins (no op record reads them)
_TABLE_CHANGE = "thresholds (tightened or extended)"


def holds_for(op: str, digest: str | None, path: Path | None = None) -> bool:
    """Whether a check record of `op` made against the lock version `digest` still stands on the lock now: every
    change the history lists after that version touched only the tolerance table, the model pins, or other ops'
    references. A version the history does not hold, a lock whose pins are not its last update's, or any change to
    this op's reference, numpy or the core files the references read, and it does not."""
    try:
        pins = load(path)
    except BadInput:
        return False
    history = (pins or {}).get("history") or []
    digests = [h.get("digest") for h in history]
    if not digest or digest not in digests or digests[-1] != digest_of(pins):
        return False  # a version the history does not hold, or a lock edited by hand since its last update
    later = history[len(digests) - digests[::-1].index(digest):]
    return all(c == _TABLE_CHANGE or c.startswith("model") or
               (c.startswith("reference of ") and c != f"reference of {op}")
               for h in later for c in h.get("changed") or ["unknown"])


def model_pins(path: Path | None = None) -> dict[str, Any] | None:
    try:
        pins = load(path)
    except BadInput:
        return None
    return (pins or {}).get("model")


# -- computing the pins -----------------------------------------------------------------------------
def reference_section(catalog: Any) -> dict[str, Any]:
    from .records import source_hash

    ops = {}
    for op in OP_NAMES:
        name = get_contract(op).reference
        impl = catalog.implementations(op).get(name)
        if impl is None:
            ops[op] = {"impl": name, "source_hash": "missing"}
            continue
        ops[op] = {"impl": name, "source_hash": source_hash(impl)}
    root = Path(__file__).resolve().parents[2]  # the directory that holds the sparkops package
    h = hashlib.sha256()
    for rel in SUPPORT_FILES:
        h.update(rel.encode() + b"\0")
        h.update((root / rel).read_bytes())
    return {"numpy": np.__version__, "support_files": list(SUPPORT_FILES), "support_hash": h.hexdigest(), "ops": ops}


def model_section(catalog: Any, preset: str = PINNED_MODEL) -> dict[str, Any]:
    """The golden run of the reference registry on the pinned model (needs the engine and the model)."""
    from ..engine import load_model
    from .digests import weights_digest
    from .model_gate import DECODE_STEPS, PROMPT_SEED, default_depths, golden_logits, prompt_tokens

    weights = load_model(preset)
    depths = default_depths(weights.config.name)
    tokens = prompt_tokens(weights.config.vocab_size, max(depths) + DECODE_STEPS, PROMPT_SEED)
    digest = weights_digest(weights)
    ref = golden_logits(weights, digest, tokens, depths, DECODE_STEPS, catalog)
    positions, prefill = [], []
    for d in depths:
        rows = ref[d]  # [d + steps, V]
        prefill.append({"depth": d, **sketch(rows[:d])})
        for p in range(d - 1, d + DECODE_STEPS):
            row = rows[p]
            order = np.argsort(-row.numpy(), kind="stable")[:TOPK]
            positions.append({"depth": d, "position": p, "phase": "prefill" if p < d else "decode",
                              "top_ids": [int(i) for i in order], "top_logits": [float(row[i]) for i in order],
                              **sketch(row)})
    return {"preset": preset, "weights_digest": digest, "prompt_seed": PROMPT_SEED, "prompt_tokens": tokens,
            "depths": list(depths), "decode_steps": DECODE_STEPS, "topk": TOPK, "positions": positions,
            "prefill": prefill}


def compute(catalog: Any, *, with_model: bool = True) -> tuple[dict[str, Any], list[str]]:
    """(the pins recomputed on this machine, notes). The model section is left out, with a note saying
    why, where the engine or the model cannot be loaded."""
    pins: dict[str, Any] = {"format": FORMAT, "reference": reference_section(catalog), "thresholds": pinned_table()}
    notes = []
    if with_model:
        try:
            pins["model"] = model_section(catalog)
        except (ImportError, BadInput, OSError) as exc:
            notes.append(f"no model pins: the engine cannot run {PINNED_MODEL} here ({type(exc).__name__}: {exc})")
    return pins, notes


def check_golden(pins: dict[str, Any], ref: dict[int, Any], tokens: list[int], decode_steps: int) -> list[str]:
    """Problems between a recomputed golden run and the model pins (for the depths both have)."""
    problems = []
    if list(pins.get("prompt_tokens", []))[:len(tokens)] != list(tokens)[:len(pins.get("prompt_tokens", []))]:
        problems.append("the prompt token ids differ from the pinned ones")
    for pos in pins.get("positions", []):
        d, p = int(pos["depth"]), int(pos["position"])
        if d not in ref or p >= ref[d].shape[0]:
            continue
        row = ref[d][p].double()
        scale = float(row.abs().max())
        ids = [int(i) for i in pos["top_ids"]]
        got = row[ids].numpy()
        worst = float(np.max(np.abs(got - np.asarray(pos["top_logits"], np.float64)))) / max(scale, 1e-300)
        where = f"depth {d} position {p} ({pos['phase']})"
        if worst > VALUE_RTOL:
            i = int(np.argmax(np.abs(got - np.asarray(pos["top_logits"]))))
            problems.append(f"{where}: logit of token {ids[i]} is {got[i]:.9g}, pinned {pos['top_logits'][i]:.9g}")
            continue
        others = np.delete(row.numpy(), ids)
        if others.size and others.max() > min(got) + VALUE_RTOL * scale:
            problems.append(f"{where}: the pinned top-{len(ids)} tokens are no longer the top {len(ids)}")
            continue
        ok, off = same_sketch(pos, sketch(row), VALUE_RTOL)
        if not ok:
            problems.append(f"{where}: the rest of the row changed (sketch off by {off:.3g} of its norm)")
    for pre in pins.get("prefill", []):
        d = int(pre["depth"])
        if d in ref:
            ok, off = same_sketch(pre, sketch(ref[d][:d]), VALUE_RTOL)
            if not ok:
                problems.append(f"depth {d}: the prefill logits changed (sketch off by {off:.3g} of their norm)")
    return problems


# -- verify ------------------------------------------------------------------------------------------
@dataclass
class VerifyReport:
    path: Path
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(path: Path | None = None, catalog: Any = None, *, with_model: bool = True) -> VerifyReport:
    """Recompute every pin of the lock on this machine and compare."""
    from ..plugins import load_catalog

    path = path or lock_path()
    rep = VerifyReport(path)
    pinned = load(path)
    if pinned is None:
        rep.problems.append(f"{path} does not exist; create it with `sparkops reference update --reason \"...\"`")
        return rep
    if pinned.get("format") != FORMAT:
        rep.problems.append(f"format {pinned.get('format')!r}, this sparkops reads format {FORMAT}")
        return rep
    catalog = catalog or load_catalog()
    _verify_reference(rep, pinned.get("reference") or {}, reference_section(catalog), catalog)
    _verify_thresholds(rep, pinned.get("thresholds") or {})
    if with_model:
        _verify_model(rep, pinned.get("model"), catalog)
    return rep


def _reference_files(catalog: Any, op: str) -> str:
    from .records import source_files

    impl = catalog.implementations(op).get(get_contract(op).reference)
    return ", ".join(n for n, _ in source_files(impl)) if impl is not None else "?"


def _verify_reference(rep: VerifyReport, old: dict[str, Any], new: dict[str, Any], catalog: Any) -> None:
    rep.checked.append("reference implementations and their source hashes")
    if old.get("numpy") != new["numpy"]:
        rep.notes.append(f"pinned with numpy {old.get('numpy')}, this is numpy {new['numpy']} (the recomputed "
                         f"values below decide whether the reference still holds)")
    if old.get("support_hash") != new["support_hash"]:
        rep.problems.append(f"the core files the references read changed ({', '.join(new['support_files'])})")
    for op in OP_NAMES:
        o, n = (old.get("ops") or {}).get(op), new["ops"][op]
        if o is None:
            rep.problems.append(f"{op}: the lock pins no reference for it")
        elif o.get("impl") != n["impl"]:
            rep.problems.append(f"{op}: the reference is now '{n['impl']}', the lock pins '{o.get('impl')}'")
        elif n["source_hash"] == "missing":
            rep.problems.append(f"{op}: its reference '{n['impl']}' is not registered (is the numpy plugin broken? "
                                f"see `sparkops plugins`)")
        elif o.get("source_hash") != n["source_hash"]:
            rep.problems.append(f"{op}: the source of its reference '{n['impl']}' changed "
                                f"(one of {_reference_files(catalog, op)})")


def _verify_thresholds(rep: VerifyReport, old: dict[str, Any]) -> None:
    rep.checked.append("the tolerance table against its pinned copy")
    loose = loosenings(old)
    rep.problems += [f"threshold loosened: {p}" for p in loose]
    if not loose and old != pinned_table():
        rep.problems.append("the tolerance table differs from its pinned copy (tightened or extended); pin it "
                            "with `sparkops reference update --reason \"...\"`")


def _verify_model(rep: VerifyReport, old: dict[str, Any] | None, catalog: Any) -> None:
    from ..engine import load_model
    from .digests import weights_digest
    from .model_gate import golden_logits

    if old is None:
        try:
            load_model(PINNED_MODEL)
        except (ImportError, BadInput, OSError) as exc:
            rep.notes.append(f"no model pins, and the engine cannot run {PINNED_MODEL} here "
                             f"({type(exc).__name__}: {exc})")
            return
        rep.problems.append(f"the lock has no model pins but {PINNED_MODEL} runs now; pin its golden logits "
                            f"with `sparkops reference update --reason \"...\"`")
        return
    rep.checked.append(f"model {old['preset']}: weights digest and golden logits at depths {old['depths']}")
    try:
        weights = load_model(old["preset"])
    except (ImportError, BadInput, OSError) as exc:
        rep.problems.append(f"the lock pins golden logits of {old['preset']}, but the engine cannot run it here "
                            f"({type(exc).__name__}: {exc})")
        return
    digest = weights_digest(weights)
    if digest != old.get("weights_digest"):
        rep.problems.append(f"the weights of {old['preset']} differ from the pinned digest (was the synthesizer "
                            f"or the GGUF reader changed?)")
        return
    tokens = [int(t) for t in old["prompt_tokens"]]
    depths = tuple(int(d) for d in old["depths"])
    ref = golden_logits(weights, digest, tokens, depths, int(old["decode_steps"]), catalog)
    rep.problems += check_golden(old, ref, tokens, int(old["decode_steps"]))


# -- update: the only writer -----------------------------------------------------------------------------
def update(reason: str, path: Path | None = None, catalog: Any = None, *,
           with_model: bool = True) -> tuple[bool, list[str], list[str]]:
    """Recompute and write the lock, keeping `reason`. Returns (written, what changed, notes).

    Refuses (CheckFailed) to pin a threshold looser than the one pinned: loosening is not an update.
    """
    from ..plugins import load_catalog

    reason = (reason or "").strip()
    if len(reason) < 8:
        raise BadInput("--reason must say why the reference changes (a sentence, at least 8 characters)")
    path = path or lock_path()
    old = load(path)
    if old is not None:
        loose = loosenings(old.get("thresholds") or {})
        if loose:
            raise CheckFailed("refusing to pin looser thresholds (they can only be tightened):\n  " +
                              "\n  ".join(loose) + "\nrestore sparkops/gate/tolerances.py")
    pins, notes = compute(catalog or load_catalog(), with_model=with_model)
    if old is not None and "model" in old and "model" not in pins:
        raise CheckFailed(f"the lock pins golden logits but they cannot be recomputed here ({'; '.join(notes)}); "
                          f"update the lock where the engine runs")
    changes = _changes(old, pins)
    if old is not None and not changes:
        return False, [], notes
    from .records import now

    history = list((old or {}).get("history", []))
    history.append({"date": now(), "reason": reason, "digest": digest_of(pins), "changed": changes})
    text = render(pins, history, notes)
    if digest_of(tomlkit.parse(text).unwrap()) != digest_of(pins):  # what is read back must be what was pinned
        raise AssertionError("reference.lock would not read back as the pins computed; this is a bug in "
                             "sparkops/gate/lockref.py (render)")
    write_atomic(path, text)
    return True, changes, notes


def _changes(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    if old is None:
        return ["created"]
    out = []
    o_ref, n_ref = old.get("reference") or {}, new["reference"]
    if o_ref.get("numpy") != n_ref["numpy"]:
        out.append(f"numpy {o_ref.get('numpy')} -> {n_ref['numpy']}")
    if o_ref.get("support_hash") != n_ref["support_hash"]:
        out.append("core files read by the references")
    for op in OP_NAMES:
        if (o_ref.get("ops") or {}).get(op) != n_ref["ops"][op]:
            out.append(f"reference of {op}")
    if old.get("thresholds") != new["thresholds"]:
        out.append(_TABLE_CHANGE)
    o_m, n_m = old.get("model"), new.get("model")
    if o_m != n_m:
        if o_m is None:
            out.append("model pins added")
        elif n_m is None:
            out.append("model pins removed")
        else:
            keys = sorted(k for k in set(o_m) | set(n_m) if o_m.get(k) != n_m.get(k))
            out.append("model: " + ", ".join(keys))
    return out


# -- the file -----------------------------------------------------------------------------------------
def render(pins: dict[str, Any], history: list[dict[str, Any]], notes: list[str] | None = None) -> str:
    """The lock as TOML, with comments saying why each pin exists."""
    doc = tomlkit.document()
    for line in (
        "reference.lock: the pinned reference every implementation and every benchmark is judged against.",
        "Written only by `sparkops reference update --reason \"...\"`; checked by `sparkops reference verify`.",
        "Every check record in registry.toml stores the digest of this file's pinned content (all but",
        "[[history]] and comments): any change here invalidates them until they are re-checked.",
    ):
        doc.add(tomlkit.comment(line))
    doc.add("format", pins["format"])

    ref = tomlkit.table()
    ref.add(tomlkit.comment("Why: the NumPy references ARE the definition of every op. If one of them changes,"))
    ref.add(tomlkit.comment("the truth changed, and every implementation must be judged again."))
    ref.add("numpy", pins["reference"]["numpy"])
    ref["numpy"].comment("the references compute in float64 NumPy; a new version may move last bits")
    ref.add("support_files", pins["reference"]["support_files"])
    ref.add("support_hash", pins["reference"]["support_hash"])
    ref["support_hash"].comment("sha256 of the core files above: the dequantizer, the sampling RNG, QWeight")
    ops = tomlkit.table()
    ops.add(tomlkit.comment("per op: the reference implementation and the sha256 of its sources (its module and"))
    ops.add(tomlkit.comment("the modules of its package it imports)"))
    for op, entry in pins["reference"]["ops"].items():
        it = tomlkit.inline_table()
        it.update({"impl": entry["impl"], "source_hash": entry["source_hash"]})
        ops.add(op, it)
    ref.add("ops", ops)
    doc.add("reference", ref)

    from .tolerances import MODEL_RULES, OP_RULES

    th = tomlkit.table()
    th.add(tomlkit.comment("Why: thresholds may be tightened, never loosened. tests/gate compares the live table"))
    th.add(tomlkit.comment("(sparkops/gate/tolerances.py) with this copy, and `reference update` refuses a looser one."))
    th_ops = tomlkit.table()
    for op, rows in pins["thresholds"]["ops"].items():
        t = tomlkit.table()
        for variant, rule in rows.items():
            it = tomlkit.inline_table()
            it.update(rule)
            t.add(variant, it)
            why = getattr(OP_RULES.get(op, {}).get(variant), "why", "")
            if why:
                t[variant].comment(why)
        th_ops.add(op, t)
    th.add("ops", th_ops)
    th_model = tomlkit.table()
    for variant, rule in pins["thresholds"]["model"].items():
        it = tomlkit.inline_table()
        it.update(rule)
        th_model.add(variant, it)
        why = getattr(MODEL_RULES.get(variant), "why", "")
        if why:
            th_model[variant].comment(why)
    th.add("model", th_model)
    doc.add("thresholds", th)

    if "model" in pins:
        doc.add("model", _render_model(pins["model"]))
    else:
        doc.add(tomlkit.nl())
        for n in notes or ["no model pins"]:
            doc.add(tomlkit.comment(n))

    hist = tomlkit.aot()
    for h in history:
        t = tomlkit.table()
        t.update({"date": h["date"], "reason": h["reason"], "digest": h["digest"], "changed": list(h.get("changed", []))})
        hist.append(t)
    doc.add(tomlkit.nl())
    doc.add(tomlkit.comment("Why: every change of the reference says when and why (`reference update --reason`)."))
    doc.add("history", hist)
    text = tomlkit.dumps(doc)
    tomlkit.parse(text)  # never write what cannot be read back
    return text


def _render_model(m: dict[str, Any]) -> Any:
    t = tomlkit.table()
    t.add(tomlkit.comment("Why: the model-level gate compares a candidate registry's logits with these golden"))
    t.add(tomlkit.comment("logits (the reference registry run in float64). A bug that only shows when ops"))
    t.add(tomlkit.comment("compose - a cache row off by one, a state carried wrongly across chunks - shows here."))
    t.add("preset", m["preset"])
    t.add("weights_digest", m["weights_digest"])
    t["weights_digest"].comment("sha256 of every weight tensor (types, shapes, bytes) as the engine loads it")
    t.add("prompt_seed", m["prompt_seed"])
    t.add("prompt_tokens", _int_array(m["prompt_tokens"]))
    t["prompt_tokens"].comment("the seeded prompt: uniform token ids (never a constant, never zeros)")
    t.add("depths", m["depths"])
    t["depths"].comment("KDA chunks are 64 tokens: 1, one short of a chunk, one chunk, one past, two + 1")
    t.add("decode_steps", m["decode_steps"])
    t["decode_steps"].comment("after prefilling d tokens, this many are decoded one by one")
    t.add("topk", m["topk"])
    t.add(tomlkit.comment("Golden rows: the reference's top-k ids and logits at the last prefill position and"))
    t.add(tomlkit.comment("every decoded one; norm/proj sketch the whole row (see sparkops/gate/digests.py):"))
    t.add(tomlkit.comment(f"float64 BLAS may differ in last bits across machines, so values are compared within "
                          f"{VALUE_RTOL:g} of the row's largest |logit| rather than hashed."))
    pos = tomlkit.aot()
    for p in m["positions"]:
        e = tomlkit.table()
        e.update({"depth": p["depth"], "position": p["position"], "phase": p["phase"], "top_ids": p["top_ids"],
                  "top_logits": p["top_logits"], "norm": p["norm"], "proj": p["proj"]})
        pos.append(e)
    t.add("positions", pos)
    pre = tomlkit.aot()
    for p in m["prefill"]:
        e = tomlkit.table()
        e.update({"depth": p["depth"], "norm": p["norm"], "proj": p["proj"]})
        pre.append(e)
    t.add("prefill", pre)
    return t


def _int_array(values: list[int], per_line: int = 20) -> Any:
    lines = [", ".join(str(int(v)) for v in values[i:i + per_line]) for i in range(0, len(values), per_line)]
    return tomlkit.parse("x = [\n" + "".join(f"  {ln},\n" for ln in lines) + "]\n")["x"]
