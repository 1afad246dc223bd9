"""Collective share of a step, and Amdahl's law fitted to measured step times (seed, lecture 07).

With T1 the step time on one rank, the step on N ranks is modelled as

    T_N / T1 = s + p / N + c(N)          speedup(N) = T1 / T_N = 1 / (s + p/N + c(N))

s: the serial fraction - work every rank repeats (replicated embedding, norms, router, kv_a, the
   low-rank gate projections, lm_head, the MLA latent-cache read every head shares), p = 1 - s the
   part that divides over ranks, c(N) the collectives as a fraction of T1. All three come from
   measurements: the compute time of the N-rank step is its wall time minus the time it spent in
   collectives, and (T_N - C_N) / T1 = s + p/N fits s by least squares over the measured N;
   c(N) is fitted as kappa * (N - 1) (a ring all_reduce: its latency grows with the hops) or
   kappa * log2 N (a tree), whichever matches the measured collective times better (with a single
   multi-rank measurement both fit exactly; the ring, which predicts the earlier crossover, is used).

The crossover is where adding ranks stops paying: the smallest N with speedup(N + 1) <= speedup(N).
For the ring model it is where N (N + 1) >= p / kappa. Because p shrinks when a parallel phase gets
faster while the collective seconds stay, a 3x faster MoE can make N ranks scale worse - the seed's
"Amdahl trap" (2.44x -> ~1.1x): `after_speedup` recomputes the model for such a change.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import BadInput

COMM_MODELS = ("ring", "tree")
#: the largest world the crossover search considers
N_MAX = 4096


@dataclass(frozen=True)
class WorldPoint:
    """One measured world size: the median step wall time and the collective seconds within it."""

    world: int
    step_s: float
    collective_s: float = 0.0

    @property
    def collective_share(self) -> float:
        return self.collective_s / self.step_s if self.step_s > 0 else float("nan")

    @property
    def compute_s(self) -> float:
        return max(0.0, self.step_s - self.collective_s)


def _shape(model: str, n: float) -> float:
    return (n - 1) if model == "ring" else math.log2(n)


@dataclass
class AmdahlFit:
    t1_s: float  # one-rank step time
    serial: float  # s
    comm_model: str  # "ring" | "tree"
    kappa: float  # c(N) = kappa * shape(N), in units of T1
    points: list[WorldPoint] = field(default_factory=list)

    @property
    def parallel(self) -> float:
        return 1.0 - self.serial

    def comm(self, n: float) -> float:
        return self.kappa * _shape(self.comm_model, n) if n > 1 else 0.0

    def step_fraction(self, n: float) -> float:
        return self.serial + self.parallel / n + self.comm(n)

    def speedup(self, n: float) -> float:
        return 1.0 / self.step_fraction(n)

    def crossover(self, n_max: int = N_MAX) -> int | None:
        """The smallest N with speedup(N + 1) <= speedup(N); None if ranks keep paying up to n_max."""
        for n in range(1, n_max):
            if self.step_fraction(n + 1) >= self.step_fraction(n):
                return n
        return None

    def best_power_of_two(self, n_max: int = N_MAX) -> int:
        ns = [2 ** k for k in range(int(math.log2(n_max)) + 1)]
        return min(ns, key=lambda n: (self.step_fraction(n), n))

    def continuous_optimum(self) -> float | None:
        """argmin of s + p/N + c(N) over real N (None without a collective cost)."""
        if self.kappa <= 0 or self.parallel <= 0:
            return None
        if self.comm_model == "ring":
            return math.sqrt(self.parallel / self.kappa)
        return self.parallel * math.log(2) / self.kappa

    def as_dict(self, worlds: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)) -> dict[str, Any]:
        return {"t1_s": self.t1_s, "serial_fraction": self.serial, "parallel_fraction": self.parallel,
                "comm_model": self.comm_model, "comm_kappa": self.kappa,
                "speedup": {n: self.speedup(n) for n in worlds},
                "measured_speedup": {p.world: self.t1_s / p.step_s for p in self.points if p.step_s > 0},
                "crossover_world": self.crossover(), "best_power_of_two": self.best_power_of_two(),
                "continuous_optimum": self.continuous_optimum(),
                "points": [asdict(p) | {"collective_share": p.collective_share} for p in self.points]}


def fit(points: list[WorldPoint]) -> AmdahlFit:
    """Fit s and c(N) to measured points; one of them must be the one-rank step (world 1)."""
    by_world = {p.world: p for p in points}
    if 1 not in by_world:
        raise BadInput("Amdahl's fit needs the one-rank step time (world 1) as its baseline; measure --worlds 1,...")
    multi = sorted((p for p in points if p.world > 1), key=lambda p: p.world)
    if not multi:
        raise BadInput("Amdahl's fit needs at least one measurement on more than one rank (e.g. --worlds 1,2)")
    for p in points:
        if not (p.step_s > 0 and math.isfinite(p.step_s)) or p.collective_s < 0:
            raise BadInput(f"world {p.world}: step time {p.step_s} / collective time {p.collective_s} are not a "
                           f"measurement (need step > 0, collectives >= 0)")
    t1 = by_world[1].step_s
    # (T_N - C_N) / T1 = s + (1 - s) / N  ->  a_N - 1/N = s (1 - 1/N): least squares through the origin
    xs = [1 - 1 / p.world for p in multi]
    ys = [p.compute_s / t1 - 1 / p.world for p in multi]
    s = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    s = min(1.0, max(0.0, s))
    best = None
    for model in COMM_MODELS:
        xs = [_shape(model, p.world) for p in multi]
        cs = [p.collective_s / t1 for p in multi]
        kappa = max(0.0, sum(x * c for x, c in zip(xs, cs)) / sum(x * x for x in xs))
        err = sum((kappa * x - c) ** 2 for x, c in zip(xs, cs))
        if best is None or err < best[0] * (1 - 1e-9):
            best = (err, model, kappa)
    _, model, kappa = best
    return AmdahlFit(t1, s, model, kappa, sorted(points, key=lambda p: p.world))


def after_speedup(f: AmdahlFit, share: float, factor: float) -> AmdahlFit:
    """The model after a parallel phase taking `share` of T1 got `factor` times faster.

    The phase leaves the parallel part (it divided over ranks); the serial work and the collective
    seconds stay as they were, so both grow as fractions of the new, shorter T1.
    """
    if not 0 <= share <= f.parallel + 1e-12:
        raise BadInput(f"a phase of share {share:g} cannot come out of a parallel part of {f.parallel:g}")
    if factor <= 0:
        raise BadInput(f"speedup factor {factor:g} must be positive")
    t1_new = 1.0 - share + share / factor  # in units of the old T1
    return AmdahlFit(f.t1_s * t1_new, f.serial / t1_new, f.comm_model, f.kappa / t1_new, [])


def collective_report(points: list[WorldPoint]) -> dict[str, Any]:
    """What `sparkops diagnose` shows about collectives: the share of the step at each measured world,
    the fitted model, its crossover and a verdict sentence. Works with a single multi-rank point
    too (then without the fit: it needs world 1)."""
    multi = [p for p in points if p.world > 1]
    out: dict[str, Any] = {"share_by_world": {p.world: p.collective_share for p in sorted(points, key=lambda p: p.world)}}
    if multi:
        top = max(multi, key=lambda p: p.world)
        out.update(world=top.world, collective_share=top.collective_share, step_s=top.step_s,
                   collective_s=top.collective_s)
    if any(p.world == 1 for p in points) and multi:
        f = fit(points)
        out["amdahl"] = f.as_dict()
        cross = f.crossover()
        top = max(multi, key=lambda p: p.world)
        out["why"] = (f"at {top.world} ranks collectives take {100 * top.collective_share:.0f}% of the step; "
                      f"serial fraction s = {f.serial:.3g}, collectives c(N) = {f.kappa:.3g} x "
                      f"{'(N-1)' if f.comm_model == 'ring' else 'log2 N'} of T1: the speedup peaks at "
                      f"{'N = %d' % cross if cross else 'more than %d ranks' % N_MAX} "
                      f"({f.speedup(cross or N_MAX):.3g}x); best power of two {f.best_power_of_two()}")
    return out


#: above this share of the step spent in collectives, collectives are the binding ceiling
COLLECTIVES_BIND = 0.5


def collectives_verdict(report: dict[str, Any]) -> dict[str, Any]:
    """From `collective_report`: do collectives bind, and what would lifting them buy?

    Lifting = collectives that cost nothing (overlapped with compute, or fused away): the step
    loses its collective time, a gain of 1 / (1 - share). Binding when they are over half the step.
    """
    share = report.get("collective_share")
    if share is None or not math.isfinite(share):
        return {"binding": False, "predicted_gain": None, "why": "no multi-rank measurement: collectives unknown"}
    gain = 1.0 / max(1e-9, 1.0 - share)
    binds = share >= COLLECTIVES_BIND
    why = (f"collectives take {100 * share:.0f}% of a {report.get('world')}-rank step"
           + (" - the binding ceiling" if binds else "") + f"; free collectives would give {gain:.3g}x")
    if "why" in report:
        why += f". {report['why']}"
    return {"binding": binds, "predicted_gain": gain, "why": why}
