"""The one statistic of the summary: a mean over seeds with its Student-t interval.

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
