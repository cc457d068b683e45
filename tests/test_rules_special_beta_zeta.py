"""Targeted checks of the incomplete beta, zeta, polygamma, digamma and lgamma rules' branches.

tests/test_rules_special.py compares these rules with XLA over random inputs, which seldom reach
their domain edges, the small-a branch of the incomplete beta, the continued fraction's step limit
or the zeta's overflowing tail. These tests call the compute functions of
gradlanes.program.rules.special directly with inputs chosen to reach each branch, and check
facts that need no budget (a domain value is nan, 0, 1 or inf, a result keeps its dtype, the loop
stops where the algorithm says, an exactly folded argument gives the unfolded result bit for bit)
or agree with XLA within the budgets tests/special_budgets.py derives, which a wrong branch
(errors in the leading digits) exceeds.
"""

from __future__ import annotations

import numpy as np
import pytest
from special_budgets import check_rule

from gradlanes.program.rules import special

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
INF, NAN = np.inf, np.nan


def _f64(*values):
    return [np.asarray(v, dtype=F64) for v in values]


def _betainc(a, b, x, dtype=F64):
    a, b, x = np.broadcast_arrays(*(np.asarray(v, dtype=dtype) for v in (a, b, x)))
    with np.errstate(all="ignore"):
        out = special._regularized_incomplete_beta(a, b, x)
    assert out.dtype == dtype and out.shape == a.shape
    return out


def test_betainc_domain_edges_are_nan_zero_or_one():
    # (a, b, x, expected): XLA's special cases as jax.lax's regularized_incomplete_beta sets them
    cases = [
        (NAN, 2.0, 0.5, NAN),
        (2.0, NAN, 0.5, NAN),
        (2.0, 2.0, NAN, NAN),
        (-1.0, 2.0, 0.5, NAN),
        (2.0, -1.0, 0.5, NAN),
        (2.0, 2.0, -0.5, NAN),
        (2.0, 2.0, 1.5, NAN),
        (0.0, 0.0, 0.5, NAN),
        (0.0, INF, 0.5, 1.0),
        (INF, INF, 0.5, NAN),
        (0.0, 2.0, 0.5, 1.0),
        (0.0, 2.0, 0.0, 0.0),
        (2.0, 0.0, 0.5, 0.0),
        (2.0, 0.0, 1.0, 1.0),
        (2.0, INF, 0.5, 1.0),
        (INF, 2.0, 0.5, 0.0),
        (2.0, INF, 0.0, 0.0),
        (INF, 2.0, 1.0, 1.0),
    ]
    a, b, x, want = (np.array(column) for column in zip(*cases, strict=True))
    got = _betainc(a, b, x)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [F64, F32], ids=str)
def test_betainc_agrees_with_xla_on_both_sides_of_the_switch(dtype):
    # a grid with x on either side of (a + 1) / (a + b + 2), where the symmetry switch is taken
    a, b, x = np.meshgrid([0.5, 1.0, 2.5, 7.0, 30.0], [0.5, 1.0, 3.0, 12.0], [0.05, 0.3, 0.5, 0.7, 0.95])
    check_rule("regularized_incomplete_beta", *(v.ravel().astype(dtype) for v in (a, b, x)))


_TINY = {F64: float(np.finfo(F64).tiny), F32: float(np.finfo(F32).tiny)}


@pytest.mark.parametrize(
    ("dtype", "a"),
    [(F64, 3e-308), (F64, 5.5e-308), (F32, 2e-38), (F32, 3e-38)]
    + [(dtype, k * _TINY[dtype]) for dtype in (F64, F32) for k in (1.0, 2.0)],
    ids=str,
)
def test_betainc_either_side_of_the_tiny_a_branch_agrees_with_xla(dtype, a):
    # below 2 * tiny (float64 4.5e-308, float32 2.4e-38) the rule uses gamma(a) = gamma(a + 1) / a;
    # I_x(a, b) is then 1 - O(a): both sides of the switch, all normal numbers, the smallest normal
    # and twice it included. With b that small instead and x above the symmetry switch, the swap puts
    # it first: I_x(a, b) = 1 - I_(1-x)(b, a) is then O(b), where a wrong branch is off by 100 %.
    small = np.full(3, a, dtype)
    b = np.array([2.5, 0.7, 9.0], dtype)
    x = np.array([0.3, 0.6, 0.1], dtype)
    check_rule("regularized_incomplete_beta", small, b, x)
    check_rule("regularized_incomplete_beta", np.array([0.5, 2.0, 9.0], dtype), small, np.full(3, 0.9, dtype))


@pytest.mark.parametrize("dtype", [F64, F32], ids=str)
def test_betainc_of_two_tiny_parameters_agrees_with_xla(dtype):
    # a and b both below 2 * tiny: gamma(a + 1) / a is used and lgamma(b) - lgamma(a + b) is not 0
    # (elsewhere a + b rounds to b), so its sign in the exponent counts; I_x(a, b) is near b / (a + b)
    tiny = _TINY[dtype]
    a = np.array([1.5 * tiny, tiny, 1.9 * tiny], dtype)
    b = np.array([1.5 * tiny, 1.2 * tiny, tiny], dtype)
    check_rule("regularized_incomplete_beta", a, b, np.array([0.3, 0.5, 0.2], dtype))


class _Steps:
    """Records the iterations at which the continued fraction asks for a partial numerator."""

    def __init__(self, monkeypatch):
        self.seen: list[int] = []
        original = special._betainc_numerator

        def numerator(iteration, a, b, x):
            self.seen.append(iteration)
            return original(iteration, a, b, x)

        monkeypatch.setattr(special, "_betainc_numerator", numerator)


def _lentz_stop(a, b, x) -> int:
    """The last iteration of Lentz's loop as the algorithm defines it (threshold eps / 2)."""
    dtype = a.dtype
    steps = 200 if dtype == F32 else 600
    small = dtype.type(np.finfo(dtype).eps / 2)
    one = dtype.type(1.0)
    c, d = np.full_like(x, small), np.zeros_like(x)
    for iteration in range(1, steps):
        n = special._betainc_numerator(iteration, a, b, x)
        c = one + n / c
        c = np.where(np.abs(c) < small, small, c)
        d = special._mul_add(n, d, one)
        d = one / np.where(np.abs(d) < small, small, d)
        if not (np.abs(special._mul_add(c, d, -one)) >= small).any():
            return iteration
    return steps - 1


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize(
    ("a", "b", "x"), [(2.0, 3.0, 0.2), (0.5, 0.5, 0.3), (10.0, 2.0, 0.6), (30.0, 40.0, 0.4)]
)
def test_continued_fraction_stops_where_it_converges(monkeypatch, dtype, a, b, x):
    a, b, x = (np.array([v], dtype) for v in (a, b, x))
    want = _lentz_stop(a, b, x)
    steps = _Steps(monkeypatch)
    h = special._betainc_continued_fraction(a, b, x)
    assert h.dtype == dtype and h.shape == (1,)
    assert steps.seen == list(range(1, want + 1))
    assert want < (200 if dtype == F32 else 600) - 1  # converged early


@pytest.mark.parametrize(("dtype", "limit"), [(F64, 600), (F32, 200)])
def test_continued_fraction_runs_to_its_step_limit(monkeypatch, dtype, limit):
    # huge a and b near x = (a + 1) / (a + b + 2) converge slowly: every step is taken
    a, b, x = (np.array([v], dtype) for v in (1e9, 1e9, 0.5))
    steps = _Steps(monkeypatch)
    special._betainc_continued_fraction(a, b, x)
    assert steps.seen == list(range(1, limit))


def test_continued_fraction_clamps_a_zero_denominator():
    # a = b = x = 1, traced by hand with small = eps / 2 = 2^-53, every step exact: step 1 (numerator
    # 1) gives c = 1 + 2^53, which rounds to even, 2^53, d = 1, h = 2^-53 * 2^53 = 1; step 2's
    # numerator is -1, so c = 1 - 2^-53 and d = 1 + (-1) * 1 = 0, clamped to 2^-53 and inverted to
    # 2^53: h = 2^53 - 1; step 3's numerator is 0 (b - m = 0), so c = d = 1 and the loop stops. A
    # clamp to any other value v gives (1 - 2^-53) / v, none an infinite h.
    a, b, x = _f64([1.0], [1.0], [1.0])
    h = special._betainc_continued_fraction(a, b, x)
    assert h.dtype == F64 and h.tolist() == [2.0**53 - 1]


def test_betainc_numerator_first_is_one():
    a, b, x = _f64([2.0], [3.0], [0.25])
    one = special._betainc_numerator(1, a, b, x)
    assert one.dtype == F64 and one.shape == (1,) and one[0] == 1.0


# ---- zeta and polygamma -----------------------------------------------------------------------
def _zeta(x, q, dtype=F64):
    x, q = np.broadcast_arrays(np.asarray(x, dtype), np.asarray(q, dtype))
    with np.errstate(all="ignore"):
        out = special._zeta(x, q)
    assert out.dtype == dtype and out.shape == x.shape
    return out


def test_zeta_domain_values():
    cases = [(1.0, 2.0, INF), (1.0, -2.0, INF), (0.5, 2.0, NAN), (2.5, -0.5, NAN), (2.0, -3.0, INF),
             (3.0, -3.0, NAN), (1.0, 0.0, INF)]  # fmt: skip
    x, q, want = (np.array(column) for column in zip(*cases, strict=True))
    np.testing.assert_array_equal(_zeta(x, q), want)


@pytest.mark.parametrize("dtype", [F64, F32], ids=str)
def test_zeta_agrees_with_xla(dtype):
    x, q = np.meshgrid([1.5, 2.0, 3.5, 10.0, 40.0], [0.3, 1.0, 2.5, 20.0])
    check_rule("zeta", x.ravel().astype(dtype), q.ravel().astype(dtype))


@pytest.mark.parametrize("dtype", [F64, F32], ids=str)
def test_zeta_below_minus_nine_agrees_with_xla(dtype):
    # q < -9: the ten direct terms straddle zero and the Euler-Maclaurin tail starts at q + 10 < 1,
    # where every term of it counts (dropping the top one moves zeta(2, -8.5) from 6.79 to 10.2)
    x, q = np.meshgrid([2.0, 3.0, 4.0], [-8.5, -9.5, -7.25])
    check_rule("zeta", x.ravel().astype(dtype), q.ravel().astype(dtype))
    n = np.array([1.0, 2.0, 3.0], dtype)
    check_rule("polygamma", n, np.full_like(n, -8.5))


@pytest.mark.parametrize(
    ("dtype", "x", "q", "finite"),
    [(F64, 1e16, 1 - 1e-14, False), (F32, 8800.0, 0.99, False), (F64, 1e15, 1 - 1e-13, True)],
    ids=["f64-nan", "f32-nan", "f64-finite"],
)
def test_zeta_is_nan_where_the_tail_overflows_as_on_xla(dtype, x, q, finite):
    # q just below 1 and a huge x: q^-x is large but finite and (q + 10)^-x underflows to 0. Where
    # the tail's rising factors overflow too, 0 * inf is nan on XLA: chlo's switch to the bare power
    # sum compares with |sum| * smallest_subnormal, which XLA's CPU code reads as 0, so it never
    # fires. The rule must give that nan, not the power sum; with x = 1e15 the tail stays finite.
    x, q = np.array([x], dtype), np.array([q], dtype)
    assert np.isfinite(_zeta(x, q, dtype)).all() == finite
    check_rule("zeta", x, q)


def test_polygamma_non_natural_order_is_nan_and_keeps_dtype():
    n, x = _f64([0.5, -1.0, 1.0, 0.0], [2.0, 2.0, 2.0, 2.0])
    with np.errstate(all="ignore"):
        got = special._polygamma(n, x)
    assert got.dtype == F64
    assert np.isnan(got[:2]).all()
    check_rule("polygamma", n, x)


# ---- digamma and lgamma -----------------------------------------------------------------------
@pytest.mark.parametrize("a", [-3.25, -2.75, -1.625, -5.125, 0.25, 3.5])
def test_digamma_of_folded_argument_equals_unfolded_where_exact(a):
    # a + 1 and a + 3/2 are exact here, so digamma(a + 1, less_one=a) must be digamma(a + 1) bitwise
    less_one = np.array([a])
    x = less_one + 1.0
    with np.errstate(all="ignore"):
        folded = special._digamma(x, less_one=less_one)
        plain = special._digamma(x)
    assert folded.dtype == F64
    np.testing.assert_array_equal(folded, plain)
    check_rule("digamma", x)


def test_digamma_poles_are_nan():
    x = np.array([0.0, -1.0, -7.0, -0.5])
    with np.errstate(all="ignore"):
        got = special._digamma(x)
    assert got.dtype == F64 and np.isnan(got[:3]).all() and np.isfinite(got[3])


def test_lgamma_near_negative_integers_agrees_with_xla():
    # frac(|x|) close to 1: folding it to 1 - frac keeps sin(pi frac) accurate
    check_rule("lgamma", np.array([-(4 - 2.0**-30), -(2 - 2.0**-25), -3.9, -0.75, -10.6]))
