"""Special functions in the interpreter against XLA: erf and relatives, lgamma, digamma, Bessel, ...

The rules evaluate XLA's own algorithms (gradlanes.program.rules.special), so most results are XLA's
bit for bit; the rest differ only where XLA calls a transcendental function (exp, log, sin, cos,
the CPU's rsqrt estimate) that the rule evaluates in float64 and rounds. Each budget below is derived
from the documented accuracy of those calls on both sides, carried through the algorithm's remaining
operations:

- XLA's CPU intrinsics, xla/codegen/intrinsic/accuracy/accuracy_budget.h: float32 exp 6 ulp, log 1,
  erf 2 (its erf is evaluated here with the same FMAs, so it is exact); float64 exp 1, log 1;
  rsqrt: its Newton-refined estimate targets 1 ulp (xla/codegen/intrinsic/rsqrt.cc). sin and cos are
  the C library's (glibc's manual: sinf, cosf within 1 ulp on x86-64; its sin, cos, log and pow,
  and NumPy's float64 ones, are the same functions, so float64 results are XLA's bit for bit there).
- The rules: a float64 result rounded to float32 is within 0.5 ulp (plus 2**-29 ulp of float64's
  own error, nothing at this scale); SciPy's float64 erf is Cephes' (relative error 3.7e-16).
- An error of k ulp relative to one value becomes at most 2k ulp of a product with it (a result's
  ulp is between 2**-24 and 2**-23 of its magnitude in float32), and every correctly rounded
  operation after the two sides part adds at most 1 ulp (half on each side).

Where the algorithm cancels terms (lgamma near its zeros at 1 and 2, digamma near its zeros, the
reflection formulas), the difference is bounded in ulps of the terms, not of the small result: those
budgets are in ulps of `scale`, the magnitude of the terms XLA adds last, per element.

float16 and bfloat16 are computed in float32 and rounded (as XLA does): the float32 difference is
far below half a narrow ulp, so the rounded results differ by at most 1 ulp.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import scipy.special
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from oracle import CASES_RUN, FLOATS, RULE_SETTINGS, arrays, check, check_widened, primitives, shapes, x64

from gradlanes.program.interpreter import Interpreter

COVERED = {"erf", "erfc", "erf_inv", "lgamma", "digamma", "bessel_i0e", "bessel_i1e"}

F16, BF16, F32, F64 = (np.dtype(t) for t in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64))
NARROW = (F16, BF16)
#: A narrow result is the float32 value rounded: once the float32 values differ at all, the roundings
#: may fall on either side of a narrow midpoint, one narrow ulp apart.
NARROW_ULPS = 1.0

# ---- budgets, in ulps of the result (float32 / float64) ---------------------------------------
#: Exact: XLA's float32 erf intrinsic, evaluated with the same fused multiply-adds.
ERF32_ULPS = 0.0
#: XLA's float64 erf is glibc's (1 ulp); SciPy's (Cephes) is within 3.7e-16 relative = 1.67 * 2**-52,
#: at most 3.4 ulp: 1 + 3.4.
ERF64_ULPS = 4.4
#: |x| < 1: exact (1 - x T(x^2) with XLA's FMAs). |x| >= 1: exp(-x^2) differs by 6 + 0.5 ulp, carried
#: through (1/|x|) and the polynomial: 2 * 6.5 + 2 roundings; 2 - erfc(|x|) only shrinks it.
ERFC32_ULPS = 15.0
#: float64: exp 1 (XLA) + 1 (NumPy's, validated to 1 ulp) through a product and a quotient.
ERFC64_ULPS = 2 * 2.0 + 2
#: w = -log1p(-x^2) differs only through log1p's log (|x|^2 >= sqrt(2) - 1): 1 + 0.5 ulp of w. The
#: polynomial in w has relative sensitivity w p'(w) / p(w) <= 0.6 on both ranges (p ~ 1.5 + w/4 below
#: w = 5, ~ 2.8 + sqrt(w) - 3 above), so erf_inv moves by 0.6 * 2 * 1.5 = 1.8 ulp relative, 3.6 ulp of
#: the result, plus the last FMA and the product with x: 1 each.
ERF_INV32_ULPS = 3.6 + 2
#: float64: log1p is XLA's algorithm and glibc's log on both sides: exact.
ERF_INV64_ULPS = 0.0
#: |x| <= 8: exact (the Chebyshev recurrence with XLA's FMAs). Above, XLA multiplies by its rsqrt
#: (1 ulp) where the rule divides by sqrt (two roundings, 1 ulp): 2 * 2 + 1 rounding.
BESSEL32_ULPS = 5.0
#: float64 rsqrt is 1/sqrt on both sides: exact.
BESSEL64_ULPS = 0.0

# ---- budgets in ulps of the terms' magnitude (`scale`) ------------------------------------------
#: lgamma (x >= 1/2): log t differs through log1p's log by 1.5 ulp of log t, which moves
#: r = ((z + 1/2) - t / log t) log t by 2 * (1.5 + 2 roundings) = 7 ulp of its terms; log a(z) by 1.5;
#: the FMA and the final add: 2. Reflection (x < 1/2): the same for lgamma(1 - x), log(sin) through
#: sin and log: 2 * 1.5 + 1.5, and two subtractions: 10.5 + 4.5 + 2.
LGAMMA32_SCALED_ULPS = 17.0
#: digamma: log t differs by 1.5 ulp; a'/a and 7/t are the same operations on both sides; two adds
#: after: 3.5. Reflection: pi cos / sin through cos and sin, 2 * (1.5 + 1.5) + 2 roundings, and the
#: subtraction: 9.
DIGAMMA32_SCALED_ULPS = 3.5 + 9.0
#: float64: every call (log, log1p's algorithm, sin, cos) is the same as XLA's: exact.
EXACT64 = 0.0

ULP_BUDGETS = {
    "erf": {F32: ERF32_ULPS, F64: ERF64_ULPS},
    "erfc": {F32: ERFC32_ULPS, F64: ERFC64_ULPS},
    "erf_inv": {F32: ERF_INV32_ULPS, F64: ERF_INV64_ULPS},
    "bessel_i0e": {F32: BESSEL32_ULPS, F64: BESSEL64_ULPS},
    "bessel_i1e": {F32: BESSEL32_ULPS, F64: BESSEL64_ULPS},
}
FUNCTIONS = {
    "erf": lax.erf,
    "erfc": lax.erfc,
    "erf_inv": lax.erf_inv,
    "bessel_i0e": lax.bessel_i0e,
    "bessel_i1e": lax.bessel_i1e,
    "lgamma": lax.lgamma,
    "digamma": lax.digamma,
}


def ulps_for(name: str, dtype: np.dtype) -> float:
    if dtype in NARROW:
        return 0.0 if ULP_BUDGETS[name][F32] == 0 else NARROW_ULPS
    return ULP_BUDGETS[name][dtype]


# ---- the terms' magnitudes, for the scaled budgets ---------------------------------------------
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


def lgamma_scale(x: np.ndarray, _=None) -> np.ndarray:
    """|terms| of XLA's lgamma: (z + 1/2) log t, t, log a(z), and for x < 1/2 log|sin(pi x)|, log pi."""
    z, t, a, _ = _lanczos_terms(x)
    scale = np.abs((z + 0.5) * np.log(t)) + t + np.abs(np.log(np.abs(a))) + 1.0
    frac = np.abs(x) - np.floor(np.abs(x))
    log_sin = np.log(np.sin(np.pi * np.minimum(frac, 1 - frac)))
    return np.where(x < 0.5, scale + np.abs(log_sin) + math.log(math.pi), scale)


def digamma_scale(x: np.ndarray, _=None) -> np.ndarray:
    """|terms| of XLA's digamma: log t, a'/a, 7/t, and for x < 1/2 pi cot(pi x)."""
    _, t, a, a_prime = _lanczos_terms(x)
    scale = np.abs(np.log(t)) + np.abs(a_prime / a) + 7 / t
    reduced = x + np.abs(np.floor(x + 0.5))
    cot = np.pi * np.cos(np.pi * reduced) / np.sin(np.pi * reduced)
    return np.where(x < 0.5, scale + np.abs(cot), scale)


SCALED = {
    "lgamma": (lgamma_scale, LGAMMA32_SCALED_ULPS),
    "digamma": (digamma_scale, DIGAMMA32_SCALED_ULPS),
}


def _ulp_in(dtype: np.dtype, magnitude: np.ndarray) -> np.ndarray:
    """The spacing of `dtype` at each |magnitude| (as float64; bfloat16 through float32's exponent)."""
    magnitude = np.abs(np.asarray(magnitude, np.float64))
    if dtype == BF16:
        tiny = float(ml_dtypes.finfo(ml_dtypes.bfloat16).tiny)
        return np.exp2(np.floor(np.log2(np.maximum(magnitude, tiny))) - 7)
    finite = np.minimum(magnitude, float(np.finfo(dtype).max))
    return np.spacing(finite.astype(dtype)).astype(np.float64)


def check_scaled(fn, x: np.ndarray, *, scale, ulps: float, expect: str, widened: bool = False) -> None:
    """`oracle.check` with a budget of `ulps` ulps of `scale(x)` (in the working precision) per element.

    XLA's dtype, shape, NaN positions and infinities must match exactly; finite values may differ by
    `ulps` ulps of the terms' magnitude, plus one narrow ulp for float16 and bfloat16 results.
    `widened` checks the float64 reference against XLA in float64 instead.
    """
    closed = jax.make_jaxpr(fn)(x)
    assert expect in primitives(closed), f"{expect} not in the traced program"
    if widened:
        got = np.asarray(Interpreter(closed, widen=True)(x)[0])
        with x64():
            want = np.asarray(jax.jit(fn)(x.astype(np.float64)))
    else:
        got = np.asarray(Interpreter(closed)(x)[0])
        want = np.asarray(jax.jit(fn)(x))
    assert got.dtype == want.dtype, f"{expect}: dtype {got.dtype}, JAX gives {want.dtype}"
    assert got.shape == want.shape, f"{expect}: shape {got.shape}, JAX gives {want.shape}"
    w, g = want.astype(np.float64), got.astype(np.float64)
    assert np.array_equal(np.isnan(w), np.isnan(g)), f"{expect}: NaN where JAX has none, or the reverse"
    work = F64 if want.dtype == F64 else F32
    with np.errstate(all="ignore"):
        terms = scale(x.astype(np.float64) if isinstance(x, np.ndarray) else x, w)
        magnitude = np.maximum(np.abs(w), np.nan_to_num(terms, nan=0.0))
        allowed = ulps * _ulp_in(work, magnitude)
        if want.dtype in NARROW and ulps > 0:
            allowed = allowed + NARROW_ULPS * _ulp_in(want.dtype, w)
        bad = ~(np.isnan(w) | (w == g) | (np.abs(w - g) <= allowed))
    assert not bad.any(), f"{expect}: got {g[bad][:5]}, JAX {w[bad][:5]}"
    CASES_RUN[expect] += 1


def check_rule(name: str, x: np.ndarray) -> None:
    if x.dtype == F64:  # float64 programs need JAX's 64-bit mode
        with x64():
            return _check_rule(name, x)
    return _check_rule(name, x)


def no_scale(x: np.ndarray, _=None) -> np.ndarray:
    return np.zeros_like(x)


def _check_rule(name: str, x: np.ndarray) -> None:
    fn = FUNCTIONS[name]
    if name in SCALED:
        scale, ulps = SCALED[name]
        check_scaled(fn, x, scale=scale, ulps=ulps if x.dtype != F64 else EXACT64, expect=name)
    elif x.dtype == BF16:
        # oracle.check compares bfloat16 (NumPy kind 'V') bit for bit, NaN != NaN included
        ulps = 0.0 if ULP_BUDGETS[name][F32] == 0 else ULP_BUDGETS[name][F32]
        check_scaled(fn, x, scale=no_scale, ulps=ulps, expect=name)
    else:
        check(fn, x, ulps=ulps_for(name, x.dtype), expect=name)


def check_rule_widened(name: str, x: np.ndarray) -> None:
    fn = FUNCTIONS[name]
    if name in SCALED:
        check_scaled(fn, x, scale=SCALED[name][0], ulps=EXACT64, expect=name, widened=True)
    else:
        # the float64 reference runs the float64 algorithm: its budget against XLA in float64
        check_widened(fn, x, ulps=max(ULP_BUDGETS[name][F64], 0.0), expect=name)


# ---- generated cases ---------------------------------------------------------------------------
dtypes = st.sampled_from(FLOATS)


def inputs(dtype, elements=None):
    if elements is None:
        return arrays(dtype, shapes())
    width = 64 if dtype == F64 else 32 if dtype in (F32, BF16) else 16
    return arrays(dtype, shapes(), elements=st.floats(*elements, width=width))


#: erf_inv is defined on [-1, 1] (NaN outside): most generated floats are outside, so half the
#: cases draw from [-1, 1] itself.
DOMAINS = {"erf_inv": (-1.0, 1.0), "lgamma": (-30.0, 30.0), "digamma": (-30.0, 30.0)}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@settings(parent=RULE_SETTINGS, max_examples=30)
@given(data=st.data(), dtype=dtypes, in_domain=st.booleans())
def test_special_function_matches_xla(name, data, dtype, in_domain):
    domain = DOMAINS.get(name) if in_domain else None
    check_rule(name, data.draw(inputs(dtype, domain)))


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@settings(parent=RULE_SETTINGS, max_examples=8)
@given(data=st.data(), in_domain=st.booleans())
def test_special_function_float64_reference(name, data, in_domain):
    domain = DOMAINS.get(name) if in_domain else None
    check_rule_widened(name, data.draw(inputs(F32, domain)))


# ---- domain edges, hand-picked -----------------------------------------------------------------
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


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", sorted(EDGES))
def test_domain_edges(name, dtype):
    with np.errstate(over="ignore"):  # 1e30 is inf in float16
        x = np.array(EDGES[name], np.float64).astype(dtype)
    check_rule(name, x)
    check_rule(name, x[:0])  # zero-size
    check_rule(name, x[0])  # scalar


def test_erf_inv_edges_are_xla_values():
    got = Interpreter(jax.make_jaxpr(lax.erf_inv)(np.zeros(4, np.float32)))(
        np.array([-1.0, 1.0, 1.0000001, -2.0], np.float32)
    )[0]
    np.testing.assert_array_equal(got, [-np.inf, np.inf, np.nan, np.nan])


def test_lgamma_poles_and_digamma_poles():
    poles = np.array([0.0, -1.0, -2.0, -50.0], np.float32)
    lg = Interpreter(jax.make_jaxpr(lax.lgamma)(poles))(poles)[0]
    dg = Interpreter(jax.make_jaxpr(lax.digamma)(poles))(poles)[0]
    np.testing.assert_array_equal(lg, np.full(4, np.inf, np.float32))
    assert np.isnan(dg).all()


def test_subnormal_inputs_flush_to_zero_as_on_xla():
    # XLA's CPU code runs with denormals flushed: lgamma(1e-39) is lgamma(0) = inf there.
    x = np.array([1e-39, -1e-39], np.float32)
    for name in ("erf", "lgamma", "erfc"):
        check_rule(name, x)


# ---- end to end --------------------------------------------------------------------------------
def gelu_grad_scale(x: np.ndarray, _=None) -> np.ndarray:
    """|terms| of d/dx x Phi(x): Phi(x) (0.5 erfc(-x/sqrt 2)) and x phi(x)."""
    return 0.5 * scipy.special.erfc(-x / math.sqrt(2)) + np.abs(x) * np.exp(-x * x / 2) / math.sqrt(
        2 * math.pi
    )


#: The exact GELU's gradient is 0.5 erfc(-x/sqrt 2) + x phi(x): erfc differs by ERFC32_ULPS; phi's exp
#: by 6 (XLA) + 3 (NumPy's float32 exp, validated to 3 ulp) carried through three products (2 * 9 + 3);
#: the final add 1. The sum cancels near x = -0.75, so the budget is in ulps of the terms.
GELU_GRAD_SCALED_ULPS = ERFC32_ULPS + 2 * 9 + 3 + 1


@settings(parent=RULE_SETTINGS, max_examples=15)
@given(x=arrays(F32, shapes(), elements=st.floats(-12, 12, width=32)))
def test_exact_gelu_gradient(x):
    gradient = jax.grad(lambda v: jnp.sum(jax.nn.gelu(v, approximate=False)))
    check_scaled(gradient, x, scale=gelu_grad_scale, ulps=GELU_GRAD_SCALED_ULPS, expect="erfc")


#: sqrt(2) erf_inv(u): erf_inv's budget carried through the product: 2 * ERF_INV32_ULPS + 1.
NORMAL_ULPS = 2 * ERF_INV32_ULPS + 1


def normal_sample_scale(_, sample: np.ndarray) -> np.ndarray:
    """A magnitude whose NORMAL_ULPS float32 ulps cover the sample's budget plus the uniform's rounding.

    jax.random.uniform ends with u = j * (max - min) + min, which XLA contracts into one FMA and the
    interpreter rounds twice (its mul and add are separate rules): |du| <= 0.5 ulp(j * (max - min)),
    at most 2**-24 as |j * (max - min)| < 2. The sample sqrt(2) erf_inv(u) moves by du times its
    derivative sqrt(2 pi) / 2 * exp(sample^2 / 2). As ulp(S) > 2**-24 S, NORMAL_ULPS ulp(S) covers
    NORMAL_ULPS ulp(sample) + that when S = 2 |sample| + sqrt(2 pi) / 2 * exp(sample^2 / 2) / NORMAL_ULPS.
    """
    return 2 * np.abs(sample) + math.sqrt(2 * math.pi) / 2 * np.exp(sample * sample / 2) / NORMAL_ULPS


@settings(parent=RULE_SETTINGS, max_examples=8)
@given(seed=st.integers(0, 2**32 - 1), shape=shapes(max_dims=2, max_side=16))
def test_random_normal_draws_through_erf_inv(seed, shape):
    key = jax.random.key(seed)
    for sampler in (
        lambda k: jax.random.normal(k, shape),
        lambda k: jax.random.truncated_normal(k, -2.0, 3.0, shape),
    ):
        check_scaled(sampler, key, scale=normal_sample_scale, ulps=NORMAL_ULPS, expect="erf_inv")


@settings(parent=RULE_SETTINGS, max_examples=20)
@given(u=arrays(F32, shapes(), elements=st.floats(-1, 1, width=32, exclude_min=True, exclude_max=True)))
def test_normal_style_erf_inv_of_uniform(u):
    check(lambda v: np.float32(math.sqrt(2)) * lax.erf_inv(v), u, ulps=NORMAL_ULPS, expect="erf_inv")
