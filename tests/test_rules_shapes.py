"""Data movement, reductions, sorting and scans against XLA, on generated shapes and every dtype.

Every case is traced once, run by XLA and by the interpreter, and must have XLA's dtype, shape and
bits (`check_exact`: NaN where NaN, and the sign of every zero), and the float64 reference must
equal XLA run in float64. Float sums and products are the exception: XLA's CPU reduction order is
its vectorised own, so those are held to the rounding bound of a sum (`check_accumulated`).
Several primitives share one traced program where they can: an XLA compile is most of a case's time.
Cases run with 64-bit types enabled so int64, uint64 and float64 are reachable.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from jax import lax
from oracle import ALL_DTYPES, CASES_RUN, FLOATS, INTEGERS, RULE_SETTINGS, arrays, primitives, shapes, x64

from gradlanes.program.interpreter import RULES, Interpreter
from gradlanes.program.rules import elementwise
from gradlanes.run.numerics import FLOAT32_U, probabilistic_bound

COVERED = {
    "broadcast_in_dim",
    "reshape",
    "squeeze",
    "transpose",
    "iota",
    "concatenate",
    "slice",
    "rev",
    "pad",
    "split",
    "stack",
    "unstack",
    "optimization_barrier",
    "reduce_sum",
    "reduce_prod",
    "reduce_max",
    "reduce_min",
    "reduce_and",
    "reduce_or",
    "reduce_xor",
    "argmax",
    "argmin",
    "sort",
    "top_k",
    "cumsum",
    "cumprod",
    "cummax",
    "cummin",
    "cumlogsumexp",
}

BF16 = np.dtype(ml_dtypes.bfloat16)
NUMBERS = INTEGERS + FLOATS  # what sums, products and scans accept (not bool)
BITWISE = (np.dtype(np.bool_),) + INTEGERS
CASES = settings(parent=RULE_SETTINGS, max_examples=examples(25))


def is_float(dtype) -> bool:
    return np.dtype(dtype) in FLOATS


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(v) for v in jax.tree_util.tree_leaves(tree)]


def _wide(args):
    return [np.asarray(a).astype(np.float64) if is_float(np.asarray(a).dtype) else a for a in args]


def assert_identical(want: np.ndarray, got: np.ndarray, label: str) -> None:
    """XLA's dtype, shape and values; floats compared in float64 (exact), so bfloat16 NaNs are NaNs
    and the sign of zeros counts (np.testing.assert_array_equal has -0.0 == +0.0)."""
    assert got.dtype == want.dtype, f"{label}: dtype {got.dtype}, JAX gives {want.dtype}"
    assert got.shape == want.shape, f"{label}: shape {got.shape}, JAX gives {want.shape}"
    if not is_float(want.dtype):
        np.testing.assert_array_equal(got, want, err_msg=label, strict=True)
        return
    w, g = want.astype(np.float64), got.astype(np.float64)
    nan = np.isnan(w)
    same = nan & np.isnan(g) | (w == g) & (np.signbit(w) == np.signbit(g))
    assert same.all(), f"{label}: {int((~same).sum())} differ: got {g[~same][:5]}, JAX {w[~same][:5]}"


def _traced(fn, args, expect):
    closed = jax.make_jaxpr(fn)(*args)
    found = primitives(closed)
    missing = [name for name in expect if name not in found]
    assert not missing, f"{missing} not in the traced program ({sorted(found)})"
    return closed


def check_exact(fn, *args, expect, widened: bool = True) -> None:
    """`fn(*args)` in the interpreter is XLA's, bit for bit; so is its float64 reference (if any input
    is a float) against XLA in float64. `expect` names the primitives under test (each counted)."""
    expect = (expect,) if isinstance(expect, str) else tuple(expect)
    closed = _traced(fn, args, expect)
    want, got = _leaves(jax.jit(fn)(*args)), _leaves(Interpreter(closed)(*args))
    assert len(got) == len(want)
    for index, (w, g) in enumerate(zip(want, got, strict=True)):
        assert_identical(w, g, f"output {index} of {expect}")
    if widened and any(is_float(np.asarray(a).dtype) for a in args):
        reference = _leaves(Interpreter(closed, widen=True)(*args))
        with x64():
            want = _leaves(jax.jit(fn)(*_wide(args)))
        for index, (w, g) in enumerate(zip(want, reference, strict=True)):
            assert_identical(w, g, f"output {index} of the float64 reference of {expect}")
    for name in expect:
        CASES_RUN[name] += 1


# ---- the bound for float sums and products ----------------------------------------------------
#: Unit roundoff of each format's arithmetic (round to nearest: half the gap above 1).
UNIT = {
    np.dtype(np.float16): 2.0**-11,
    BF16: 2.0**-8,
    np.dtype(np.float32): FLOAT32_U,
    np.dtype(np.float64): 2.0**-53,
}
#: Smallest normal of the formats XLA CPU flushes (FTZ/DAZ); float16 runs in float32 unflushed.
FLUSHED_TINY = {np.dtype(np.float32): 2.0**-126, BF16: 2.0**-126, np.dtype(np.float64): 2.0**-1022}


def ulp(values: np.ndarray) -> np.ndarray:
    """The spacing at |values| in their own format (bfloat16: float32's, 16 bits coarser)."""
    if values.dtype == BF16:
        return np.spacing(np.abs(values.astype(np.float32))).astype(np.float64) * 2.0**16
    return np.spacing(np.abs(values)).astype(np.float64)


def assert_within_accumulation_bound(want, got, scale, dropped, terms, unit, final_rounding, label):
    """`got` equals XLA's `want` up to two accumulations' rounding (the derivation).

    Each side sums the same `terms` values in its own order. Higham & Mary's probabilistic bound
    (gradlanes.run.numerics, lambda = 4) puts each within lambda sqrt(n) u sum|terms| of the exact
    sum, so the two differ by at most twice that; for n <= 64, as generated here, 2 lambda sqrt(n)
    >= n - 1, so this also covers the deterministic worst case gamma_(n-1) of any order, with no
    probability involved. `scale` is sum|terms| (for products, prod|terms| = |exact|: the same bound
    per rounded multiply). Where the sum is accumulated wider and rounded once more to the output
    (16-bit dots accumulate in float32) the two roundings may land one output ulp apart. XLA
    flushes subnormals (gradlanes.program.rules.sorting): each subnormal term or partial result it
    drops is below the smallest normal, and `dropped` is the magnitude of the terms with a subnormal
    factor, which XLA drops whole. Infinities and NaN must be the same on both sides.
    """
    assert got.dtype == want.dtype, f"{label}: dtype {got.dtype}, JAX gives {want.dtype}"
    assert got.shape == want.shape, f"{label}: shape {got.shape}, JAX gives {want.shape}"
    if not is_float(want.dtype):
        np.testing.assert_array_equal(got, want, err_msg=label, strict=True)
        return
    w, g = want.astype(np.float64), got.astype(np.float64)
    allowed = (
        2 * probabilistic_bound(terms) * unit * scale + dropped + terms * FLUSHED_TINY.get(want.dtype, 0.0)
    )
    if final_rounding:
        allowed = allowed + np.maximum(ulp(want), ulp(got))
    with np.errstate(invalid="ignore"):
        same = (w == g) | (np.isnan(w) & np.isnan(g))
        close = np.isfinite(w) & np.isfinite(g) & (np.abs(w - g) <= allowed)
    bad = ~(same | close)
    assert not bad.any(), f"{label}: {int(bad.sum())} beyond the bound: got {g[bad][:4]}, JAX {w[bad][:4]}"


def check_accumulated(fn, *args, expect, terms, scale, dropped=None, accumulate=None) -> None:
    """Like `check_exact`, with float outputs held to `assert_within_accumulation_bound`.

    `terms` is the longest accumulation (reduced size, contraction length); `scale` and `dropped`
    are per output, in float64 (see there). `accumulate` is the format both sides accumulate in
    when it is wider than the output (float32 for 16-bit dots); by default the output's own.
    """
    expect = (expect,) if isinstance(expect, str) else tuple(expect)
    closed = _traced(fn, args, expect)
    dropped = dropped or [0.0] * len(scale)
    want, got = _leaves(jax.jit(fn)(*args)), _leaves(Interpreter(closed)(*args))
    for w, g, s, d in zip(want, got, scale, dropped, strict=True):
        unit = UNIT.get(np.dtype(accumulate or w.dtype), 0.0)
        assert_within_accumulation_bound(w, g, s, d, terms, unit, accumulate is not None, f"{expect}")
    if any(is_float(np.asarray(a).dtype) for a in args):
        reference = _leaves(Interpreter(closed, widen=True)(*args))
        with x64():
            want = _leaves(jax.jit(fn)(*_wide(args)))
        for w, g, s in zip(want, reference, scale, strict=True):
            assert_within_accumulation_bound(
                w, g, s, 0.0, terms, UNIT.get(w.dtype, 0.0), False, f"reference {expect}"
            )
    for name in expect:
        CASES_RUN[name] += 1


def floats_within(dtype, low: float, high: float):
    """Floats of `dtype`'s width (bfloat16 drawn as float32) in [low, high], bounds rounded inward."""
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return st.floats(low, high, width=64)
    width, holder = (16, np.float16) if dtype == np.float16 else (32, np.float32)
    top = float(np.finfo(holder).max)
    low, high = holder(max(low, -top)), holder(min(high, top))
    inward = float(np.nextafter(low, holder(np.inf))), float(np.nextafter(high, holder(-np.inf)))
    return st.floats(*inward, width=width)


SPECIALS = st.sampled_from([np.inf, -np.inf, np.nan])


def _max_finite(dtype) -> float:
    return float(ml_dtypes.finfo(dtype).max)


def axes_of(data, ndim: int) -> tuple[int, ...]:
    return tuple(sorted(data.draw(st.sets(st.integers(0, ndim - 1), max_size=ndim)))) if ndim else ()


# ---- data movement ----------------------------------------------------------------------------


@settings(parent=RULE_SETTINGS, max_examples=examples(30))
@given(st.data())
def test_data_movement(data):
    """broadcast_in_dim, reshape, squeeze, transpose, slice, rev, pad, concatenate, split, stack, barrier."""
    dtype = data.draw(st.sampled_from(ALL_DTYPES))
    x = data.draw(arrays(dtype, shapes()))
    value = data.draw(arrays(dtype, ()))
    ops, expect = [], ["broadcast_in_dim", "reshape", "squeeze", "pad", "optimization_barrier"]

    target, dims = [2], []  # a new leading dim, so the broadcast is never the identity JAX drops
    for size in x.shape:
        target += data.draw(st.lists(st.integers(0, 3), max_size=1))
        dims.append(len(target))
        target.append(data.draw(st.sampled_from([1, 3])) if size == 1 else size)
    ops.append(lambda a, v: lax.broadcast_in_dim(a, tuple(target), tuple(dims)))
    ops.append(lambda a, v: jnp.reshape(a, (x.size,) if x.ndim != 1 else (1, x.size)))
    with_ones = list(x.shape)
    for position in sorted(data.draw(st.sets(st.integers(0, x.ndim), min_size=1, max_size=2)), reverse=True):
        with_ones.insert(position, 1)
    ones = tuple(i for i, size in enumerate(with_ones) if size == 1)
    ops.append(lambda a, v: lax.squeeze(jnp.reshape(a, with_ones), ones))
    config = []
    for size in x.shape:
        interior = data.draw(st.integers(0, 2))
        spread = size + max(size - 1, 0) * interior
        low = data.draw(st.integers(-spread - 2, 3))
        config.append((low, data.draw(st.integers(max(-spread - low, -3), 3)), interior))  # size >= 0
    config = [(1, 0, 0)] if x.ndim == 0 else config  # a 0-d pad is the operand itself
    ops.append(lambda a, v: lax.pad(jnp.reshape(a, (1,)) if x.ndim == 0 else a, v, config))
    ops.append(lambda a, v: lax.optimization_barrier((a, v)))
    ops.append(lambda a, v: jnp.stack([a, jnp.broadcast_to(v, a.shape)], axis=a.ndim))
    expect.append("stack")

    if x.ndim:
        permutation = tuple(data.draw(st.permutations(range(x.ndim))))
        if permutation == tuple(range(x.ndim)):  # JAX drops an identity transpose: rotate it
            permutation = permutation[1:] + permutation[:1]
        if x.ndim > 1:
            ops.append(lambda a, v: lax.transpose(a, permutation))
            expect.append("transpose")
        starts, limits, strides = [], [], []
        for size in x.shape:
            starts.append(data.draw(st.integers(0, size)))
            limits.append(data.draw(st.integers(starts[-1], size)))
            strides.append(data.draw(st.integers(1, 3)))
        ops.append(lambda a, v: lax.slice(a, starts, limits, strides))
        reversed_dims = tuple(sorted(data.draw(st.sets(st.integers(0, x.ndim - 1), min_size=1))))
        ops.append(lambda a, v: lax.rev(a, reversed_dims))
        axis = data.draw(st.integers(0, x.ndim - 1))
        ops.append(lambda a, v: lax.concatenate([a, lax.rev(a, (axis,)), a], axis))
        cuts = sorted(data.draw(st.lists(st.integers(0, x.shape[axis]), min_size=1, max_size=3)))
        sizes = [b - a for a, b in zip([0, *cuts], [*cuts, x.shape[axis]], strict=True)]
        ops.append(lambda a, v: lax.split(a, sizes, axis=axis))
        ops.append(lambda a, v: jnp.unstack(a, axis=axis))
        expect += ["slice", "rev", "concatenate", "split", "unstack"]
    with x64():
        check_exact(lambda a, v: [op(a, v) for op in ops], x, value, expect=expect)


@pytest.mark.parametrize("dtype", [BF16, np.float16], ids=str)
@pytest.mark.parametrize("count", [4_097, 10_000])
def test_16_bit_sums_of_many_terms_stay_within_the_pairwise_bound(dtype, count):
    """Summed term by term in bfloat16, 4,097 halves stall at 128 (0.5 is under half an ulp of 256);
    XLA and the rule sum in a tree, whose error is at most ceil(log2 n) roundings of u * sum|x|
    (u: half an ulp of 1), the bound both must meet."""
    x = np.full(count, 0.5, dtype)
    exact = 0.5 * count
    bound = math.ceil(math.log2(count)) * UNIT[np.dtype(dtype)] * exact
    closed = jax.make_jaxpr(lambda a: lax.reduce_sum(a, (0,)))(x)
    (got,) = Interpreter(closed)(x)
    want = jax.jit(lambda a: lax.reduce_sum(a, (0,)))(x)
    assert abs(float(want) - exact) <= bound
    assert abs(float(got) - exact) <= bound, (float(got), exact, bound)


def test_reshape_with_dimensions_transposes_first_as_xla():
    """lax.reshape(x, sizes, dimensions) keeps `dimensions` in the jaxpr when it is not the identity."""
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    program = lambda a: lax.reshape(a, (4, 6), dimensions=(2, 0, 1))  # noqa: E731
    closed = jax.make_jaxpr(program)(x)
    (reshape,) = [eqn for eqn in closed.jaxpr.eqns if eqn.primitive.name == "reshape"]
    assert tuple(reshape.params["dimensions"]) == (2, 0, 1)
    check_exact(program, x, expect="reshape")


def test_rev_of_no_dimensions_is_the_operand():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    closed = jax.make_jaxpr(lambda a: lax.rev(a, ()))(x)
    assert [eqn.primitive.name for eqn in closed.jaxpr.eqns] == ["rev"]
    (got,) = Interpreter(closed)(x)
    np.testing.assert_array_equal(got, x, strict=True)


@settings(parent=RULE_SETTINGS, max_examples=examples(15))
@given(st.data())
def test_iota(data):
    cases = []
    for _ in range(3):
        shape = data.draw(shapes(min_dims=1))
        cases.append((data.draw(st.sampled_from(NUMBERS)), shape, data.draw(st.integers(0, len(shape) - 1))))
    with x64():
        check_exact(lambda: [lax.broadcasted_iota(*case) for case in cases], expect="iota")


def test_iota_wraps_integers_and_rounds_floats():
    lengths = [(np.int8, 300), (np.uint8, 300), (np.float16, 70_000), (BF16, 600), (np.uint16, 70_000)]
    with x64():
        check_exact(lambda: [lax.iota(dtype, length) for dtype, length in lengths], expect="iota")


# ---- reductions -------------------------------------------------------------------------------


@settings(parent=RULE_SETTINGS, max_examples=examples(30))
@given(st.data())
def test_comparison_and_bitwise_reductions(data):
    """reduce_max/min, argmax/argmin and (bool, integers) reduce_and/or/xor."""
    dtype = data.draw(st.sampled_from(ALL_DTYPES))
    x = data.draw(arrays(dtype, shapes()))
    axes = axes_of(data, x.ndim)
    ops = [lambda a: lax.reduce_max(a, axes), lambda a: lax.reduce_min(a, axes)]
    expect = ["reduce_max", "reduce_min"]
    if dtype in BITWISE:
        ops += [
            lambda a: lax.reduce_and(a, axes),
            lambda a: lax.reduce_or(a, axes),
            lambda a: lax.reduce_xor(a, axes),
        ]
        expect += ["reduce_and", "reduce_or", "reduce_xor"]
    y = data.draw(arrays(dtype, shapes(min_dims=1)))  # argmax needs an axis that is not empty
    axis = data.draw(st.sampled_from([d for d in range(y.ndim) if y.shape[d] > 0] or [None]))
    index_dtype = data.draw(st.sampled_from([np.int32, np.int64, np.int8, np.uint8]))
    with x64():
        check_exact(lambda a: [op(a) for op in ops], x, expect=expect)
        if axis is not None:  # apart: XLA fuses a max with an argmax of the same operand (see sorting)
            check_exact(
                lambda a: [lax.argmax(a, axis, index_dtype), lax.argmin(a, axis, index_dtype)],
                y,
                expect=["argmax", "argmin"],
            )


@settings(parent=RULE_SETTINGS, max_examples=examples(30))
@given(st.data())
def test_reduce_sum_and_prod(data):
    dtype = data.draw(st.sampled_from(NUMBERS))
    shape = data.draw(shapes())
    axes = axes_of(data, len(shape))
    terms = math.prod(shape[a] for a in axes)
    if is_float(dtype):
        # Sums: finite parts whose magnitudes cannot overflow in any order; specials, whose sum is
        # the same in any order. Products: factors whose partial products stay normal in any order
        # (64 at most), and the specials and zeros.
        info = ml_dtypes.finfo(dtype)
        limit = _max_finite(dtype) / 256
        summands = st.one_of(floats_within(dtype, -limit, limit), SPECIALS)
        reach = 2.0 ** (min(info.maxexp - 1, -info.minexp) / 64)
        magnitude = floats_within(dtype, 1 / reach * 1.01, reach * 0.99)
        factors = st.one_of(magnitude, magnitude.map(lambda v: -v), SPECIALS, st.sampled_from([0.0, -0.0]))
        x, y = (
            data.draw(arrays(dtype, shape, elements=summands)),
            data.draw(arrays(dtype, shape, elements=factors)),
        )
    else:  # integer sums and products wrap, exactly, in any order
        x, y = data.draw(arrays(dtype, shape)), data.draw(arrays(dtype, shape))
    with np.errstate(over="ignore", invalid="ignore"):
        scale = [
            np.sum(np.abs(x.astype(np.float64)), axis=axes),
            np.prod(np.abs(y.astype(np.float64)), axis=axes),
        ]
    with x64():
        check_accumulated(
            lambda a, b: [lax.reduce_sum(a, axes), lax.reduce_prod(b, axes)],
            x,
            y,
            expect=["reduce_sum", "reduce_prod"],
            terms=terms,
            scale=scale,
        )


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_reductions_over_nothing_give_the_identity(dtype):
    """-inf (the integer minimum, False) for max, +inf for min, 0, 1, all ones, 0, 0."""
    x = np.zeros((0, 3), dtype)
    ops = {"reduce_max": lax.reduce_max, "reduce_min": lax.reduce_min}
    if dtype != np.bool_:
        ops |= {"reduce_sum": lax.reduce_sum, "reduce_prod": lax.reduce_prod}
    if dtype in BITWISE:
        ops |= {"reduce_and": lax.reduce_and, "reduce_or": lax.reduce_or, "reduce_xor": lax.reduce_xor}
    cube = np.zeros((2, 0, 3), dtype)  # the empty axis between kept ones, and every axis at once
    with x64():
        check_exact(
            lambda a, b: (
                [op(a, (0,)) for op in ops.values()]
                + [op(b, (1,)) for op in ops.values()]
                + [op(b, (0, 1, 2)) for op in ops.values()]
            ),
            x,
            cube,
            expect=list(ops),
        )


@pytest.mark.parametrize("processor_flushes", [True, False], ids=["ftz-daz", "rules-alone"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, BF16, np.float16], ids=str)
def test_signed_zeros_and_flushed_subnormals_in_reductions(dtype, processor_flushes, monkeypatch):
    """A sum of -0.0 past one term is +0.0; max/min order -0.0 < +0.0; compares flush subnormals.

    Also where `xla_float_environment` cannot set FTZ/DAZ (not Linux on x86_64 or aarch64): the
    rules then flush by themselves, bfloat16 through float32 (which holds its subnormals as
    subnormals; float64 would hold them as normal numbers and keep them)."""
    if not processor_flushes:
        monkeypatch.setattr(elementwise, "_ENVIRONMENT", None)
    tiny = float(ml_dtypes.finfo(dtype).smallest_subnormal)
    rows = np.array(
        [
            [-0.0, -0.0, -0.0],
            [-0.0, 0.0, -0.0],
            [tiny, 0.0, 2 * tiny],
            [-tiny, -0.0, -1.0],
            [0.0, -tiny, -0.0],
        ],
        dtype,
    )
    big = 2.0 ** (ml_dtypes.finfo(dtype).maxexp - 2)
    factors = np.array([[tiny, big, 1.0], [big, -tiny, 2.0], [-0.0, 1.0, 1.0]], dtype)  # subnormal: 0
    ops = {"reduce_sum": lax.reduce_sum, "reduce_max": lax.reduce_max, "reduce_min": lax.reduce_min}
    with x64():
        check_exact(
            lambda a, b: (
                [op(a, (1,)) for op in ops.values()]
                + [op(a[:, :1], (1,)) for op in ops.values()]  # one term: the term itself
                + [lax.reduce_prod(b, (1,))]
            ),
            rows,
            factors,
            expect=[*ops, "reduce_prod"],
        )
        argument = lambda a: [lax.argmax(a, 1, np.int32), lax.argmin(a, 1, np.int32)]  # noqa: E731
        check_exact(argument, rows, expect=["argmax", "argmin"])


def test_argmax_takes_the_first_nan_and_the_first_of_ties():
    x = np.zeros((5, 1000), np.float32)
    x[:, [7, 300, 301, 999]] = np.nan
    x[1, 7], x[2, [7, 300]], x[3, 5:900] = 0, 0, np.nan
    ties = np.random.default_rng(0).integers(0, 3, (7, 1000)).astype(np.float32)
    with x64():
        check_exact(
            lambda a, t, b: (
                [lax.argmax(a, 1, np.int32), lax.argmin(a, 1, np.int32), lax.argmax(t, 0, np.int32)]
                + [lax.argmax(b, 1, np.int32), lax.argmin(b, 1, np.int32)]
            ),
            x,
            x.T,
            ties,
            expect=["argmax", "argmin"],
        )


def test_long_float_sums_stay_within_the_bound():
    """Beyond the generated sizes: 4,097 terms, where a sequential bfloat16 sum would stall at 256."""
    rng = np.random.default_rng(7)
    for dtype in (np.float16, BF16, np.float32):
        x = rng.uniform(0, 1, (3, 4097)).astype(dtype)
        with x64():
            check_accumulated(
                lambda a: lax.reduce_sum(a, (1,)),
                x,
                expect="reduce_sum",
                terms=4097,
                scale=[np.sum(x.astype(np.float64), axis=1)],
            )


# ---- sorting ----------------------------------------------------------------------------------


def _canonical_keys(x: np.ndarray) -> np.ndarray:
    """Keys as JAX's comparator sees them: -0.0 as +0.0, flushed subnormals as zero, NaNs alike."""
    if not is_float(x.dtype):
        return x
    wide = x.astype(np.float64)
    return np.where(np.abs(wide) < FLUSHED_TINY.get(x.dtype, 2.0**-1074), 0.0, wide)


@settings(parent=RULE_SETTINGS, max_examples=examples(30))
@given(st.data())
def test_sort(data):
    shape = data.draw(shapes(min_dims=1))
    count = data.draw(st.integers(1, 3))
    operands = [data.draw(arrays(data.draw(st.sampled_from(ALL_DTYPES)), shape)) for _ in range(count)]
    num_keys = data.draw(st.integers(1, count))
    dimension = data.draw(st.integers(0, len(shape) - 1))
    stable = lambda *xs: lax.sort(xs, dimension=dimension, is_stable=True, num_keys=num_keys)  # noqa: E731
    unstable = lambda *xs: lax.sort(xs, dimension=dimension, is_stable=False, num_keys=num_keys)  # noqa: E731
    with x64():
        check_exact(stable, *operands, expect="sort")
        # XLA's unstable sort (std::sort) orders ties its own way. The rule returns the stable order,
        # one of the orders allowed; the keys XLA returns match it as the comparator sees them.
        got = _leaves(Interpreter(jax.make_jaxpr(unstable)(*operands))(*operands))
        for index, (w, g) in enumerate(zip(_leaves(jax.jit(stable)(*operands)), got, strict=True)):
            assert_identical(w, g, f"unstable sort output {index}")
        for w, g in zip(_leaves(jax.jit(unstable)(*operands))[:num_keys], got[:num_keys], strict=True):
            np.testing.assert_array_equal(_canonical_keys(g), _canonical_keys(w))


@pytest.mark.parametrize("dimension", [0, 1, 2])
def test_sort_along_each_dimension_permutes_every_operand_along_it(dimension):
    """Two keys and a payload of shape (3, 4, 5), sorted along each axis in turn (not only the last)."""
    rng = np.random.default_rng(dimension)
    first = rng.integers(0, 3, size=(3, 4, 5)).astype(np.int32)
    second = rng.standard_normal((3, 4, 5)).astype(np.float32)
    payload = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    program = lambda a, b, c: lax.sort((a, b, c), dimension=dimension, num_keys=2)  # noqa: E731
    check_exact(program, first, second, payload, expect="sort")


def test_sort_refuses_more_keys_than_operands():
    with pytest.raises(NotImplementedError, match=r"^sort: num_keys=3 with 2 operand\(s\)$"):
        RULES["sort"](np.zeros(3), np.zeros(3), dimension=0, num_keys=3)


def test_sort_orders_nans_last_zeros_together_and_flushes_subnormals():
    x = np.array([3, np.nan, -0.0, 0.0, 1e-45, -1e-45, np.inf, 3, -np.inf, -np.nan, 1e-38], np.float32)
    with x64():
        check_exact(
            lambda a, b: [lax.sort(a), jnp.argsort(a), lax.sort((b, jnp.arange(b.size)), num_keys=1)],
            x,
            x.astype(BF16),
            expect="sort",
        )


@CASES
@given(st.data())
def test_top_k(data):
    dtype = data.draw(st.sampled_from(ALL_DTYPES))
    x = data.draw(arrays(dtype, shapes(min_dims=1)))
    axis = data.draw(st.integers(0, x.ndim - 1))
    k = data.draw(st.integers(0, x.shape[axis]))
    with x64():
        check_exact(lambda a: lax.top_k(a, k, axis=axis), x, expect="top_k")


def test_top_k_orders_by_bits_nans_by_payload():
    nan = np.float32(np.nan)
    payload = np.array([0x7FC00001], np.uint32).view(np.float32)[0]
    x = np.array([1, nan, -0.0, 0.0, -nan, np.inf, -np.inf, 1, 0.0, -0.0, 1e-45, -1e-45, payload], np.float32)
    ties = np.random.default_rng(3).integers(0, 3, (4, 200))
    with x64():
        check_exact(
            lambda *xs: [lax.top_k(a, a.shape[-1]) for a in xs[:4]] + [lax.top_k(a, 150) for a in xs[4:]],
            *[x.astype(dtype) for dtype in (np.float32, np.float64, np.float16, BF16)],
            *[ties.astype(dtype) for dtype in (np.float32, np.float16, np.int8, np.uint64, np.bool_)],
            expect="top_k",
            widened=False,  # float64 keeps NaN payloads that a float32 -> float64 conversion may not
        )


# ---- cumulative scans -------------------------------------------------------------------------

SCANS = {"cumsum": lax.cumsum, "cumprod": lax.cumprod, "cummax": lax.cummax, "cummin": lax.cummin}


@settings(parent=RULE_SETTINGS, max_examples=examples(25))
@given(st.data())
def test_scans_are_bit_exact(data):
    """XLA's tree of blocks of 16, reproduced, rounds as XLA does: bits equal, floats included."""
    dtype = data.draw(st.sampled_from(NUMBERS))
    x = data.draw(arrays(dtype, shapes(min_dims=1)))
    axis = data.draw(st.integers(0, x.ndim - 1))
    reverse = data.draw(st.booleans())
    with x64():
        check_exact(
            lambda a: [scan(a, axis=axis, reverse=reverse) for scan in SCANS.values()], x, expect=list(SCANS)
        )


@settings(parent=RULE_SETTINGS, max_examples=examples(4))
@given(st.data())
def test_long_scans_follow_xlas_tree(data):
    """Past one block (16) and past a block of blocks (256) the rewriter's two levels take over."""
    dtype = data.draw(st.sampled_from(FLOATS + (np.dtype(np.int32),)))
    length = data.draw(st.sampled_from([17, 40, 257, 300]))
    elements = floats_within(dtype, -8, 8) if is_float(dtype) else None
    factors = floats_within(dtype, 0.9, 1.1) if is_float(dtype) else None  # normal over 300 factors
    x = data.draw(arrays(dtype, (2, length), elements=elements))
    y = data.draw(arrays(dtype, (2, length), elements=factors))
    reverse = data.draw(st.booleans())
    with x64():
        check_exact(
            lambda a, b: [
                scan(b if name == "cumprod" else a, axis=1, reverse=reverse) for name, scan in SCANS.items()
            ],
            x,
            y,
            expect=list(SCANS),
        )


@pytest.mark.parametrize("layout", ["row", "rows", "middle axis"])
@pytest.mark.parametrize("length", [40, 300])
def test_long_scans_of_any_rank_along_any_axis(layout, length):
    """Three blocks and more (the exclusive scan of block totals shifts by one), two levels past
    256, on one row, on rows, and along a middle axis, each way."""
    shape, axis = {"row": ((length,), 0), "rows": ((2, length), 1), "middle axis": ((2, length, 3), 1)}[
        layout
    ]
    rng = np.random.default_rng(length)
    x = rng.uniform(-8, 8, shape).astype(np.float32)
    factors = rng.uniform(0.9, 1.1, shape).astype(np.float32)
    ints = rng.integers(-1000, 1000, shape).astype(np.int32)
    for reverse in (False, True):
        check_exact(
            lambda a, b, i, reverse=reverse: (
                [
                    scan(b if name == "cumprod" else a, axis=axis, reverse=reverse)
                    for name, scan in SCANS.items()
                ]
                + [lax.cumsum(i, axis=axis, reverse=reverse)]
            ),
            x,
            factors,
            ints,
            expect=list(SCANS),
        )


@pytest.mark.parametrize("processor_flushes", [True, False], ids=["ftz-daz", "rules-alone"])
def test_scans_of_signed_zeros_and_single_elements(processor_flushes, monkeypatch):
    """Signed zeros, subnormals (zeros to XLA, except a one-element cumsum/cummax/cummin, which XLA
    returns as is) and the smallest normal (not a zero); also where the rules flush by themselves."""
    if not processor_flushes:
        monkeypatch.setattr(elementwise, "_ENVIRONMENT", None)
    zeros = []
    for dtype in (np.float32, np.float16, BF16, np.float64):
        info = ml_dtypes.finfo(dtype)
        sub, tiny = float(info.smallest_subnormal), float(info.smallest_normal)
        rows = [
            [-0.0, -0.0, 0.0, -0.0],
            [sub, -0.0, tiny, -sub],
            [-sub, sub, 0.0, tiny],
            [tiny, -sub, -0.0, sub],
        ]
        zeros.append(np.array(rows, dtype))

    def scans(*xs):
        out = []
        for a in xs:
            for scan in SCANS.values():
                out += [scan(a, axis=1), scan(a, axis=1, reverse=True), scan(a[:, :1], axis=1)]
                out.append(scan(a[1:2, :1], axis=1))  # a lone subnormal: the whole array one element
            out.append(lax.cumlogsumexp(a[:1], axis=1))  # the zeros row: subnormals make it inexact
        return out

    with x64():
        check_exact(scans, *zeros, expect=[*SCANS, "cumlogsumexp"])


def logsumexp_budget(want: np.ndarray, x: np.ndarray, axis: int) -> np.ndarray:
    """How far XLA's and NumPy's cumlogsumexp may be apart, elementwise (the derivation).

    Each step is logaddexp(a, b) = max + log1p(exp(-|a - b|)) (lax/other.py), whose correction term
    lies in [0, log 2]. exp and log1p are within 4 ulps each on either side (NumPy's validated
    float32 maximum, test_interpreter.TRANSCENDENTAL), and exp's relative error enters log1p scaled
    by at most 1/2, so the term is within 4 + 4/2 + 0.5 (its rounding) ulps of 1, absolutely; the
    step's add rounds by 0.5 ulp of the partial result, which is at most max|x| + log(length). Each
    step's derivative in either operand is a softmax weight (<= 1), so errors add and do not grow,
    over at most `length` steps; the two sides err independently.
    """
    length = x.shape[axis]
    reach = np.max(np.abs(x.astype(np.float64)), axis=axis, keepdims=True) + np.log(length) + 1.0
    return 2 * length * (4 + 2 + 0.5 + 0.5) * ulp(np.broadcast_to(reach, want.shape).astype(want.dtype))


@settings(parent=RULE_SETTINGS, max_examples=examples(20))
@given(st.data())
def test_cumlogsumexp(data):
    dtype = data.draw(st.sampled_from(FLOATS))
    limit = min(_max_finite(dtype) / 4, 1e6)
    x = data.draw(arrays(dtype, shapes(min_dims=1, min_side=1), elements=floats_within(dtype, -limit, limit)))
    axis = data.draw(st.integers(0, x.ndim - 1))
    reverse = data.draw(st.booleans())
    fn = lambda a: lax.cumlogsumexp(a, axis=axis, reverse=reverse)  # noqa: E731
    with x64():
        closed = _traced(fn, [x], ["cumlogsumexp"])
        for got, want, values in (
            (Interpreter(closed)(x)[0], np.asarray(jax.jit(fn)(x)), x),
            (
                Interpreter(closed, widen=True)(x)[0],
                np.asarray(jax.jit(fn)(x.astype(np.float64))),
                x.astype(np.float64),
            ),
        ):
            assert got.dtype == want.dtype and got.shape == want.shape
            w, g = want.astype(np.float64), got.astype(np.float64)
            with np.errstate(invalid="ignore"):
                ok = (
                    (w == g)
                    | (np.isnan(w) & np.isnan(g))
                    | (np.abs(w - g) <= logsumexp_budget(want, values, axis))
                )
            assert ok.all(), (g[~ok][:4], w[~ok][:4])
    CASES_RUN["cumlogsumexp"] += 1


def test_cumlogsumexp_specials():
    x = np.array([[-np.inf, -np.inf, 1.0, np.nan, 3.0], [np.inf, 1.0, -np.inf, np.inf, 2.0]], np.float32)
    with x64():
        check_exact(
            lambda a: [lax.cumlogsumexp(a, axis=1), lax.cumlogsumexp(a, axis=1, reverse=True)],
            x,
            expect="cumlogsumexp",
        )


def test_integer_cumlogsumexp_is_refused():
    program = jax.make_jaxpr(lambda a: lax.cumlogsumexp(a))(np.arange(3, dtype=np.int32))
    with pytest.raises(NotImplementedError, match="cumlogsumexp"):
        Interpreter(program)(np.arange(3, dtype=np.int32))


def test_negative_interior_padding_is_refused():
    from gradlanes.program.rules import RULES

    with pytest.raises(NotImplementedError, match="pad: negative interior"):
        RULES["pad"](np.zeros(3), np.float64(0), padding_config=[(0, 0, -1)])
