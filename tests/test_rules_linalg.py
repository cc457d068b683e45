"""dot_general against XLA: batch, contracting and free dimensions in any position, every dtype pair.

Integer and bool contractions must equal XLA's bit for bit (they wrap, in any order). Float ones
differ from XLA's in summation order only, so they are held to the bound of a sum
(`test_rules_shapes.assert_within_accumulation_bound`, derivation there), and so is the float64
reference against XLA in float64.
"""

from __future__ import annotations

import math
import string

import jax
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from jax import lax
from oracle import ALL_DTYPES, CASES_RUN, FLOATS, RULE_SETTINGS, arrays, x64
from test_rules_shapes import (
    FLUSHED_TINY,
    UNIT,
    assert_identical,
    assert_within_accumulation_bound,
    floats_within,
)

from gradlanes.program.interpreter import Interpreter

COVERED = {"dot_general"}

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
SETTINGS = settings(
    parent=RULE_SETTINGS,
    max_examples=examples(40),
    suppress_health_check=[*RULE_SETTINGS.suppress_health_check, HealthCheck.filter_too_much],
)


def is_float(dtype) -> bool:
    return np.dtype(dtype) in FLOATS


def _widened(dtype):
    return F64 if dtype is not None and is_float(dtype) else dtype


def _einsum(lhs_labels, rhs_labels, out_labels, a, b) -> np.ndarray:
    return np.einsum(f"{''.join(lhs_labels)},{''.join(rhs_labels)}->{''.join(out_labels)}", a, b)


def _magnitude(x: np.ndarray, accumulate: np.dtype, subnormal_only: bool = False) -> np.ndarray:
    """|x| in float64; with `subnormal_only`, just the entries that are subnormal in `accumulate`."""
    wide = np.abs(x.astype(np.float64))
    if subnormal_only:
        return np.where(wide < FLUSHED_TINY.get(accumulate, 0.0), wide, 0.0)
    return wide


def check_dot(lhs, rhs, dimension_numbers, preferred, labels) -> None:
    """One dot_general on XLA and in the interpreter (and its float64 reference against XLA in x64).

    `labels` are einsum subscripts of lhs, rhs and the output, for sum|terms| (the bound's scale)
    and for the terms with a subnormal factor, which XLA's flushed arithmetic drops.
    """

    def make(preferred_type):
        return lambda a, b: lax.dot_general(a, b, dimension_numbers, preferred_element_type=preferred_type)

    fn = make(preferred)
    try:
        closed = jax.make_jaxpr(fn)(lhs, rhs)
    except TypeError:  # a combination JAX refuses (a preferred type narrower than the result)
        assume(False)
    assert any(eqn.primitive.name == "dot_general" for eqn in closed.jaxpr.eqns)
    want = np.asarray(jax.jit(fn)(lhs, rhs))
    got = np.asarray(Interpreter(closed)(lhs, rhs)[0])
    terms = math.prod(lhs.shape[d] for d in dimension_numbers[0][0])
    if not is_float(want.dtype):
        assert_identical(want, got, "dot_general")
    else:
        _assert_close(want, got, lhs, rhs, labels, terms, [lhs.dtype, rhs.dtype, want.dtype])
    if is_float(lhs.dtype) or is_float(rhs.dtype) or (preferred is not None and is_float(preferred)):
        reference = np.asarray(Interpreter(closed, widen=True)(lhs, rhs)[0])
        wide = [x.astype(np.float64) if is_float(x.dtype) else x for x in (lhs, rhs)]
        wide = [x.astype(np.complex128) if x.dtype.kind == "c" else x for x in wide]
        want = np.asarray(jax.jit(make(_widened(preferred)))(*wide))
        if is_float(want.dtype):
            _assert_close(want, reference, *wide, labels, terms, [F64])
        else:
            assert_identical(want, reference, "float64 reference of dot_general")
    CASES_RUN["dot_general"] += 1


def _assert_close(want, got, lhs, rhs, labels, terms, formats) -> None:
    """Within the bound of a sum, accumulated at the least precise of `formats` (16-bit ones in
    float32, as XLA CPU does), plus the final rounding of each side to the output format."""
    accumulate = max(
        (F32 if np.dtype(f).itemsize < 4 else np.dtype(f) for f in formats if is_float(f)), key=UNIT.get
    )
    scale = _einsum(*labels, _magnitude(lhs, accumulate), _magnitude(rhs, accumulate))
    dropped = _einsum(*labels, _magnitude(lhs, accumulate, True), _magnitude(rhs, accumulate))
    dropped = dropped + _einsum(*labels, _magnitude(lhs, accumulate), _magnitude(rhs, accumulate, True))
    unit = UNIT[accumulate]
    assert_within_accumulation_bound(want, got, scale, dropped, terms, unit, True, f"dot_general {labels}")


def _values(dtype, shape, limit):
    """Arrays whose sums of |products| stay below `limit`**2 * terms, with inf/NaN for floats."""
    dtype = np.dtype(dtype)
    if is_float(dtype):
        elements = st.one_of(floats_within(dtype, -limit, limit), st.sampled_from([np.inf, -np.inf, np.nan]))
    elif dtype == np.bool_:
        elements = None
    else:
        info = np.iinfo(dtype)
        elements = st.integers(max(info.min, -int(limit)), min(info.max, int(limit)))
    return arrays(dtype, shape, elements=elements)


@SETTINGS
@given(st.data())
def test_dot_general(data):
    """Batch, contracting and free dims of random count, size and position; dtypes and preferred."""
    letters = iter(string.ascii_letters)
    batch = [(next(letters), data.draw(st.integers(0, 3))) for _ in range(data.draw(st.integers(0, 2)))]
    contract = [(next(letters), data.draw(st.integers(0, 4))) for _ in range(data.draw(st.integers(0, 2)))]
    lhs_free = [(next(letters), data.draw(st.integers(0, 3))) for _ in range(data.draw(st.integers(0, 2)))]
    rhs_free = [(next(letters), data.draw(st.integers(0, 3))) for _ in range(data.draw(st.integers(0, 2)))]
    lhs_dims = data.draw(st.permutations(batch + contract + lhs_free))
    rhs_dims = data.draw(st.permutations(batch + contract + rhs_free))
    lhs_type = data.draw(st.sampled_from(ALL_DTYPES))
    rhs_type = data.draw(st.one_of(st.just(lhs_type), st.sampled_from(ALL_DTYPES)))
    preferred = data.draw(st.one_of(st.none(), st.sampled_from(ALL_DTYPES)))
    with x64():
        try:
            result = jax.eval_shape(
                lambda a, b: lax.dot_general(a, b, (((), ()), ((), ())), preferred_element_type=preferred),
                jax.ShapeDtypeStruct((), lhs_type),
                jax.ShapeDtypeStruct((), rhs_type),
            ).dtype
        except TypeError:
            assume(False)
        # Float results: operands small enough that no partial sum overflows the output format, in
        # any order; from float inputs an integer result truncates sums, whose last bit depends on
        # the order, so those go to test_float_to_integer_results instead.
        assume(not (is_float(lhs_type) or is_float(rhs_type)) or is_float(result))
        terms = max(1, math.prod(size for _, size in contract))
        limit = math.sqrt(float(ml_dtypes.finfo(result).max) / (4 * terms)) if is_float(result) else 2.0**62
        lhs = data.draw(_values(lhs_type, tuple(size for _, size in lhs_dims), limit))
        rhs = data.draw(_values(rhs_type, tuple(size for _, size in rhs_dims), limit))
        position = lambda dims, label: [name for name, _ in dims].index(label)  # noqa: E731
        dimension_numbers = (
            (
                tuple(position(lhs_dims, n) for n, _ in contract),
                tuple(position(rhs_dims, n) for n, _ in contract),
            ),
            (tuple(position(lhs_dims, n) for n, _ in batch), tuple(position(rhs_dims, n) for n, _ in batch)),
        )
        lhs_labels, rhs_labels = [n for n, _ in lhs_dims], [n for n, _ in rhs_dims]
        free = {n for n, _ in lhs_free + rhs_free}  # in the output as in their operand's order
        out = (
            [n for n, _ in batch]
            + [n for n in lhs_labels if n in free]
            + [n for n in rhs_labels if n in free]
        )
        labels = (lhs_labels, rhs_labels, out)
        check_dot(lhs, rhs, dimension_numbers, preferred, labels)


PLAIN = (((1,), (0,)), ((), ()))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16], ids=str)
def test_matrix_products_of_training_sizes(dtype):
    """The BLAS path, plain and with either operand transposed (forward, and both backward products)."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((64, 100)).astype(dtype), rng.standard_normal((100, 32)).astype(dtype)
    g = rng.standard_normal((64, 32)).astype(dtype)
    with x64():
        check_dot(a, b, PLAIN, None, (["i", "k"], ["k", "j"], ["i", "j"]))
        check_dot(a, g, (((0,), (0,)), ((), ())), None, (["k", "i"], ["k", "j"], ["i", "j"]))
        check_dot(g, b, (((1,), (1,)), ((), ())), None, (["i", "k"], ["j", "k"], ["i", "j"]))
        check_dot(a, b, PLAIN, np.float32, (["i", "k"], ["k", "j"], ["i", "j"]))


@pytest.mark.parametrize(
    ("lhs_shape", "rhs_shape", "dimension_numbers", "labels"),
    [
        ((6, 5), (6, 5), (((1,), (1,)), ((0,), (0,))), (["b", "k"], ["b", "k"], ["b"])),
        ((3, 4, 5), (5, 6), (((2,), (0,)), ((), ())), (["i", "t", "k"], ["k", "j"], ["i", "t", "j"])),
        ((5, 4), (3, 5, 6), (((0,), (1,)), ((), ())), (["k", "i"], ["a", "k", "j"], ["i", "a", "j"])),
        ((4, 5), (4, 5), (((0, 1), (0, 1)), ((), ())), (["k", "l"], ["k", "l"], [])),
    ],
    ids=["batched rows", "3-d by 2-d", "2-d by 3-d", "two contracted dims"],
)
def test_float32_contractions_beside_the_matrix_product(lhs_shape, rhs_shape, dimension_numbers, labels):
    """The BLAS shortcut is for plain 2-d products only; these go through the general contraction."""
    rng = np.random.default_rng(len(lhs_shape) + len(rhs_shape))
    lhs = rng.standard_normal(lhs_shape).astype(np.float32)
    rhs = rng.standard_normal(rhs_shape).astype(np.float32)
    with x64():
        check_dot(lhs, rhs, dimension_numbers, None, labels)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=str)
def test_outer_products_keep_negative_zeros_as_xla(dtype):
    """A contraction over one element is a product, -1 * 0 = -0 (BLAS would add it to +0)."""
    x, y = np.array([[-1.0], [2.0]], dtype), np.array([[0.0, -3.0]], dtype)
    closed = jax.make_jaxpr(lambda a, b: a @ b)(x, y)
    (got,) = Interpreter(closed)(x, y)
    assert_identical(np.asarray(jax.jit(lambda a, b: a @ b)(x, y)), got, "outer product")
    assert np.signbit(got[0, 0])


def test_integer_and_bool_contractions_wrap_and_widen_as_xla():
    cases = [
        (np.full((2, 100), 100, np.int8), np.full((100, 2), 100, np.int8), None),  # wraps in int8
        (np.full((2, 100), 100, np.int8), np.full((100, 2), 100, np.int8), np.int32),  # widened first
        (np.full((2, 100), 200, np.uint8), np.full((100, 2), 200, np.uint8), np.int32),
        (np.full((2, 2), -100, np.int8), np.full((2, 2), 200, np.uint8), np.int16),  # both to int16
        (np.full((2, 2), 200, np.uint8), np.full((2, 2), -1, np.int8), None),  # int8 wins, 200 wraps
        (np.array([[True, False], [False, False]]), np.array([[True, True], [False, True]]), None),
        (np.ones((2, 3), bool), np.ones((3, 2), bool), np.int32),
        (np.full((1, 3), 2**24 + 1, np.int32), np.ones((3, 1), np.int32), np.float32),  # converted first
    ]
    with x64():
        for lhs, rhs, preferred in cases:
            check_dot(lhs, rhs, PLAIN, preferred, (["i", "k"], ["k", "j"], ["i", "j"]))


def test_mixed_operand_types_contract_in_the_higher_type():
    """Operands of two dtypes (JAX leaves preferred_element_type None) are converted to the higher
    one first: its rank, not the operand's side, decides. Values that the wrong type would change:
    fractions an integer truncates, integers over the narrower type's range, float32 ulps that
    float16 and bfloat16 lose, imaginary parts a real type drops, bools that are not 0/1 bytes."""
    fractions = np.array([[0.5, -1.25, 2.75]], np.float32)
    fine = np.array([[1 + 2.0**-20, -(1 + 2.0**-19), 3 + 2.0**-18]], np.float32)
    small = np.array([[1, -2, 3]], np.int8)
    cases = [
        (fractions, small.T, None),
        (small, fractions.T, None),
        (np.array([[300, -300, 1000]], np.int16), small.T, None),
        (small, np.array([[300, -300, 1000]], np.int16).T, None),
        (fine, fine.T.astype(np.float16), None),
        (fine.astype(np.float16), fine.T, None),
        (fine, fine.T.astype(ml_dtypes.bfloat16), None),
        (fine.astype(ml_dtypes.bfloat16), fine.T, None),
        (fine.astype(np.float16), fine.T.astype(ml_dtypes.bfloat16), None),
        (np.array([[True, False, True]]), np.array([[200, 100, 56]], np.uint8).T, None),
        (np.array([[True, False, True]]), np.array([[100, 50, 28]], np.int8).T, None),
        (small.astype(np.float32), np.array([[1 + 2j, -1j, 3]], np.complex64).T, None),
        (np.array([[1 + 2j, -1j, 3]], np.complex64), small.T.astype(np.float32), None),
    ]
    with x64():
        for lhs, rhs, preferred in cases:
            check_dot(lhs, rhs, PLAIN, preferred, (["i", "k"], ["k", "j"], ["i", "j"]))


def test_float_to_integer_results_truncate_saturate_and_zero_nans():
    """float32 sums converted to integers as XLA converts: toward zero, saturating, NaN to 0."""
    # 2**63 and 2**64 are the first floats past int64's and uint64's maximum: saturated, not wrapped
    edges = [2.0**63, -(2.0**63), 2.0**64, 2.0**31, -(2.0**31)]
    values = np.array([[np.nan, np.inf, -np.inf, 3e9, -3e9, -1.5, 2.7, 0.5, *edges]], np.float32).T
    one_hot = np.zeros((1, 2), np.float32)
    one_hot[0, 0] = 1
    with x64():
        for preferred in (np.int32, np.uint32, np.int8, np.int64, np.uint64, np.uint8):
            fn = lambda a, b, p=preferred: lax.dot_general(a, b, PLAIN, preferred_element_type=p)  # noqa: E731
            program = jax.make_jaxpr(fn)(values, one_hot)
            assert_identical(
                np.asarray(jax.jit(fn)(values, one_hot)), Interpreter(program)(values, one_hot)[0], ""
            )
            pairs = np.concatenate([values, values], axis=1), np.ones((2, 3), np.float32) / 2  # x/2 + x/2
            program = jax.make_jaxpr(fn)(*pairs)
            assert_identical(np.asarray(jax.jit(fn)(*pairs)), Interpreter(program)(*pairs)[0], "")
            CASES_RUN["dot_general"] += 2


def test_signed_zeros():
    """A contraction of one term is XLA's multiply (-0.0 kept); of more, a sum from +0.0."""
    zeros = np.full((2, 1), -0.0, np.float32)
    with x64():
        for dtype in (np.float32, np.float16, ml_dtypes.bfloat16, np.float64):
            a = zeros.astype(dtype)
            for lhs, rhs, dims in [(a, a.T, PLAIN), (a.T, a.T, (((0,), (0,)), ((), ())))]:
                fn = lambda x, y, dims=dims: lax.dot_general(x, y, dims)  # noqa: E731
                program = jax.make_jaxpr(fn)(lhs, rhs)
                assert_identical(
                    np.asarray(jax.jit(fn)(lhs, rhs)), Interpreter(program)(lhs, rhs)[0], str(dtype)
                )
            vector = np.full(3, -0.0, dtype)
            program = jax.make_jaxpr(lambda x, y: x @ y)(vector, vector)
            assert_identical(
                np.asarray(jax.jit(lambda x, y: x @ y)(vector, vector)),
                Interpreter(program)(vector, vector)[0],
                "",
            )


def test_precision_hints_run_and_dot_algorithms_are_refused():
    a = np.ones((3, 4), np.float32)
    with x64():
        check_dot(a, a.T, PLAIN, None, (["i", "k"], ["k", "j"], ["i", "j"]))
        hinted = jax.make_jaxpr(lambda x, y: lax.dot(x, y, precision=lax.Precision.HIGHEST))(a, a.T)
        np.testing.assert_array_equal(Interpreter(hinted)(a, a.T)[0], a @ a.T)
        preset = jax.make_jaxpr(lambda x, y: lax.dot(x, y, precision=lax.DotAlgorithmPreset.BF16_BF16_F32))(
            a, a.T
        )
        with pytest.raises(NotImplementedError, match="dot_general: precision"):
            Interpreter(preset)(a, a.T)
