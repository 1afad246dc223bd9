"""The roofline: the fastest a token can possibly go on this box, and what share of it a figure is.

time per token >= max(bytes / bandwidth, FLOPs / matmul rate), both ceilings measured here
(`ceilings.py`), the costs from `costs.py`. A figure above 100% of that ceiling is not a win, it is
a measurement error (anchors section 6: the wrong rows, a short context, a cached working set)
and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CheckFailed
from .ceilings import Ceilings
from .costs import TokenCost


class AboveCeiling(CheckFailed):
    """A figure faster than the roofline allows: a measurement error, refused."""


@dataclass
class RooflinePoint:
    rate: float  # measured tokens/s
    ceiling_rate: float  # the roofline's tokens/s
    bound: str  # "bandwidth" | "compute": which ceiling the roofline is set by
    time_bandwidth: float  # seconds per token at the bandwidth ceiling
    time_compute: float  # seconds per token at the compute ceiling
    intensity: float  # FLOP per byte
    achieved_flops: float  # FLOP/s the figure implies
    achieved_bandwidth: float  # bytes/s the figure implies

    @property
    def fraction(self) -> float:
        return self.rate / self.ceiling_rate if self.ceiling_rate else float("inf")

    def as_dict(self) -> dict:
        return {"rate": self.rate, "ceiling_rate": self.ceiling_rate, "fraction": self.fraction, "bound": self.bound,
                "time_bandwidth": self.time_bandwidth, "time_compute": self.time_compute,
                "intensity": self.intensity, "achieved_flops": self.achieved_flops,
                "achieved_bandwidth": self.achieved_bandwidth}


def point(rate: float, cost: TokenCost, ceilings: Ceilings) -> RooflinePoint:
    t_bw = cost.bytes / ceilings.read_bandwidth
    t_fl = cost.flops / ceilings.matmul_flops
    floor = max(t_bw, t_fl)
    return RooflinePoint(rate=rate, ceiling_rate=1.0 / floor if floor > 0 else float("inf"),
                         bound="bandwidth" if t_bw >= t_fl else "compute", time_bandwidth=t_bw, time_compute=t_fl,
                         intensity=cost.intensity, achieved_flops=rate * cost.flops,
                         achieved_bandwidth=rate * cost.bytes)


def refuse_above_ceiling(p: RooflinePoint, what: str) -> None:
    """Raise AboveCeiling when a figure claims more than 100% of its roofline."""
    if p.fraction > 1.0:
        raise AboveCeiling(
            f"{what}: {p.rate:.4g} tok/s is {100 * p.fraction:.0f}% of the roofline ({p.ceiling_rate:.4g} tok/s, "
            f"{p.bound}-bound: {p.achieved_bandwidth / 1e9:.4g} GB/s and {p.achieved_flops / 1e12:.4g} TFLOP/s "
            f"implied). No engine beats its ceiling: this is a measurement error (a truncated context, the wrong "
            f"rows, a working set served from cache, a miscounted byte). The figure is refused and not recorded")
