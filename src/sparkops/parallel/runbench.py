"""The multi-GPU figures: prefill of a P-token prompt and decode at context depth D on N ranks, with
the collective share measured, recorded in the ledger beside the seed's figures for the same box.

    sparkops parallel bench --model k3-2.8t --source ondevice --mix ud_iq1_s --world 8 --device cuda \
        --prefill 32768 --depth 131072 --record

Order, as the scoreboard demands (seed, lectures 02 and 10): the gate first, then the clock.
  gate     (1) the sharded graph on this box: k3-nano over the same world, backend, registry and
               dtype against one process (parallel.check) - the split, the reduce points, the
               dispatch, NCCL's sums;
           (2) the big model itself, which no single device can hold, so it is judged against
               itself: a prompt prefilled in one forward must give the logits of the same prompt
               prefilled shorter and decoded token by token (the caches and states carried between
               steps), within the model rule; every rank's logits must be the same bytes; all finite.
  prefill  a fresh sequence, the P-token prompt prefilled (in --chunk pieces), timed from a barrier
           to the last rank's end; the cache then proven to hold P tokens (bench.depth); then the chunk
           proof (bench.chunking): the prompt prefilled again in the timed chunks and in a size the
           k3-nano gate ran, 8 decode steps after each, the logits judged by the model rule - a figure
           whose result depends on its chunk is refused like a failed gate.
  decode   the sequence filled to D - by prefilling D tokens (its time is recorded too: a prefill
           figure at that length) or, with --fill synthetic, by writing random RMS-normed latent rows
           and random KDA states (decode's cost at depth D does not depend on what the rows hold:
           attention reads every one; the row is labelled so) - the depth proven, then rounds of
           --steps decode steps from the same snapshot, the collective time inside each.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ..bench.chunking import CHECK_STEPS
from ..errors import BadInput
from ..kvcache import to_cache

#: the seed's figures (seed/part4-optimizing-a-real-engine.txt), 8x H200, UD-IQ1_S, same box and
#: weights for both engines, 2026-08 - what our figure is shown beside, never measured here
SEED_FIGURES: dict[tuple[str, int], dict[str, float]] = {
    ("decode", 131072): {"SparkInfer-K3 (current)": 60.17, "llama.cpp": 18.44,
                         "SparkInfer-K3 (first measurement, 2026-08-01)": 1.01},
    ("prefill", 32768): {"SparkInfer-K3 (current)": 99.68, "llama.cpp": 143.88,
                         "SparkInfer-K3 (before batching)": 40.35},
}
SEED_SOURCE = "seed/part4-optimizing-a-real-engine.txt (8x H200, UD-IQ1_S, same box and weights, 2026-08)"
FILLS = ("prefill", "synthetic")
#: tokens per forward of the timed prefill and of the fill (a 32768-token forward would need every
#: layer's whole-prompt activations and an MLA score matrix of 32768^2 per head at once)
CHUNK = 2048


# ----------------------------------------------------------------------------------------------
# Inside a rank
# ----------------------------------------------------------------------------------------------

def timed_round(e: Any, fn) -> tuple[float, float]:
    """(wall seconds, collective seconds) of fn(), the ranks lined up at a barrier first."""
    from ..bench.timing import sync

    e.comm.barrier()
    sync(e.device.type)
    e.comm.reset()
    t0 = time.perf_counter()
    fn()
    sync(e.device.type)
    wall = time.perf_counter() - t0
    return wall, sum(e.comm.take().values())


def time_decode(e: Any, toks: torch.Tensor, rounds: int) -> dict[str, Any]:
    """Rounds of len(toks) decode steps from the state the engine is in now (restored before each)."""
    from ..bench import depth as dep

    snap = dep.Snapshot(e)
    steps = int(toks.numel())

    def run() -> None:
        snap.restore()
        for i in range(steps):
            e.decode(toks[i:i + 1])

    was = e.comm.timed
    e.comm.timed = True
    try:
        timed_round(e, run)  # warm-up
        walls, colls = [], []
        for _ in range(rounds):
            w, c = timed_round(e, run)
            walls.append(w / steps)
            colls.append(c / steps)
        calls = {k: v / steps for k, v in e.comm.calls.items()}
    finally:
        e.comm.timed = was
        e.comm.reset()
    snap.restore()
    return {"wall_s": walls, "collective_s": colls, "reduces_per_step": calls,
            "step_s": statistics.median(walls), "collective_median_s": statistics.median(colls)}


def synthetic_fill(e: Any, depth: int, seed: int) -> None:
    """Put the sequence at `depth` without running the model (labelled 'synthetic' wherever recorded).

    MLA caches: rows [0, depth) = RMS-normed random latents times kv_norm, then random k_pe - the same
    on every rank (a generator seeded alike: the cache is replicated); KDA conv windows and
    recurrent states random (each rank's own heads). Position and length set to depth.
    """
    from ..engine.state import KDAState

    g = torch.Generator(device=e.device).manual_seed(int(seed))
    lkv = e.config.kv_lora_rank
    rows = 8192
    with torch.inference_mode():
        for layer, st in zip(e.model.layers, e.state.layers):
            if isinstance(st, KDAState):
                for t in (st.conv_q, st.conv_k, st.conv_v):
                    t.copy_(torch.randn(t.shape, generator=g, device=e.device))
                st.recurrent.copy_(0.1 * torch.randn(st.recurrent.shape, generator=g, device=e.device))
                continue
            w = layer.attn.kv_norm.to(e.device, torch.float32)
            for lo in range(0, depth, rows):
                n = min(rows, depth - lo)
                x = torch.randn(n, st.cache.shape[1], generator=g, device=e.device)
                c = x[:, :lkv]
                x[:, :lkv] = c * torch.rsqrt(c.pow(2).mean(-1, keepdim=True) + 1e-6) * w
                st.cache[lo:lo + n] = to_cache(x, st.cache.dtype)
        e.state.pos.fill_(depth)
    e.state.length = depth


def _digest(x: torch.Tensor) -> str:
    return hashlib.sha256(x.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def consistency_on_rank(r: Any, n: int, k: int, seed: int) -> dict[str, Any]:
    """Prefill n + k tokens at once vs prefill n then decode k: both logits (rank 0), every rank's digest."""
    from ..bench import depth as dep

    e = r.engine
    prompt = dep.random_tokens(n + k, e.config.vocab_size, seed)
    e.reset()
    whole = e.prefill(prompt)  # [n + k, V]
    e.reset()
    rows = [e.prefill(prompt[:n])] + [e.decode(prompt[n + j:n + j + 1]) for j in range(k)]
    stepped = torch.cat(rows)
    e.reset()
    out = {"rank": r.rank, "digest": _digest(whole) + _digest(stepped),
           "finite": bool(torch.isfinite(whole).all()) and bool(torch.isfinite(stepped).all())}
    if r.rank == 0:
        out["whole"] = whole.double().cpu().numpy()
        out["stepped"] = stepped.double().cpu().numpy()
    return out


def bench_on_rank(r: Any, req: dict[str, Any]) -> dict[str, Any]:
    """The timed phases (module docstring), run by every rank in lockstep; this rank's figures."""
    from ..bench import depth as dep

    e = r.engine
    out: dict[str, Any] = {"rank": r.rank}
    chunk = req.get("chunk")
    seed = int(req.get("seed", 0))
    P, D, steps, rounds = int(req.get("prefill", 0)), int(req.get("depth", -1)), int(req["steps"]), int(req["rounds"])
    if P:
        prompt = dep.random_tokens(P, e.config.vocab_size, seed)
        e.reset()
        e.comm.timed = True
        try:
            wall, coll = timed_round(e, lambda: e.prefill(prompt, last_only=True, chunk_size=chunk))
        finally:
            e.comm.timed = False
        proof = dep.verify_depth(e, P, fresh=True)
        out["prefill"] = {"tokens": P, "wall_s": wall, "collective_s": coll, "tok_s": P / wall,
                          "proof": proof.as_dict()}
        if req.get("rule") is not None:  # every rank in lockstep (the sharded forwards need them all)
            from ..bench import chunking
            from ..gate.tolerances import ModelRule

            steps_tok = dep.random_tokens(chunking.CHECK_STEPS, e.config.vocab_size, seed + 3)
            out["prefill"]["chunk_proof"] = chunking.prove(e, e.reset, prompt, steps_tok, chunk,
                                                           tuple(req.get("proof_depths") or ()),
                                                           ModelRule(**req["rule"]), req.get("router_tie")).as_dict()
    if D >= 0:
        prompt = dep.random_tokens(D + steps, e.config.vocab_size, seed + 1)
        e.reset()
        fill_s = None
        if req.get("fill", "prefill") == "synthetic":
            synthetic_fill(e, D, seed + 2)
        elif D:
            e.comm.timed = True
            try:
                fill_s, _ = timed_round(e, lambda: dep.fill(e, prompt[:D], chunk))
            finally:
                e.comm.timed = False
        proof = dep.verify_depth(e, D, fresh=True, need=steps)
        t = time_decode(e, prompt[D:D + steps].to(e.device), rounds)
        dep.check_fingerprint(e, proof)
        out["decode"] = {"depth": D, "steps": steps, "fill": req.get("fill", "prefill"), "fill_s": fill_s,
                         "proof": proof.as_dict(), **t}
    if e.device.type == "cuda":
        out["max_memory"] = torch.cuda.max_memory_allocated(e.device)
    return out


# ----------------------------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------------------------

def run(spec: Any, *, prefill: int, depth: int, steps: int = 8, rounds: int = 3, chunk: int | None = CHUNK,
        fill: str = "prefill", seed: int = 0, gate_depths: tuple[int, ...] = (1, 63, 65),
        consistency: tuple[int, int] = (16, 3), skip_gate: bool = False) -> dict[str, Any]:
    """Gate, then time (module docstring). Returns everything measured; `ledger_rows` turns it into rows."""
    from ..gate.model_gate import judge_depths
    from ..gate.tolerances import loosest, model_rule_for, router_tie
    from .check import registry_variant, sharded_check
    from .launch import ModelSource, ShardedPool

    if fill not in FILLS:
        raise BadInput(f"--fill {fill}: use one of {', '.join(FILLS)}")
    if prefill < 0 or depth < -1 or steps < 1 or rounds < 1:
        raise BadInput("need --prefill >= 0, --depth >= 0, --steps >= 1, --rounds >= 1")
    variant = registry_variant(spec.registry, spec.device)
    if spec.dtype in ("bfloat16", "bf16"):
        variant = loosest([variant, "bf16"])
    rule = model_rule_for(variant)
    result: dict[str, Any] = {"spec": _spec_dict(spec), "variant": variant, "rule": rule.pinned(), "gates": {},
                              "request": {"prefill": prefill, "depth": depth, "steps": steps, "fill": fill}}
    if not skip_gate:
        nano = replace(spec, source=ModelSource("synth", "k3-nano", "f32", 0), max_context=max(gate_depths) + 8,
                       prefill_chunk=None)
        o = sharded_check(nano, gate_depths)
        result["gates"]["sharded_graph_k3-nano"] = o.as_dict()
        if not o.passed:
            result["refused"] = f"the sharded graph failed the gate on this box: {o.summary}"
            return result
    need = max(prefill + CHECK_STEPS, depth + steps, sum(consistency)) + 1
    t0 = time.perf_counter()
    with ShardedPool(replace(spec, max_context=max(spec.max_context, need))) as pool:
        result["startup_s"] = time.perf_counter() - t0
        result["ranks"] = pool.call("describe")
        if not skip_gate:
            n, k = consistency
            per = pool.call("consistency", n, k, seed)
            zero = per[0]
            same = len({p["digest"] for p in per}) == 1
            finite = all(p["finite"] for p in per)
            res = judge_depths({n: torch.from_numpy(zero["whole"])}, {n: torch.from_numpy(zero["stepped"])}, rule)[0]
            ok = same and finite and res.passed
            result["gates"]["self_consistency"] = {
                "passed": ok, "ranks_identical": same, "finite": finite, "kl_max": res.kl_max, "top1": res.top1,
                "positions": res.positions, "rule": rule.pinned(),
                "what": f"prefill of {n + k} tokens vs prefill {n} + decode {k}, every rank the same bytes"}
            if not ok:
                result["refused"] = f"the model failed its self-consistency gate: {result['gates']['self_consistency']}"
                return result
        req = {"prefill": prefill, "depth": depth, "steps": steps, "rounds": rounds, "chunk": chunk, "fill": fill,
               "seed": seed, "rule": rule.pinned(), "proof_depths": list(gate_depths),
               "router_tie": router_tie(variant)}
        result["per_rank"] = pool.call("bench", req)
    result["summary"] = summarize(result["per_rank"])
    cp = chunk_gate(result["per_rank"])
    if cp is not None:
        result["gates"]["chunk_proof_prefill"] = cp
        if not cp["passed"]:
            result["refused"] = (f"the prefill's result depends on its chunk: chunks of {cp['timed_chunk']} against "
                                 f"{cp['reference_chunk']} gave KL max {cp['kl_max']:.3g}, top-1 {cp['top1']:.3f} "
                                 f"({cp['rule']}; {cp.get('routing') or 'routing: not reported'}); time with "
                                 f"--chunk {cp['reference_chunk']}, and find the op with the GPU tests of the "
                                 f"registry's implementations (`pytest -m gpu tests/backends`)")
    return result


def chunk_gate(per_rank: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The prefill's chunk proof as a gate verdict (rank 0's; every rank judged the same logits), or None."""
    cp = (per_rank[0].get("prefill") or {}).get("chunk_proof") if per_rank else None
    if cp is None:
        return None
    return {**cp, "what": f"prefill in chunks of {cp['timed_chunk']} vs {cp['reference_chunk']} ({cp['why']}), "
                          f"the last position and the decode steps after"}


def summarize(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """Across ranks: a phase ends when its slowest rank does; collectives averaged over the ranks."""
    out: dict[str, Any] = {}
    if "prefill" in per_rank[0]:
        wall = max(p["prefill"]["wall_s"] for p in per_rank)
        coll = statistics.fmean(p["prefill"]["collective_s"] for p in per_rank)
        toks = per_rank[0]["prefill"]["tokens"]
        out["prefill"] = {"tokens": toks, "wall_s": wall, "tok_s": toks / wall, "collective_s": coll,
                          "collective_share": coll / wall, "proof": per_rank[0]["prefill"]["proof"],
                          "chunk_proof": per_rank[0]["prefill"].get("chunk_proof")}
    if "decode" in per_rank[0]:
        d0 = per_rank[0]["decode"]
        rounds = len(d0["wall_s"])
        steps = [max(p["decode"]["wall_s"][i] for p in per_rank) for i in range(rounds)]
        colls = [statistics.fmean(p["decode"]["collective_s"][i] for p in per_rank) for i in range(rounds)]
        step = statistics.median(steps)
        coll = statistics.median(colls)
        out["decode"] = {"depth": d0["depth"], "steps": d0["steps"], "fill": d0["fill"], "fill_s": d0["fill_s"],
                         "step_s": step, "tok_s": 1 / step, "rates": [1 / s for s in steps], "collective_s": coll,
                         "collective_share": coll / step, "reduces_per_step": d0["reduces_per_step"],
                         "proof": d0["proof"]}
        if d0["fill"] == "prefill" and d0["fill_s"]:
            out["fill_prefill"] = {"tokens": d0["depth"], "wall_s": max(p["decode"]["fill_s"] for p in per_rank)}
    return out


def _spec_dict(spec: Any) -> dict[str, Any]:
    return {"world": spec.world, "device": spec.device, "backend": spec.resolved_backend,
            "source": {"kind": spec.source.kind, "name": spec.source.name, "mix": spec.source.mix,
                       "seed": spec.source.seed},
            "registry": spec.registry, "dtype": spec.dtype, "placement": {"dispatch": spec.placement.dispatch,
                                                                           "late": sorted(spec.placement.late)},
            "prefill_chunk": spec.prefill_chunk}


# ----------------------------------------------------------------------------------------------
# The ledger
# ----------------------------------------------------------------------------------------------

def box_slug(world: int, device_slug: str) -> str:
    """The frontier's box name for N devices of one kind: '8xnvidia-h200', '2xcpu'."""
    return f"{world}x{device_slug}"


def ledger_rows(result: dict[str, Any], command: str, frontier: Any = None,
                env: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One measurement row per timed phase, with the gates, the collective share and the seed's figures.

    env: bench.provenance.environment() of the box that ran it (default: this process's view).
    """
    from ..bench import ledger as L
    from ..bench.frontier import workload_key
    from ..bench.provenance import environment, now
    from ..bench.timing import MIN_EFFECT, Spread, tier_against

    spec, s = result["spec"], result.get("summary") or {}
    env = env if env is not None else environment(spec["device"])
    box = box_slug(spec["world"], env["device_slug"])
    model = {"name": spec["source"]["name"], "mix": spec["source"]["mix"], "source": spec["source"]["kind"],
             "seed": spec["source"]["seed"]}
    gates = result["gates"]
    nano = gates.get("sharded_graph_k3-nano") or {}
    worst = nano.get("worst_depth") or {}
    rows = []
    for phase in ("prefill", "decode"):
        if phase not in s:
            continue
        p = s[phase]
        depth = p["depth"] if phase == "decode" else 0
        tokens = p["steps"] if phase == "decode" else p["tokens"]
        rates = p.get("rates") or [p["tok_s"]]
        key = workload_key(phase, model["name"], model["mix"], box, depth, tokens)
        change = f"tensor + expert parallel over {spec['world']} ranks ({spec['backend']})"
        if phase == "decode" and p.get("fill") == "synthetic":  # its own workload: never competes with a real fill
            key += ".fill=synthetic"
            change += "; decode context filled synthetically (not by the model)"
        before = frontier.value(key) if frontier is not None else None
        spread = Spread.of(rates)
        date = now()
        seed_key = (phase, depth if phase == "decode" else tokens)
        rows.append({
            "id": L.new_id(date), "kind": "measurement", "date": date,
            "change": change, "key": key,
            "phase": phase, "depth": depth, "tokens": tokens, "model": model,
            "metric": (f"decode tok/s @ d={depth} ({tokens} steps)" if phase == "decode"
                       else f"prefill tok/s, {tokens}-token prompt"),
            "unit": "tok/s", "before": before, "after": spread.median,
            "ratio": spread.median / before if before else None,
            "tier": tier_against(spread.median, before, spread), "noise": max(MIN_EFFECT, spread.relative_iqr),
            "registry": spec["registry"] or "registry.toml", "dtype": spec["dtype"],
            "worst_kl": worst.get("kl_max"), "worst_top1": worst.get("top1"), "worst_depth": worst.get("depth"),
            "gates": gates,
            "figures": [{"label": "A", "registry": spec["registry"] or "registry.toml", "dtype": spec["dtype"],
                         "value": spread.median, "rates": rates, "iqr": [spread.lo, spread.hi],
                         "roofline_fraction": None, "selections": {}}],
            "parallel": {"world": spec["world"], "backend": spec["backend"], "placement": spec["placement"],
                         "collective_s": p["collective_s"], "collective_share": p["collective_share"],
                         "reduces_per_step": p.get("reduces_per_step")},
            "fill": p.get("fill") if phase == "decode" else None,
            "depth_proof": {"A": p["proof"]},
            **({"chunk_proof": {"A": p["chunk_proof"]}} if p.get("chunk_proof") else {}),
            "seed_figures": {"figures": SEED_FIGURES.get(seed_key, {}), "source": SEED_SOURCE,
                             "ratio_to": {k: spread.median / v for k, v in SEED_FIGURES.get(seed_key, {}).items()}},
            "command": command, "commit": env.get("commit"), "dirty": env.get("dirty"), "device": spec["device"],
            "device_name": env.get("device_name"), "device_slug": box, "clocks": env.get("clocks"),
            "versions": env.get("versions"), "host": env.get("host"),
        })
    return rows


def refusal_row(result: dict[str, Any], command: str, env: dict[str, Any] | None = None) -> dict[str, Any]:
    """The record of a sharded run its gate refused: which gate, its verdict, the command; no figure at all."""
    from ..bench import ledger as L
    from ..bench.provenance import environment, now

    spec = result["spec"]
    env = env if env is not None else environment(spec["device"])
    failed = {name: g for name, g in result.get("gates", {}).items() if not g.get("passed")}
    name, gate = next(iter(failed.items()), (None, {}))
    worst = gate.get("worst_depth") or {}
    date = now()
    src = spec["source"]
    req = result.get("request") or {}
    return {"id": L.new_id(date), "kind": "refusal", "date": date, "phase": "sharded prefill + decode",
            "depths": [req["depth"]] if req.get("depth", -1) >= 0 else [], "tokens": req.get("prefill"),
            "model": {"name": src["name"], "mix": src["mix"], "source": src["kind"], "seed": src["seed"]},
            "change": f"tensor + expert parallel over {spec['world']} ranks ({spec['backend']})",
            "refused": name or "gate", "registry": spec.get("registry") or "registry.toml", "gate": gate,
            "why": result["refused"], "worst_kl": worst.get("kl_max", gate.get("kl_max")),
            "worst_top1": worst.get("top1", gate.get("top1")), "worst_depth": worst.get("depth"),
            "command": command, "commit": env.get("commit"), "dirty": env.get("dirty"),
            "code_digest": env.get("code_digest"), "device": env.get("device"), "device_name": env.get("device_name"),
            "versions": env.get("versions")}


def record(result: dict[str, Any], command: str, bench: str | Path | None = None) -> list[dict[str, Any]]:
    """Append the rows (gated ones only) and offer them to the raise-only frontier; re-render the ladder."""
    from ..bench import ledger as L
    from ..bench.frontier import Frontier
    from ..bench.record import offer_row, render_all

    if result.get("refused"):
        raise BadInput(f"nothing recorded: {result['refused']} (record_refusal keeps the refusal itself)")
    d = L.bench_dir(bench)
    with L.writer_lock(d):  # one recording at a time in this bench directory (bench/ledger.py)
        frontier = Frontier.load(d / L.FRONTIER)
        rows = ledger_rows(result, command, frontier)
        for row in rows:
            row["frontier"] = offer_row(frontier, row)
            L.append(d / L.LEDGER, row)
        frontier.save()
        render_all(d)
    return rows


def record_refusal(result: dict[str, Any], command: str, bench: str | Path | None = None) -> dict[str, Any]:
    """Append the refusal row (no figure; the frontier untouched) and re-render the ladder."""
    from ..bench.record import record_refusal as append

    return append(refusal_row(result, command), bench)
