"""igamma, igammac and igamma_grad_a rules at the branches XLA's algorithm takes.

tests/test_rules_special.py checks these rules against XLA on random operands; mutation testing
(tools/, mutmut) found branch conditions, masks and loop limits that those operands never reach.
These tests call the rules' NumPy functions directly on operands chosen for each branch: the exact
special values JAX's jax/_src/lax/special.py assigns (NaN for domain errors, 0 or 1 at x = 0 and
x = inf, 0 at a = 0), and the values against XLA's within the budgets tests/special_budgets.py
derives, on one array that mixes every branch (so a mask that picks the wrong elements shows) and
on each element alone (so no other element keeps a loop running).
"""

from __future__ import annotations

import numpy as np
import pytest
from special_budgets import check_rule

from gradlanes.program.rules import special

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def arrays(a, x, dtype):
    return np.array(a, np.float64).astype(dtype), np.array(x, np.float64).astype(dtype)


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_domain_errors_are_nan_when_one_operand_is_nan(dtype):
    # NaN in only one operand, with the other at 0 or inf, where the branches would give 0 or 1
    a, x = arrays(
        [np.nan, np.nan, 1.0, 1.0, -1.0, 0.0, 2.0], [0.0, np.inf, np.nan, np.nan, 1.0, 0.0, -1.0], dtype
    )
    for fn in (special._igamma, special._igammac, special._igamma_grad_a):
        got = fn(a, x)
        assert got.dtype == dtype
        assert np.isnan(got).all(), (fn.__name__, got)
    grad = special._igamma_grad_a(*arrays([0.0, np.nan, 1.0], [1.0, 1.0, np.nan], dtype))
    assert np.isnan(grad).all()


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_special_points_take_jax_values(dtype):
    # x = 0: P = 0, Q = 1, dP/da = 0; x = inf: P = 1, Q = 0; a = 0 < x: Q = 0, P = 1
    a, x = arrays([1.0, 2.5, 30.0, 1.0, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, np.inf, np.inf, 1.0, 5.0], dtype)
    p, q = special._igamma(a, x), special._igammac(a, x)
    np.testing.assert_array_equal(p, np.array([0, 0, 0, 1, 1, 1, 1], dtype))
    np.testing.assert_array_equal(q, np.array([1, 1, 1, 0, 0, 0, 0], dtype))
    g = special._igamma_grad_a(a[:3], x[:3])
    np.testing.assert_array_equal(g, np.zeros(3, dtype))


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_underflowing_ax_gives_limits(dtype):
    # exp(a log x - x - lgamma a) below the smallest float: P = 1 (x >> a) or P = 0 (a >> x)
    a, x = arrays([1.0, 2.0, 1e4 if dtype == F64 else 300.0], [2e3, 1e3, 1.0], dtype)
    np.testing.assert_array_equal(special._igamma(a, x), np.array([1, 1, 0], dtype))
    np.testing.assert_array_equal(special._igammac(a, x), np.array([0, 0, 1], dtype))
    np.testing.assert_array_equal(special._igamma_grad_a(a, x), np.zeros(3, dtype))


# operands in every branch: x < 1 (series), x < a (series), x == a, x == 1, x in (1, 2],
# x > 1 and x > a (continued fraction), small a, large a, each as one array so masks matter
A = [0.5, 3.0, 2.0, 1.0, 0.3, 0.7, 1.5, 0.5, 40.0, 5.0, 2.0, 1.0, 0.1, 1e-3, 60.0, 0.9, 3.0, 1.0, 10.0, 25.0]
X = [0.5, 2.0, 2.0, 1.0, 1.0, 1.5, 1.5, 4.0, 30.0, 20.0, 0.01, 1.9, 3.0, 0.5, 60.0, 1.0, 3.0, 2.0, 15.0, 25.0]


RULES = {"igamma": special._igamma, "igammac": special._igammac, "igamma_grad_a": special._igamma_grad_a}


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("name", ["igamma", "igammac", "igamma_grad_a"])
def test_values_match_xla_in_every_branch(name, dtype):
    a, x = arrays(A, X, dtype)
    check_rule(name, a, x)
    rule = RULES[name]
    together = rule(a, x)
    for i in range(len(A)):  # each element alone: no other element keeps a loop running
        np.testing.assert_array_equal(rule(a[i : i + 1], x[i : i + 1]), together[i : i + 1])


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_igammac_just_past_one_with_a_near_zero_takes_the_continued_fraction(dtype):
    # x in (1, 2) and a << x: igammac's series runs for x < 1 only; the series summed here instead
    # (a threshold of 2) leaves Q about 1e-4 of itself off, past the budget (a mutation survivor)
    a = np.array([0.038041607, 0.044275380662415875, 0.02, 0.01, 0.03], dtype)
    x = np.array([1.9091856, 1.2793207182411797, 1.5, 1.8, 1.1], dtype)
    check_rule("igammac", a, x)


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_igammac_at_one_with_a_below_one_takes_the_continued_fraction(dtype):
    # x = 1 > a: not x < 1, so the continued fraction; the series there (x <= 1) is past the budget
    a = np.linspace(0.02, 0.98, 10).astype(dtype)
    for start in range(0, 10, 5):
        check_rule("igammac", a[start : start + 5], np.ones(5, dtype))


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_igammac_of_a_equal_to_one_runs_its_series(dtype):
    # a = 1 is no special case (only a = 0 is): Q(1, x) = exp(-x) from the series for x < 1, the
    # fraction beyond; a series left at its first term there is off by orders of magnitude
    x = np.array([0.05, 0.3, 0.55, 0.8, 0.95], dtype)
    check_rule("igammac", np.ones(5, dtype), x)
    check_rule("igammac", np.ones(5, dtype), x * 10)
