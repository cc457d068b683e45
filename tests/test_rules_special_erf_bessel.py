"""erf, erfc, erf_inv, bessel_i0e and bessel_i1e rules at their branch thresholds and clamps.

tests/test_rules_special.py compares these rules with XLA within budgets derived from XLA's
roundings; a rule that takes the wrong branch exactly at a threshold, the float64 path for a float32
operand, or a wrong saturation moves a result by an ulp or two, which those budgets allow. The tests
here need no budget: they check same-engine relations that hold bit for bit (the rule at a threshold
equals the branch the algorithm names, evaluated here independently in float64 with NumPy's exp),
exact values (erf saturates to exactly +-1), or, where a wrong branch is far off, XLA's own value
within the budgets tests/special_budgets.py derives.
"""

from __future__ import annotations

import numpy as np
import pytest
from special_budgets import check_rule

from gradlanes.program.rules import special

# overflow and inf - inf in the unused branch (evaluated everywhere) are expected
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), (got, want)


def _horner(t, coefficients):
    """Horner's rule in float64, highest power first (independent of the module's helper)."""
    result = np.zeros_like(t)
    for c in coefficients:
        result = result * t + c
    return result


# ---- erf: saturation ------------------------------------------------------------------------------
def test_erf_is_exactly_one_at_and_beyond_saturation():
    # XLA's float32 erf returns exactly +-1 for |x| >= 3.8325068... (the ratio there is below 1):
    # `>=`, so the saturation point itself is 1 too (float16 and bfloat16 compute in float32).
    sat = special._ERF_SATURATION32
    x = np.array([sat, np.nextafter(sat, np.float32(np.inf)), 4.0, 5.0, 10.0, 1e30, np.inf], F32)
    x = np.concatenate([x, -x])
    _same_bits(special._erf(x), np.copysign(np.ones_like(x), x))


# ---- erfc: the branch taken at |x| = 1, 2 (float32) and 1, 8 (float64) ----------------------------
def _erfc32_tail(x: np.ndarray, coefficients) -> np.ndarray:
    """Cephes' float32 erfc for |x| >= 1 as the rule evaluates it: exp(-x^2) / x * P(1/x^2), +2 below 0."""
    square = x * x
    tail = np.exp(-square.astype(F64)) * (np.float32(1) / x).astype(F64)
    tail *= _horner((np.float32(1) / square).astype(F64), coefficients)
    return (tail + (1.0 - np.copysign(1.0, x))).astype(F32)


@pytest.mark.parametrize("edge", [1.0, 2.0, 1.5, 3.0])
def test_float32_erfc_at_a_branch_start_takes_that_branch(edge):
    # the P branch is 1 <= |x| < 2, the R branch |x| >= 2: at exactly 1 and 2 the new branch applies
    x = np.array([edge, -edge], F32)
    coefficients = special._ERFC_P32 if edge < 2 else special._ERFC_R32
    _same_bits(special._erfc(x), _erfc32_tail(x, coefficients))


def test_float32_erfc_below_one_is_the_float32_polynomial():
    # below |x| = 1 a float32 erfc is 1 - x T(x^2) with Cephes' float32 T (not the float64 T / U)
    x = np.array([0.5, -0.5, 0.25, 0.75, 0.99999994, -0.99999994, 0.1], F32)
    want = (1.0 - x.astype(F64) * _horner((x * x).astype(F64), special._ERF_T32)).astype(F32)
    _same_bits(special._erfc(x), want)


@pytest.mark.parametrize("edge", [1.0, 8.0, 4.0, 20.0])
def test_float64_erfc_at_a_branch_start_takes_that_branch(edge):
    # float64: P/Q for 1 <= |x| < 8, R/S for |x| >= 8; at exactly 1 and 8 the new branch applies
    x = np.array([edge, -edge], F64)
    numerator, denominator = (
        (special._ERFC_P64, special._ERFC_Q64) if edge < 8 else (special._ERFC_R64, special._ERFC_S64)
    )
    tail = np.exp(-(x * x)) * _horner(np.abs(x), numerator) / _horner(np.abs(x), denominator)
    want = np.where(x > 0, tail, 2.0 - tail)
    _same_bits(special._erfc(x), want)
    # and the value is XLA's: a wrong branch at 8 is far off (R/S fits 1/x, P/Q does not there)
    check_rule("erfc", x)


# ---- erf_inv: the float32 path and the far float64 branch -----------------------------------------
def test_float32_erf_inv_is_the_float32_algorithm():
    # float32: w = -log(1 - x^2) from the float32 product, Giles' two float32 polynomials (w < 5 or not)
    x = np.array([0.5, -0.5, 0.9, 0.99, 0.999, 0.9999, 0.99999994, -0.99999994, 0.1, 1e-20], F32)
    w = -np.log(1.0 + (x * -x).astype(F64))
    near = _horner(w - 2.5, special._ERF_INV32_NEAR)
    far = _horner(np.sqrt(w) - 3.0, special._ERF_INV32_FAR)
    want = (np.where(w < 5.0, near, far) * x.astype(F64)).astype(F32)
    _same_bits(special._erf_inv(x), want)


def test_float64_erf_inv_near_one_is_erf_inv():
    # w = -log1p(-x^2) >= 16 (1 - |x| below about 1e-7) is Giles' far branch, sqrt(w) - 5: a shift
    # off by one or of the wrong sign moves erf_inv by 20 % or more, far outside XLA's budget
    x = 1.0 - np.array([1e-8, 1e-10, 1e-12, 1e-14, 2.0**-52, 2.0**-53], F64)
    check_rule("erf_inv", np.concatenate([x, -x]))


def test_float64_erf_inv_takes_log1p_below_its_switch():
    # w = -log1p(-x^2): XLA's log1p is Cephes' rational form for |x^2| < sqrt(2) - 1 (|x| < 0.6436),
    # which is not log(1 + -x^2) rounded: erf_inv's budget counts the same log1p on both sides, and
    # log(1 - x^2) instead moves 0.63 < |x| < 0.6436 past it (a mutation survivor)
    x = np.linspace(0.3, 0.6435, 64)
    check_rule("erf_inv", np.concatenate([x, -x]))


# ---- bessel_i0e, bessel_i1e: float32 tables and the threshold at |x| = 8 --------------------------
def _bessel_parts(x: np.ndarray, a, b):
    """The near series and the tail, each everywhere, with the module's Clenshaw steps."""
    ax = np.abs(x)
    near = special._chebyshev(special._mul_add(ax, x.dtype.type(0.5), x.dtype.type(-2.0)), a)
    with np.errstate(all="ignore"):
        tail = special._bessel_tail(ax, b)
    return ax, near, tail


_I = {
    ("i0e", F32): (special._I0E_A32, special._I0E_B32),
    ("i0e", F64): (special._I0E_A64, special._I0E_B64),
    ("i1e", F32): (special._I1E_A32, special._I1E_B32),
    ("i1e", F64): (special._I1E_A64, special._I1E_B64),
}


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("which", ["i0e", "i1e"])
def test_bessel_uses_its_dtype_tables_and_switches_past_eight(which, dtype):
    # XLA's float32 i0e/i1e use the float32 Chebyshev tables; |x| <= 8 is the near series (8 included),
    # |x| > 8 the tail in 32/|x| - 2
    base = [0.0, 1e-30, 0.5, 1.0, 3.0, 7.9999995, 8.0, 8.000001, 8.25, 8.5, 8.75, 9.0, 9.5, 20.0, 1e3]
    x = np.array(base, dtype)
    x = np.concatenate([x, -x])
    ax, near, tail = _bessel_parts(x, *_I[which, dtype])
    value = np.where(ax <= 8, near, tail)
    if which == "i1e":
        value = np.where(ax <= 8, ax * near, tail) * np.where(x == 0, x, np.copysign(dtype.type(1), x))
        got = special._bessel_i1e(x)
    else:
        got = special._bessel_i0e(x)
    _same_bits(got, value.astype(dtype))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_bessel_i1e_is_odd_and_keeps_signed_zero_and_nan(dtype):
    x = np.array([0.0, -0.0, np.nan, 1.0, 8.0, 10.0, np.inf], dtype)
    got = special._bessel_i1e(x)
    assert np.signbit(got[0]) == 0 and np.signbit(got[1]) == 1 and got[0] == 0 and got[1] == 0
    assert np.isnan(got[2])
    _same_bits(special._bessel_i1e(-x[3:]), -got[3:])
