"""Budgets for the special-function rules against XLA: erf and relatives, lgamma, digamma, Bessel, ...

Shared by tests/test_rules_special*.py: the generated cases and the hand-picked branches compare the
interpreter with XLA through `check_rule`, within the budgets derived here.

Most rules evaluate XLA's own algorithms operation by operation (gradlanes.program.rules.special),
so they part from XLA only where XLA calls a transcendental function (exp, log, sin, cos, pow, the
CPU's rsqrt estimate) that the rule evaluates otherwise. Every budget below is derived from the
documented accuracy of those calls on both sides (`CALL`), carried through the operations of the
algorithm that follow:

- XLA's CPU intrinsics (xla/codegen/intrinsic/accuracy/accuracy_budget.h): float32 exp 6 ulp, log
  1, log1p 1, rsqrt 1 (it refines the CPU's estimate, rsqrt.cc); float64 exp 1, log 1, rsqrt 1
  (the AVX-512 estimate refined; other CPUs divide by the square root); float32 sin, cos, pow and
  float64 sin, cos, pow are the C library's (glibc's manual: within 1 ulp on x86-64).
- The rules: float32 steps are float64 results rounded (0.5 ulp). float64 steps are NumPy's, the C
  library's or, on CPUs with AVX-512, NumPy's own SIMD code; numpy/_core/tests/data/
  umath-validation-set-*.csv validates float64 exp, log, log1p, sin and cos to 1 ulp of the
  correctly rounded value (so 1.5 of exact) on either path. NumPy does not validate power, which on
  AVX-512 is Intel's SVML in its low-accuracy variant (numpy/SVML, svml_z0_pow_d_la.s), documented by
  Intel to 4 ulp. XLA's float64 exp and its log1p are evaluated with XLA's own operations.
- An error of k ulp of a value is a relative error below k * EPS (EPS = 2**-23 in float32) and a
  relative error r is at most 2 r / EPS ulp of the value it lands in; every correctly rounded
  operation after the two sides part adds at most 1 ulp (half on each side).

Where the algorithm adds terms that cancel (lgamma near its zeros at 1 and 2, digamma near its
zeros, the reflection formulas, 1 - P in the incomplete functions) the difference is bounded in
ulps of the terms, not of the small result: those budgets are in ulps of `scale`, the magnitude of
the terms, computed here in float64 per element.

erf, erfc and erf_inv are evaluated otherwise, for speed: XLA's formulas, its polynomials
included, in float64 and rounded once. A polynomial's approximation error is then the same on both
sides; they part by XLA's own rounding of every step, which `horner_bound` bounds per element from
the magnitudes of the steps (a running error bound), by exp (XLA's against NumPy's float64) or
log1p (XLA's float32 against a float64 log), and by the rule's final rounding (0.5 ulp).

float16 and bfloat16 are computed in float32 and rounded, as XLA does: once the float32 values
differ at all, the two roundings may fall on either side of a midpoint, one narrow ulp apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import ml_dtypes
import numpy as np
import scipy.special as sc
from hypothesis import strategies as st
from jax import lax
from oracle import CASES_RUN, check, check_widened, primitives, x64

from gradlanes.program.interpreter import Interpreter
from gradlanes.program.rules import special

F16, BF16, F32, F64 = (np.dtype(t) for t in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64))
NARROW = (F16, BF16)
WORK = {F16: F32, BF16: F32, F32: F32, F64: F64}
EPS = {F32: 2.0**-23, F64: 2.0**-52}

#: |XLA's result - the rule's| for one transcendental call, in ulps of its result: XLA's documented
#: error plus the rule's. The rule's rsqrt is 1 / sqrt: the square root's half ulp, relative,
#: carried through the quotient (1 ulp of it) and the quotient's own half ulp, 1.5.
CALL = {
    F32: {"exp": 6 + 0.5, "log": 1 + 0.5, "sin": 1 + 0.5, "cos": 1 + 0.5, "pow": 1 + 0.5, "rsqrt": 1 + 1.5},
    F64: {"exp": 0.0, "log": 1 + 1.5, "sin": 1 + 1.5, "cos": 1 + 1.5, "pow": 1 + 4, "rsqrt": 1 + 1.5},
}

# ---- budgets in ulps of XLA's result -------------------------------------------------------------
#: float64 erf is glibc's erf (1 ulp) against SciPy's (Cephes: relative error 3.7e-16 = 1.67 EPS,
#: so 3.4 ulp).
ERF64_ULPS = 1 + 3.4
#: Bessel: |x| <= 8 is exact; beyond, XLA multiplies by its rsqrt: 2 rsqrt + 1 rounding.
BESSEL_ULPS = {w: 2 * CALL[w]["rsqrt"] + 1 for w in (F32, F64)}
UNIFORM = {"bessel_i0e": BESSEL_ULPS, "bessel_i1e": BESSEL_ULPS}


# ---- budgets in ulps of the terms ----------------------------------------------------------------
def lgamma_ulps(w: np.dtype) -> float:
    """lgamma, in ulps of `lgamma_scale`.

    log t differs by a log (log1p's log); r = ((z + 1/2) - t / log t) log t moves by 2 log of its
    terms; log a(z) by a log; 5 roundings after (the quotient, difference, product, FMA, sum). The
    reflection adds log|sin(pi x)|: 2 sin + log, and two subtractions.
    """
    d = CALL[w]
    return 4 * d["log"] + 2 * d["sin"] + 7


def digamma_ulps(w: np.dtype) -> float:
    """digamma, in ulps of `digamma_scale`: log t (a log) and two sums; the reflection's
    pi cos / sin: 2 (cos + sin), its product, quotient and the subtraction."""
    d = CALL[w]
    return d["log"] + 2 + 2 * (d["cos"] + d["sin"]) + 3


_LANCZOS = (676.520368121885098567009190444019, -1259.13921672240287047156078755283,
            771.3234287776530788486528258894, -176.61502916214059906584551354, 12.507343278686904814458936853,
            -0.13857109526572011689554707, 9.984369578019570859563e-6, 1.50563273514931155834e-7)  # fmt: skip


def _lanczos_terms(x: np.ndarray):
    """z, t = z + 7.5 and Lanczos' a(z), a'(z) as XLA's lgamma and digamma use them (float64)."""
    z = np.where(x < 0.5, -x, x - 1)
    shifted = [z + k for k in range(1, 9)]
    a = 1.0 + sum(c / s for c, s in zip(_LANCZOS, shifted, strict=True))
    a_prime = -sum(c / (s * s) for c, s in zip(_LANCZOS, shifted, strict=True))
    return z, z + 7.5, a, a_prime


def lgamma_scale(x: np.ndarray) -> np.ndarray:
    """|terms| of XLA's lgamma: (z + 1/2) log t, t, log a(z), and for x < 1/2 log|sin(pi x)|, log pi."""
    z, t, a, _ = _lanczos_terms(x)
    scale = np.abs((z + 0.5) * np.log(t)) + t + np.abs(np.log(np.abs(a))) + 1.0
    frac = np.abs(x) - np.floor(np.abs(x))
    log_sin = np.log(np.sin(np.pi * np.minimum(frac, 1 - frac)))
    return np.where(x < 0.5, scale + np.abs(log_sin) + math.log(math.pi), scale)


def digamma_scale(x: np.ndarray) -> np.ndarray:
    """|terms| of XLA's digamma: log t, a'/a, 7/t, and for x < 1/2 pi cot(pi x)."""
    _, t, a, a_prime = _lanczos_terms(x)
    scale = np.abs(np.log(t)) + np.abs(a_prime / a) + 7 / t
    reduced = x + np.abs(np.floor(x + 0.5))
    cot = np.pi * np.cos(np.pi * reduced) / np.sin(np.pi * reduced)
    return np.where(x < 0.5, scale + np.abs(cot), scale)


def ulp(dtype: np.dtype, magnitude) -> np.ndarray:
    """The spacing of `dtype` at each |magnitude| (float64; bfloat16 through float32's exponent)."""
    magnitude = np.abs(np.asarray(magnitude, np.float64))
    if dtype == BF16:
        tiny = float(ml_dtypes.finfo(ml_dtypes.bfloat16).tiny)
        return np.exp2(np.floor(np.log2(np.maximum(magnitude, tiny))) - 7)
    finite = np.minimum(np.nan_to_num(magnitude, nan=0.0), float(np.finfo(dtype).max))
    return np.spacing(finite.astype(dtype)).astype(np.float64)


#: A budget: (float64 operands, XLA's result in float64, working dtype) -> allowed |difference|.
Budget = Callable[[list, np.ndarray, np.dtype], np.ndarray]


def in_ulps(ulps: dict) -> Budget:
    return lambda args, want, w: ulps[w] * ulp(w, want)


# ---- erf, erfc, erf_inv: XLA's roundings, bounded per element --------------------------------------
#: Unit roundoffs. XLA's float32 formulas round every step to float32 and the rule's evaluation of
#: them to float64, so a step of the two differs by at most STEP32 of its magnitude; in float64 both
#: sides round to float64 (STEP64).
U32, U64 = 2.0**-24, 2.0**-53
STEP32, STEP64 = U32 + U64, 2 * U64
#: exp, relative to its result: XLA's float32 exp 6 ulp (each at most EPS = 2 U32 of the value) and
#: NumPy's float64 exp, 1.5 ulp of float64 (validated to 1 ulp of the correctly rounded value);
#: XLA's float64 exp 1 ulp and NumPy's 1.5.
EXP_RELATIVE = {F32: 6 * 2 * U32 + 1.5 * 2 * U64, F64: (1 + 1.5) * 2 * U64}
#: The smallest normal numbers: results below are flushed to zero by XLA's CPU code and the rule.
TINY = {w: float(np.finfo(w).tiny) for w in (F32, F64)}
#: XLA's erfc is 0 (2 below zero) where -x^2 < -log(max float) (chlo's kMaxlog).
ERFC_MAXLOG = {F32: np.float32(88.72283905206835), F64: 7.09782712893383996843e2}


def horner_bound(coefficients, t: np.ndarray, unit: float, dt=0.0) -> tuple[np.ndarray, np.ndarray]:
    """p(t) by Horner's rule in float64, and a bound on how far p computed with each multiply and
    add rounded (unit roundoff `unit`; fused, they round once, which the bound covers) from a `t`
    off by up to `dt` lies from it.

    Each step r <- r t + c multiplies the error so far by |t|, adds |r| dt for t's own error and
    unit (|r t| + |r t + c|) for its two roundings (a running error bound, Higham's "Accuracy and
    Stability of Numerical Algorithms" 5.1, to first order: what it leaves out is some n unit, 2^-19
    at most, of itself, far below the final roundings the budgets add).
    """
    r = np.full_like(t, coefficients[0])
    bound = np.zeros_like(t)
    for c in coefficients[1:]:
        product = r * t
        bound = bound * np.abs(t) + np.abs(r) * dt + unit * np.abs(product)
        r = product + c
        bound = bound + unit * np.abs(r)
    return r, bound


def _flushed(x: np.ndarray, w: np.dtype) -> np.ndarray:
    """Operands as XLA's CPU code reads them: subnormals are zeros of their sign."""
    return np.where(np.abs(x) < TINY[w], 0.0 * x, x)


def erf32_bound(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """XLA's float32 erf, x P(x^2) / Q(x^2) (both sides square x in float32 alike), and its
    difference from the rule before the rule's rounding: P's and Q's steps, the product x P and the
    quotient. Beyond the saturation point both give +-1 exactly."""
    ax = np.minimum(np.abs(x), float(special._ERF_SATURATION32))
    x2 = (ax.astype(F32) * ax.astype(F32)).astype(F64)
    p, p_bound = horner_bound(special._ERF_ALPHA32, x2, STEP32)
    q, q_bound = horner_bound(special._ERF_BETA32, x2, STEP32)
    value = np.copysign(ax * p / q, x)
    relative = p_bound / np.abs(p) + q_bound / np.abs(q) + 2 * STEP32
    saturated = np.abs(x) >= float(special._ERF_SATURATION32)
    return np.where(saturated, np.sign(x), value), np.where(saturated, 0.0, relative * np.abs(value))


def erfc32_bound(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """XLA's float32 erfc and how far from it the rule's float64 evaluation lies.

    |x| < 1: 1 - x T(x^2): T's steps carried through the product with x, which rounds, and the
    subtraction (an FMA or two roundings). |x| >= 1: exp(-x^2) (1 / |x|) W(1 / x^2), W = P below 2, R
    above, where x^2, 1 / x^2 and 1 / |x| are float32 operations alike on both sides: exp's error,
    the two products and W's steps, relative to the tail; 2 - tail below zero rounds once more.
    """
    x32 = x.astype(F32)
    ax = np.abs(x)
    x2_32 = x32 * x32
    x2 = x2_32.astype(F64)
    t, t_bound = horner_bound(special._ERF_T32, x2, STEP32)
    near = 1.0 - x * t
    near_error = ax * t_bound + STEP32 * np.abs(x * t) + STEP32 * np.abs(near)
    y = (np.float32(1) / x2_32).astype(F64)
    below_two = ax < 2
    p, p_bound = horner_bound(special._ERFC_P32, y, STEP32)
    r, r_bound = horner_bound(special._ERFC_R32, y, STEP32)
    tail_poly, tail_poly_bound = np.where(below_two, p, r), np.where(below_two, p_bound, r_bound)
    tail = np.exp(-x2) * (np.float32(1) / np.abs(x32)).astype(F64) * tail_poly
    tail_error = (EXP_RELATIVE[F32] + 2 * STEP32 + tail_poly_bound / np.abs(tail_poly)) * tail
    clamped = x2_32 > ERFC_MAXLOG[F32]
    tail, tail_error = np.where(clamped, 0.0, tail), np.where(clamped, 0.0, tail_error)
    far = np.where(x < 0, 2.0 - tail, tail)
    far_error = tail_error + np.where(x < 0, STEP32 * np.abs(far), 0.0)
    return np.where(ax < 1, near, far), np.where(ax < 1, near_error, far_error)


def erfc64_bound(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """XLA's float64 erfc (1 - x T(x^2) / U(x^2) below |x| = 1, exp(-x^2) P(|x|) / Q(|x|) below 8,
    R / S beyond) and how far from it the rule's lies: both sides' steps, exp's error on both."""
    ax = np.abs(x)
    x2 = x * x
    t, t_bound = horner_bound(special._ERF_T64, x2, STEP64)
    u, u_bound = horner_bound(special._ERF_U64, x2, STEP64)
    ratio = x * t / u
    near = 1.0 - ratio
    near_error = (t_bound / np.abs(t) + u_bound / np.abs(u) + 2 * STEP64) * np.abs(ratio)
    near_error = near_error + STEP64 * np.abs(near)
    below_eight = ax < 8
    tails = []
    for numerator, denominator in (
        (special._ERFC_P64, special._ERFC_Q64),
        (special._ERFC_R64, special._ERFC_S64),
    ):
        n, n_bound = horner_bound(numerator, ax, STEP64)
        d, d_bound = horner_bound(denominator, ax, STEP64)
        tails.append((n / d, n_bound / np.abs(n) + d_bound / np.abs(d)))
    ratio = np.where(below_eight, tails[0][0], tails[1][0])
    ratio_error = np.where(below_eight, tails[0][1], tails[1][1])
    tail = np.exp(-x2) * ratio
    tail_error = (EXP_RELATIVE[F64] + 2 * STEP64 + ratio_error) * tail
    clamped = x2 > ERFC_MAXLOG[F64]
    tail, tail_error = np.where(clamped, 0.0, tail), np.where(clamped, 0.0, tail_error)
    far = np.where(x < 0, 2.0 - tail, tail)
    far_error = tail_error + np.where(x < 0, STEP64 * np.abs(far), 0.0)
    return np.where(ax < 1, near, far), np.where(ax < 1, near_error, far_error)


def _erf_inv_branch(x, w, dw, shift_from_sqrt, shift, coefficients, unit):
    """One branch of erf_inv: p(t) x with t = w - shift or sqrt(w) - shift, where XLA's w is off by
    up to dw; t's own rounding (and the square root's), p's steps and the product x p."""
    if shift_from_sqrt:
        s = np.sqrt(w)
        t = s - shift
        dt = dw / (2 * s) + unit * s + unit * np.abs(t)
    else:
        t = w - shift
        dt = dw + unit * np.abs(t)
    p, p_bound = horner_bound(coefficients, t, unit, dt)
    return p * x, np.abs(x) * p_bound + unit * np.abs(p * x)


def log1p_error(m: np.ndarray, w: np.dtype) -> np.ndarray:
    """How far XLA's log1p(m), m = x * -x in [-1, 0], lies from the rule's.

    XLA's is Cephes' rational below |m| = sqrt(2) - 1, m + (-m^2 / 2 + m^3 N(m) / D(m)), and log(1 + m)
    beyond (xla/codegen/intrinsic/log1p.cc). The rational's roundings: N's and D's steps, the
    products m^2, m^3, m^3 N / D (the halving exact) and the two sums. float64: the rule evaluates the
    same rational (its approximation error the same on both sides) and log(1 + m), the sum alike,
    XLA's log 1 ulp and NumPy's 1.5. float32: the rule takes log(1 + m) in float64 (NumPy's log 1.5
    ulp of float64; the sum exact down to |m| = 2**-29, below off by 2**-53, which moves the log by
    as much), and XLA's float32 log1p is documented to 1 ulp; derived, its rational's roundings plus
    the rational's own distance from log1p (the float64 evaluations of both here are within 4 ulp of
    float64), or its log's 1 ulp plus the float32 sum's rounding (u of 1 + m, so u of the log):
    the larger of the two.
    """
    unit = STEP32 if w == F32 else STEP64
    log1p = np.log1p(m)
    m2 = m * m
    n, n_bound = horner_bound(special._LOG1P_NUMERATOR, m, unit)
    d, d_bound = horner_bound(special._LOG1P_DENOMINATOR, m, unit)
    cube_term = m * m2 * n / d
    half_square = 0.5 * m2
    relative = n_bound / np.abs(n) + d_bound / np.abs(d) + 4 * unit
    rational = relative * np.abs(cube_term) + unit * half_square + unit * np.abs(cube_term - half_square)
    rational = rational + unit * np.abs(log1p)
    uses_rational = np.abs(m) < 0.41421356237309504880
    if w == F64:
        return np.where(uses_rational, rational, (1 + 1.5) * 2 * U64 * np.abs(log1p))
    approximation = np.abs(m + (cube_term - half_square) - log1p) + 4 * 2 * U64 * np.abs(log1p)
    derived = np.where(uses_rational, rational + approximation, ulp(F32, log1p) + U32)
    return np.maximum(ulp(F32, log1p), derived) + 1.5 * 2 * U64 * np.abs(log1p) + U64


def erf_inv_bound(x: np.ndarray, w: np.dtype, window: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """XLA's erf_inv, p(t(w)) x with w = -log1p(x * -x) (that product alike on both sides), and how far
    from it the rule's lies: w's error (`log1p_error`), carried through t and p, and each branch's
    steps.

    XLA picks the branch from its own w, which may fall on the other side of a branch's bound than
    the rule's: within dw (and `window`, for a w known less closely) of one, the two branches'
    difference is allowed too.
    """
    unit = STEP32 if w == F32 else STEP64
    m = (x.astype(F32) * -x.astype(F32)).astype(F64) if w == F32 else x * -x
    log1p = np.log1p(m)
    dw = log1p_error(m, w)
    if w == F32:
        branches = ((5.0, False, 2.5, special._ERF_INV32_NEAR), (np.inf, True, 3.0, special._ERF_INV32_FAR))
    else:
        branches = ((6.25, False, 3.125, special._ERF_INV64_NEAR), (16.0, True, 3.25, special._ERF_INV64_MID),
                    (np.inf, True, 5.0, special._ERF_INV64_FAR))  # fmt: skip
    w_value = -log1p
    results = [_erf_inv_branch(x, w_value, dw, *branch[1:], unit) for branch in branches]
    value, error = results[-1]
    for (high, *_), (branch_value, branch_error) in zip(branches[-2::-1], results[-2::-1], strict=True):
        value = np.where(w_value < high, branch_value, value)
        error = np.where(w_value < high, branch_error, error)
    for (bound, *_), below, above in zip(branches, results, results[1:], strict=False):
        straddles = np.abs(w_value - bound) <= dw + window
        straddle_error = np.abs(below[0] - above[0]) + np.maximum(below[1], above[1])
        error = np.where(straddles, straddle_error, error)
    edge = np.abs(x) == 1  # +-inf on both sides
    return np.where(edge, x * np.inf, value), np.where(edge, 0.0, error)


def rounded_once(value: np.ndarray, error: np.ndarray, w: np.dtype) -> np.ndarray:
    """The allowed difference given XLA's value and its distance from the rule's float64 result:
    float32 results are that rounded once (half an ulp), and a value within reach of the smallest
    normal number may be flushed to zero on one side only."""
    allowed = error + (0.5 * ulp(F32, np.abs(value) + error) if w == F32 else 0.0)
    return np.where(np.abs(value) - allowed < TINY[w], np.abs(value) + allowed, allowed)


def erf_budget(args, want, w):
    if w == F64:
        return ERF64_ULPS * ulp(F64, want)
    return rounded_once(*erf32_bound(_flushed(args[0], w)), w)


def erfc_budget(args, want, w):
    return rounded_once(*(erfc32_bound if w == F32 else erfc64_bound)(_flushed(args[0], w)), w)


def erf_inv_budget(args, want, w):
    return rounded_once(*erf_inv_bound(_flushed(args[0], w), w), w)


def lgamma_budget(args, want, w):
    return lgamma_ulps(w) * ulp(w, np.maximum(lgamma_scale(args[0]), np.abs(want)))


def digamma_budget(args, want, w):
    return digamma_ulps(w) * ulp(w, np.maximum(digamma_scale(args[0]), np.abs(want)))


def _exponent_error(a: np.ndarray, x: np.ndarray, w: np.dtype) -> np.ndarray:
    """The relative error of ax = exp(a log x - x - lgamma(a)) between the two sides.

    log x differs by a log, a log x by twice that in ulps of the product; lgamma(a) by its budget;
    the FMA and the subtraction 1 each, all in ulps of the exponent's terms; exp adds its own.
    """
    log_x = np.log(x)
    terms = np.abs(a * log_x) + np.abs(x) + lgamma_scale(a)
    exponent = (2 * CALL[w]["log"] + 2) * ulp(w, terms) + lgamma_ulps(w) * ulp(w, lgamma_scale(a))
    return exponent + CALL[w]["exp"] * EPS[w]


def igamma_budget(args, want, w):
    """P(a, x) = ans ax / a (series), or 1 - ans ax (the continued fraction, x >= 1 and x > a): the
    loops are the same operations on both sides, so the difference is ax's, relative to the term
    it scales, plus the roundings after it (the product and quotient, or the fused 1 - product)."""
    a, x = args
    with np.errstate(all="ignore"):
        term = np.where((x >= 1) & (x > a), np.abs(1 - want), np.abs(want))
        return _exponent_error(a, x, w) * term + 2 * ulp(w, np.maximum(term, np.abs(want)))


def igammac_budget(args, want, w):
    """Q(a, x) = 1 - ans ax / a (series, x < 1 or x < a), or ans ax: as igamma's, one rounding more."""
    a, x = args
    with np.errstate(all="ignore"):
        term = np.where((x < 1) | (x < a), np.abs(1 - want), np.abs(want))
        return _exponent_error(a, x, w) * term + 3 * ulp(w, np.maximum(term, np.abs(want)))


def igamma_grad_a_budget(args, want, w):
    """dP/da = ax (ans D + dans) / a, D = log x - digamma(a + 1) (series), or -ax (ans D + dans),
    D = log x - digamma(a) (continued fraction, x > 1 and x > a): ax's relative error on the terms
    |P D| + |dP/da| (bounds of |ax ans D| and |ax dans|), and D's own difference (a log and
    digamma's budget) times P (or Q), plus 3 roundings (the FMA, the product and quotient)."""
    a, x = args
    with np.errstate(all="ignore"):
        fraction = (x > 1) & (x > a)
        p = np.where(fraction, sc.gammaincc(a, x), sc.gammainc(a, x))
        psi_of = np.where(fraction, a, a + 1)
        d = np.log(x) - sc.digamma(psi_of)
        terms = 2 * np.abs(p * d) + np.abs(want)
        d_error = CALL[w]["log"] * ulp(w, np.log(x)) + digamma_ulps(w) * ulp(w, digamma_scale(psi_of))
        d_error = d_error + ulp(w, d)
        return _exponent_error(a, x, w) * terms + p * d_error + 3 * ulp(w, terms)


def zeta_terms(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """|terms| of XLA's zeta: |q + k|^-x for k < 10, and the Euler-Maclaurin tail at q + 10."""
    with np.errstate(all="ignore"):
        terms = sum(np.abs(q + k) ** -x for k in range(10))
        tail = np.abs(q + 10) ** -x
        return terms + tail * (np.abs(q + 10) / np.abs(x - 1) + 1)


def zeta_ulps(w: np.dtype) -> float:
    """zeta, in ulps of `zeta_terms`: each of the 11 powers differs by a pow (twice that in ulps of
    the terms it lands in), then the 9 sums, the correction's product and quotient, the tail's two
    FMAs and the final FMA: 2 pow + 13 roundings."""
    return 2 * CALL[w]["pow"] + 13


def zeta_budget(args, want, w):
    x, q = args
    return zeta_ulps(w) * ulp(w, np.maximum(zeta_terms(x, q), np.abs(want)))


def polygamma_budget(args, want, w):
    """n = 0: digamma's. n >= 1: sign exp(lgamma(n + 1)) zeta(n + 1, x): exp of lgamma(n + 1)
    differs by lgamma's budget (in ulps of its terms) and an exp, relative; zeta by its own, times
    n!; two products after."""
    n, x = args
    with np.errstate(all="ignore"):
        factorial = sc.gamma(n + 1)
        relative = lgamma_ulps(w) * ulp(w, lgamma_scale(n + 1)) + CALL[w]["exp"] * EPS[w]
        zeta_part = factorial * zeta_ulps(w) * ulp(w, zeta_terms(n + 1, x))
        higher = relative * np.abs(want) + zeta_part + 2 * ulp(w, want)
        return np.where(n == 0, digamma_budget([x], want, w), higher)


def betainc_budget(args, want, w):
    """I_x(a, b) = fraction * exp(a log x + b log1p(-x) - lbeta) / a, or 1 - that (x above
    (a + 1) / (a + b + 2), with a, b and 1 - x swapped). The exponent differs by 2 log of each
    product, three lgammas' budgets and 3 roundings, in ulps of its terms; exp adds its own.

    The continued fraction is the same operations on both sides, yet XLA's value differs from the
    rule's by a few ulps when every element converges early (unexplained: no step count reproduces
    it, see the rule's docstring), so no derivation covers it. Were it a difference in step count,
    each step after convergence would move h by at most eps (|c d - 1| < eps/2 leaves delta at 1
    or 1 - eps/2, and h delta rounds): 200 (float32) or 600 (float64) steps of eps. The allowance is
    a quarter of that, a margin rather than a measured size: tools/measurements/
    betainc_fraction_allowance.py (seeds 1 and 2, 36,266 elements, a and b up to 40) found the rest
    of this budget covering every element by at least 697 eps of its term, at default kernels and
    under the Sandybridge-AVX, Nehalem-AVX2 and Haswell-AVX cells (2026-12-07), so no sampled
    element needed it; none used more than 0.31 of the whole budget.
    """
    a, b, x = args
    with np.errstate(all="ignore"):
        rapid = x < (a + 1) / (a + b + 2)
        a, b, x = np.where(rapid, a, b), np.where(rapid, b, a), np.where(rapid, x, 1 - x)
        terms = np.abs(a * np.log(x)) + np.abs(b * np.log1p(-x))
        lbeta_terms = lgamma_scale(a) + lgamma_scale(b) + lgamma_scale(a + b)
        exponent = (2 * CALL[w]["log"] + 3) * ulp(w, terms + lbeta_terms)
        exponent = exponent + lgamma_ulps(w) * ulp(w, lbeta_terms)
        steps = 200 if w == F32 else 600
        relative = exponent + CALL[w]["exp"] * EPS[w] + steps * EPS[w] / 4
        term = np.where(rapid, np.abs(want), np.abs(1 - want))
        return relative * term + 3 * ulp(w, np.maximum(term, np.abs(want)))


# ---- the functions, their operands and budgets ---------------------------------------------------
def unit(dtype, low, high):
    """Floats of `dtype` in [low, high] (bfloat16 through float32)."""
    width = 64 if dtype == F64 else 16 if dtype == F16 else 32
    return st.floats(low, high, width=width)


#: name -> (function, operand count, budget, finite domain drawn half the time (None: all floats)).
#: The incomplete gamma and beta functions loop until a term stops counting, which for huge equal a
#: and x takes XLA itself millions of steps: their operands come from a bounded domain.
SPECIAL = {
    "erf": (lax.erf, 1, erf_budget, None),
    "erfc": (lax.erfc, 1, erfc_budget, (-12.0, 12.0)),
    "erf_inv": (lax.erf_inv, 1, erf_inv_budget, (-1.0, 1.0)),
    "bessel_i0e": (lax.bessel_i0e, 1, in_ulps(BESSEL_ULPS), (-20.0, 20.0)),
    "bessel_i1e": (lax.bessel_i1e, 1, in_ulps(BESSEL_ULPS), (-20.0, 20.0)),
    "lgamma": (lax.lgamma, 1, lgamma_budget, (-30.0, 30.0)),
    "digamma": (lax.digamma, 1, digamma_budget, (-30.0, 30.0)),
    "igamma": (lax.igamma, 2, igamma_budget, (0.0, 60.0)),
    "igammac": (lax.igammac, 2, igammac_budget, (0.0, 60.0)),
    "igamma_grad_a": (lax.igamma_grad_a, 2, igamma_grad_a_budget, (0.0, 60.0)),
    "zeta": (lax.zeta, 2, zeta_budget, (-10.0, 30.0)),
    "polygamma": (lax.polygamma, 2, polygamma_budget, (-10.0, 10.0)),
    "regularized_incomplete_beta": (lax.betainc, 3, betainc_budget, (0.0, 40.0)),
}
BOUNDED = {"igamma", "igammac", "igamma_grad_a", "regularized_incomplete_beta"}
#: Their XLA programs (while loops) take seconds to compile, once per shape and dtype: a few shapes.
LOOP_SHAPES = st.sampled_from([(), (0,), (5,)])


#: Operands that are numbers (arrays or NumPy scalars), not PRNG keys.
NUMERIC = (np.ndarray, np.generic)


# ---- jax.random.normal: sqrt(2) erf_inv(u) -------------------------------------------------------
def normal_budget(u: np.ndarray, sample: np.ndarray, recovered: bool = False) -> np.ndarray:
    """sqrt(2) erf_inv(u): erf_inv's budget carried through the product, which rounds on both sides
    (1 ulp of the sample).

    `recovered`: u is not known but recovered from XLA's sample as erf(sample / sqrt 2). That moves
    the budget's magnitudes by some ulps of the sample, and its ulp steps by a binade at most: the
    budget is doubled. And it moves w by about 3.3 times the sample's error near w = 5: XLA's and the
    rule's w are taken to straddle the branch point wherever the recovered w is within 1 of it (a
    sample off by the 0.3 that would take to mislead it fails any budget here).
    """
    value, error = erf_inv_bound(u, F32, window=1.0 if recovered else 0.0)
    erf_inv_allowed = rounded_once(value, error, F32)
    return math.sqrt(2) * (2 if recovered else 1) * erf_inv_allowed + ulp(F32, sample)


def normal_sample_budget(_, sample, w):
    """A jax.random normal sample's budget, u recovered from it, plus the uniform's rounding carried
    through erf_inv.

    jax.random.uniform ends with u = j * (max - min) + min, which XLA contracts into one FMA and the
    interpreter rounds twice (its mul and add are separate rules): |du| <= 0.5 ulp(j * (max - min)),
    at most 2**-24 as |j * (max - min)| < 2. The sample sqrt(2) erf_inv(u) moves by du times its
    derivative sqrt(2 pi) / 2 * exp(sample^2 / 2).
    """
    u = sc.erf(sample / math.sqrt(2))
    uniform_rounding = 2.0**-24 * math.sqrt(2 * math.pi) / 2 * np.exp(sample * sample / 2)
    return normal_budget(u, sample, recovered=True) + uniform_rounding


def check_special(fn, args: list, budget: Budget, expect: str, widened: bool = False) -> None:
    """`fn(*args)` in the interpreter against XLA: XLA's dtype, shape, NaN and infinities exactly,
    finite values within `budget` (plus one narrow ulp for float16 and bfloat16).

    `widened` checks the float64 reference of `fn`'s program against XLA running it in float64.
    Operands may be arrays or PRNG keys (budgets of keys' samplers ignore them).
    """
    if any(isinstance(a, NUMERIC) and a.dtype == F64 for a in args):  # NumPy's float64 scalars too
        with x64():  # float64 programs need JAX's 64-bit mode, while tracing too
            return _check_special(fn, args, budget, expect, widened)
    return _check_special(fn, args, budget, expect, widened)


def _check_special(fn, args: list, budget: Budget, expect: str, widened: bool) -> None:
    closed = jax.make_jaxpr(fn)(*args)
    assert expect in primitives(closed), f"{expect} not in the traced program"
    if widened:
        got = np.asarray(Interpreter(closed, widen=True)(*args)[0])
        with x64():
            want = np.asarray(jax.jit(fn)(*[a.astype(np.float64) for a in args]))
    else:
        got, want = np.asarray(Interpreter(closed)(*args)[0]), np.asarray(jax.jit(fn)(*args))
    assert got.dtype == want.dtype, f"{expect}: dtype {got.dtype}, JAX gives {want.dtype}"
    assert got.shape == want.shape, f"{expect}: shape {got.shape}, JAX gives {want.shape}"
    w, g = want.astype(np.float64), got.astype(np.float64)
    assert np.array_equal(np.isnan(w), np.isnan(g)), f"{expect}: NaN where JAX has none, or the reverse"
    work = WORK[want.dtype]
    operands = [a.astype(np.float64) if isinstance(a, NUMERIC) else a for a in args]
    with np.errstate(all="ignore"):
        allowed = np.broadcast_to(np.nan_to_num(budget(operands, w, work), nan=np.inf), w.shape)
        if want.dtype in NARROW and allowed.any():
            allowed = allowed + ulp(want.dtype, w)
        bad = ~(np.isnan(w) | (w == g) | (np.abs(w - g) <= allowed))
    where = [np.broadcast_to(a, w.shape)[bad][:3] for a in args if isinstance(a, NUMERIC)]
    assert not bad.any(), f"{expect}: got {g[bad][:3]}, JAX {w[bad][:3]}, at {where}"
    CASES_RUN[expect] += 1


def check_rule(name: str, *args: np.ndarray, widened: bool = False) -> None:
    fn, _, budget, _ = SPECIAL[name]
    work = WORK[args[0].dtype]
    if name in UNIFORM and args[0].dtype != BF16 and not widened:
        # oracle.check's bfloat16 comparison is bit for bit (NumPy sees kind 'V'), NaN != NaN there
        ulps = UNIFORM[name][work] if args[0].dtype not in NARROW or UNIFORM[name][work] == 0 else 1.0
        if args[0].dtype == F64:
            with x64():
                check(fn, *args, ulps=ulps, expect=name)
        else:
            check(fn, *args, ulps=ulps, expect=name)
    elif name in UNIFORM and widened:
        check_widened(fn, *args, ulps=UNIFORM[name][F64], expect=name)
    else:
        check_special(fn, list(args), budget, name, widened=widened)
