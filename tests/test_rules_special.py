"""Special functions in the interpreter against XLA: erf and relatives, lgamma, digamma, Bessel, ...

Generated operands and hand-picked domain edges, each compared with XLA within the budgets that
tests/special_budgets.py derives (its docstring gives the derivation).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as sc
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from jax import lax
from oracle import FLOATS, RULE_SETTINGS, arrays, shapes
from special_budgets import (
    BOUNDED,
    F32,
    F64,
    LOOP_SHAPES,
    SPECIAL,
    check_rule,
    check_special,
    erfc32_bound,
    normal_budget,
    normal_sample_budget,
    rounded_once,
    ulp,
    unit,
)

from gradlanes.program.interpreter import Interpreter

#: The primitives whose generated cases this module runs (tests/test_interpreter.py).
COVERED = {
    "erf", "erfc", "erf_inv", "lgamma", "digamma", "bessel_i0e", "bessel_i1e", "igamma", "igammac",
    "igamma_grad_a", "zeta", "polygamma", "regularized_incomplete_beta",
}  # fmt: skip


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
@settings(parent=RULE_SETTINGS, max_examples=examples(16))
@given(data=st.data(), dtype=st.sampled_from(FLOATS), in_domain=st.booleans())
def test_special_function_matches_xla(name, data, dtype, in_domain):
    check_rule(name, *data.draw(operands(name, dtype, in_domain)))


@pytest.mark.parametrize("name", sorted(BOUNDED))
@settings(parent=RULE_SETTINGS, max_examples=examples(10))  # seconds of XLA compile per new shape and dtype
@given(data=st.data(), dtype=st.sampled_from(FLOATS), in_domain=st.booleans())
def test_looping_special_function_matches_xla(name, data, dtype, in_domain):
    check_rule(name, *data.draw(operands(name, dtype, in_domain)))


@pytest.mark.parametrize("name", sorted(SPECIAL))
@settings(parent=RULE_SETTINGS, max_examples=examples(4))
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
    """d/dx x Phi(x) = 0.5 erfc(a) + x phi(x), a = -x / sqrt 2 (rounded to float32 alike on both
    sides): 0.5 erfc(a) differs by half erfc's budget at a; phi's exp by 6 (XLA) + 3 (the
    interpreter's NumPy float32 exp, validated to 3 ulp), carried through three products: 2 * 9 + 3;
    the final add 1. The sum cancels near x = -0.75: in ulps of the terms."""
    (x,) = args
    a = (-x.astype(F32) * np.float32(math.sqrt(0.5))).astype(F64)
    terms = 0.5 * sc.erfc(-x / math.sqrt(2)) + np.abs(x) * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    erfc_part = 0.5 * rounded_once(*erfc32_bound(a), F32)
    return erfc_part + (2 * 9 + 3 + 1) * ulp(w, np.maximum(terms, np.abs(want)))


@settings(parent=RULE_SETTINGS, max_examples=examples(8))
@given(x=arrays(F32, shapes(), elements=unit(F32, -12.0, 12.0)))
def test_exact_gelu_gradient(x):
    gradient = jax.grad(lambda v: jnp.sum(jax.nn.gelu(v, approximate=False)))
    check_special(gradient, [x], gelu_grad_budget, "erfc")


@settings(parent=RULE_SETTINGS, max_examples=examples(4))
@given(seed=st.integers(0, 2**32 - 1), shape=st.sampled_from([(), (0,), (3, 50)]))
def test_random_normal_draws_through_erf_inv(seed, shape):
    key = jax.random.key(seed)
    for sampler in (
        lambda k: jax.random.normal(k, shape),
        lambda k: jax.random.truncated_normal(k, -2.0, 3.0, shape),
    ):
        check_special(sampler, [key], normal_sample_budget, "erf_inv")


@settings(parent=RULE_SETTINGS, max_examples=examples(12))
@given(u=arrays(F32, shapes(), elements=st.floats(-1, 1, width=32, exclude_min=True, exclude_max=True)))
def test_normal_style_erf_inv_of_uniform(u):
    def budget(args, sample, w):
        return normal_budget(args[0], sample)

    check_special(lambda v: np.float32(math.sqrt(2)) * lax.erf_inv(v), [u], budget, "erf_inv")
