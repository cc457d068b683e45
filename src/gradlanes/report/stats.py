"""The summary's statistics: a mean over seeds with its Student-t interval, and the same on logs
(a geometric mean, for ratios).

Kept apart from the tables so that the arithmetic is tested, and read, on its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from scipy import stats


def mean_ci(values: Iterable[float | None], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t confidence interval; a single value has no interval (nan)."""
    data = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if data.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(data.mean())
    if data.size < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf((1 + level) / 2, data.size - 1) * data.std(ddof=1) / math.sqrt(data.size))
    return mean, mean - half, mean + half


def geometric_mean_ci(ratios: Iterable[float | None], level: float = 0.95) -> tuple[float, float, float]:
    """Geometric mean of positive ratios and its interval: `mean_ci` on the logs, exponentiated.

    Ratios multiply, so their natural average is the geometric one: a lane twice as slow on one
    seed and twice as fast on another is, on the whole, as fast (1×), not 1.25× slower; on logs the
    interval is symmetric in that sense, and it can never reach below zero.
    """
    data = [r for r in ratios if r is not None and not math.isnan(r)]
    if any(r <= 0 for r in data):
        raise ValueError(f"ratios must be positive to be averaged on logs, got {data}")
    mean, low, high = mean_ci((math.log(r) for r in data), level)
    return math.exp(mean), math.exp(low), math.exp(high)
