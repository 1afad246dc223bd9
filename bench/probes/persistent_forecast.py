"""Forecast a persistent decode step (one launch a token, the weight stream never stopping) from two numbers a probe
measures: the stream's bandwidth and the latency of one dependent stage. No device needed.

Why. Session 44 replayed the s55 step's timeline with every lead the sessions had named and found that 60% of the
roofline needs a step whose weight stream never stops: each SM requesting the next ops' weights, which depend on
nothing, while the current op waits for its inputs (bench/gpu-runs/2026-12-06-session44/README.md). Session 45 built
the probe that sizes such a stream (bench/probes/persistent_chain.py: warp rings on a chain of dependent GEMVs, at
2304 rows where the bytes bind and at 1152 where the dependency does). This turns that probe's two numbers into what
they mean for the model's step, before anyone builds it: tok/s, share of the roofline, and where the stream stands
idle.

The step, from the model's tensors (sparkops.gguf.mix.plan: the bytes the roofline counts, every one placed):
a chain of stages, each waiting for the one before (its inputs), each reading its tensors' bytes:
  KDA layer   in (norm, q/k/v, the gates' first low-rank halves, beta) -> gates (second halves, the short conv and its
              state) -> recurrence (its state, read and written) -> out (the norm's gain, o_proj)
  MLA layer   in (norm, q, kv_a) -> absorb (kv_a's norm, k_b) -> attention (the latent cache at the depth) ->
              values (v_b) -> out (o_proj)
  FFN         dense: gateup -> down; MoE: router (norm, router, bias, the shared expert's gate/up) -> experts (the
              routed gate/up, top-k of E) -> down (the routed down, the shared down)
  the token   embed (one row) first, head (the final norm, lm_head) last
A segment of bytes is *gated* when it may be requested only once a stage has ended: the routed experts' gate/up and
down, which the router picks. Everything else may be requested at any time.

The stream. One server of B bytes/us serves the segments in chunks, the earliest stage's first. A chunk of a stage
whose inputs are ready is dotted as it lands; a chunk of a stage that is not ready waits on chip, and on-chip waiting
bytes may not exceed the window W (the shared memory the step can spare: 227 KB x 132 SMs is ~30 MB on an H200).
A gated chunk is requested only after its gate's stage has ended; meanwhile the stream goes on with later stages'
chunks, as far as the window lets it less the room the skipped gated chunks will need if they too must wait on chip
(the routed down, requested while the routed gate/up still runs): without that room the next layer's weights fill
the window and the routed down streams only once its stage is ready, on the critical path (--in-order: the stream
waits at a gated chunk instead). A stage ends lambda us after both its inputs
are ready and its last chunk has landed: lambda is what a dependent stage costs beyond its bytes (the last rows'
dots, the reduction, publishing the output, the next stage's SMs seeing it). Three tokens run back to back; the
time a token is the last two's mean, so the stream's run into the next token counts.

What the model leaves out: compute that is not a read (the recurrence's and attention's arithmetic, bound by bytes
at batch 1 for the 48B); writes are counted as stream bytes like reads; a stage's work spread unevenly over the SMs.
It bounds what the probe's numbers allow, it does not measure a step.

    python3 bench/probes/persistent_forecast.py [--model kimi-linear-48b-a3b] [--mix q4_k_m] [--depth 0]
        [--latency-us 1.0,1.5,2,3] [--bandwidth-tbs 3.2,3.6,4.04] [--window-mb 24] [--in-order]
        [--probe-latency PROBE_1152.json | --q4k-latency PROBE_Q4K.json]
        [--merge kda:gates+recurrence | --merge local]
        [--extra-us gates+recurrence=0.5] [--json OUT.json] [--plot OUT.png]

--merge runs neighbouring stages of a layer as one (session 47: `local`, the parts each head can do with its own slice
of the stage before); --extra-us adds a stage's own work to its latency (what a merged stage computes before its
output exists, which a probe's chain of GEMVs does not hold).

The probe gives the latency, not the bandwidth: its chain at full rows is latency-bound too (GPU session 46, H100:
7.0 us a 10.6 MB GEMV, and half the rows take only 1.4 us off), so its bytes over its time are no stream's rate. The
bandwidths stay a list (a read ceiling and below it).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

READ_CEILING_TBS = 4.04  # the H200's measured read ceiling (METHOD.md), the roofline's bandwidth
CHUNK = 1 << 20  # bytes the stream serves at a time (the 48B's forecast moves by under 0.1% from 1 MiB to 64 KiB)
TOKENS = 3  # tokens simulated back to back; the forecast is the mean of the last two


class ForecastError(ValueError):
    """A bad argument or probe file, said with what to do."""


@dataclass
class Segment:
    """Bytes a stage reads; `gate` the index of the stage that must end before they may be requested (or None)."""
    nbytes: float
    gate: int | None = None


@dataclass
class Stage:
    """One dependent stage of the step: it waits for the stage before it."""
    name: str  # "blk.3.attention", "head", ...
    segments: list[Segment] = field(default_factory=list)

    @property
    def nbytes(self) -> float:
        return sum(s.nbytes for s in self.segments)


#: each tensor's stage within its layer, by its name after "blk.N." (gated: the router picks which rows are read)
STAGE_OF = {
    "attn_norm.weight": "in", "attn_q.weight": "in", "attn_k.weight": "in", "attn_v.weight": "in",
    "ssm_f_a.weight": "in", "ssm_g_a.weight": "in", "ssm_beta.weight": "in", "attn_kv_a_mqa.weight": "in",
    "ssm_f_b.weight": "gates", "ssm_g_b.weight": "gates", "ssm_conv1d_q.weight": "gates",
    "ssm_conv1d_k.weight": "gates", "ssm_conv1d_v.weight": "gates", "ssm_a": "gates", "ssm_dt.bias": "gates",
    "ssm_norm.weight": "out", "attn_output.weight": "out",
    "attn_kv_a_norm.weight": "absorb", "attn_k_b.weight": "absorb", "attn_v_b.weight": "values",
    "ffn_norm.weight": "ffn_in", "ffn_gate.weight": "ffn_in", "ffn_up.weight": "ffn_in",
    "ffn_gate_inp.weight": "ffn_in", "exp_probs_b.bias": "ffn_in", "ffn_gate_shexp.weight": "ffn_in",
    "ffn_up_shexp.weight": "ffn_in",
    "ffn_gate_exps.weight": "experts", "ffn_up_exps.weight": "experts",
    "ffn_down_exps.weight": "down", "ffn_down_shexp.weight": "down", "ffn_down.weight": "down",
}
GATED = ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight")
ORDER = {"kda": ("in", "gates", "recurrence", "out"), "mla": ("in", "absorb", "attention", "values", "out")}
FFN_ORDER = {False: ("ffn_in", "down"), True: ("ffn_in", "experts", "down")}  # by is_moe
FFN_NAME = {False: {"ffn_in": "gateup"}, True: {"ffn_in": "router"}}


#: the merges that keep every stage's work local to what one block can own (the what-if of session 47): KDA's gate
#: up-projections (f_b, g_b from the whole low-rank vector "in" made), the short conv (per channel) and the recurrence
#: (per head) in one stage; MLA's absorption (k_b on one head's q), the attention and the values (v_b on one head's
#: output) in one stage. Each merged part needs only its own head's slice of what the stage before it made.
LOCAL_MERGES = ("kda:gates+recurrence", "mla:absorb+attention+values")


def parse_merges(specs: list[str]) -> dict[str, list[tuple[str, ...]]]:
    """["kda:gates+recurrence", ...] -> {"kda": [("gates", "recurrence")]}: parts of a layer kind's ORDER, next to each
    other, run as one stage (its bytes theirs together, one latency)."""
    merges: dict[str, list[tuple[str, ...]]] = {}
    for spec in specs:
        kind, _, parts_text = spec.partition(":")
        parts = tuple(p for p in parts_text.split("+") if p)
        order = ORDER.get(kind)
        if order is None or len(parts) < 2:
            raise ForecastError(f"--merge '{spec}': give KIND:PART+PART[+PART] with KIND one of {sorted(ORDER)}, "
                                f"e.g. {LOCAL_MERGES[0]}")
        if any(p not in order for p in parts):
            raise ForecastError(f"--merge '{spec}': a {kind} layer's stages are {'+'.join(order)}")
        i = order.index(parts[0])
        if order[i:i + len(parts)] != parts:
            raise ForecastError(f"--merge '{spec}': only stages next to each other, in their order "
                                f"({'+'.join(order)}), can run as one")
        taken = {p for group in merges.get(kind, []) for p in group}
        if taken & set(parts):
            raise ForecastError(f"--merge '{spec}': {sorted(taken & set(parts))} already merged in another group")
        merges.setdefault(kind, []).append(parts)
    return merges


def _layer_groups(kind: str, merges: dict[str, list[tuple[str, ...]]]) -> list[tuple[str, ...]]:
    """A layer kind's stages as groups of its ORDER's parts (one part each, unless merged)."""
    groups, order, i = [], ORDER[kind], 0
    starts = {g[0]: g for g in merges.get(kind, [])}
    while i < len(order):
        g = starts.get(order[i], (order[i],))
        groups.append(g)
        i += len(g)
    return groups


def step_stages(config, mix: str, depth: int, merges: dict[str, list[tuple[str, ...]]] | None = None) -> list[Stage]:
    """The step's stages in order, with every byte the roofline counts at `depth` (bytes_per_token's total); `merges`
    (parse_merges) runs neighbouring parts of a layer as one stage."""
    from sparkops.gguf.mix import cache_bytes_per_token, plan

    per_layer: dict[tuple[int, str], list[Segment]] = {}
    glob: dict[str, float] = {}
    for p in plan(config, mix):
        if p.spec.layer is None:
            glob[p.name] = float(p.nbytes)
            continue
        role = p.name.split(".", 2)[2]
        if role not in STAGE_OF:
            raise ForecastError(f"tensor '{p.name}' has no stage in persistent_forecast.STAGE_OF: add its role "
                                f"'{role}' there (its bytes would otherwise be left out of the forecast)")
        b = float(p.nbytes)
        gated = role in GATED
        if gated:
            b *= config.n_experts_per_token / config.n_experts
        per_layer.setdefault((p.spec.layer, STAGE_OF[role]), []).append(Segment(b, -1 if gated else None))
    cache = cache_bytes_per_token(config, depth)
    kinds = config.layer_kinds
    n_kda, n_mla = sum(k == "kda" for k in kinds), sum(k == "mla" for k in kinds)
    state = {("kda", "recurrence"): cache["kda_state"] / max(n_kda, 1),  # read and written: the stream's bytes
             ("kda", "gates"): cache["kda_conv_state"] / max(n_kda, 1),
             ("mla", "attention"): cache["mla_cache"] / max(n_mla, 1)}

    known = {"token_embd.weight", "output_norm.weight", "output.weight"}
    if set(glob) - known:
        raise ForecastError(f"global tensors {sorted(set(glob) - known)} have no stage in persistent_forecast")
    stages = [Stage("embed", [Segment(glob["token_embd.weight"] / config.vocab_size)])]
    for layer, kind in enumerate(kinds):
        moe = config.is_moe(layer)
        for group in _layer_groups(kind, merges or {}):
            segs = []
            for part in group:
                segs += per_layer.pop((layer, part), [])
                if (kind, part) in state:
                    segs.append(Segment(state[kind, part]))
            stages.append(Stage(f"blk.{layer}.{'+'.join(group)}", segs))
        router = None
        for part in FFN_ORDER[moe]:
            segs = per_layer.pop((layer, part), [])
            if part == "ffn_in":
                router = len(stages)
            stages.append(Stage(f"blk.{layer}.{FFN_NAME[moe].get(part, part)}",
                                [Segment(s.nbytes, router if s.gate == -1 else None) for s in segs]))
    if per_layer:
        raise ForecastError(f"tensors of {sorted(per_layer)} were placed in no stage (a layer kind's ORDER lacks "
                            "their stage)")
    stages.append(Stage("head", [Segment(glob["output_norm.weight"]), Segment(glob["output.weight"])]))
    return stages


@dataclass
class Result:
    """One forecast: the time a token and where the stream stood idle."""
    latency_us: float
    bandwidth_tbs: float
    window_mb: float
    in_order: bool
    us_a_token: float
    idle_gated_us: float  # the stream had nothing it might request: every chunk left waited for a gate
    idle_window_us: float  # the stream had chunks it might request, but the window was full
    stages: int

    def tok_s(self) -> float:
        return 1e6 / self.us_a_token


def simulate(stages: list[Stage], latency_us: float, bandwidth_tbs: float, window_bytes: float,
             in_order: bool = False, tokens: int = TOKENS, chunk: float = CHUNK,
             extra_us: dict[str, float] | None = None) -> Result:
    """The step's time a token under the stream model of the module docstring."""
    if latency_us < 0 or bandwidth_tbs <= 0 or window_bytes < 0 or tokens < 1:
        raise ForecastError(f"latency {latency_us} us, bandwidth {bandwidth_tbs} TB/s and window {window_bytes} "
                            f"bytes, {tokens} tokens: the latency and window must be >= 0, the bandwidth > 0, the "
                            "tokens >= 1")
    per_us = bandwidth_tbs * 1e6  # bytes a microsecond
    n = len(stages)
    extra = [stage_extra(st.name, extra_us or {}) for st in stages]  # work a stage does past the chain's latency
    total = n * tokens
    # the chunks of every (token, stage), in order: (stage index overall, bytes, gate index overall or -1)
    chunks: list[tuple[int, float, int]] = []
    left = [0] * total  # chunks of each stage not yet landed
    for t in range(tokens):
        for s, st in enumerate(stages):
            g = t * n + s
            for seg in st.segments:
                gate = -1 if seg.gate is None else t * n + seg.gate
                k = max(1, int(-(-seg.nbytes // chunk))) if seg.nbytes > 0 else 0
                for i in range(k):
                    chunks.append((g, min(chunk, seg.nbytes - i * chunk), gate))
                    left[g] += 1
    done = [None] * total  # each stage's end
    landed_last = [0.0] * total  # its last chunk's landing
    waiting: dict[int, float] = {}  # bytes landed for stages whose inputs are not ready, by stage
    served = [False] * len(chunks)
    first = 0  # the first chunk not yet served
    now = 0.0
    idle_gated = idle_window = 0.0
    nxt = 0  # the first stage not yet ended

    def ready_at(g: int) -> float | None:  # when stage g's inputs are ready
        return 0.0 if g == 0 else done[g - 1]

    def settle() -> None:  # end every stage that can end: inputs known and every chunk landed
        nonlocal nxt
        while nxt < total and left[nxt] == 0 and (nxt == 0 or done[nxt - 1] is not None):
            r = ready_at(nxt)
            done[nxt] = max(r, landed_last[nxt]) + latency_us + extra[nxt % n]
            nxt += 1

    def occupancy(t: float) -> float:
        return sum(b for g, b in waiting.items() if not (ready_at(g) is not None and ready_at(g) <= t))

    settle()
    while first < len(chunks):
        pick = None
        blocked_by_window = False
        reserved = 0.0  # room kept for skipped gated chunks that will wait on chip (not their gate's next stage)
        for i in range(first, len(chunks)):
            if served[i]:
                continue
            g, b, gate = chunks[i]
            if gate >= 0 and (done[gate] is None or done[gate] > now):
                if in_order:
                    break
                if g != gate + 1:
                    reserved += b
                continue
            r = ready_at(g)
            if (r is not None and r <= now) or occupancy(now) + reserved + b <= window_bytes:
                pick = i
                break
            blocked_by_window = True
            if in_order:
                break
            # a later chunk cannot fit where this one does not (the same or a later stage, never ready sooner)
            break
        if pick is None:  # wait for the next stage to end (the event that frees a gate or the window)
            settle()
            future = [d for d in done[:nxt] if d is not None and d > now]
            if not future:
                raise ForecastError("the stream stalled with nothing to wait for (a window smaller than a chunk "
                                    "with no stage ready?)")
            t = min(future)
            if blocked_by_window:
                idle_window += t - now
            else:
                idle_gated += t - now
            now = t
            continue
        g, b, _ = chunks[pick]
        served[pick] = True
        now += b / per_us
        landed_last[g] = now
        left[g] -= 1
        r = ready_at(g)
        if not (r is not None and r <= now):
            waiting[g] = waiting.get(g, 0.0) + b
        while first < len(chunks) and served[first]:
            first += 1
        settle()
        for w in [w for w in waiting if ready_at(w) is not None and ready_at(w) <= now]:
            del waiting[w]
    settle()
    assert nxt == total, "every stage ends once every chunk has landed"
    # one token: from the start, the window empty; more: the mean of all but the first (the stream runs into them)
    span = done[total - 1] if tokens == 1 else (done[total - 1] - done[n - 1]) / (tokens - 1)
    return Result(latency_us, bandwidth_tbs, window_bytes / 1e6, in_order, span,
                  idle_gated / tokens, idle_window / tokens, n)


def stage_extra(name: str, extra_us: dict[str, float]) -> float:
    """The extra latency of stage `name` ("blk.3.gates+recurrence"): extra_us's value for its part after the layer
    ("gates+recurrence"), or for the whole name ("head"), else 0."""
    part = name.split(".", 2)[2] if name.startswith("blk.") else name
    return extra_us.get(part, extra_us.get(name, 0.0))


def parse_extra(specs: list[str]) -> dict[str, float]:
    """["gates+recurrence=1.5", ...] -> {"gates+recurrence": 1.5}."""
    out: dict[str, float] = {}
    for spec in specs:
        part, _, value = spec.partition("=")
        try:
            us = float(value)
        except ValueError:
            us = -1.0
        if not part or us < 0:
            raise ForecastError(f"--extra-us '{spec}': give STAGE=US with STAGE a layer's stage as the forecast names "
                                "it (e.g. recurrence, or gates+recurrence under --merge local) and US >= 0")
        out[part] = us
    return out


def latency_from_probe(path: str) -> tuple[float, str]:
    """The fastest proven persistent variant's us a GEMV in persistent_chain.py's JSON (an upper bound on its stage
    latency: the time still holds the GEMV's bytes), and which it is. Variants whose chain did not end with the
    launches' bits are not used."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ForecastError(f"probe file '{path}': {e} (give persistent_chain.py's --out JSON)") from None
    variants = data.get("variants") or {}
    same = data.get("last_output_bitwise_the_launches") or {}
    if data.get("barrier_timed_out"):
        raise ForecastError(f"probe file '{path}': its barrier timed out, so none of its times is a chain's")
    rings = {n: v for n, v in variants.items() if n.startswith("persistent") and same.get(n) is True}
    if not rings:
        raise ForecastError(f"probe file '{path}' has no persistent variant whose last output was the launches' bits "
                            "(the forecast uses only variants proven to compute the chain)")
    name = min(rings, key=lambda n: rings[n]["us_a_gemv"])
    return rings[name]["us_a_gemv"], f"{name} at {data.get('rows')} rows"


def latency_from_q4k(path: str) -> tuple[float, str]:
    """The latency lambda that makes this model's own stream reproduce q4k_chain.py's fastest proven paced chain: the
    probe's stages (its bytes), one token from an empty window of the form's ring (slots x slot bytes x SMs), at the
    probe's plain-read rate on the same bytes; lambda found by bisection so the simulated chain takes the measured
    round. What a dependent Q4_K stage of the step's widths costs beyond its bytes, as this model counts it (session
    49). Forms whose outputs were not the launches' bits, or that timed out, are not used, and no form at all where
    the launches themselves missed the reference or wrote a non-finite output."""
    try:
        data = json.loads(Path(path).read_text())
        forms, pattern = data["forms"], data["pattern"]
        same, timed_out, rings = data["outputs_bitwise_the_launches"], data["timed_out"], data["ring_bytes"]
        layers, read_tbs = int(data["layers"]), float(forms["read"]["tbs"])
        wrong = [k for k, c in data["reference"]["stages"].items() if not c["within_act_q8"]]
        finite = data["finite"] is True
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ForecastError(f"probe file '{path}': {e!r} (give q4k_chain.py's --out JSON)") from None
    if wrong or not finite:
        raise ForecastError(f"probe file '{path}': its launches, the bits every form is checked against, "
                            + (f"missed the reference on {', '.join(wrong)}" if wrong else "wrote non-finite outputs")
                            + ": no form of it computed the chain")
    proven = {n: f for n, f in forms.items() if same.get(n) is True and not timed_out.get(n) and n in rings}
    if not proven:
        raise ForecastError(f"probe file '{path}' has no paced form whose outputs were the launches' bits without a "
                            "time-out (the forecast uses only forms proven to compute the chain)")
    name = min(proven, key=lambda n: proven[n]["us_a_round"])
    measured = float(proven[name]["us_a_round"])
    stages = [Stage(f"{i}.{p['name']}", [Segment(float(p["nbytes"]))]) for i in range(layers) for p in pattern]
    window = float(rings[name])

    def round_us(lat: float) -> float:
        return simulate(stages, lat, read_tbs, window, tokens=1).us_a_token

    lo, hi = 0.0, 1.0
    if round_us(lo) >= measured:
        return 0.0, (f"{name} of {path}: {measured:.1f} us a round, no slower than the stream alone at "
                     f"{read_tbs:.2f} TB/s (lambda 0)")
    while round_us(hi) < measured:
        hi *= 2
        if hi > 1e4:
            raise ForecastError(f"probe file '{path}': no latency up to 10 ms a stage explains {name}'s {measured} us")
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if round_us(mid) < measured else (lo, mid)
    lat = (lo + hi) / 2
    return lat, (f"{name} of {path}: {measured:.1f} us a round of {len(stages)} Q4_K stages, its plain read "
                 f"{read_tbs:.2f} TB/s, window {window / 1e6:.1f} MB -> lambda {lat:.2f} us")


def _floats(text: str, what: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ForecastError(f"{what} '{text}': give numbers separated by commas, e.g. 1,1.5,2") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="kimi-linear-48b-a3b", help="a preset name (sparkops.config)")
    ap.add_argument("--mix", default="q4_k_m", help="a quant mix (sparkops.gguf.mix)")
    ap.add_argument("--depth", type=int, default=0, help="cached tokens (the MLA cache's bytes)")
    ap.add_argument("--latency-us", default="0.5,1,1.5,2,3,5", help="lambda values, us a dependent stage")
    ap.add_argument("--bandwidth-tbs", default="3.2,3.6,4.04", help="stream bandwidths, TB/s")
    ap.add_argument("--window-mb", type=float, default=24.0, help="on-chip bytes that may wait for their stage")
    ap.add_argument("--in-order", action="store_true", help="the stream waits at a gated chunk")
    probe_file = ap.add_mutually_exclusive_group()
    probe_file.add_argument("--probe-latency", help="persistent_chain.py's JSON (best at fewer rows): the latency "
                                                    "(replaces the list; an upper bound, as a GEMV's time there still "
                                                    "holds its bytes)")
    probe_file.add_argument("--q4k-latency", help="q4k_chain.py's JSON: the latency fitted to its fastest proven paced "
                                                  "chain of the step's own Q4_K stages (replaces the list)")
    ap.add_argument("--merge", action="append", default=[], metavar="KIND:PART+PART",
                    help="run neighbouring stages of a layer kind as one (repeatable), e.g. kda:gates+recurrence; "
                         f"--merge local: {' and '.join(LOCAL_MERGES)} (each part local to a head)")
    ap.add_argument("--extra-us", action="append", default=[], metavar="STAGE=US",
                    help="a layer stage's own work beyond the chain's latency (repeatable), e.g. gates+recurrence=1.5: "
                         "what a merged stage computes before its output exists")
    ap.add_argument("--json", help="write the forecasts here")
    ap.add_argument("--plot", help="write tok/s against the latency, a line a bandwidth, as a PNG here")
    args = ap.parse_args(argv)
    try:
        from sparkops.config import load_preset
        from sparkops.gguf.mix import bytes_per_token
        try:
            config = load_preset(args.model)
        except Exception as e:  # the preset loader's own error names the presets
            raise ForecastError(str(e)) from None
        if args.depth < 0:
            raise ForecastError(f"--depth {args.depth}: give a number of cached tokens >= 0")
        lats = _floats(args.latency_us, "--latency-us")
        bws = _floats(args.bandwidth_tbs, "--bandwidth-tbs")
        sources = {}
        if args.probe_latency:
            lat, sources["latency"] = latency_from_probe(args.probe_latency)
            lats = [lat]
        if args.q4k_latency:
            lat, sources["latency"] = latency_from_q4k(args.q4k_latency)
            lats = [lat]
        merge_specs = [m for spec in args.merge for m in (LOCAL_MERGES if spec == "local" else (spec,))]
        stages = step_stages(config, args.mix, args.depth, parse_merges(merge_specs))
        roof_bytes = bytes_per_token(config, args.mix, args.depth)["total"]
        extra = parse_extra(args.extra_us)
        parts = {st.name.split(".", 2)[2] if st.name.startswith("blk.") else st.name for st in stages}
        if set(extra) - parts:
            raise ForecastError(f"--extra-us names {sorted(set(extra) - parts)}, which are no stage of this step (its "
                                f"stages: {sorted(parts)})")
        results = [simulate(stages, lat, bw, args.window_mb * 1e6, args.in_order, extra_us=extra)
                   for bw in bws for lat in lats]
    except ForecastError as e:
        print(f"persistent_forecast: {e}", file=sys.stderr)
        return 2
    roof_tok_s = READ_CEILING_TBS * 1e12 / roof_bytes
    print(f"{args.model} {args.mix} at depth {args.depth}: {len(stages)} dependent stages a token, "
          f"{roof_bytes / 1e9:.3f} GB a token, roofline {roof_tok_s:.1f} tok/s at {READ_CEILING_TBS} TB/s; "
          f"window {args.window_mb:g} MB, {'in order' if args.in_order else 'skipping ahead of gated chunks'}"
          + (f"; merged: {', '.join(merge_specs)}" if merge_specs else "")
          + (f"; extra: {', '.join(f'{k} +{v:g} us' for k, v in extra.items())}" if extra else ""))
    for k, v in sources.items():
        print(f"  {k} from the probe: {v}")
    print(f"{'lambda us':>9} {'TB/s':>6} {'us/token':>9} {'tok/s':>8} {'roofline':>8} {'idle: gated':>12} "
          f"{'window':>7}")
    for r in results:
        print(f"{r.latency_us:9.2f} {r.bandwidth_tbs:6.2f} {r.us_a_token:9.1f} {r.tok_s():8.1f} "
              f"{100 * r.tok_s() / roof_tok_s:7.1f}% {r.idle_gated_us:10.1f}us {r.idle_window_us:5.1f}us")
    out = {"model": args.model, "mix": args.mix, "depth": args.depth, "stages": len(stages),
           "bytes_a_token": roof_bytes, "roofline_tok_s": roof_tok_s, "window_mb": args.window_mb,
           "in_order": args.in_order, "sources": sources, "merges": merge_specs, "extra_us": extra,
           "forecasts": [{**vars(r), "tok_s": r.tok_s(), "roofline_share": r.tok_s() / roof_tok_s}
                         for r in results]}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for bw in bws:
            rs = [r for r in results if r.bandwidth_tbs == bw]
            ax.plot([r.latency_us for r in rs], [r.tok_s() for r in rs], marker="o", label=f"stream {bw:g} TB/s")
        ax.axhline(roof_tok_s, color="k", lw=0.8, label=f"roofline {roof_tok_s:.0f} tok/s")
        ax.axhline(0.6 * roof_tok_s, color="g", ls="--", lw=0.8, label="60% of the roofline")
        ax.set_xlabel("latency of a dependent stage beyond its bytes (us)")
        ax.set_ylabel("decode tok/s (forecast)")
        ax.set_title(f"persistent step forecast: {args.model} {args.mix}, depth {args.depth}, "
                     f"window {args.window_mb:g} MB", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
