"""Timing a region honestly, and turning repeated timings into a median, pair ratios and a tier.

On CUDA the region is bracketed by CUDA events on the current stream (device time, not host time);
on the CPU by perf_counter. Warm-up is the caller's job and is never passed in here.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import torch

#: the smallest effect we call a win or a regression, whatever the measured spread (2%)
MIN_EFFECT = 0.02
#: a win or a regression must pass a two-sided sign test over the pairs at this level
SIGN_TEST_P = 0.05


class RegionTimer:
    """`with timer: work` then `timer.seconds`; CUDA events on a CUDA device, perf_counter otherwise."""

    def __init__(self, device: str):
        self.cuda = device == "cuda"
        self.seconds = float("nan")

    def __enter__(self) -> "RegionTimer":
        if self.cuda:
            torch.cuda.synchronize()
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        if self.cuda:
            self._end.record()
            self._end.synchronize()
            self.seconds = self._start.elapsed_time(self._end) / 1e3
        else:
            self.seconds = time.perf_counter() - self._t0


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


@dataclass(frozen=True)
class Spread:
    """A sample of positive numbers summarised the robust way."""

    median: float
    lo: float  # 25th percentile
    hi: float  # 75th percentile
    n: int

    @classmethod
    def of(cls, xs: list[float]) -> "Spread":
        if not xs:
            raise ValueError("no samples")
        s = sorted(xs)
        if len(s) == 1:
            return cls(s[0], s[0], s[0], 1)
        q = statistics.quantiles(s, n=4, method="inclusive")
        return cls(statistics.median(s), q[0], q[2], len(s))

    @property
    def relative_iqr(self) -> float:
        return (self.hi - self.lo) / self.median if self.median else float("inf")


def pair_ratios(a_rates: list[float], b_rates: list[float]) -> list[float]:
    """Per ABAB pair: B's rate over A's (> 1 means B is faster)."""
    if len(a_rates) != len(b_rates):
        raise ValueError(f"{len(a_rates)} A figures but {len(b_rates)} B figures: not pairs")
    return [b / a for a, b in zip(a_rates, b_rates)]


def noise_floor(ratios: list[float]) -> float:
    """The relative change below which a difference is noise: max(2%, the IQR of the ratios)."""
    return max(MIN_EFFECT, Spread.of(ratios).relative_iqr if len(ratios) > 1 else MIN_EFFECT)


def sign_test(agree: int, n: int) -> float:
    """Two-sided sign-test p-value: the chance that a fair coin gives >= `agree` of `n` one way."""
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(agree, n + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def tier_of_pairs(ratios: list[float]) -> str:
    """'win' / 'regression' when the median ratio clears the noise floor AND the pairs pass a sign
    test (p < 0.05: at least 6 of 6, 7 of 7, 8 of 9, 9 of 10 ... pairs agree on the direction).

    Anything else is 'none': a change that cannot be told apart from re-running the same code
    (an A/A run on a busy 2-core box easily shows +40% over three pairs).
    """
    spread = Spread.of(ratios)
    floor = noise_floor(ratios)
    n = len(ratios)
    up, down = sum(r > 1 for r in ratios), sum(r < 1 for r in ratios)
    if spread.median >= 1 + floor and sign_test(up, n) < SIGN_TEST_P:
        return "win"
    if spread.median <= 1 - floor and sign_test(down, n) < SIGN_TEST_P:
        return "regression"
    return "none"


def tier_against(value: float, before: float | None, spread: Spread) -> str:
    """Tier of a lone figure against a previous best (no pairs): the repeats' own IQR is the noise."""
    if before is None or before <= 0:
        return "none"
    floor = max(MIN_EFFECT, spread.relative_iqr)
    ratio = value / before
    if ratio >= 1 + floor:
        return "win"
    if ratio <= 1 - floor:
        return "regression"
    return "none"
