"""Convolutions, window reductions and their gradients in the interpreter against XLA.

Selections and integer arithmetic are exact, and so is every float window sum: the rules fold a
window's elements in XLA's order and dtype, so those checks are bit for bit (`ulps=0`), NaN,
inf and -0.0 included. Convolutions run a BLAS product whose summation order is not XLA's;
they are checked bit for bit on integer-valued data (every partial sum exact, so any order
gives the same bits: this checks the geometry, layouts, groups and dtypes), and on random data
against the exact result within the rounding bound of a float sum (`within_sum_bound`).
Geometry (shapes, strides, padding including negative, dilations, layouts, groups) is
generated; the end is a LeNet-5 block's gradient checked whole. XLA's own float convolution
misreads negative low padding (openxla/xla#48713), so the oracle is `oracle.xla`, which crops
first; the last tests here pin that defect and prove the cropped program is the same function.
"""

from __future__ import annotations

import contextlib
import functools
import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from jax import lax
from oracle import CASES_RUN, FLOATS, INTEGERS, RULE_SETTINGS, _ulp, arrays, check, check_widened, x64, xla

from gradlanes.program.interpreter import RULES, Interpreter
from gradlanes.program.rules import windows
from gradlanes.run.numerics import probabilistic_bound

COVERED = {
    "conv_general_dilated",
    "reduce_window_sum",
    "reduce_window_max",
    "reduce_window_min",
    "reduce_window",
    "select_and_scatter_add",
    "select_and_gather_add",
}

BF16 = np.dtype(ml_dtypes.bfloat16)
NUMBERS = INTEGERS + FLOATS


@pytest.fixture(autouse=True)
def shape_rules(monkeypatch):
    """Gradients flip kernels (`rev`) and pad cotangents (`pad`, for average pooling), rules of
    the shapes module; until those exist these stand in for them, so the tests here exercise the
    window rules alone."""
    if "rev" not in RULES:
        monkeypatch.setitem(RULES, "rev", lambda x, *, dimensions, **_: np.flip(x, tuple(dimensions)))
    if "pad" not in RULES:

        def pad(x, fill, *, padding_config, **_):
            x = np.asarray(x)
            edges = [(int(lo), int(hi)) for lo, hi, _ in padding_config]
            return windows._spread(
                x, np.asarray(fill, x.dtype), edges, [int(i) + 1 for _, _, i in padding_config]
            )

        monkeypatch.setitem(RULES, "pad", pad)


def wide(*dtypes) -> contextlib.AbstractContextManager:
    """x64 while any of `dtypes` is 64-bit (JAX would otherwise truncate the inputs to 32 bits)."""
    return x64() if any(np.dtype(d).itemsize == 8 for d in dtypes) else contextlib.nullcontext()


def check_exact(fn, *args, expect: str) -> set[str]:
    """`check` bit for bit, and the sign of every zero too (max, min and sums decide it).

    bfloat16 outputs are compared as float32 (an exact conversion on both sides): NumPy's
    testing does not treat bfloat16 NaNs as equal.
    """
    widened = lambda v: v.astype(jnp.float32) if v.dtype == jnp.bfloat16 else v  # noqa: E731
    compared = lambda *a: jax.tree_util.tree_map(widened, fn(*a))  # noqa: E731
    found = check(compared, *args, expect=expect)
    closed = jax.make_jaxpr(compared)(*args)
    got = Interpreter(closed)(*jax.tree_util.tree_leaves(args))
    want = jax.tree_util.tree_leaves(xla(compared)(*args))  # the program `check` ran
    for index, (w, g) in enumerate(zip(want, got, strict=True)):
        w, g = np.asarray(w), np.asarray(g)
        if w.dtype.kind == "f":
            zero = (w == 0) & (g == 0)
            assert np.array_equal(np.signbit(w[zero]), np.signbit(g[zero])), f"output {index}: sign of a zero"
    return found


def accepted(fn, *args) -> bool:
    """Whether JAX accepts the geometry (its shape rules are the reference for what is valid)."""
    try:
        jax.eval_shape(fn, *args)
    except (TypeError, ValueError):
        return False
    return True


def small_ints(dtype, shape, low=-2, high=2):
    """Integer-valued arrays of `dtype` (any dtype), so sums of products are exact in any order."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return arrays(dtype, shape)
    if dtype.kind == "u":
        low, high = 0, high - low
    return arrays(np.int64, shape, elements=st.integers(low, high)).map(lambda a: a.astype(dtype))


# ---- window reductions ----------------------------------------------------------------------
@st.composite
def window_geometry(draw, *, min_rank=0, max_rank=3, dilations=True, negative_padding=True):
    """(shape, window, strides, padding, base dilation, window dilation) for one operand."""
    rank = draw(st.integers(min_rank, max_rank))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=rank, max_size=rank)))
    window = tuple(draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)))
    strides = tuple(draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)))
    low = -1 if negative_padding else 0
    padding = tuple((draw(st.integers(low, 2)), draw(st.integers(low, 2))) for _ in range(rank))
    one = st.just(1)
    base = tuple(draw(st.lists(st.integers(1, 2) if dilations else one, min_size=rank, max_size=rank)))
    window_dilation = tuple(
        draw(st.lists(st.integers(1, 2) if dilations else one, min_size=rank, max_size=rank))
    )
    return shape, window, strides, padding, base, window_dilation


def pooled(x, init, body, geometry):
    _, window, strides, padding, base, dilation = geometry
    return lax.reduce_window(x, init, body, window, strides, padding, base, dilation)


def lowest(dtype: np.dtype) -> np.ndarray:
    if dtype == np.bool_:
        return np.array(False)
    return np.array(-np.inf if dtype.kind == "f" or dtype == BF16 else np.iinfo(dtype).min, dtype)


def highest(dtype: np.dtype) -> np.ndarray:
    if dtype == np.bool_:
        return np.array(True)
    return np.array(np.inf if dtype.kind == "f" or dtype == BF16 else np.iinfo(dtype).max, dtype)


#: The primitive each monoid with its identity as init becomes, and that identity.
MONOIDS = {
    "reduce_window_sum": (lax.add, lambda dtype: np.zeros((), dtype)),
    "reduce_window_max": (lax.max, lowest),
    "reduce_window_min": (lax.min, highest),
}


@settings(RULE_SETTINGS, max_examples=examples(90))
@given(
    name=st.sampled_from(sorted(MONOIDS)),
    dtype=st.sampled_from((np.dtype(np.bool_),) + NUMBERS),
    geometry=window_geometry(),
    data=st.data(),
)
def test_monoid_window_reductions_match_xla_bit_for_bit(name, dtype, geometry, data):
    assume(not (name == "reduce_window_sum" and dtype == np.bool_))
    body, identity = MONOIDS[name]
    init = identity(dtype)
    with wide(dtype):
        x = data.draw(arrays(dtype, geometry[0]))
        fn = lambda x: pooled(x, init, body, geometry)  # noqa: E731
        assume(accepted(fn, x))
        check_exact(fn, x, expect=name)


#: Bodies of the generic reduce_window (lambdas, so JAX does not turn them into the monoids).
BODIES = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: b * a,
    "max": lambda a, b: lax.max(a, b),
    "min": lambda a, b: lax.min(b, a),
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
}


@settings(RULE_SETTINGS, max_examples=examples(40))
@given(
    op=st.sampled_from(sorted(BODIES)),
    dtype=st.sampled_from((np.dtype(np.bool_),) + NUMBERS),
    geometry=window_geometry(),
    data=st.data(),
)
def test_generic_reduce_window_folds_the_init_and_skips_padding(op, dtype, geometry, data):
    if op in ("and", "or", "xor"):
        assume(dtype == np.bool_ or dtype.kind in "iu")
    else:
        assume(dtype != np.bool_)
    with wide(dtype):
        x = data.draw(arrays(dtype, geometry[0]))
        init = data.draw(arrays(dtype, ()))
        fn = lambda x, init: pooled(x, init, BODIES[op], geometry)  # noqa: E731
        assume(accepted(fn, x, init))
        check_exact(fn, x, init, expect="reduce_window")


#: (body, dtype, operand, init): operands whose every window meets padding or a base-dilation
#: hole, with values a wrong identity there would change (all bits set for and, even values for
#: or and xor, values other than 1 for mul), and the monoid's identity as init.
IDENTITY_CASES = [
    ("and", np.bool_, [True, True, True, True, True], True),
    ("and", np.int8, [-1, 127, -1, 5, -1], -1),
    ("and", np.uint32, [2**32 - 1, 6, 2**32 - 1, 2**31, 3], 2**32 - 1),
    ("or", np.bool_, [False, False, False, False, False], False),
    ("or", np.int16, [2, 4, 0, 6, 8], 0),
    ("xor", np.bool_, [False, True, False, False, True], False),
    ("xor", np.uint8, [2, 4, 0, 6, 8], 0),
    ("mul", np.int32, [2, -3, 5, 7, 0], 1),
    ("mul", np.float32, [2.5, -3.0, 0.5, 7.0, -0.0], 1.0),
]


@pytest.mark.parametrize(("op", "dtype", "operand", "init"), IDENTITY_CASES)
def test_generic_reduce_window_pads_with_the_bodys_identity(op, dtype, operand, init):
    """Padding and the holes of a base dilation hold the body's identity (all ones for and, zero
    for or and xor, one for mul), which no window here can do without: each of them sees one."""
    x, init = np.array(operand, dtype), np.array(init, dtype)
    fn = lambda x, init: lax.reduce_window(x, init, BODIES[op], (3,), (2,), ((2, 2),), (2,), (1,))  # noqa: E731
    check_exact(fn, x, init, expect="reduce_window")


#: (body, dtype, operand, init) with two windows of two: an init that beats the elements, and
#: zeros whose sign the init settles (a max of +0 and -0s is +0, a min of -0 and +0s is -0,
#: whichever comes first). NumPy's maximum and minimum return the first or the second argument
#: on a tie depending on the dtype's loop (float32 and float16 differ on x86), so both orders
#: meet each case.
EXTREME_INIT_CASES = [
    ("max", np.float32, [1.0, 7.0, 2.0, 3.0], 5.0),
    ("min", np.float64, [3.0, -7.0, 2.0, 9.0], -1.0),
    ("max", np.float32, [-0.0, -0.0, -1.0, -0.0], 0.0),
    ("max", BF16, [-0.0, -0.0, -1.0, -0.0], 0.0),
    ("min", np.float32, [0.0, 0.0, 1.0, 0.0], -0.0),
    ("min", np.float16, [0.0, 0.0, 1.0, 0.0], -0.0),
    ("max", np.float16, [0.0, 0.0, 1.0, 0.0], -0.0),
    ("max", np.float32, [0.0, 0.0, 1.0, 0.0], -0.0),
]


@pytest.mark.parametrize(("op", "dtype", "operand", "init"), EXTREME_INIT_CASES)
def test_generic_max_and_min_fold_the_init_and_the_sign_of_its_zero(op, dtype, operand, init):
    x, init = np.array(operand, dtype), np.array(init, dtype)
    fn = lambda x, init: lax.reduce_window(x, init, BODIES[op], (2,), (2,), "VALID")  # noqa: E731
    check_exact(fn, x, init, expect="reduce_window")


def test_a_body_with_dead_equations_folds_its_live_one():
    """XLA drops what no output uses; so does the rule (it reads only the equation of each output)."""
    x = np.array([1.0, 2.0, 3.0, 5.0], np.float32)
    dead = lambda a, b: (a * b, lax.max(b, a))[1]  # noqa: E731
    fn = lambda x: lax.reduce_window(x, np.float32(4), dead, (2,), (1,), "VALID")  # noqa: E731
    assert [e.primitive.name for e in jax.make_jaxpr(fn)(x).eqns[0].params["jaxpr"].eqns] == ["mul", "max"]
    check_exact(fn, x, expect="reduce_window")


def test_base_dilation_without_padding_still_spreads_the_operand():
    """Holes between elements and no padding: the fast path that returns the operand as it is
    must not take this case (each window of 2 meets one hole)."""
    x = np.array([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]], np.float32)
    for dilation in ((2, 2), (1, 2), (2, 1)):
        fn = lambda x, dilation=dilation: lax.reduce_window(  # noqa: E731
            x, 0.0, lax.add, (1, 2), (1, 1), ((0, 0), (0, 0)), dilation
        )
        check_exact(fn, x, expect="reduce_window_sum")


def test_signed_zeros_and_nan_in_pooling():
    """XLA's max is IEEE maximum: +0 beats -0 in either order, NaN wins; min the reverse. A sum
    padded around -0 stays -0 only from a -0 init (the generic body), never from reduce_window_sum."""
    x = np.array([-0.0, 0.0, 0.0, -0.0, -0.0, -0.0, np.nan, 1.0, 1.0, np.nan], np.float32)
    for body, init in ((lax.max, -np.inf), (lax.min, np.inf)):
        check_exact(
            lambda x, body=body, init=init: lax.reduce_window(x, init, body, (2,), (2,), "VALID"),
            x,
            expect="reduce_window_max" if body is lax.max else "reduce_window_min",
        )
    zeros = np.array([-0.0, -0.0], np.float32)
    check_exact(
        lambda x: lax.reduce_window(x, 0.0, lax.add, (2,), (1,), ((1, 1),)), zeros, expect="reduce_window_sum"
    )
    check_exact(
        lambda x: lax.reduce_window(x, np.float32(-0.0), lambda a, b: a + b, (2,), (1,), ((1, 1),)),
        zeros,
        expect="reduce_window",
    )


def test_pooling_gradient_ties_nan_and_padding():
    """The cases read off XLA: the first of tied maxima wins; a NaN is replaced by the element
    after it; a window of -inf keeps its padding element, whose gradient is dropped."""
    rows = [
        [1, 1, 1, 1],
        [np.nan, 1, 2, 3],
        [1, np.nan, 2, 3],
        [1, 2, np.nan, 3],
        [-np.inf] * 4,
        [-0.0, 0.0, 0.0, -0.0],
    ]
    x = np.array(rows, np.float32)
    weights = np.arange(1, 5, dtype=np.float32)

    def gradient(x):
        pooled = lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 3), (1, 1), ((0, 0), (1, 1)))  # noqa: E731
        return jax.grad(lambda x: jnp.sum(pooled(x) * weights))(x)

    check_exact(gradient, x, expect="select_and_scatter_add")


def test_conv_converts_operands_to_the_preferred_type_first():
    """int16 3001 becomes float16 3000 before the products, float16 1+2^-10 becomes bfloat16 1
    (on either side of the convolution)."""
    ints = np.array([[[3001], [1]]], np.int16), np.array([[[1], [-3000]]], np.int16)
    halves = np.array([[[1 + 2**-10], [1]]], np.float16), np.array([[[1024], [-1024]]], np.float16)
    cases = (
        (ints, np.float16),
        (ints[::-1], np.float16),
        (halves, BF16),
        (halves[::-1], BF16),
        (halves, np.float32),
    )
    for (a, b), preferred in cases:

        def conv(a, b, preferred=preferred):
            return lax.conv_general_dilated(a, b, (1,), "VALID", preferred_element_type=preferred)

        check_exact(conv, a, b, expect="conv_general_dilated")


def test_variadic_reduce_window_of_independent_monoids():
    x = np.arange(1, 13, dtype=np.float32).reshape(3, 4) / 8
    y = np.arange(12, dtype=np.int32).reshape(3, 4) - 5

    def both(x, y):
        init = (np.float32(0.5), np.int32(1))
        body = lambda a, b: (a[0] + b[0], a[1] * b[1])  # noqa: E731
        return lax.reduce_window((x, y), init, body, (2, 2), (1, 2), ((1, 0), (0, 1)))

    check_exact(both, x, y, expect="reduce_window")


def test_reduce_window_refuses_a_body_it_cannot_fold():
    x = np.arange(6, dtype=np.float32)
    for body, shown in (
        (lambda a, b: a - b, "sub"),
        (lambda a, b: jnp.logaddexp(a, b), "custom_jvp_call"),
    ):
        program = jax.make_jaxpr(
            lambda x, body=body: lax.reduce_window(x, np.float32(0), body, (2,), (1,), "VALID")
        )(x)
        with pytest.raises(NotImplementedError, match=rf"reduce_window: .*this body is \{{{shown}"):
            Interpreter(program)(x)
    pairs = jax.make_jaxpr(
        lambda x, i: lax.reduce_window(
            (x, i),
            (np.float32(-np.inf), np.int32(0)),
            lambda a, b: (lax.max(a[0], b[0]), lax.select(a[0] >= b[0], a[1], b[1])),
            (2,),
            (1,),
            "VALID",
        )
    )(x, np.arange(6, dtype=np.int32))
    with pytest.raises(NotImplementedError, match="reduce_window: .*this body is"):
        Interpreter(pairs)(x, np.arange(6, dtype=np.int32))


MONOID_NAMES = "add, and, max, min, mul, or, xor"


def test_reduce_window_refusals_name_the_monoids_and_the_body():
    """The refusal lists what is supported and the body's equations in order, or says it has none."""
    x = np.arange(6, dtype=np.float32)
    for body, shown in ((lambda a, b: a * 2 + b, "mul; add"), (lambda a, b: a, "empty")):
        program = jax.make_jaxpr(
            lambda x, body=body: lax.reduce_window(x, np.float32(0), body, (2,), (1,), "VALID")
        )(x)
        with pytest.raises(NotImplementedError) as refused:
            Interpreter(program)(x)
        assert str(refused.value) == (
            f"reduce_window: the interpreter runs bodies that fold each operand with one of "
            f"{MONOID_NAMES}; this body is {{{shown}}}"
        )


def test_reduce_window_refuses_a_body_with_constants_by_name():
    """JAX 0.10 cannot bind one (its consts param must hash), so the rule is called directly."""
    x = np.arange(6, dtype=np.float32)
    program = jax.make_jaxpr(
        lambda x: lax.reduce_window(x, np.float32(0), BODIES["add"], (2,), (1,), "VALID")
    )(x)
    (eqn,) = program.jaxpr.eqns
    with pytest.raises(NotImplementedError) as refused:
        windows._reduce_window(x, np.float32(0), **{**eqn.params, "consts": (np.float32(1),)})
    assert str(refused.value) == "reduce_window: bodies with constants are not supported"


def test_body_monoids_read_open_and_closed_bodies_and_refuse_an_output_no_equation_makes():
    zeros = [np.float32(0)] * 4
    closed = jax.make_jaxpr(lambda a0, a1, b0, b1: (a0 + b0, lax.max(a1, b1)))(*zeros)
    assert windows._body_monoids(closed, 2) == ["add", "max"]
    assert windows._body_monoids(closed.jaxpr, 2) == ["add", "max"]
    # two equations for two outputs, but the second output is an accumulator passed through
    passed_through = jax.make_jaxpr(lambda a0, a1, b0, b1: (a0 + b0, (a1 * b1, a1)[1]))(*zeros)
    with pytest.raises(NotImplementedError, match=r"this body is \{add; mul\}$"):
        windows._body_monoids(passed_through, 2)


def test_select_and_gather_add_refuses_integer_operands_by_name():
    """XLA's max-pooling JVP starts from -inf, which integers lack (JAX gives them no tangents)."""
    geometry = dict(window_dimensions=(2,), window_strides=(1,), padding=((0, 0),), base_dilation=(1,))
    with pytest.raises(NotImplementedError) as refused:
        windows._select_and_gather_add(
            np.zeros(4, np.float32), np.arange(4, dtype=np.int32), select_prim=lax.ge_p, **geometry,
            window_dilation=(1,),
        )  # fmt: skip
    assert str(refused.value) == "select_and_gather_add: operand dtype int32 (XLA's init is -inf)"


def test_pooling_gradients_refuse_other_selections_by_name():
    """Max pooling selects with ge, min pooling with le; any other primitive is refused, named."""
    with pytest.raises(NotImplementedError) as refused:
        windows._selector(lax.gt_p)
    assert str(refused.value) == "select_prim=gt: only ge (max pooling) and le (min pooling) are supported"


# ---- pooling gradients ----------------------------------------------------------------------
def pool_values(dtype, shape):
    """Pooling operands full of ties (few distinct values) and, for floats, NaN, inf and -0.0."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return small_ints(dtype, shape, -2, 2)
    specials = [0.0, -0.0, 1.0, -1.0, 2.0, np.inf, -np.inf, np.nan]
    return arrays(np.float64, shape, elements=st.sampled_from(specials)).map(lambda a: a.astype(dtype))


@settings(RULE_SETTINGS, max_examples=examples(30))
@given(
    dtype=st.sampled_from(FLOATS),
    chooser=st.sampled_from(["max", "min"]),
    # XLA aborts compiling the gradient of a scalar's pooling (SelectAndScatterExpander)
    geometry=window_geometry(min_rank=1, dilations=False, negative_padding=False),
    data=st.data(),
)
def test_pooling_gradient_scatters_to_xlas_choice(dtype, chooser, geometry, data):
    """jax.grad of max/min pooling: ties, NaN, padding and overlapping windows as on XLA."""
    body, init = (lax.max, -np.inf) if chooser == "max" else (lax.min, np.inf)
    with wide(dtype):
        x = data.draw(pool_values(dtype, geometry[0]))
        fn = lambda x: pooled(x, np.array(init, dtype), body, geometry)  # noqa: E731
        assume(accepted(fn, x))
        out_shape = jax.eval_shape(fn, x).shape
        # random cotangents: overlapping windows sum several into one position, in XLA's order
        cotangent = data.draw(arrays(dtype, out_shape))

        def gradient(x, cotangent):
            return jax.grad(lambda x: jnp.sum(fn(x) * cotangent))(x)

        check_exact(gradient, x, cotangent, expect="select_and_scatter_add")


@functools.cache
def scatter_primitive():
    """select_and_scatter_add as JAX binds it (jax.lax does not export it; a gradient makes it)."""
    pooled = lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (2,), (2,), "VALID")  # noqa: E731
    program = jax.make_jaxpr(jax.grad(lambda x: jnp.sum(pooled(x))))(np.zeros(4, np.float32))
    return next(e.primitive for e in program.eqns if e.primitive.name == "select_and_scatter_add")


@settings(RULE_SETTINGS, max_examples=examples(30))
@given(
    dtype=st.sampled_from((np.dtype(np.bool_),) + INTEGERS),
    chooser=st.sampled_from([lax.ge_p, lax.le_p]),
    geometry=window_geometry(min_rank=1, dilations=False, negative_padding=False),
    data=st.data(),
)
def test_select_and_scatter_add_of_integers_and_booleans(dtype, chooser, geometry, data):
    """No gradient has integer operands, but the primitive does, and XLA runs it: a window's
    choice as for floats, sources added in the integer dtype (wrapping) or OR-ed for booleans."""
    shape, window, strides, padding, _, _ = geometry
    primitive = scatter_primitive()

    def scatter(source, operand):
        return primitive.bind(
            source,
            operand,
            select_prim=chooser,
            window_dimensions=window,
            window_strides=strides,
            padding=padding,
        )

    with wide(dtype):
        operand = data.draw(small_ints(dtype, shape))
        pool = lambda x: lax.reduce_window(x, lowest(dtype), lax.max, window, strides, padding)  # noqa: E731
        assume(accepted(pool, operand))
        source = data.draw(arrays(dtype, jax.eval_shape(pool, operand).shape))
        check_exact(scatter, source, operand, expect="select_and_scatter_add")


#: (dtype, operand, source, window, stride): selections whose windows do not overlap (each
#: position gets one source at most, written in place) and ones that do (sources summed).
SCATTER_CASES = [
    (np.bool_, [False, True, True, True, False, False], [True, True, False], 2, 2),
    (np.bool_, [False, True, True, False, False, True], [True, False, True, True], 3, 1),
    (np.int8, [3, 1, -4, 1, 5, -9], [100, 27, -128], 2, 2),
    (np.int8, [3, 1, -4, 1, 5, -9], [100, 27, 100, -128], 3, 1),
]


@pytest.mark.parametrize(("dtype", "operand", "source", "window", "stride"), SCATTER_CASES)
def test_select_and_scatter_add_of_fixed_booleans_and_wrapping_integers(
    dtype, operand, source, window, stride
):
    primitive = scatter_primitive()
    for chooser in (lax.ge_p, lax.le_p):

        def scatter(source, operand, chooser=chooser):
            geometry = dict(window_dimensions=(window,), window_strides=(stride,), padding=((0, 0),))
            return primitive.bind(source, operand, select_prim=chooser, **geometry)

        check_exact(
            scatter, np.array(source, dtype), np.array(operand, dtype), expect="select_and_scatter_add"
        )


def test_pooling_gradient_refuses_negative_padding_as_jax_does():
    """JAX traces a max pool's gradient with negative padding but cannot run it (so there is no
    result to match); the rule refuses it by name."""
    pooled = lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (2,), (1,), ((-1, 0),))  # noqa: E731
    gradient = jax.grad(lambda x: jnp.sum(pooled(x)))
    operand = np.arange(4, dtype=np.float32)
    program = jax.make_jaxpr(gradient)(operand)
    (eqn,) = [e for e in program.eqns if e.primitive.name == "select_and_scatter_add"]
    assert eqn.params["padding"] == ((-1, 0),)
    with pytest.raises((TypeError, ValueError)):
        jax.jit(gradient)(operand)
    with pytest.raises(NotImplementedError) as refused:
        Interpreter(program)(operand)
    assert str(refused.value) == (
        "select_and_scatter_add: negative padding ((-1, 0),) is not supported (JAX traces it but "
        "cannot run it: its lowering slices at a negative start)"
    )


def test_pooling_gradient_follows_a_nan_chain_past_a_narrow_dtypes_integers():
    """With a NaN the selection runs as XLA's chain, remembering the offset chosen: offset 259 of
    a 300-wide bfloat16 window, which bfloat16 itself could not hold (it would round to 260)."""
    x = np.full(300, -1.0, np.float32)
    x[0], x[259] = np.nan, 3.0
    x = x.astype(BF16)

    def gradient(x):
        pooled = lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (300,), (1,), "VALID")  # noqa: E731
        return jax.grad(lambda x: jnp.sum(pooled(x)))(x)

    check_exact(gradient, x, expect="select_and_scatter_add")
    assert np.flatnonzero(np.asarray(gradient(x), np.float32)).tolist() == [259]


@settings(RULE_SETTINGS, max_examples=examples(30))
@given(
    dtype=st.sampled_from(FLOATS),
    chooser=st.sampled_from(["max", "min"]),
    geometry=window_geometry(),
    data=st.data(),
)
def test_pooling_jvp_gathers_xlas_choice(dtype, chooser, geometry, data):
    """jax.jvp of max/min pooling (forward mode): the tangent of the selected element."""
    body, init = (lax.max, -np.inf) if chooser == "max" else (lax.min, np.inf)
    with wide(dtype):
        x = data.draw(pool_values(dtype, geometry[0]))
        tangent = data.draw(arrays(dtype, geometry[0]))
        fn = lambda x: pooled(x, np.array(init, dtype), body, geometry)  # noqa: E731
        assume(accepted(fn, x))
        check_exact(lambda x, t: jax.jvp(fn, (x,), (t,)), x, tangent, expect="select_and_gather_add")


@settings(RULE_SETTINGS, max_examples=examples(15))
@given(
    body=st.sampled_from(["max", "min", "add"]),
    geometry=window_geometry(min_rank=1, dilations=False, negative_padding=False),
    data=st.data(),
)
def test_pooling_float64_reference(body, geometry, data):
    """Under widen the pooling rules see float64 operands: value, gradient and JVP of a float32
    pooling equal XLA's float64 ones (integer-valued, so exact in both)."""
    monoid, init = {"max": (lax.max, -np.inf), "min": (lax.min, np.inf), "add": (lax.add, 0.0)}[body]
    x = data.draw(small_ints(np.float32, geometry[0]))
    fn = lambda x: pooled(x, init, monoid, geometry)  # noqa: E731
    assume(accepted(fn, x))
    t = data.draw(small_ints(np.float32, geometry[0]))
    cotangent = data.draw(small_ints(np.float32, jax.eval_shape(fn, x).shape))

    def everything(x, t, c):
        value, tangent = jax.jvp(fn, (x,), (t,))
        return value, tangent, jax.grad(lambda x: jnp.sum(fn(x) * c))(x)

    check_widened(
        everything,
        x,
        t,
        cotangent,
        ulps=0,
        expect={"add": "reduce_window_sum"}.get(body, f"reduce_window_{body}"),
    )


def test_second_order_pooling_gradient():
    """A Hessian-vector product through max pooling meets both pooling gradients."""
    rng = np.random.default_rng(3)
    x = rng.integers(-3, 4, (2, 6, 6)).astype(np.float32)
    v = rng.standard_normal((2, 6, 6)).astype(np.float32)

    def loss(x):
        pooled = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3), (1, 2, 2), ((0, 0), (1, 1), (1, 1)))
        return jnp.sum(pooled**2)

    def hvp(x, v):
        return jax.jvp(jax.grad(loss), (x,), (v,))[1]

    found = check_exact(hvp, x, v, expect="select_and_scatter_add")
    assert "select_and_gather_add" in found or "select_and_scatter_add" in found


# ---- convolution ----------------------------------------------------------------------------
@st.composite
def conv_geometry(draw, *, gradients=False):
    """A convolution's shapes and params: 1-3 spatial dims, any layout, feature or batch groups."""
    rank = draw(st.integers(1, 3 if not gradients else 2))
    max_side = (6, 5, 4)[rank - 1]
    groups = draw(st.integers(1, 3))
    grouping = draw(st.sampled_from(["feature", "batch"])) if groups > 1 else "feature"
    batch = draw(st.integers(1, 3)) * (groups if grouping == "batch" else 1)
    per_group_in = draw(st.integers(1, 3))
    in_features = per_group_in * (groups if grouping == "feature" else 1)
    out_features = draw(st.integers(1, 3)) * groups
    spatial = draw(st.lists(st.integers(1, max_side), min_size=rank, max_size=rank))
    kernel = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    strides = tuple(draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)))
    padding = tuple((draw(st.integers(-2, 3)), draw(st.integers(-2, 3))) for _ in range(rank))
    lhs_dilation = tuple(draw(st.lists(st.integers(1, 1 if gradients else 3), min_size=rank, max_size=rank)))
    rhs_dilation = tuple(draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)))
    specs = [tuple(draw(st.permutations(range(rank + 2)))) for _ in range(3)]
    lhs_canonical = (batch, in_features, *spatial)
    rhs_canonical = (out_features, per_group_in, *kernel)
    lhs_shape = tuple(lhs_canonical[specs[0].index(d)] for d in range(rank + 2))
    rhs_shape = tuple(rhs_canonical[specs[1].index(d)] for d in range(rank + 2))
    params = dict(
        window_strides=strides,
        padding=padding,
        lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation,
        dimension_numbers=lax.ConvDimensionNumbers(*specs),
        feature_group_count=groups if grouping == "feature" else 1,
        batch_group_count=groups if grouping == "batch" else 1,
    )
    return lhs_shape, rhs_shape, params


def contraction(rhs_shape, params) -> int:
    """Terms summed into one output element: input features per group times kernel taps."""
    return math.prod(rhs_shape) // rhs_shape[params["dimension_numbers"].rhs_spec[0]]


def preferred_for(dtype: np.dtype):
    """preferred_element_type choices JAX accepts for operands of `dtype` (None: the default)."""
    floats = [d for d in FLOATS if d.itemsize >= dtype.itemsize]
    if dtype == np.bool_:
        return st.sampled_from(
            [None, np.dtype(np.bool_), np.dtype(np.int32), np.dtype(np.uint8), *FLOATS[:3]]
        )
    if dtype.kind == "f" or dtype == BF16:
        return st.sampled_from([None, *floats])
    same_kind = [d for d in INTEGERS if d.kind == dtype.kind and d.itemsize >= dtype.itemsize]
    return st.sampled_from([None, *same_kind, *floats])


@settings(RULE_SETTINGS, max_examples=examples(60))
@given(
    geometry=conv_geometry(),
    dtype=st.sampled_from((np.dtype(np.bool_),) + NUMBERS),
    data=st.data(),
)
def test_conv_geometry_layouts_groups_and_dtypes_bit_for_bit(geometry, dtype, data):
    """Integer-valued operands: every partial sum is exact, so XLA's bits are the only answer."""
    lhs_shape, rhs_shape, params = geometry
    preferred = data.draw(preferred_for(dtype))
    if dtype == BF16:  # 8 significant bits: keep every sum of +-1 products below 256
        low, high = -1, 1
    else:
        low, high = -2, 2
    with wide(dtype, *([preferred] if preferred is not None else [])):
        lhs = data.draw(small_ints(dtype, lhs_shape, low, high))
        rhs = data.draw(small_ints(dtype, rhs_shape, low, high))
        precision = data.draw(st.sampled_from([None, lax.Precision.HIGHEST]))
        fn = lambda a, b: lax.conv_general_dilated(  # noqa: E731
            a, b, **params, precision=precision, preferred_element_type=preferred
        )
        assume(accepted(fn, lhs, rhs))
        check_exact(fn, lhs, rhs, expect="conv_general_dilated")


def within_sum_bound(fn, args, terms: int, expect: str) -> None:
    """Interpreter and XLA each within the rounding bound of a `terms`-long float sum.

    The reference is XLA in float64 on the same values (its own error, ~sqrt(n) 2^-53 relative,
    is far below the bound). A float32 accumulation of n products (one rounding each, then n
    additions) is off by at most lambda sqrt(n+1) u sum|terms| except with probability below
    2 exp(-lambda^2/2) per element (Higham & Mary 2019; `probabilistic_bound`, lambda = 4), with
    u = 2^-24 also for float16/bfloat16, which XLA accumulates in float32 (and so do the rules);
    their one final rounding adds half an ulp of the result. sum|terms| is the same
    convolution of |operands|, evaluated in float64.
    """
    closed = jax.make_jaxpr(fn)(*args)
    want = np.asarray(xla(fn)(*args))
    got = np.asarray(Interpreter(closed)(*args)[0])
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    with x64():
        wide_args = [np.asarray(a, np.float64) for a in args]
        exact = np.asarray(xla(fn)(*wide_args), np.float64)
        scale = np.asarray(xla(fn)(*[np.abs(a) for a in wide_args]), np.float64)
    unit = 2.0**-53 if want.dtype == np.float64 else 2.0**-24
    allowed = probabilistic_bound(terms + 1) * unit * scale + 0.5 * _ulp(exact.astype(want.dtype))
    for engine, value in (("interpreter", got), ("xla", want)):
        error = np.abs(value.astype(np.float64) - exact)
        assert np.all(error <= allowed), (engine, float(np.max(error - allowed)))
    CASES_RUN[expect] += 1


@settings(RULE_SETTINGS, max_examples=examples(30))
@given(geometry=conv_geometry(), dtype=st.sampled_from(FLOATS[:3]), data=st.data())
def test_conv_of_random_floats_within_the_sum_bound(geometry, dtype, data):
    lhs_shape, rhs_shape, params = geometry
    # no subnormal products (XLA's CPU kernels may flush them to zero, an error beyond the bound)
    magnitude = st.floats(1 / 64, 4, width=32)
    finite = st.one_of(st.just(0.0), magnitude, magnitude.map(lambda v: -v))
    lhs = data.draw(arrays(np.float32, lhs_shape, elements=finite)).astype(dtype)
    rhs = data.draw(arrays(np.float32, rhs_shape, elements=finite)).astype(dtype)
    fn = lambda a, b: lax.conv_general_dilated(a, b, **params)  # noqa: E731
    assume(accepted(fn, lhs, rhs))
    within_sum_bound(fn, (lhs, rhs), contraction(rhs_shape, params), "conv_general_dilated")


@settings(RULE_SETTINGS, max_examples=examples(30))
@given(geometry=conv_geometry(gradients=True), data=st.data())
def test_conv_gradients_bit_for_bit(geometry, data):
    """jax.grad of a convolution: the transposed convolutions (lhs dilation by the strides,
    kernel dilation, batch groups for grouped kernels' gradients), on integer-valued data."""
    lhs_shape, rhs_shape, params = geometry
    lhs = data.draw(small_ints(np.float32, lhs_shape))
    rhs = data.draw(small_ints(np.float32, rhs_shape))
    fn = lambda a, b: lax.conv_general_dilated(a, b, **params)  # noqa: E731
    assume(accepted(fn, lhs, rhs))
    out_shape = jax.eval_shape(fn, lhs, rhs).shape
    assume(math.prod(out_shape) > 0)
    cotangent = data.draw(small_ints(np.float32, out_shape))

    def gradients(a, b, c):
        return jax.grad(lambda a, b: jnp.sum(fn(a, b) * c), argnums=(0, 1))(a, b)

    check_exact(gradients, lhs, rhs, cotangent, expect="conv_general_dilated")


@settings(RULE_SETTINGS, max_examples=examples(60))
@given(geometry=conv_geometry(gradients=True), lhs_dilation=st.integers(1, 3), data=st.data())
def test_the_two_convolution_algorithms_agree_bit_for_bit(geometry, lhs_dilation, data):
    """The gathered (im2col) and scattered (col2im) forms are the same sum, whichever the cost
    model picks: compared directly on every generated geometry, with integer-valued float64 data
    (every partial sum exact), so any difference is a wrong term, not rounding."""
    lhs_shape, rhs_shape, params = geometry
    specs = params["dimension_numbers"]
    x = np.transpose(data.draw(small_ints(np.float64, lhs_shape)), specs.lhs_spec)
    w = np.transpose(data.draw(small_ints(np.float64, rhs_shape)), specs.rhs_spec)
    rank = x.ndim - 2
    strides, padding = params["window_strides"], params["padding"]
    lhs_dilations, rhs_dilations = (lhs_dilation,) * rank, params["rhs_dilation"]
    groups = (params["feature_group_count"], params["batch_group_count"])
    padded = [
        windows._dilated(n, d) + lo + hi
        for n, d, (lo, hi) in zip(x.shape[2:], lhs_dilations, padding, strict=True)
    ]
    counts = windows._window_counts(padded, w.shape[2:], strides, rhs_dilations)
    assume(min(padded) >= 0 and math.prod(counts) > 0)
    args = (x, w, strides, padding, lhs_dilations, rhs_dilations, *groups)
    gathered = windows._convolve_gathered(*args)
    scattered = windows._convolve_scattered(*args, counts)
    assert gathered.shape == scattered.shape == (x.shape[0] // groups[1], w.shape[0], *counts)
    assert np.array_equal(gathered, scattered)


@settings(RULE_SETTINGS, max_examples=examples(10))
@given(geometry=conv_geometry(), data=st.data())
def test_conv_float64_reference(geometry, data):
    """Under widen, float32 operands arrive as float64, and so does a float preferred_element_type
    of integer operands (compared with XLA asked for float64 outright)."""
    lhs_shape, rhs_shape, params = geometry
    lhs = data.draw(small_ints(np.float32, lhs_shape))
    rhs = data.draw(small_ints(np.float32, rhs_shape))
    fn = lambda a, b: lax.conv_general_dilated(a, b, **params)  # noqa: E731
    assume(accepted(fn, lhs, rhs))
    check_widened(fn, lhs, rhs, ulps=0, expect="conv_general_dilated")
    ints = lhs.astype(np.int8), rhs.astype(np.int8)
    program = jax.make_jaxpr(
        lambda a, b: lax.conv_general_dilated(a, b, **params, preferred_element_type=np.float32)
    )(*ints)
    (got,) = Interpreter(program, widen=True)(*ints)
    with x64():
        widened = lambda a, b: lax.conv_general_dilated(a, b, **params, preferred_element_type=np.float64)  # noqa: E731
        want = xla(widened)(*ints)
    np.testing.assert_array_equal(got, np.asarray(want), strict=True)


def test_conv_of_empty_operands():
    """No batch, no input or output features, or no window that fits: zeros (or nothing) of XLA's
    shape."""
    ones = lambda *shape: np.ones(shape, np.float32)  # noqa: E731
    for lhs, rhs in (
        (ones(0, 2, 5), ones(3, 2, 2)),
        (ones(2, 0, 5), ones(3, 0, 2)),
        (ones(2, 2, 1), ones(3, 2, 4)),
        (ones(2, 2, 5), ones(0, 2, 2)),
    ):
        check_exact(
            lambda a, b: lax.conv_general_dilated(a, b, (1,), "VALID"),
            lhs,
            rhs,
            expect="conv_general_dilated",
        )


def test_integer_convolutions_wrap():
    """Integer products and sums wrap modulo 2^bits as XLA's do, also past float64's 2^53."""
    cases = (
        (np.int8, [[[100, -100, 127, 3]]], [[[100, 99]]]),
        (np.uint8, [[[200, 250, 3, 7]]], [[[255, 2]]]),
        (np.int64, [[[2**40 + 3, -(2**41) - 1, 2**62, 5]]], [[[2**30 + 1, 3]]]),
        (np.uint64, [[[2**63 + 1, 2**40 + 7, 2**64 - 1, 1]]], [[[2**33 + 5, 2**64 - 3]]]),
    )
    for dtype, lhs, rhs in cases:
        with wide(dtype):
            check_exact(
                lambda a, b: lax.conv_general_dilated(a, b, (1,), "VALID"),
                np.array(lhs, dtype),
                np.array(rhs, dtype),
                expect="conv_general_dilated",
            )


def test_float64_convolutions_accumulate_in_float64():
    """Interpreter and XLA each sum 150 float64 products within lambda sqrt(n+1) 2^-53 sum|terms|
    of the exact sum (the bound of `within_sum_bound`), so they differ by at most twice that; a
    float32 accumulation would be off by about 2^-24 relative, 10^8 times more."""
    rng = np.random.default_rng(5)
    lhs, rhs = rng.standard_normal((2, 6, 9, 9)), rng.standard_normal((4, 6, 5, 5))
    fn = lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "VALID")  # noqa: E731
    with x64():
        closed = jax.make_jaxpr(fn)(lhs, rhs)
        want = np.asarray(xla(fn)(lhs, rhs))
        scale = np.asarray(xla(fn)(np.abs(lhs), np.abs(rhs)))
    (got,) = Interpreter(closed)(lhs, rhs)
    assert got.dtype == want.dtype == np.float64
    allowed = 2 * probabilistic_bound(6 * 25 + 1) * 2.0**-53 * scale
    assert np.all(np.abs(got - want) <= allowed), float(np.max(np.abs(got - want) / scale))
    CASES_RUN["conv_general_dilated"] += 1


def test_conv_refuses_complex_operands():
    a = np.ones((1, 1, 3), np.complex64)
    program = jax.make_jaxpr(lambda a, b: lax.conv_general_dilated(a, b, (1,), "VALID"))(a, a)
    with pytest.raises(NotImplementedError, match="conv_general_dilated: complex dtype complex64"):
        Interpreter(program)(a, a)


# ---- a LeNet-5 block, whole -----------------------------------------------------------------
def lenet_block(params, images, targets):
    """conv 5x5 SAME -> relu -> max pool 2 -> conv 5x5 VALID -> average pool 2 -> dense."""
    conv1, conv2, dense = params
    x = lax.conv_general_dilated(images, conv1, (1, 1), "SAME")
    x = lax.reduce_window(jax.nn.relu(x), -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    x = lax.conv_general_dilated(x, conv2, (1, 1), "VALID")
    x = lax.reduce_window(x, 0.0, lax.add, (1, 1, 2, 2), (1, 1, 2, 2), "VALID") / 4
    logits = x.reshape(x.shape[0], -1) @ dense
    return jnp.sum(logits * targets)


def test_lenet_block_gradient_bit_for_bit():
    """Weights and images in {-1, 0, 1} and a linear loss: every value of the forward and
    backward pass is a small multiple of 1/4, exact in float32, so XLA's bits are the answer."""
    rng = np.random.default_rng(5)
    ternary = lambda *shape: rng.integers(-1, 2, shape).astype(np.float32)  # noqa: E731
    params = (ternary(4, 1, 5, 5), ternary(3, 4, 5, 5), ternary(3, 2))
    images, targets = ternary(2, 1, 12, 12), ternary(2, 2)
    found = check_exact(jax.grad(lenet_block), params, images, targets, expect="conv_general_dilated")
    assert {"select_and_scatter_add", "reduce_window_sum", "reduce_window_max"} <= found


def test_operands_of_any_memory_layout():
    """Rules get views (transposed, flipped, broadcast): the values must not depend on the layout."""
    rng = np.random.default_rng(7)
    ternary = lambda *shape: rng.integers(-1, 2, shape).astype(np.float32)  # noqa: E731
    params = (ternary(4, 1, 5, 5), ternary(3, 4, 5, 5), ternary(3, 2))
    images, targets = ternary(2, 1, 12, 12), ternary(2, 2)
    program = jax.make_jaxpr(jax.grad(lenet_block))(params, images, targets)
    plain = Interpreter(program)(*params, images, targets)
    fortran = [np.asfortranarray(a) for a in (*params, images, targets)]
    flipped = [np.flip(np.flip(a, -1).copy(), -1) for a in (*params, images, targets)]
    for inputs in (fortran, flipped):
        for want, got in zip(plain, Interpreter(program)(*inputs), strict=True):
            assert got.tobytes() == want.tobytes()
    constant = np.broadcast_to(np.float32(2), (3, 8, 8))
    pool = jax.make_jaxpr(
        lambda x: jax.grad(
            lambda x: jnp.sum(lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3), (1, 2, 2), "SAME"))
        )(x)
    )(np.ones((3, 8, 8), np.float32))
    (got,) = Interpreter(pool)(constant)
    (want,) = Interpreter(pool)(np.ascontiguousarray(constant))
    assert got.tobytes() == want.tobytes()


# ---- the oracle's way round openxla/xla#48713 --------------------------------------------------
#: The kernel gradient of CI's failing example (stop 21): stride 2, padding (-2, 2). Whole-number
#: data, so the answer is exact; element [0, 1, 2] sees only padding and is 0.
NEGATIVE_LOW = dict(
    window_strides=(2,),
    padding=((-2, 2),),
    lhs_dilation=(1,),
    rhs_dilation=(1,),
    dimension_numbers=lax.ConvDimensionNumbers((1, 2, 0), (1, 2, 0), (2, 0, 1)),
    feature_group_count=1,
    batch_group_count=1,
)


def test_the_oracle_gives_zero_where_only_padding_is_seen():
    lhs = np.zeros((6, 3, 3), np.float32)
    lhs[1, 0] = (2, 0, -1)
    lhs[3, 0, 2] = lhs[4, 0, 0] = 2
    kernel = np.full((4, 2, 3), 2, np.float32)
    fn = lambda a, b: lax.conv_general_dilated(a, b, **NEGATIVE_LOW)  # noqa: E731
    got = np.asarray(Interpreter(jax.make_jaxpr(fn)(lhs, kernel))(lhs, kernel)[0])
    for _ in range(20):  # XLA's read past the buffer differs run to run: zero every time here
        np.testing.assert_array_equal(np.asarray(xla(fn)(lhs, kernel)), got)
    assert got[0, 1, 2] == 0
    with x64():  # int64 goes through XLA's elemental emitter, which pads correctly
        ints = np.asarray(jax.jit(fn)(lhs.astype(np.int64), kernel.astype(np.int64)))
    np.testing.assert_array_equal(got, ints.astype(np.float32))


@settings(RULE_SETTINGS, max_examples=examples(40))
@given(geometry=conv_geometry(), data=st.data())
def test_the_cropped_convolution_is_the_same_function(geometry, data):
    """In int32 (XLA's elemental emitter, which pads correctly) the oracle's cropped program
    equals `jax.jit` of the original, for every generated geometry, negative padding included."""
    lhs_shape, rhs_shape, params = geometry
    lhs = data.draw(small_ints(np.int32, lhs_shape))
    rhs = data.draw(small_ints(np.int32, rhs_shape))
    fn = lambda a, b: lax.conv_general_dilated(a, b, **params)  # noqa: E731
    assume(accepted(fn, lhs, rhs))
    cropped, direct = np.asarray(xla(fn)(lhs, rhs)), np.asarray(jax.jit(fn)(lhs, rhs))
    np.testing.assert_array_equal(cropped, direct, strict=True)
