"""Special functions in the interpreter against XLA: erf and relatives, lgamma, digamma, Bessel, ...

The rules evaluate XLA's own algorithms (gradlanes.program.rules.special), so they part from XLA
only where XLA calls a transcendental function (exp, log, sin, cos, pow, the CPU's rsqrt estimate)
that the rule evaluates otherwise. Every budget below is derived from the documented accuracy of
those calls on both sides (`CALL`), carried through the operations of the algorithm that follow:

- XLA's CPU intrinsics (xla/codegen/intrinsic/accuracy/accuracy_budget.h): float32 exp 6 ulp, log 1;
  its rsqrt refines the CPU's estimate to 1 ulp (rsqrt.cc); float32 sin, cos, pow are the C
  library's (glibc's manual: within 1 ulp on x86-64), and so are float64 log, sin, cos and pow.
- The rules: float32 steps are float64 results rounded (0.5 ulp); float64 steps are NumPy's (its
  validation data, numpy/_core/tests/data/umath-validation-set-*.csv: within 1 ulp). XLA's float64
  exp and its log1p are evaluated with XLA's own operations, so they do not differ at all.
- An error of k ulp of a value is a relative error below k * EPS (EPS = 2**-23 in float32) and a
  relative error r is at most 2 r / EPS ulp of the value it lands in; every correctly rounded
  operation after the two sides part adds at most 1 ulp (half on each side).

Where the algorithm adds terms that cancel (lgamma near its zeros at 1 and 2, digamma near its
zeros, the reflection formulas, 1 - P in the incomplete functions) the difference is bounded in
ulps of the terms, not of the small result: those budgets are in ulps of `scale`, the magnitude of
the terms, computed here in float64 per element.

float16 and bfloat16 are computed in float32 and rounded, as XLA does: once the float32 values
differ at all, the two roundings may fall on either side of a midpoint, one narrow ulp apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import scipy.special as sc
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from oracle import CASES_RUN, FLOATS, RULE_SETTINGS, arrays, check, check_widened, primitives, shapes, x64

from gradlanes.program.interpreter import Interpreter

F16, BF16, F32, F64 = (np.dtype(t) for t in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64))
NARROW = (F16, BF16)
WORK = {F16: F32, BF16: F32, F32: F32, F64: F64}
EPS = {F32: 2.0**-23, F64: 2.0**-52}

#: |XLA's result - the rule's| for one transcendental call, in ulps of its result.
CALL = {
    F32: {"exp": 6 + 0.5, "log": 1 + 0.5, "sin": 1 + 0.5, "cos": 1 + 0.5, "pow": 1 + 0.5, "rsqrt": 1 + 1},
    F64: {"exp": 0.0, "log": 1 + 1, "sin": 1 + 1, "cos": 1 + 1, "pow": 1 + 1, "rsqrt": 0.0},
}

COVERED = {
    "erf", "erfc", "erf_inv", "lgamma", "digamma", "bessel_i0e", "bessel_i1e", "igamma", "igammac",
    "igamma_grad_a", "zeta", "polygamma", "regularized_incomplete_beta",
}  # fmt: skip

# ---- budgets in ulps of XLA's result -------------------------------------------------------------
#: erf: float32 is XLA's intrinsic with the same FMAs (exact); float64 is glibc's erf (1 ulp)
#: against SciPy's (Cephes: relative error 3.7e-16 = 1.67 EPS, so 3.4 ulp).
ERF_ULPS = {F32: 0.0, F64: 1 + 3.4}
#: erfc: |x| < 1 is exact; beyond, exp(-x^2) carried through 1/|x| and a polynomial: 2 exp + 2.
ERFC_ULPS = {w: 2 * CALL[w]["exp"] + 2 if CALL[w]["exp"] else 0.0 for w in (F32, F64)}
#: erf_inv: w = -log1p(-x^2) parts through log1p's log; the polynomial's relative sensitivity
#: w p'(w) / p(w) is below 0.6 on both ranges (p ~ 1.5 + w/4 below w = 5, 2.8 + sqrt(w) - 3 above),
#: so 0.6 * 2 * log ulp, plus its last FMA and the product with x.
ERF_INV_ULPS = {w: 1.2 * CALL[w]["log"] + 2 for w in (F32, F64)}
#: Bessel: |x| <= 8 is exact; beyond, XLA multiplies by its rsqrt: 2 rsqrt + 1 rounding.
BESSEL_ULPS = {w: 2 * CALL[w]["rsqrt"] + 1 if CALL[w]["rsqrt"] else 0.0 for w in (F32, F64)}
UNIFORM = {"erf": ERF_ULPS, "erfc": ERFC_ULPS, "erf_inv": ERF_INV_ULPS, "bessel_i0e": BESSEL_ULPS,
           "bessel_i1e": BESSEL_ULPS}  # fmt: skip


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

    The continued fraction is the same operations on both sides, but its value is allowed to
    differ by its own stopping tolerance (eps/2 per step) over all of its steps: XLA stops every
    element when all have converged and its small arrays stop elsewhere than this rule's (an
    unexplained divergence, see the report), so 200 (float32) or 600 (float64) steps of eps/2.
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
    "erf": (lax.erf, 1, in_ulps(ERF_ULPS), None),
    "erfc": (lax.erfc, 1, in_ulps(ERFC_ULPS), (-12.0, 12.0)),
    "erf_inv": (lax.erf_inv, 1, in_ulps(ERF_INV_ULPS), (-1.0, 1.0)),
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


def check_special(fn, args: list, budget: Budget, expect: str, widened: bool = False) -> None:
    """`fn(*args)` in the interpreter against XLA: XLA's dtype, shape, NaN and infinities exactly,
    finite values within `budget` (plus one narrow ulp for float16 and bfloat16).

    `widened` checks the float64 reference of `fn`'s program against XLA running it in float64.
    Operands may be arrays or PRNG keys (budgets of keys' samplers ignore them).
    """
    if any(isinstance(a, np.ndarray) and a.dtype == F64 for a in args):
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
    operands = [a.astype(np.float64) if isinstance(a, np.ndarray) else a for a in args]
    with np.errstate(all="ignore"):
        allowed = np.broadcast_to(np.nan_to_num(budget(operands, w, work), nan=np.inf), w.shape)
        if want.dtype in NARROW and allowed.any():
            allowed = allowed + ulp(want.dtype, w)
        bad = ~(np.isnan(w) | (w == g) | (np.abs(w - g) <= allowed))
    where = [np.broadcast_to(a, w.shape)[bad][:3] for a in args if isinstance(a, np.ndarray)]
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


# ---- generated cases -----------------------------------------------------------------------------
def operands(name: str, dtype: np.dtype, in_domain: bool):
    """Operands of one shape (the primitives take equal shapes), all floats or from the domain."""
    _, count, _, domain = SPECIAL[name]
    domain = domain if (in_domain or name in BOUNDED) else None
    elements = unit(dtype, *domain) if domain else None
    if name in BOUNDED and not in_domain:
        # the domain plus its edges: 0, inf, nan and negatives
        elements = st.one_of(elements, st.sampled_from([0.0, -1.0, np.inf, np.nan]))
    return (LOOP_SHAPES if name in BOUNDED else shapes()).flatmap(
        lambda shape: st.tuples(*[arrays(dtype, shape, elements=elements) for _ in range(count)])
    )


@pytest.mark.parametrize("name", sorted(set(SPECIAL) - BOUNDED))
@settings(parent=RULE_SETTINGS, max_examples=16)
@given(data=st.data(), dtype=st.sampled_from(FLOATS), in_domain=st.booleans())
def test_special_function_matches_xla(name, data, dtype, in_domain):
    check_rule(name, *data.draw(operands(name, dtype, in_domain)))


@pytest.mark.parametrize("name", sorted(BOUNDED))
@settings(parent=RULE_SETTINGS, max_examples=10)  # seconds of XLA compile per new shape and dtype
@given(data=st.data(), dtype=st.sampled_from(FLOATS), in_domain=st.booleans())
def test_looping_special_function_matches_xla(name, data, dtype, in_domain):
    check_rule(name, *data.draw(operands(name, dtype, in_domain)))


@pytest.mark.parametrize("name", sorted(SPECIAL))
@settings(parent=RULE_SETTINGS, max_examples=4)
@given(data=st.data(), in_domain=st.booleans())
def test_special_function_float64_reference(name, data, in_domain):
    check_rule(name, *data.draw(operands(name, F32, in_domain)), widened=True)


# ---- domain edges, hand-picked -------------------------------------------------------------------
EDGES = {
    "erf_inv": [-1.0, 1.0, -1.0000001, 1.0000001, 2.0, -0.0, 0.0, 0.5, -0.9999999, np.inf, -np.inf, np.nan],
    "lgamma": [0.0, -0.0, -1.0, -2.0, -3.0, -100.0, 1.0, 2.0, -0.5, -1.5, -2.5, -1e-20, 1e-20, 1e-38,
               -1e30, 1e30, 3e38, np.inf, -np.inf, np.nan, 0.99999994, 1.0000001, 1.9999999, -2.7476826],
    "digamma": [0.0, -0.0, -1.0, -2.0, -7.0, -1e6, 1.0, 1.4616321, -0.5, -1.5, 1e-20, -1e-20, 1e-38, 1e30,
                -0.50000006, np.inf, -np.inf, np.nan],
    "erf": [0.0, -0.0, 1e-39, -1e-39, 1e-38, 3.832506856900711, 3.8325067, -3.8325067, 5.0, np.inf, -np.inf,
            np.nan],
    "erfc": [0.0, -0.0, 1e-39, 0.99999994, 1.0, -1.0, 2.0, 9.19, 9.2, 9.4, 10.0, 26.6, -30.0, np.inf, -np.inf,
             np.nan],
    "bessel_i0e": [0.0, -0.0, 8.0, 8.000001, -8.0, 7.9999995, 1e-39, 1e30, np.inf, -np.inf, np.nan],
    "bessel_i1e": [0.0, -0.0, 8.0, 8.000001, -8.0, 7.9999995, 1e-39, -1e-39, 1e30, np.inf, -np.inf, np.nan],
}  # fmt: skip
PAIRS = {
    # igamma and relatives: a = 0, x = 0, negatives, infinities, NaN, the branch boundaries x = 1, x = a
    "igamma": ([0.0, 0.0, 1.0, 1.0, -1.0, 2.0, 2.0, np.inf, 3.0, np.nan, 1.0, 0.5, 30.0, 1e-30],
               [0.0, 1.0, 0.0, -1.0, 1.0, 2.0, np.inf, 1.0, 1.0, 1.0, 1.0, 1.0, 30.0, 1e-30]),
    # zeta: x = 1 (pole), x < 1, q at non-positive integers with even and odd x, q negative non-integer
    "zeta": ([1.0, 0.5, 2.0, 3.0, 2.0, 4.0, 1.5, 2.0, np.inf, np.nan, 2.0, 30.0],
             [1.0, 1.0, 0.0, -2.0, -2.0, -3.5, -3.5, np.inf, 1.0, 1.0, np.nan, 1e-3]),
    # polygamma: n = 0, non-integer n, negative n, poles of x
    "polygamma": ([0.0, 1.0, 2.0, 0.5, -1.0, 1.0, 3.0, 0.0, 1.0, np.nan],
                  [1.0, 1.0, 0.5, 1.0, 1.0, 0.0, -2.0, -1.0, -1.5, 1.0]),
}  # fmt: skip
PAIRS["igammac"] = PAIRS["igamma_grad_a"] = PAIRS["igamma"]
BETA_EDGES = (
    [0.0, 1.0, 0.0, np.inf, 1.0, 2.0, -1.0, 1.0, 1.0, 1e-39, 0.5, np.nan],
    [1.0, 0.0, 0.0, 1.0, np.inf, 3.0, 1.0, 1.0, 1.0, 2.0, 0.5, 1.0],
    [0.5, 0.5, 0.5, 0.5, 0.5, 0.0, 0.5, 1.0, 1.5, 0.5, 0.5, 0.5],
)


def _edge_arrays(columns, dtype):
    with np.errstate(over="ignore"):  # 1e30 is inf in float16
        return [np.array(column, np.float64).astype(dtype) for column in columns]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", sorted(EDGES) + sorted(PAIRS) + ["regularized_incomplete_beta"])
def test_domain_edges(name, dtype):
    if name in EDGES:
        columns = [EDGES[name]]
    else:
        columns = PAIRS[name] if name in PAIRS else BETA_EDGES
    args = _edge_arrays(columns, dtype)
    if name in BOUNDED:  # in LOOP_SHAPES: the edges five at a time
        padded = [np.concatenate([a, np.ones(-len(a) % 5, dtype)]) for a in args]
        for start in range(0, len(padded[0]), 5):
            check_rule(name, *[a[start : start + 5] for a in padded])
    else:
        check_rule(name, *args)
    check_rule(name, *[a[:0] for a in args])  # zero-size
    check_rule(name, *[a[3] for a in args])  # scalar


def test_erf_inv_edges_are_xla_values():
    x = np.array([-1.0, 1.0, 1.0000001, -2.0], np.float32)
    got = Interpreter(jax.make_jaxpr(lax.erf_inv)(x))(x)[0]
    np.testing.assert_array_equal(got, [-np.inf, np.inf, np.nan, np.nan])


def test_lgamma_poles_and_digamma_poles():
    poles = np.array([0.0, -1.0, -2.0, -50.0], np.float32)
    lgamma = Interpreter(jax.make_jaxpr(lax.lgamma)(poles))(poles)[0]
    np.testing.assert_array_equal(lgamma, np.full(4, np.inf))
    assert np.isnan(Interpreter(jax.make_jaxpr(lax.digamma)(poles))(poles)[0]).all()


def test_subnormal_operands_flush_to_zero_as_on_xla():
    # XLA's CPU code runs with denormals flushed: lgamma(1e-39) is lgamma(0) = inf there.
    x = np.array([1e-39, -1e-39], np.float32)
    for name in ("erf", "lgamma", "erfc"):
        check_rule(name, x)


# ---- end to end ----------------------------------------------------------------------------------
def gelu_grad_budget(args, want, w):
    """d/dx x Phi(x) = 0.5 erfc(-x / sqrt 2) + x phi(x). erfc differs by ERFC_ULPS; phi's exp by 6
    (XLA) + 3 (the interpreter's NumPy float32 exp, validated to 3 ulp), carried through three
    products: 2 * 9 + 3; the final add 1. The sum cancels near x = -0.75: in ulps of the terms."""
    (x,) = args
    terms = 0.5 * sc.erfc(-x / math.sqrt(2)) + np.abs(x) * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    return (ERFC_ULPS[F32] + 2 * 9 + 3 + 1) * ulp(w, np.maximum(terms, np.abs(want)))


@settings(parent=RULE_SETTINGS, max_examples=8)
@given(x=arrays(F32, shapes(), elements=unit(F32, -12.0, 12.0)))
def test_exact_gelu_gradient(x):
    gradient = jax.grad(lambda v: jnp.sum(jax.nn.gelu(v, approximate=False)))
    check_special(gradient, [x], gelu_grad_budget, "erfc")


#: sqrt(2) erf_inv(u): erf_inv's budget carried through the product, 2 * ERF_INV_ULPS + 1.
NORMAL_ULPS = 2 * ERF_INV_ULPS[F32] + 1


def normal_sample_budget(_, sample, w):
    """The sample's own budget, plus the uniform's rounding carried through erf_inv.

    jax.random.uniform ends with u = j * (max - min) + min, which XLA contracts into one FMA and the
    interpreter rounds twice (its mul and add are separate rules): |du| <= 0.5 ulp(j * (max - min)),
    at most 2**-24 as |j * (max - min)| < 2. The sample sqrt(2) erf_inv(u) moves by du times its
    derivative sqrt(2 pi) / 2 * exp(sample^2 / 2).
    """
    return NORMAL_ULPS * ulp(w, sample) + 2.0**-24 * math.sqrt(2 * math.pi) / 2 * np.exp(sample * sample / 2)


@settings(parent=RULE_SETTINGS, max_examples=4)
@given(seed=st.integers(0, 2**32 - 1), shape=st.sampled_from([(), (0,), (3, 50)]))
def test_random_normal_draws_through_erf_inv(seed, shape):
    key = jax.random.key(seed)
    for sampler in (
        lambda k: jax.random.normal(k, shape),
        lambda k: jax.random.truncated_normal(k, -2.0, 3.0, shape),
    ):
        check_special(sampler, [key], normal_sample_budget, "erf_inv")


@settings(parent=RULE_SETTINGS, max_examples=12)
@given(u=arrays(F32, shapes(), elements=st.floats(-1, 1, width=32, exclude_min=True, exclude_max=True)))
def test_normal_style_erf_inv_of_uniform(u):
    check(lambda v: np.float32(math.sqrt(2)) * lax.erf_inv(v), u, ulps=NORMAL_ULPS, expect="erf_inv")
