"""Measuring a decode step over several world sizes: step time, collective time, the Amdahl fit.

For each world N a pool of N ranks fills the sequence to the depth, proves it (bench.depth), and
times `rounds` rounds of `steps` decode steps from the same snapshot, the ranks lined up at a
barrier before each round (worker._profile). Per round, the step ends when the slowest rank ends
(its wall time is the step), and the collective time is each rank's time inside all_reduce,
averaged over the ranks; both are medians over rounds. World 1 is the same code on one rank
(no collective), the baseline T1.

    report = measure_scaling(PoolSpec(1, ModelSource("synth", "k3-nano")), worlds=(1, 2), depth=8)
    report["collectives"]["amdahl"]["crossover_world"]

`diagnose_collectives` is the entry point for `sparkops diagnose` (see the report of this change).
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from ..errors import BadInput
from .amdahl import WorldPoint, collective_report
from .launch import PoolSpec, ShardedPool


def world_point(per_rank: list[dict[str, Any]]) -> WorldPoint:
    """One world's point from every rank's profile (see the module docstring)."""
    rounds = len(per_rank[0]["wall_s"])
    steps = [max(r["wall_s"][i] for r in per_rank) for i in range(rounds)]
    colls = [statistics.fmean(r["collective_s"][i] for r in per_rank) for i in range(rounds)]
    return WorldPoint(len(per_rank), statistics.median(steps), statistics.median(colls))


def measure_scaling(spec: PoolSpec, worlds: tuple[int, ...] = (1, 2), *, depth: int = 0, steps: int = 4,
                    rounds: int = 3, seed: int = 0, chunk: int | None = None,
                    pools: dict[int, ShardedPool] | None = None) -> dict[str, Any]:
    """Profile decode at `depth` on each world size; points, per-rank detail and the collective report.

    `pools` may hold already-started pools by world size (they are used and left open); the others
    are started from `spec` with its world replaced, and closed.
    """
    if not worlds or min(worlds) < 1:
        raise BadInput(f"--worlds {worlds}: give world sizes >= 1, e.g. 1,2,4")
    if steps < 1 or rounds < 1 or depth < 0:
        raise BadInput("need --steps >= 1, --rounds >= 1, --depth >= 0")
    pools = dict(pools or {})
    points, detail = [], {}
    for n in sorted(set(worlds)):
        own = n not in pools
        pool = pools[n] if not own else ShardedPool(replace(spec, world=n, max_context=max(spec.max_context,
                                                                                          depth + steps)))
        try:
            per_rank = pool.call("profile", depth, steps, rounds, seed, chunk)
        finally:
            if own:
                pool.close()
        p = world_point(per_rank)
        points.append(p)
        detail[n] = {"step_s": p.step_s, "collective_s": p.collective_s, "collective_share": p.collective_share,
                     "reduces_per_step": per_rank[0]["reduces_per_step"],
                     "per_rank_share": [statistics.median(c / w for c, w in zip(r["collective_s"], r["wall_s"]))
                                        for r in per_rank]}
    return {"depth": depth, "steps": steps, "rounds": rounds, "device": spec.device,
            "backend": spec.resolved_backend, "model": spec.source.name, "mix": spec.source.mix,
            "worlds": detail, "points": points, "collectives": collective_report(points)}


def diagnose_collectives(model: str, *, worlds: tuple[int, ...] = (1, 2), depth: int = 0, steps: int = 4,
                         rounds: int = 3, device: str = "cpu", registry: str | None = None,
                         dtype: str = "float32", mix: str = "f32", source: str | None = None,
                         seed: int = 0) -> dict[str, Any]:
    """For `sparkops diagnose`: the collective share of a decode step and the Amdahl crossover, measured.

    model: a preset (k3-nano: synthesized in every rank; a large preset: drawn on each device with
    `source="ondevice"`) or a GGUF path. Returns measure_scaling's dict; its "collectives" entry is
    what a diagnosis shows (collective_share, share_by_world, amdahl{serial_fraction, crossover_world,
    speedup, ...}, why).
    """
    from pathlib import Path

    kind = source or ("gguf" if model.endswith(".gguf") or Path(model).exists() else "synth")
    spec = PoolSpec(world=max(worlds), source=_source(kind, model, mix, seed), device=device, registry=registry,
                    dtype=dtype, max_context=depth + steps + 1)
    return measure_scaling(spec, worlds, depth=depth, steps=steps, rounds=rounds, seed=seed)


def _source(kind: str, model: str, mix: str, seed: int):
    from .launch import ModelSource

    return ModelSource(kind, model, mix, seed)
