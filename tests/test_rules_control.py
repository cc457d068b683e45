"""Control flow in the interpreter against XLA: scan, while, cond, checkpoint and their gradients.

Bodies use operations that are exact in every dtype (doubling, adding an integer-valued constant,
negation, selection), so any difference from XLA is a control-flow error (wrong iteration order,
carry, branch or stacking), never rounding: the checks are bit for bit. XLA may contract a
multiply and an add into one fused multiply-add inside a loop body; with a doubling, the product is
exact and the FMA rounds the same as the add alone. Rounding-sensitive gradients are checked
against the float64 reference instead (`check_widened`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from jax import lax
from oracle import RULE_SETTINGS, SIGNED, arrays, check, check_widened, shapes, x64
from test_rules_elementwise import leaf_budget

from gradlanes.program.jaxcompat import jaxpr_as_fun

COVERED = {"scan", "while", "cond", "empty2"}

#: Dtypes whose doubling and small-integer additions are exact (wrapping for integers, as XLA).
CARRY_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int32), np.dtype(np.uint8))


def exact_step(carry, x):
    """A scan body exact in every carry dtype: the new carry and what the iteration emits."""
    doubled = carry * carry.dtype.type(2) + x
    return doubled, -carry


@settings(parent=RULE_SETTINGS, max_examples=examples(30))
@given(
    data=st.data(),
    dtype=st.sampled_from(CARRY_DTYPES),
    length=st.integers(0, 5),
    reverse=st.booleans(),
)
def test_scan_carries_and_stacks_like_xla(data, dtype, length, reverse):
    shape = data.draw(shapes(max_dims=2, max_side=3))
    carry = data.draw(arrays(dtype, shape, finite=True))
    xs = data.draw(arrays(dtype, (length, *shape), finite=True))
    check(lambda c, xs: lax.scan(exact_step, c, xs, reverse=reverse), carry, xs, expect="scan")


@settings(parent=RULE_SETTINGS, max_examples=examples(10))
@given(length=st.integers(0, 4), reverse=st.booleans())
def test_scan_without_scanned_inputs_and_with_constants(length, reverse):
    offset = np.arange(3, dtype=np.int32)

    def program(carry, offset):
        return lax.scan(lambda c, _: (c * 2 + offset, c), carry, None, length=length, reverse=reverse)

    check(program, np.array([1, -2, 3], np.int32), offset, expect="scan")


def test_scan_over_prng_keys_unwraps_each_row():
    keys = jax.random.split(jax.random.key(7), 4)
    check(lambda k: lax.scan(lambda c, k: (c + 1, jax.random.key_data(k)), 0, k), keys, expect="scan")


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("length", [0, 1, 3])
def test_scan_that_emits_keys_stacks_them_as_keys(length, reverse):
    """Each iteration draws from its key and emits the other half of its split: the stacked output
    is a key array (its words compared), empty for a zero-length scan, one row for length 1."""

    def body(total, key):
        draw, kept = jax.random.split(key)
        return total + jax.random.uniform(draw), kept

    keys = jax.random.split(jax.random.key(11), max(length, 1))[:length]
    check(lambda k: lax.scan(body, np.float32(0), k, reverse=reverse), keys, expect="scan")


@settings(parent=RULE_SETTINGS, max_examples=examples(20))
@given(data=st.data(), dtype=st.sampled_from(CARRY_DTYPES), limit=st.integers(-2, 8))
def test_while_runs_until_its_condition_fails(data, dtype, limit):
    value = data.draw(arrays(dtype, shapes(max_dims=2, max_side=3), finite=True))
    program = lambda x: lax.while_loop(  # noqa: E731
        lambda c: c[0] < limit, lambda c: (c[0] + 1, c[1] * c[1].dtype.type(2)), (0, x)
    )
    check(program, value, expect="while")


def test_fori_loop_with_dynamic_bounds_is_a_while():
    program = lambda n, x: lax.fori_loop(0, n, lambda i, c: c * 2 + i, x)  # noqa: E731
    for n in (0, 1, 5):
        check(program, np.int32(n), np.arange(4, dtype=np.int32), expect="while")


@settings(parent=RULE_SETTINGS, max_examples=examples(30))
@given(data=st.data(), index=st.integers(-3, 5), dtype=st.sampled_from(CARRY_DTYPES))
def test_switch_picks_the_branch_xla_picks_clamping_the_index(data, index, dtype):
    value = data.draw(arrays(dtype, shapes(max_dims=2, max_side=3), finite=True))
    branches = [lambda x: x * x.dtype.type(2), lambda x: -x, lambda x: x + x.dtype.type(3)]
    check(lambda i, x: lax.switch(i, branches, x), np.int32(index), value, expect="cond")


def test_while_with_constants_in_its_condition_and_its_body():
    """Both nested jaxprs close over traced values: their constants lead the operands, cond's first."""
    program = lambda limit, step, x: lax.while_loop(  # noqa: E731
        lambda c: c[0] < limit, lambda c: (c[0] + step, c[1] * 2 + step), (np.int32(0), x)
    )
    closed = jax.make_jaxpr(program)(np.int32(7), np.int32(2), np.arange(3, dtype=np.int32))
    (loop,) = [eqn for eqn in closed.jaxpr.eqns if eqn.primitive.name == "while"]
    assert (loop.params["cond_nconsts"], loop.params["body_nconsts"]) == (1, 1)
    for limit, step in ((7, 2), (0, 3), (5, 1)):
        check(program, np.int32(limit), np.int32(step), np.arange(3, dtype=np.int32), expect="while")


@pytest.mark.parametrize("index", [-5, -1, 0, 1, 2, 3, 9])
def test_cond_bound_with_an_index_out_of_range_runs_the_last_branch_as_xla(index):
    """lax.switch clamps its index; a cond bound without that clamp runs XLA's Conditional rule."""
    branches = [lambda x: x + 1.0, lambda x: x * 2.0, lambda x: x - 5.0]
    closed = jax.make_jaxpr(lambda i, x: lax.switch(i, branches, x))(np.int32(0), np.float32(3))
    (cond,) = [eqn for eqn in closed.jaxpr.eqns if eqn.primitive.name == "cond"]
    raw = closed.jaxpr.replace(eqns=[cond.replace(invars=[closed.jaxpr.invars[0], *cond.invars[1:]])])
    unclamped = jaxpr_as_fun(closed.replace(jaxpr=raw))
    check(lambda i, x: unclamped(i, x)[0], np.int32(index), np.float32(3), expect="cond")


@given(pred=st.booleans())
@settings(parent=RULE_SETTINGS, max_examples=examples(4))
def test_cond_on_a_boolean_with_several_operands(pred):
    program = lambda p, a, b: lax.cond(p, lambda a, b: (a + b, b), lambda a, b: (a - b, -b), a, b)  # noqa: E731
    check(program, np.bool_(pred), np.arange(3, dtype=np.int16), np.int16(5), expect="cond")


def test_gradient_of_cond_fills_the_untaken_branch_with_empty2():
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    for p in (np.float32(1.0), np.float32(-1.0)):
        program = jax.grad(lambda p, x: lax.cond(p > 0, lambda x: x * 2, lambda x: x * x, x).sum(), argnums=1)
        check(program, p, x, expect="empty2")
        check_widened(program, p, x)


def remat_gradient_budget(dtype: np.dtype) -> float:
    """d/dz sin(z) z = z cos z + sin z (the cotangent is ones: exact products). The sides differ
    by cos's leaf budget plus the product's rounding (2u) in the first term and sin's leaf budget
    in the second; on |z| <= 1 < pi/2 both terms have z's sign, so the sum passes the larger
    relative difference through and adds its own rounding (2u). In u, hence in ulps of XLA's result
    (test_rules_elementwise: an ulp is at least |value| u). An FMA XLA may form rounds once less."""
    return max(leaf_budget("cos", dtype) + 2, leaf_budget("sin", dtype)) + 2


def scan_gradient_budget(c0: np.ndarray, xs: np.ndarray, dtype: np.dtype) -> float:
    """c_(k+1) = sin(c_k) x_k for k = 0..2; d c_3 / d c_0 = prod_k cos(c_k) x_k. The carries' relative
    differences d_k grow by sin's condition |c cot c| (<= 1 here) plus its leaf budget and the
    product's rounding; each cos(c_k) differs by |c_k tan c_k| d_k plus cos's leaf budget; the six
    products of the backward pass add 2u each. Evaluated at the test's own carries, in float64."""
    carries, difference, budget = [c0.astype(np.float64)], [0.0], 6 * 2.0
    for x in xs.astype(np.float64)[:-1]:
        c = carries[-1]
        condition = np.max(np.abs(c / np.tan(c), where=c != 0, out=np.ones_like(c)))
        difference.append(condition * difference[-1] + leaf_budget("sin", dtype) + 2)
        carries.append(np.sin(c) * x)
    for c, d in zip(carries, difference, strict=True):
        budget += float(np.max(np.abs(c * np.tan(c)))) * d + leaf_budget("cos", dtype)
    return budget


def test_gradient_of_checkpoint_and_of_scan_against_the_float64_reference():
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    xs = np.linspace(0.5, 1.5, 12, dtype=np.float32).reshape(3, 4)
    remat = jax.grad(lambda x: jax.checkpoint(lambda z: jnp.sin(z) * z)(x).sum())
    check(remat, x, ulps=remat_gradient_budget(np.dtype(np.float32)), expect="remat2")
    check_widened(remat, x, ulps=remat_gradient_budget(np.dtype(np.float64)))
    scanned = jax.grad(lambda c, xs: lax.scan(lambda c, x: (jnp.sin(c) * x, c), c, xs)[0].sum())
    check_widened(scanned, x, xs, ulps=scan_gradient_budget(x, xs, np.dtype(np.float64)))


def test_scan_in_x64_with_int64_carries_wraps_like_xla():
    with x64():
        big = np.array([2**62, -(2**62), 3], np.int64)
        check(lambda c: lax.scan(lambda c, _: (c * 2 + 1, c), c, None, length=3), big, expect="scan")
        for dtype in SIGNED:
            check(
                lambda c: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2), (0, c)),
                np.array([1, -1], dtype),
                expect="while",
            )
