"""The summary's statistics (gradlanes.report.stats) on their own: what each interval is, which
values are left out, and the error a ratio that cannot be averaged on logs gets."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from gradlanes.report.stats import geometric_mean_ci, mean_ci


def _t_half(values: list[float], level: float) -> float:
    """The Student-t half-width, in the operations and order gradlanes.report.stats uses: a result
    equal to its bit for bit says the project computed this formula in float64, nothing else."""
    data = np.array(values, np.float64)
    return float(scipy_stats.t.ppf((1 + level) / 2, data.size - 1) * data.std(ddof=1) / math.sqrt(data.size))


def test_mean_ci_leaves_out_missing_and_nan_values():
    """Lanes that did not run a seed report None or NaN: neither counts as a value."""
    assert mean_ci([None, 93.0, math.nan, 95.0]) == mean_ci([93.0, 95.0])
    assert mean_ci([None, 2.0])[0] == 2.0
    assert all(math.isnan(v) for v in mean_ci([None, math.nan]))


def test_mean_ci_averages_in_float64_whatever_the_values_dtype():
    """float32 timings summed in float32 lose the 1 beside 2^24; in float64 the mean is 1/3."""
    values = [np.float32(2**24), np.float32(1.0), np.float32(-(2**24))]
    mean, low, high = mean_ci(values)
    # Exact: the float64 sum of these integers is exact (1) and one division rounds it to 1 / 3.
    assert mean == 1 / 3
    half = _t_half([2.0**24, 1.0, -(2.0**24)], 0.95)
    assert (low, high) == (mean - half, mean + half)  # exact: the same float64 operations


def test_geometric_mean_ci_is_mean_ci_on_logs_at_95_percent_by_default():
    ratios = [1.5, 2.0, 3.0, 2.5]
    logs = [math.log(r) for r in ratios]
    mean, low, high = geometric_mean_ci(ratios)
    centre, half = float(np.mean(logs)), _t_half(logs, 0.95)
    # Exact: math.log, NumPy's mean, the half-width and math.exp, in the order the project uses.
    assert (mean, low, high) == (math.exp(centre), math.exp(centre - half), math.exp(centre + half))
    assert geometric_mean_ci(ratios, level=0.5)[2] < high  # a narrower level, a narrower interval


def test_geometric_mean_ci_leaves_out_missing_and_nan_ratios():
    assert geometric_mean_ci([None, 2.0, math.nan, 8.0]) == geometric_mean_ci([2.0, 8.0])
    assert geometric_mean_ci([None, 4.0])[0] == math.exp(math.log(4.0))  # exact: the same two calls


@pytest.mark.parametrize("bad", [0.0, -1.5])
def test_a_ratio_that_is_not_positive_is_refused_by_name(bad):
    message = r"ratios must be positive to be averaged on logs, got \[2\.0, " + str(bad)
    with pytest.raises(ValueError, match=message):
        geometric_mean_ci([2.0, bad])
