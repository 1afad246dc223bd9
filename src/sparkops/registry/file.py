"""registry.toml: which implementation each op runs, per device class, and the check record that let it in.

    [ops.attention.cuda]
    impl = "triton_splitk"        # an implementation name of this op (`sparkops ops attention`)
    fallback = "error"            # what to do if it cannot run: "error" or "reference"
    [ops.attention.cuda.check]    # written by `sparkops swap` / `sparkops check` (the gate)
    ...
    [engine]                      # how the engine composes the ops (`sparkops engine`)
    fuse_projections = true       # linears that read one input run as one (engine/fusion.py)

Rewritten by the tools through tomlkit, so people's comments survive, and atomically.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions

from ..atomic import write_atomic
from ..errors import RegistryError
from ..ops import OP_NAMES
from ..plugins.implementation import DEVICES
from ..qweight import SUPPORTED

FALLBACKS = ("error", "reference")
_KEYS = {"impl", "fallback", "check", "by_type"}
#: ops whose implementation can be chosen per GGUF type of one weight argument ([ops.OP.DEVICE.by_type.TYPE]):
#: op -> the parameter whose type picks. A linear's speed depends on its weight's block format more than on
#: anything else (session 8: the Q6_K lm_head at 22% of the read ceiling in Triton, Q4_K at 44%), so a registry
#: may send one type to another implementation. moe_experts by its gate weight's type: the fastest one-token Q4_K
#: expert kernels take no other type, and a model of another mix (IQ1_S) must keep a kernel that reads its blocks
#: (GPU session 25: the step's Q4_K experts passed every IQ1_S layer to the float32 path, 6.5 tok/s);
#: moe_experts_add_rmsnorm (the experts with the next norm) by the same weight, and linear_add_rmsnorm (a projection
#: with the next norm) by its weight, for the same reasons
TYPED_OPS = {"linear": "weight", "moe_experts": "w_gate", "moe_experts_add_rmsnorm": "w_gate",
             "linear_add_rmsnorm": "weight"}
#: the GGUF type names a by_type table may name: the types sparkops reads
TYPE_NAMES = tuple(t.name for t in SUPPORTED)
_TYPE_KEYS = {"impl", "check"}


def typed_weight_type(op: str) -> Any:
    """For a TYPED_OPS op, a function of a call's (args, kwargs) giving the GGUF type name of its typed weight (None
    where that argument is not a quantized weight); None for any other op. Used where calls are sent or counted per
    type: the dispatch of per-type selections, and diagnose's per-type times."""
    param = TYPED_OPS.get(op)
    if param is None:
        return None
    from ..ops import get_contract
    from ..qweight import QWeight

    at = get_contract(op).param_names.index(param)

    def type_of(args: tuple, kwargs: dict) -> str | None:
        w = kwargs[param] if param in kwargs else (args[at] if at < len(args) else None)
        return w.qtype.name if isinstance(w, QWeight) else None

    return type_of


#: the [engine] table's options: name -> (type, default, what it does)
ENGINE_KEYS: dict[str, tuple[type, object, str]] = {
    "fuse_projections": (bool, False, "linears that read the same input (KDA q/k/v/f_a/beta/g_a, MLA q/kv_a, "
                                      "dense gate/up) run as one over their stacked rows, per GGUF type"),
    "fuse_short_conv": (bool, False, "with fuse_projections: a KDA layer's q/k/v short convs run as one over "
                                     "their stacked channels (bit-identical to three; one launch, not three)"),
    "fuse_low_rank": (bool, False, "with fuse_projections: a KDA layer's two low-rank up-projections (f_b on f_a's "
                                   "output, g_b on g_a's) run as one linear over a block-diagonal weight (float "
                                   "types; zeros read, one launch saved)"),
    "side_stream": (bool, False, "a KDA layer's gate projections (f_a/g_a/beta, then f_b and g_b) run on a second "
                                 "CUDA stream, concurrent with q/k/v and their short conv: the same kernels and "
                                 "bits, two branches of the captured graph; not in a layer whose fused group "
                                 "mixes a gate input with q/k/v (one linear); CPU: inline, one stream"),
    "side_priority": (bool, False, "with side_stream: the side stream at the device's highest priority, so that its "
                                   "kernels' blocks start before the main line's waiting ones (captured graphs keep "
                                   "node priorities; the same kernels and bits)"),
    "fuse_kda_norm": (bool, False, "a decode step's KDA layers run their recurrence and output norm as one op "
                                   "(kda_norm: one launch, not two; needs a proven kda_norm selection, else the "
                                   "reference runs it, counted); a prefill chunk keeps kda and gated_rmsnorm apart"),
    "fuse_kda_gates": (bool, False, "a decode step's KDA layers run their two low-rank gate up-projections (f_b, "
                                    "g_b), recurrence and output norm as one op (kda_lowrank_norm: one launch, not "
                                    "three; implies fuse_kda_norm's fusion there; needs a proven kda_lowrank_norm "
                                    "selection, else the reference runs it, counted); a prefill chunk keeps the "
                                    "linears, kda and gated_rmsnorm apart"),
    "fuse_router_norm": (bool, False, "a decode step's MoE layers run their residual add, FFN norm and router as one "
                                      "op (add_rmsnorm_router: one launch, not two; needs a proven add_rmsnorm_router "
                                      "selection, else the reference runs it, counted); a call of more than 8 tokens "
                                      "(a prefill chunk) and a dense-FFN layer keep add_rmsnorm and moe_router apart"),
    "fuse_conv_kda": (bool, False, "with fuse_short_conv: a decode step's KDA layers run their merged q|k|v short "
                                   "conv, recurrence and output norm as one op (short_conv_kda_norm: one launch "
                                   "where short_conv and kda_norm are two; implies fuse_kda_norm's fusion there; "
                                   "needs a proven short_conv_kda_norm selection, else the reference runs it, "
                                   "counted); a prefill chunk keeps short_conv, kda and gated_rmsnorm apart; not "
                                   "with fuse_kda_gates (both fuse the recurrence and the norm)"),
    "fuse_moe_norm": (bool, False, "a decode step's MoE layers run their experts and the next block's residual add "
                                   "and norm as one op (moe_experts_add_rmsnorm: one launch fewer a layer; needs a "
                                   "proven moe_experts_add_rmsnorm selection, else the reference runs it, counted); a "
                                   "prefill chunk, a dense-FFN layer and a layer whose shared expert runs apart "
                                   "(shared_expert_side) keep moe_experts and add_rmsnorm apart"),
    "fuse_oproj_norm": (bool, False, "a decode step's attention blocks end with their output projection and the "
                                     "FFN's residual add and norm as one op (linear_add_rmsnorm: one launch fewer a "
                                     "layer; needs a proven linear_add_rmsnorm selection, else the reference runs it, "
                                     "counted); a prefill chunk keeps the o_proj linear and add_rmsnorm apart; not "
                                     "with fuse_router_norm (both take the FFN norm into their op)"),
    "gates_first": (bool, False, "with side_stream: a KDA layer's gate-input projection (f_a/g_a/beta) runs on the "
                                 "main line before q/k/v, and only the up-projections (f_b, g_b) fork onto the side "
                                 "stream (with fuse_kda_gates nothing forks): their bytes are read before the q|k|v "
                                 "GEMV's. The same kernels and bits; CPU: inline, one stream"),
    "shared_expert_side": (bool, False, "with side_stream: a decode step's MoE layers run their shared expert as a "
                                        "dense SwiGLU FFN (its gate and up one linear with fuse_projections) on the "
                                        "side stream, beside the router and the routed experts, and add its output "
                                        "into the residual there (add_rmsnorm, its normed half unused); moe_experts "
                                        "runs the routed experts alone. Other sums' order: not the one-stream bits. "
                                        "A call of more than 8 tokens (a prefill chunk) keeps the shared expert in "
                                        "moe_experts; CPU: inline, one stream"),
}
#: options that only mean something with another one on: option -> (the one it needs, why)
ENGINE_NEEDS: dict[str, tuple[str, str]] = {
    "fuse_short_conv": ("fuse_projections", "the merged conv reads q, k and v as adjacent columns of one fused "
                                            "linear"),
    "fuse_low_rank": ("fuse_projections", "the block-diagonal linear reads f_a's and g_a's outputs as adjacent "
                                          "columns of one fused linear"),
    "side_priority": ("side_stream", "it sets the priority of the side stream, which only side_stream makes"),
    "fuse_conv_kda": ("fuse_short_conv", "the fused op runs the merged q|k|v conv, whose taps and window only "
                                         "fuse_short_conv makes"),
    "shared_expert_side": ("side_stream", "the shared expert runs on the side stream, which only side_stream makes"),
    "gates_first": ("side_stream", "it orders what forks onto the side stream, which only side_stream makes"),
}
#: options that cannot be on together: option -> (the one it excludes, why)
ENGINE_EXCLUDES: dict[str, tuple[str, str]] = {
    "fuse_oproj_norm": ("fuse_router_norm", "each takes a decode step's FFN residual add and norm into its own fused "
                                            "op - linear_add_rmsnorm with the o_proj, add_rmsnorm_router with the "
                                            "router - and no op does both"),
    "fuse_conv_kda": ("fuse_kda_gates", "each runs a decode step's KDA recurrence and output norm in its own fused "
                                        "op - short_conv_kda_norm with the short conv, kda_lowrank_norm with the "
                                        "low-rank gate up-projections - and no op does both"),
}


def needs_problem(options: dict[str, object]) -> str | None:
    """Why the [engine] `options` cannot run, or None: an option on without one it needs (ENGINE_NEEDS), naming every
    option still off along its chain of needs in the command that sets them."""
    for key, (needed, why) in ENGINE_NEEDS.items():
        if options.get(key) and not options.get(needed):
            chain = [needed]
            while chain[0] in ENGINE_NEEDS and not options.get(ENGINE_NEEDS[chain[0]][0]):
                chain.insert(0, ENGINE_NEEDS[chain[0]][0])
            both = "both" if len(chain) == 1 else "them all"
            turn_on = " ".join(f"{k}=on" for k in (*chain, key))
            return (f"[engine] {key} = true needs {needed} = true ({why}); set {both} (sparkops engine {turn_on}) "
                    f"or turn {key} off")
    return None


def excludes_problem(options: dict[str, object]) -> str | None:
    """Why the [engine] `options` cannot run, or None: two options on that exclude each other (ENGINE_EXCLUDES),
    naming the two ways out. The engine asks too: neither option silently wins over the other."""
    for key, (other, why) in ENGINE_EXCLUDES.items():
        if options.get(key) and options.get(other):
            return (f"[engine] {key} = true and {other} = true cannot both be on ({why}); turn one off "
                    f"(sparkops engine {other}=off, or {key}=off)")
    return None


@dataclass(frozen=True)
class Selection:
    op: str
    device: str
    impl: str
    fallback: str
    check: dict[str, Any] | None
    line: int | None  # where the selection is written, for messages


class Registry:
    def __init__(self, path: Path, doc: tomlkit.TOMLDocument, text: str):
        self.path = path
        self.doc = doc
        self._text = text

    # -- reading -------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> "Registry":
        path = Path(path)
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise RegistryError(f"{path}: no such registry file; pass --registry FILE or create one "
                                f"with `sparkops swap OP=IMPL --registry {path}`") from None
        try:
            doc = tomlkit.parse(text)
        except tomlkit.exceptions.ParseError as exc:
            raise RegistryError(f"{path}:{exc.line}:{exc.col}: malformed TOML: {exc}. Fix that line "
                                f"(or restore the file from git) and run again") from None
        reg = cls(path, doc, text)
        reg.validate()
        return reg

    @classmethod
    def empty(cls, path: str | Path) -> "Registry":
        doc = tomlkit.document()
        doc.add(tomlkit.comment("sparkops registry: the implementation each op runs, per device class."))
        doc.add(tomlkit.comment("Change it with `sparkops swap OP=IMPL`; see `sparkops plan` for what will run."))
        return cls(Path(path), doc, "")

    def validate(self) -> None:
        top = set(self.doc.keys()) - {"ops", "engine"}
        if top:
            self._fail(f"unknown top-level key(s) {sorted(top)}; the registry holds [ops.OP.DEVICE] tables and an "
                       f"[engine] table", sorted(top)[0])
        engine = self.doc.get("engine", {})
        if not isinstance(engine, dict):
            self._fail("'engine' must be a table: [engine] with options such as fuse_projections = true", "engine")
        for key, value in engine.items():
            if key not in ENGINE_KEYS:
                self._fail(f"[engine]: unknown option '{key}'; the options are: {', '.join(ENGINE_KEYS)}", "engine")
            kind = ENGINE_KEYS[key][0]
            if type(value.unwrap() if hasattr(value, "unwrap") else value) is not kind:
                self._fail(f"[engine]: {key} must be a {kind.__name__} (e.g. {key} = true), got {value!r}", "engine")
        self._check_needs({k: (v.unwrap() if hasattr(v, "unwrap") else v) for k, v in engine.items()})
        ops = self.doc.get("ops", {})
        if not isinstance(ops, dict):
            self._fail("'ops' must be a table of [ops.OP.DEVICE] tables", "ops")
        for op, devices in ops.items():
            if op not in OP_NAMES:
                self._fail(f"unknown op '{op}'; the ops are: {', '.join(OP_NAMES)}", f"ops.{op}")
            if not isinstance(devices, dict):
                self._fail(f"[ops.{op}] must hold device tables [ops.{op}.cpu] / [ops.{op}.cuda]", f"ops.{op}")
            for dev, entry in devices.items():
                where = f"ops.{op}.{dev}"
                if dev not in DEVICES:
                    self._fail(f"[{where}]: unknown device class '{dev}'; use one of {list(DEVICES)}", where)
                if not isinstance(entry, dict):
                    self._fail(f"[{where}] must be a table with impl = \"NAME\"", where)
                extra = set(entry) - _KEYS
                if extra:
                    self._fail(f"[{where}]: unknown key(s) {sorted(extra)}; allowed: {sorted(_KEYS)}", where)
                if not isinstance(entry.get("impl"), str):
                    self._fail(f"[{where}]: impl = \"NAME\" is required (a string)", where)
                if "by_type" in entry:
                    self._validate_by_type(op, where, entry["by_type"])
                fb = entry.get("fallback", "error")
                if fb not in FALLBACKS:
                    self._fail(f"[{where}]: fallback = {fb!r}; use one of {list(FALLBACKS)}", where)
                if "check" in entry and not isinstance(entry["check"], dict):
                    self._fail(f"[{where}]: check must be a table (written by the gate)", where)

    def _validate_by_type(self, op: str, where: str, table: Any) -> None:
        if op not in TYPED_OPS:
            self._fail(f"[{where}.by_type]: '{op}' cannot be chosen per weight type; the ops that can: "
                       f"{', '.join(TYPED_OPS)}", where)
        if not isinstance(table, dict):
            self._fail(f"[{where}.by_type] must hold tables [{where}.by_type.TYPE] with impl = \"NAME\"", where)
        for qtype, sub in table.items():
            w = f"{where}.by_type.{qtype}"
            if qtype not in TYPE_NAMES:
                self._fail(f"[{w}]: unknown GGUF type '{qtype}'; use one of {', '.join(TYPE_NAMES)}", w)
            if not isinstance(sub, dict) or not isinstance(sub.get("impl"), str):
                self._fail(f"[{w}]: impl = \"NAME\" is required (a string)", w)
            if "check" in sub and not isinstance(sub["check"], dict):
                self._fail(f"[{w}]: check must be a table (written by the gate)", w)
            extra = set(sub) - _TYPE_KEYS
            if extra:
                self._fail(f"[{w}]: unknown key(s) {sorted(extra)}; allowed: {sorted(_TYPE_KEYS)} (a type's "
                           f"implementation has no fallback of its own: it must run, or the plan refuses)", w)

    def selection(self, op: str, device: str) -> Selection | None:
        entry = self.doc.get("ops", {}).get(op, {}).get(device)
        if entry is None:
            return None
        check = entry.get("check")
        return Selection(op, device, str(entry["impl"]), str(entry.get("fallback", "error")),
                         check.unwrap() if check is not None else None, self._line_of(f"ops.{op}.{device}"))

    def type_selections(self, op: str, device: str) -> dict[str, Selection]:
        """{GGUF type name: its selection} from [ops.OP.DEVICE.by_type.TYPE] (empty where there is none)."""
        entry = self.doc.get("ops", {}).get(op, {}).get(device)
        out = {}
        for qtype, sub in ((entry or {}).get("by_type") or {}).items():
            check = sub.get("check")
            out[qtype] = Selection(op, device, str(sub["impl"]), "error", check.unwrap() if check is not None else None,
                                   self._line_of(f"ops.{op}.{device}.by_type.{qtype}"))
        return out

    def _check_needs(self, options: dict[str, object]) -> None:
        """An option that needs another (ENGINE_NEEDS) is refused on its own, naming the one to turn on; two that
        exclude each other (ENGINE_EXCLUDES) are refused together."""
        problem = needs_problem(options) or excludes_problem(options)
        if problem is not None:
            raise RegistryError(f"{self.path}: {problem}")

    def engine_options(self) -> dict[str, object]:
        """Every [engine] option, the file's value or the default."""
        engine = self.doc.get("engine", {})
        return {k: (engine[k].unwrap() if hasattr(engine[k], "unwrap") else engine[k]) if k in engine else default
                for k, (_, default, _) in ENGINE_KEYS.items()}

    # -- writing -------------------------------------------------------------------------------
    def set_engine(self, key: str, value: object) -> None:
        """Set one [engine] option (validated like a loaded file)."""
        self.set_engines({key: value})

    def set_engines(self, changes: dict[str, object]) -> None:
        """Set several [engine] options at once: each validated, then the needs (ENGINE_NEEDS) and exclusions
        (ENGINE_EXCLUDES) of the result, so an option and the one it needs can be turned on together in either order,
        and one option turned off as another that excludes it is turned on."""
        for key, value in changes.items():
            if key not in ENGINE_KEYS:
                raise RegistryError(f"unknown engine option '{key}'; the options are: {', '.join(ENGINE_KEYS)}")
            kind = ENGINE_KEYS[key][0]
            if type(value) is not kind:
                raise RegistryError(f"engine option {key} takes a {kind.__name__}, got {value!r}")
        self._check_needs({**self.engine_options(), **changes})
        if changes and "engine" not in self.doc:
            self.doc["engine"] = tomlkit.table()
        for key, value in changes.items():
            self.doc["engine"][key] = value

    def set(self, op: str, device: str, impl: str, *, fallback: str | None = None,
            check: dict[str, Any] | None = None) -> None:
        """Select `impl` for `op` on `device`; a new selection replaces any old check record."""
        if fallback is not None and fallback not in FALLBACKS:
            raise RegistryError(f"fallback must be one of {list(FALLBACKS)}, got {fallback!r}")
        ops = self.doc.get("ops")
        if ops is None:
            ops = tomlkit.table(is_super_table=True)
            self.doc["ops"] = ops
        if op not in ops:
            ops[op] = tomlkit.table(is_super_table=True)
        if device not in ops[op]:
            ops[op][device] = tomlkit.table()
        entry = ops[op][device]
        entry["impl"] = impl
        entry["fallback"] = fallback or entry.get("fallback", "error")
        if "check" in entry:
            del entry["check"]
        if check is not None:
            entry["check"] = _to_table(check)

    def set_type(self, op: str, device: str, qtype: str, impl: str | None,
                 check: dict[str, Any] | None = None) -> None:
        """Send `op`'s calls whose typed weight (TYPED_OPS) is `qtype` to `impl` on `device`, with its check
        record; impl None removes that type's selection."""
        if op not in TYPED_OPS:
            raise RegistryError(f"'{op}' cannot be chosen per weight type; the ops that can: {', '.join(TYPED_OPS)}")
        if qtype not in TYPE_NAMES:
            raise RegistryError(f"unknown GGUF type '{qtype}'; use one of {', '.join(TYPE_NAMES)}")
        entry = self.doc.get("ops", {}).get(op, {}).get(device)
        if entry is None:
            raise RegistryError(f"{self.path}: [ops.{op}.{device}] has no implementation yet; select one for every "
                                f"type first (sparkops swap {op}=IMPL --device {device}), then {op}@{qtype}=IMPL")
        if impl is None:
            table = entry.get("by_type")
            if table is None or qtype not in table:
                raise RegistryError(f"{self.path}: [ops.{op}.{device}] has no per-type selection for {qtype} to "
                                    f"remove (its types: {', '.join(table or {}) or 'none'})")
            del table[qtype]
            if not table:
                del entry["by_type"]
            return
        if "by_type" not in entry:
            entry["by_type"] = tomlkit.table(is_super_table=True)
        sub = tomlkit.table()
        sub["impl"] = impl
        if check is not None:
            sub["check"] = _to_table(check)
        entry["by_type"][qtype] = sub

    def text(self) -> str:
        return tomlkit.dumps(self.doc)

    def save(self, path: str | Path | None = None) -> None:
        target = Path(path or self.path)
        text = self.text()
        tomlkit.parse(text)  # never write what we could not read back
        write_atomic(target, text)

    # -- helpers -------------------------------------------------------------------------------
    def _line_of(self, dotted: str) -> int | None:
        pattern = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(map(re.escape, dotted.split("."))) + r"\s*\]")
        for i, line in enumerate(self._text.splitlines(), 1):
            if pattern.match(line):
                return i
        first = dotted.split(".")[-1]
        for i, line in enumerate(self._text.splitlines(), 1):
            if re.search(r"\b" + re.escape(first) + r"\b", line):
                return i
        return None

    def _fail(self, message: str, dotted: str) -> None:
        line = self._line_of(dotted)
        loc = f"{self.path}:{line}" if line else str(self.path)
        raise RegistryError(f"{loc}: {message}")


def _to_table(d: dict[str, Any]) -> Any:
    t = tomlkit.table()
    for k, v in d.items():
        t[k] = _to_table(v) if isinstance(v, dict) else v
    return t
