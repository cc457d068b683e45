"""The exact arithmetic under the special-function rules, against exact rational arithmetic.

gradlanes.program.rules.special evaluates XLA's algorithms step by step, and XLA's CPU code fuses a
multiply feeding an add into one FMA. The rules' `_fma32` and `_fma64` stand in for that
instruction, so they have an exact specification: a*b + c computed exactly, rounded once (to
nearest, ties to even). The tests through XLA bound whole functions with budgets wide enough to
hide one wrong last bit of one step; these check the steps themselves, with no budget at all:
`fractions.Fraction` gives the exact value, rounded here by hand.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import mpmath
import numpy as np
import pytest

from gradlanes.program.rules import special

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
# (significand bits, smallest normal exponent, largest exponent) of IEEE binary32 and binary64
FORMAT = {F32: (24, -126, 127), F64: (53, -1022, 1023)}


@pytest.fixture(autouse=True)
def _quiet_floats():
    """The rules run under np.errstate(all="ignore") (special._in_working_precision): inf and nan are
    values there, as on XLA, not events to warn about."""
    with np.errstate(all="ignore"):
        yield


def rounded(exact: Fraction, dtype: np.dtype) -> float:
    """`exact` rounded to nearest, ties to even, in `dtype` (subnormals kept, overflow to inf)."""
    if exact == 0:
        return 0.0
    bits, emin, emax = FORMAT[dtype]
    magnitude = abs(exact)
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    if Fraction(2) ** exponent > magnitude:  # bit lengths overestimate by at most one
        exponent -= 1
    quantum = Fraction(2) ** (max(exponent, emin) - (bits - 1))
    value = round(magnitude / quantum) * quantum  # Fraction's round() ties to even
    if value >= Fraction(2) ** (emax + 1):
        return math.copysign(math.inf, exact)
    return math.copysign(float(value), exact)


def exact_fma(a, b, c) -> Fraction:
    return Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))


def random_floats(rng, dtype, size, exponents) -> np.ndarray:
    """Random significands and signs over a range of binary exponents (no inf or nan)."""
    bits, _, _ = FORMAT[dtype]
    significand = 1 + rng.integers(0, 2 ** (bits - 1), size) / 2 ** (bits - 1)
    sign = rng.choice([-1.0, 1.0], size)
    return (sign * np.ldexp(significand, rng.integers(*exponents, size))).astype(dtype)


def fma32_cases() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Generated triples, exact cancellations, subnormal results, and sums that float64 rounds onto
    a float32 midpoint while the exact sum lies just beside it (the case a plain float64 a*b + c
    rounded to float32 gets wrong)."""
    rng = np.random.default_rng(20261205)
    n = 4000
    a, b, c = (random_floats(rng, F32, n, (-40, 40)) for _ in range(3))
    # c cancels a*b to float32 precision: the result is the product's low bits
    cancel_a, cancel_b = random_floats(rng, F32, n, (-20, 20)), random_floats(rng, F32, n, (-20, 20))
    cancel_c = -(cancel_a.astype(F64) * cancel_b.astype(F64)).astype(F32)
    # results below float32's smallest normal, which FMA rounds to a subnormal
    tiny_a, tiny_b = random_floats(rng, F32, n, (-80, -60)), random_floats(rng, F32, n, (-80, -60))
    tiny_c = random_floats(rng, F32, n, (-149, -126))
    # Midpoints: C has binary exponent E and an odd last bit; a*b = ±2**(E-24) * (1 - 2**-46) is half
    # an ulp of C less a part too small for float64 to keep beside C, so float64's sum is the
    # midpoint and only the sign of the lost part says which way to round.
    exponent = rng.integers(-60, 60, n)
    odd = 1 + (2 * rng.integers(0, 2**22, n) + 1) / 2**23
    big = (rng.choice([-1.0, 1.0], n) * np.ldexp(odd, exponent)).astype(F32)
    half_ulp = np.ldexp(1.0, exponent - 24) * rng.choice([-1.0, 1.0], n)
    mid_a = (half_ulp * (1 + 2**-23)).astype(F32)
    mid_b = np.full(n, 1 - 2**-23, F32)
    return (
        np.concatenate([a, cancel_a, tiny_a, mid_a]),
        np.concatenate([b, cancel_b, tiny_b, mid_b]),
        np.concatenate([c, cancel_c, tiny_c, big]),
    )


def test_fma32_is_the_exact_sum_rounded_once():
    a, b, c = fma32_cases()
    got = special._fma32(a, b, c)
    assert got.dtype == F32
    want = np.array([rounded(exact_fma(*abc), F32) for abc in zip(a, b, c, strict=True)], F32)
    wrong = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert not wrong.size, [(a[i], b[i], c[i], got[i], want[i]) for i in wrong[:5]]


def test_fma32_rounds_an_exact_midpoint_to_even():
    """a*b + c exactly halfway between two float32 values, which float64 holds exactly (no error
    to take the sign of): the tie goes to the even neighbour, up or down, as the FMA rounds it."""
    rng = np.random.default_rng(20261206)
    n = 2000
    exponent = rng.integers(-60, 60, n)
    c = (rng.choice([-1.0, 1.0], n) * np.ldexp(1 + rng.integers(0, 2**23, n) / 2**23, exponent)).astype(F32)
    # a*b = an odd number of half ulps of c (b = 1 or a power of two): c + a*b is a midpoint
    a = (rng.choice([-1.0, 1.0], n) * (2 * rng.integers(0, 8, n) + 1) * np.ldexp(1.0, exponent - 24)).astype(
        F32
    )
    b = np.ldexp(1.0, rng.integers(-3, 4, n)).astype(F32)
    a = (a.astype(np.float64) / b.astype(np.float64)).astype(F32)
    want = np.array([rounded(exact_fma(*abc), F32) for abc in zip(a, b, c, strict=True)], F32)
    assert (want.view(np.uint32) % 2 == 0).all()  # every case is a tie
    got = special._fma32(a, b, c)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_fma32_breaks_a_product_tie_by_an_addend_too_small_for_float64():
    """a*b exactly on a float32 midpoint and c below float64's resolution of it: float64's sum is
    the midpoint, its error is c, and the sign of c decides the rounding (as in XLA's contracted
    Horner steps, where a large term meets a small coefficient)."""
    rng = np.random.default_rng(20261207)
    n = 4000
    b = np.ldexp(1 + (2 * rng.integers(0, 2**22, n) + 1) / 2**23, rng.integers(-40, 40, n))  # odd last bit
    a = 3.0 * np.ldexp(1.0, rng.integers(-20, 20, n))
    product = a * b
    spacing = np.ldexp(1.0, np.frexp(product)[1] - 24)
    tie = np.fmod(product / spacing, 1.0) == 0.5
    a, b = a[tie].astype(F32), b[tie].astype(F32)
    c = (rng.choice([-1.0, 1.0], a.size) * np.abs(product[tie]) * 2.0**-60).astype(F32)
    assert a.size > 1000
    want = np.array([rounded(exact_fma(*abc), F32) for abc in zip(a, b, c, strict=True)], F32)
    got = special._fma32(a, b, c)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_the_midpoint_cases_are_ones_float64_rounding_gets_wrong():
    """The midpoint triples are a real test: float64's a*b + c is the midpoint, and rounding it to
    float32 (a double rounding) goes to the even neighbour, away from C's odd last bit, while the
    exact sum lies on C's side of the midpoint. So it misses every one of them; `_fma32` none."""
    a, b, c = fma32_cases()
    mid = slice(3 * 4000, None)
    naive = (a[mid].astype(F64) * b[mid].astype(F64) + c[mid].astype(F64)).astype(F32)
    want = np.array([rounded(exact_fma(*abc), F32) for abc in zip(a[mid], b[mid], c[mid], strict=True)], F32)
    assert np.all(naive != want)
    assert np.array_equal(special._fma32(a[mid], b[mid], c[mid]), want)


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_fma32_of_non_finite_values_is_ieee(value):
    a = np.array([value, 2.0, 1.0, np.inf], F32)
    b = np.array([1.0, value, 0.0, 0.0], F32)
    c = np.array([1.0, -3.0, value, 1.0], F32)
    want = a.astype(F64) * b.astype(F64) + c.astype(F64)
    np.testing.assert_array_equal(special._fma32(a, b, c), want.astype(F32))


def fma64_cases() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5122026)
    n = 4000
    a, b, c = (random_floats(rng, F64, n, (-300, 300)) for _ in range(3))
    cancel_a, cancel_b = random_floats(rng, F64, n, (-200, 200)), random_floats(rng, F64, n, (-200, 200))
    cancel_c = -(cancel_a * cancel_b)
    # the split's range: factors up to just under 2**996 (a product far over float64's range is inf)
    wide_a = random_floats(rng, F64, n, (900, 995))
    wide_b = random_floats(rng, F64, n, (-995, -900))
    wide_c = random_floats(rng, F64, n, (-60, 60))
    return (
        np.concatenate([a, cancel_a, wide_a]),
        np.concatenate([b, cancel_b, wide_b]),
        np.concatenate([c, cancel_c, wide_c]),
    )


def test_fma64_is_the_exact_sum_rounded_once_away_from_midpoints():
    """`_fma64` adds the rounding errors of the product and the sum (Dekker, TwoSum) in float64,
    which rounds once more: it can miss only where the exact sum lies within 2**-50 ulp of a
    midpoint between two float64s. Those few cases are left out by their exact distance; every
    other one must be the correctly rounded value, bit for bit."""
    a, b, c = fma64_cases()
    got = special._fma64(a, b, c)
    checked = 0
    for i, abc in enumerate(zip(a, b, c, strict=True)):
        exact = exact_fma(*abc)
        want = rounded(exact, F64)
        if exact != 0 and math.isfinite(want):
            ulp = Fraction(math.ulp(want))
            midpoint_distance = min(
                abs(exact - Fraction(want) - ulp / 2), abs(exact - Fraction(want) + ulp / 2)
            )
            if midpoint_distance < ulp * Fraction(2) ** -50:
                continue
        checked += 1
        assert got[i] == want or (got[i] == 0 and want == 0), (abc, got[i], want)
    assert checked > 0.99 * len(a)


def test_fma64_beyond_the_split_range_is_the_plain_expression():
    a = np.array([2.0**1000, 3.0, np.inf, np.nan], F64)
    b = np.array([2.0**-10, 2.0**1000, 1.0, 1.0], F64)
    c = np.array([1.0, -1.0, 1.0, 0.0], F64)
    np.testing.assert_array_equal(special._fma64(a, b, c), a * b + c)


def test_mul_add_dispatches_by_the_working_precision():
    three = np.array([1 + 2**-23], F32), np.array([1 - 2**-23], F32), np.array([-1.0], F32)
    assert special._mul_add(*three)[0] == -(2.0**-46)  # fused: no rounding of the product
    assert special._mul_add(*three).dtype == F32
    assert special._mul_add(*(x.astype(F64) for x in three)).dtype == F64


def test_veltkamps_split_is_exact_in_two_halves_of_26_bits():
    rng = np.random.default_rng(3)
    a = np.concatenate([random_floats(rng, F64, 20000, (-990, 990)), [0.0, -0.0, 1.0, -(2.0**-1022)]])
    hi, lo = special._split(a)
    assert np.array_equal(hi + lo, a)  # exact: no rounding in the sum
    for part, bits in ((hi, 26), (lo, 26)):
        mantissa, _ = np.frexp(part)
        scaled = np.ldexp(mantissa, bits)  # an integer when the part has at most `bits` bits
        assert np.array_equal(scaled, np.round(scaled)), bits
    assert np.all(np.abs(lo) <= np.abs(hi) * 2.0**-26)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_flush_zeroes_subnormals_keeping_the_sign_and_nothing_else(dtype):
    tiny = np.finfo(dtype).tiny
    subnormal = np.nextafter(dtype.type(0), dtype.type(1))
    values = np.array(
        [tiny, -tiny, subnormal, -subnormal, tiny / 2, -tiny * 0.75, 0.0, -0.0, 1.0, -np.inf, np.nan], dtype
    )
    flushed = special._flush(values)
    assert flushed.dtype == dtype
    want = values.copy()
    want[2:6] = [0.0, -0.0, 0.0, -0.0]
    np.testing.assert_array_equal(flushed, want)
    assert np.array_equal(np.signbit(flushed), np.signbit(want))


@pytest.mark.parametrize(
    "values",
    [[1.0, -2.0, 3.5], [0.0, -0.0, 1.0], [np.finfo(np.float32).tiny, 1.0], [1e-45, 1.0], [-1e-45, 0.0]],
    ids=["normal", "zeros", "smallest-normal", "subnormal", "negative-subnormal"],
)
def test_flush_of_arrays_with_and_without_subnormals(values):
    values = np.array(values, F32)
    want = np.where((np.abs(values) < np.finfo(F32).tiny), np.copysign(F32.type(0), values), values)
    got = special._flush(values)
    assert got.dtype == F32
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_flush_of_a_0d_subnormal_is_a_signed_zero():
    assert special._flush(np.float32(-1e-45)).view(np.uint32) == np.float32(-0.0).view(np.uint32)
    assert special._flush(np.float64(5e-324)) == 0


def test_working_precision_upcasts_narrow_floats_and_refuses_the_rest():
    assert special._working_dtype(np.float16) == F32
    assert special._working_dtype(ml_dtypes.bfloat16) == F32
    assert special._working_dtype(np.float32) == F32
    assert special._working_dtype(np.float64) == F64
    with pytest.raises(
        TypeError, match="special functions take float16, bfloat16, float32 or float64, not int32"
    ):
        special._working_dtype(np.int32)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_poly_is_horner_with_one_fma_per_coefficient_in_its_dtype(dtype):
    coefficients = special._LOG1P_NUMERATOR
    x = np.random.default_rng(13).uniform(-2, 2, 500).astype(dtype)
    want = np.full_like(x, coefficients[0])
    for c in coefficients[1:]:
        want = np.array(
            [rounded(exact_fma(r, v, dtype.type(c)), dtype) for r, v in zip(want, x, strict=True)], dtype
        )
    got = special._poly(x, coefficients)
    assert got.dtype == dtype
    assert np.array_equal(got, want)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_log1p_of_a_small_argument_is_not_log_of_one_plus_it(dtype):
    """Below |x| = sqrt(2) - 1 the rules' log1p is XLA's rational form, within 0.72 ulp of log1p
    where log(1 + x) loses the digits of x that 1 + x rounds away (thousands of ulps for |x| < 1e-3).
    Up to |x| = 0.1 only: nearer -0.414 the form itself is off by up to 129 ulps (see `_log1p`)."""
    x = np.geomspace(1e-7, 0.1, 400, dtype=F64)
    x = np.concatenate([x, -x]).astype(dtype)
    got = special._log1p(x)
    with mpmath.workprec(200):  # log1p to 200 bits: its own error is nothing beside an ulp
        exact = [mpmath.log1p(mpmath.mpf(float(v))) for v in x]
        spacing = np.spacing(np.abs(np.array(exact, F64)).astype(dtype))
        ulps = [
            float(abs(mpmath.mpf(float(g)) - e) / float(s))
            for g, e, s in zip(got, exact, spacing, strict=True)
        ]
    # Roundings counted in units of u |log1p(x)|, which an ulp of it exceeds. The result x + t
    # rounds once: 0.5 ulp. For |x| <= 0.1, t = -x^2/2 + s is under 0.051 |log1p(x)|, x^2/2 under
    # 0.053 and s = x^3 P/Q under 0.0035: t's own rounding, that of x*x in -x^2/2, and s's 31
    # (P's 7, its constants' and six FMAs', times its condition, under 1.78; Q's 7 times under
    # 2.06; then x*x, x*x2, P/Q and s) add 0.051 + 0.053 + 31 * 0.0035 < 0.22. Cephes fits the form
    # to 2.32e-20 relative (unity.c, "theoretical peak relative error"), 0.0003 float64 ulp.
    assert max(ulps) <= 0.72, max(ulps)


EXP64_LOW, EXP64_HIGH = -708.3964185322641, 709.782712893384  # XLA's clamps (exp.cc)
# XLA's float64 exp is within 1 ulp of exp (accuracy_budget.h), NumPy's within 1 ulp of the correctly
# rounded value (numpy's umath validation set), so 1.5 of exp: apart by 2.5 ulp, under 3 * 2**-52.
EXP64_RTOL = 3 * 2.0**-52


def test_float64_exp_is_zero_below_its_clamp_and_inf_above_it():
    """XLA's float64 exp clamps its argument to [low, high], then answers 0 below low and inf above
    high; at the clamps themselves it computes (about float64's smallest normal and its largest
    finite value). Unflushed here (`_exp` flushes)."""
    x = np.array([EXP64_LOW, EXP64_HIGH, -709.0, -745.2, -1e308, 709.9, 1e308, -np.inf, np.inf, np.nan])
    got = special._exp64(x)
    np.testing.assert_allclose(got[:2], np.exp(x[:2]), rtol=EXP64_RTOL)
    np.testing.assert_array_equal(got[2:], [0.0, 0.0, 0.0, np.inf, np.inf, 0.0, np.inf, np.nan])


@pytest.mark.parametrize("step", ["_exp32", "_log", "_sin", "_cos"])
def test_float32_transcendentals_are_float64_results_rounded_once(step):
    """The rules' float32 exp, log, sin and cos are the float64 functions rounded to float32 (0.5
    ulp, the budgets' premise), not NumPy's float32 kernels (which are within 1 to 4 ulp and differ
    from the rounded float64 value on a large share of inputs): equal bit for bit."""
    rng = np.random.default_rng(11)
    x = rng.uniform(-80, 80, 100_000).astype(F32)
    x = np.abs(x) if step == "_log" else x
    reference = {"_exp32": np.exp, "_log": np.log, "_sin": np.sin, "_cos": np.cos}[step]
    got = getattr(special, step)(x)
    assert got.dtype == F32
    want = reference(x.astype(F64)).astype(F32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_exp_is_xlas_float64_algorithm_flushed_and_float32_rounded():
    x64 = np.array([EXP64_LOW, -708.5, 0.5, 700.0])
    got = special._exp(x64)
    assert got.dtype == F64
    exact = np.exp(x64)
    # exp(-708.5) is subnormal, which the rule flushes
    np.testing.assert_allclose(got[[0, 2, 3]], exact[[0, 2, 3]], rtol=EXP64_RTOL)
    assert got[1] == 0 and exact[1] > 0
    # and it is XLA's algorithm, not NumPy's exp (they differ in the last bit on some inputs)
    x = np.random.default_rng(12).uniform(-700, 700, 20_000)
    assert np.array_equal(special._exp(x), special._flush(special._exp64(x)))
    assert (special._exp64(x) != np.exp(x)).any()
    x32 = np.array([-100.0, -87.0, 0.5, 88.0], F32)
    got32 = special._exp(x32)
    assert got32.dtype == F32
    want = special._flush(np.exp(x32.astype(F64)).astype(F32))
    assert np.array_equal(got32.view(np.uint32), want.view(np.uint32))
    assert got32[0] == 0  # exp(-100) is a float32 subnormal: flushed


@pytest.mark.parametrize("name", ["erf", "lgamma", "digamma", "bessel_i1e"])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_a_special_rule_answers_in_its_operands_dtype(name, dtype):
    from gradlanes.program.rules import RULES

    x = np.array([0.25, -1.5, 3.0], dtype)
    assert RULES[name](x).dtype == np.dtype(dtype)


def test_special_rules_name_mismatched_and_unsupported_dtypes():
    from gradlanes.program.rules import RULES

    a, x = np.array([1.0], F32), np.array([2.0], F64)
    with pytest.raises(TypeError, match=r"^igamma: operands of dtypes \['float32', 'float64'\]$"):
        RULES["igamma"](a, x)
    with pytest.raises(TypeError, match=r"^igamma: operands of dtypes \['float64', 'float32'\]$"):
        RULES["igamma"](x, a)
    beta = RULES["regularized_incomplete_beta"]
    with pytest.raises(
        TypeError,
        match=r"^regularized_incomplete_beta: operands of dtypes \['float32', 'float32', 'float64'\]$",
    ):
        beta(a, a, x)
    with pytest.raises(
        TypeError, match=r"^erf: special functions take float16, bfloat16, float32 or float64, not int32$"
    ):
        RULES["erf"](np.array([1], np.int32))


def clenshaw_reference(x: float, coefficients, dtype: np.dtype) -> float:
    """Clenshaw's recurrence as XLA's CPU code evaluates it, each operation rounded exactly: the
    first two steps x b1 + c fused (XLA folds the zero start b2 = 0), the rest x b1 - b2 fused, then
    + c rounded apart, and (b0 - b2) * 0.5 at the end."""

    def fma(a, b, c):
        return rounded(Fraction(a) * Fraction(b) + Fraction(c), dtype)

    def const(c):
        return float(dtype.type(c))

    b2 = b1 = 0.0
    b0 = fma(x, b1, const(coefficients[0]))
    for i, c in enumerate(coefficients[1:]):
        b2, b1 = b1, b0
        b0 = (
            fma(x, b1, const(c)) if i == 0 else rounded(Fraction(fma(x, b1, -b2)) + Fraction(const(c)), dtype)
        )
    return rounded((Fraction(b0) - Fraction(b2)) * Fraction(1, 2), dtype)


#: float32 points where rounding x b1 apart from + c in the second step (XLA fuses it) moves the
#: result by an ulp or more: found by search, about 2 in 100,000 uniform points on [-2, 2] do.
_SECOND_STEP_SENSITIVE = {
    "I0E": [1.9389894008636475, 1.9401394128799438],
    "I1E": [-1.8327369689941406, -1.8088536262512207],
}


@pytest.mark.parametrize("table", ["I0E", "I1E"])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_chebyshev_series_is_clenshaws_recurrence_step_by_step(dtype, table):
    coefficients = getattr(special, f"_{table}_A{'32' if dtype == F32 else '64'}")
    x = np.random.default_rng(8).uniform(-2, 2, 300).astype(dtype)
    x = np.concatenate([x, np.array(_SECOND_STEP_SENSITIVE[table], dtype)])
    got = special._chebyshev(x, coefficients)
    want = np.array([clenshaw_reference(float(v), coefficients, dtype) for v in x], dtype)
    assert np.array_equal(got, want)
