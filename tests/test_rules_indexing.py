"""Gather, scatter and dynamic slices in the interpreter against XLA, bit for bit.

These rules only move values (and, for scatter-add/sub/mul/min/max, combine each one with the
operand in XLA's update order), so every check is exact (`ulps=0`): a wrong index, a wrong
clamp, a fill where XLA keeps a value or an accumulation in another order shows up as a
different bit. Cases come from the public APIs that emit the primitives (NumPy-style indexing,
`.at[...]`, `jnp.take`, `jnp.take_along_axis`, `lax.dynamic_slice`, their `vmap`s and gradients)
and from `lax.gather`/`lax.scatter_*` with generated dimension numbers, for every dtype and
every integer index dtype, with indices out of bounds on both sides in every mode.
"""

from __future__ import annotations

import contextlib
import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from jax import lax
from oracle import (
    ALL_DTYPES,
    FLOATS,
    INTEGERS,
    RULE_SETTINGS,
    arrays,
    check,
    check_widened,
    primitives,
    shapes,
    x64,
)

from gradlanes.program.interpreter import RULES, Interpreter

COVERED = {
    "gather",
    "scatter",
    "scatter-add",
    "scatter-sub",
    "scatter-mul",
    "scatter-min",
    "scatter-max",
    "dynamic_slice",
    "dynamic_update_slice",
}

MODES = ("clip", "fill", "promise_in_bounds")
#: With `mode=None` each API picks its own default (promise_in_bounds for x[i] and .at[i].get,
#: fill for take and take_along_axis, drop for .at[i] updates), part of what is being checked.
API_MODES = (None, *MODES)
#: The `.at[...]` combiners and the scatter primitive each one emits.
AT_OPS = {"add": "scatter-add", "mul": "scatter-mul", "min": "scatter-min", "max": "scatter-max"}
SCATTERS = {
    "scatter-add": lax.scatter_add,
    "scatter-sub": lax.scatter_sub,
    "scatter-mul": lax.scatter_mul,
    "scatter-min": lax.scatter_min,
    "scatter-max": lax.scatter_max,
}


def wide(*dtypes) -> contextlib.AbstractContextManager:
    """x64 while any of `dtypes` is 64-bit (JAX would otherwise truncate the inputs to 32 bits)."""
    return x64() if any(np.dtype(d).itemsize == 8 for d in dtypes) else contextlib.nullcontext()


def index_arrays(dtype, shape, low: int, high: int):
    """Integer arrays of `dtype` in [low, high] (cut to the dtype's range) and its extremes."""
    info = np.iinfo(dtype)
    low, high = max(low, int(info.min)), min(high, int(info.max))
    values = st.one_of(st.integers(low, high), st.sampled_from([int(info.min), int(info.max)]))
    return arrays(dtype, shape, elements=values)


def values(dtype, shape):
    """Operand or update values; bool draws True/False, floats reach NaN, inf and -0.0."""
    return arrays(dtype, shape)


def check_where_emitted(fn, *args, expect: str) -> None:
    """`check`, counted for `expect` when JAX emits it (with an empty index it often does not)."""
    emitted = expect in primitives(jax.make_jaxpr(fn)(*args))
    check(fn, *args, expect=expect if emitted else None)


def at_index(axis: int, index):
    return (slice(None),) * axis + (index,)


def indexed_shape(shape, axis: int, index_shape):
    return tuple(shape[:axis]) + tuple(index_shape) + tuple(shape[axis + 1 :])


# ---- gather through the public APIs ----------------------------------------------------------
@settings(parent=RULE_SETTINGS, max_examples=examples(25))
@given(
    data=st.data(),
    dtype=st.sampled_from(ALL_DTYPES),
    index_dtype=st.sampled_from(INTEGERS),
    mode=st.sampled_from(API_MODES),
)
def test_getitem_and_at_get_gather_like_xla(data, dtype, index_dtype, mode):
    shape = data.draw(shapes(min_dims=1, max_dims=3, min_side=1))
    axis = data.draw(st.integers(0, len(shape) - 1))
    dim = shape[axis]
    operand = data.draw(values(dtype, shape))
    index = data.draw(index_arrays(index_dtype, shapes(max_dims=2), -2 * dim - 1, 2 * dim + 1))
    fill = data.draw(st.sampled_from([None, 0, 1])) if mode == "fill" else None
    with wide(dtype, index_dtype):
        if mode is None:
            check_where_emitted(lambda x, i: x[at_index(axis, i)], operand, index, expect="gather")
        else:
            program = lambda x, i: x.at[at_index(axis, i)].get(mode=mode, fill_value=fill)  # noqa: E731
            check_where_emitted(program, operand, index, expect="gather")


@settings(parent=RULE_SETTINGS, max_examples=examples(25))
@given(
    data=st.data(),
    dtype=st.sampled_from(ALL_DTYPES),
    index_dtype=st.sampled_from(INTEGERS),
    mode=st.sampled_from(API_MODES),
    along=st.booleans(),
)
def test_take_and_take_along_axis_gather_like_xla(data, dtype, index_dtype, mode, along):
    shape = data.draw(shapes(min_dims=1, max_dims=3, min_side=1))
    axis = data.draw(st.integers(0, len(shape) - 1))
    dim = shape[axis]
    operand = data.draw(values(dtype, shape))
    if along:
        index_shape = tuple(data.draw(st.integers(0, 3)) if a == axis else s for a, s in enumerate(shape))
    else:
        index_shape = data.draw(shapes(max_dims=2))
    index = data.draw(index_arrays(index_dtype, index_shape, -2 * dim - 1, 2 * dim + 1))
    with wide(dtype, index_dtype):
        if along:
            program = lambda x, i: jnp.take_along_axis(x, i, axis=axis, mode=mode)  # noqa: E731
        else:  # jnp.take has no promise_in_bounds
            take_mode = "clip" if mode == "promise_in_bounds" else mode
            program = lambda x, i: jnp.take(x, i, axis=axis, mode=take_mode)  # noqa: E731
        check_where_emitted(program, operand, index, expect="gather")


# ---- scatter through the public APIs ---------------------------------------------------------
@settings(parent=RULE_SETTINGS, max_examples=examples(40))
@given(
    data=st.data(),
    dtype=st.sampled_from(ALL_DTYPES),
    index_dtype=st.sampled_from(INTEGERS),
    op=st.sampled_from(sorted(AT_OPS)),
    mode=st.sampled_from((None, "clip", "drop", "promise_in_bounds")),
)
def test_at_add_mul_min_max_combine_duplicates_in_update_order(data, dtype, index_dtype, op, mode):
    shape = data.draw(shapes(min_dims=1, max_dims=3, min_side=1))
    axis = data.draw(st.integers(0, len(shape) - 1))
    dim = shape[axis]
    operand = data.draw(values(dtype, shape))
    # A small range on a long index array: most cases repeat an index, so float sums and
    # products depend on the order in which duplicates are combined.
    index = data.draw(index_arrays(index_dtype, shapes(max_dims=2, max_side=6), -dim - 1, dim + 1))
    updates = data.draw(values(dtype, indexed_shape(shape, axis, index.shape)))
    if dtype == np.bool_ and op == "add":
        op = "max"  # JAX refuses .at[].add on booleans; XLA's bool max is the same `or`
    with wide(dtype, index_dtype):
        program = lambda x, i, u: getattr(x.at[at_index(axis, i)], op)(u, mode=mode)  # noqa: E731
        check_where_emitted(program, operand, index, updates, expect=AT_OPS[op])


@settings(parent=RULE_SETTINGS, max_examples=examples(20))
@given(
    data=st.data(),
    dtype=st.sampled_from(ALL_DTYPES),
    index_dtype=st.sampled_from(INTEGERS),
    mode=st.sampled_from((None, "clip", "drop", "promise_in_bounds")),
)
def test_at_set_places_each_update_once(data, dtype, index_dtype, mode):
    shape = data.draw(shapes(min_dims=1, max_dims=3, min_side=1))
    axis = data.draw(st.integers(0, len(shape) - 1))
    dim = shape[axis]
    # Distinct targets (XLA leaves the winner among duplicates unspecified): a subset of the axis,
    # some written as negative indices, plus distinct out-of-bounds ones where they are dropped.
    targets = data.draw(st.lists(st.integers(0, dim - 1), unique=True, max_size=dim))
    info = np.iinfo(index_dtype)
    negated = data.draw(st.lists(st.booleans(), min_size=len(targets), max_size=len(targets)))
    index = [t - dim if neg and t - dim >= info.min else t for t, neg in zip(targets, negated, strict=True)]
    if mode in ("drop", "promise_in_bounds"):
        outside = data.draw(st.lists(st.integers(dim, 2 * dim + 3), unique=True, max_size=3))
        index += [o for o in outside if o <= info.max]
    index = np.asarray(data.draw(st.permutations(index)), dtype=index_dtype)
    operand = data.draw(values(dtype, shape))
    updates = data.draw(values(dtype, indexed_shape(shape, axis, index.shape)))
    with wide(dtype, index_dtype):
        program = lambda x, i, u: x.at[at_index(axis, i)].set(u, mode=mode)  # noqa: E731
        check_where_emitted(program, operand, index, updates, expect="scatter")


def test_at_updates_with_a_broadcast_scalar_and_a_scalar_index():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    check(lambda x: x.at[1].add(0.5), x, expect="scatter-add")
    check(lambda x: x.at[:, np.array([3, 3, 0])].mul(-2.0), x, expect="scatter-mul")
    # Repeated targets of one value: every candidate XLA may pick among duplicates is the same.
    check(lambda x: x.at[np.array([[0, 2], [2, 2]])].set(7.0), x, expect="scatter")
    check(lambda x, i: x.at[i, i].min(-0.0), x, np.int32(2), expect="scatter-min")


@pytest.mark.parametrize("name", sorted(SCATTERS))
def test_one_hot_scatters_are_refused_naming_the_primitive(name):
    """JAX accepts mode=ONE_HOT on a scatter; the interpreter has no rule for it and says which."""
    x, index, updates = np.zeros(4, np.float32), np.array([[1]], np.int32), np.ones(1, np.float32)
    dnums = lax.ScatterDimensionNumbers((), (0,), (0,))
    scatter = SCATTERS[name]
    program = jax.make_jaxpr(lambda x, i, u: scatter(x, i, u, dnums, mode=lax.GatherScatterMode.ONE_HOT))(
        x, index, updates
    )
    with pytest.raises(NotImplementedError, match=rf"^{re.escape(name)}: mode=ONE_HOT is not supported"):
        Interpreter(program)(x, index, updates)


@pytest.mark.parametrize("dtype", [np.int64, np.uint64], ids=str)
def test_fill_gathers_of_64_bit_integers_keep_every_bit(dtype):
    """Values past 2**53 (a float64 would round them) and the fill value of an out-of-bounds row."""
    info = np.iinfo(dtype)
    x = np.array([info.max, info.min, 2**53 + 1, info.max - 2, 7], dtype)
    index = np.array([0, 1, 2, 3, 9, -1], np.int32)
    with x64():
        check(lambda x, i: x.at[i].get(mode="fill"), x, index, expect="gather")
        check(lambda x, i: x.at[i].get(mode="fill", fill_value=info.max - 1), x, index, expect="gather")


def test_gather_with_an_empty_index_vector_takes_the_whole_window_for_every_row():
    """No operand dimension is indexed: each of the 3 batch rows is the same [2, 4] window."""
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    dnums = lax.GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=())
    check(lambda x, i: lax.gather(x, i, dnums, (2, 4)), x, np.zeros((3, 0), np.int32), expect="gather")


def test_scatter_into_a_transposed_operand():
    """The operand arrives as a transposed view (not C-contiguous); the scatter writes its copy."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    index = np.array([[0], [2], [0]], np.int32)
    dnums = lax.ScatterDimensionNumbers((1,), (0,), (0,))
    updates = np.ones((3, 3), np.float32)
    for name, scatter in SCATTERS.items():
        check(lambda x, i, u, f=scatter: f(x.T, i, u, dnums), x, index, updates, expect=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64], ids=str)
def test_scatter_min_and_max_order_negative_zero_below_positive_zero(dtype):
    """XLA's min/max put -0.0 below +0.0 whichever came first; NumPy's return the first of equal
    values. Every pairing: operand zero against update zero, and two update zeros meeting."""
    operand = np.array([0.0, -0.0, 0.0, -0.0, -0.0, 0.0, 1.0, -0.0], dtype)
    index = np.array([[0], [1], [2], [3], [4], [4], [5], [5], [6]], np.int32)
    updates = np.array([-0.0, 0.0, 0.0, -0.0, 0.0, -0.0, -0.0, 0.0, -0.0], dtype)
    dnums = lax.ScatterDimensionNumbers((), (0,), (0,))
    with x64():
        for name, scatter in (("scatter-min", lax.scatter_min), ("scatter-max", lax.scatter_max)):
            check(lambda x, i, u, f=scatter: f(x, i, u, dnums), operand, index, updates, expect=name)


@pytest.mark.parametrize("mode", MODES)
def test_fill_gathers_wrap_64_bit_indices_to_int32_as_jax_lowers_them(mode):
    """JAX lowers mode='fill' through a conversion of the indices to int32 (for operand axes below
    2**31), so a 64-bit index 2**32 + 3 reads element 3, not the fill value; clip and scatters
    compare the index itself, so there it is out of bounds."""
    dnums = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
    scatter_dnums = lax.ScatterDimensionNumbers((), (0,), (0,))
    gather = lambda x, i: lax.gather(x, i, dnums, (1,), mode=mode)  # noqa: E731
    scatter = lambda x, i, u: lax.scatter_add(x, i, u, scatter_dnums, mode=mode)  # noqa: E731
    x = np.arange(5, dtype=np.float32)
    far = {np.int64: [2**32 + 3, -(2**32), 2**31, 4], np.uint64: [2**32 + 1, 2**63]}
    with x64():
        for index_dtype, values in far.items():
            index = np.array(values, dtype=index_dtype)[:, None]
            check(gather, x, index, expect="gather")
            check(scatter, x, index, np.arange(len(values), dtype=np.float32) + 10, expect="scatter-add")


# ---- the general dimension numbers through lax directly --------------------------------------
#: Axis lengths of generated operands and index batches: zero-size now and then, mostly not.
SIDES = st.sampled_from((1, 2, 3, 4) * 3 + (0,))


def _subset(draw, items, max_size=None, min_size=0):
    if not items:
        return []
    return sorted(draw(st.lists(st.sampled_from(items), unique=True, min_size=min_size, max_size=max_size)))


def _window(side: int):
    """A slice or window length along an axis of `side`: empty now and then, mostly not."""
    return st.sampled_from((*range(1, side + 1), *range(1, side + 1), 0))


def _indexed(draw, free):
    """The operand dims an index vector addresses, in index order; now and then none."""
    at_least_one = bool(free) and draw(st.integers(0, 5)) > 0
    return draw(st.permutations(_subset(draw, free, min_size=int(at_least_one))))


@st.composite
def gathers(draw):
    """A valid lax.gather call: operand shape, index shape, dimension numbers and slice sizes."""
    rank = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(SIDES, min_size=rank, max_size=rank)))
    dims = list(range(rank))
    batching = _subset(draw, dims, max_size=2)
    free = [d for d in dims if d not in batching]
    start_index_map = _indexed(draw, free)
    collapsed = _subset(draw, [d for d in free if shape[d] > 0])  # a size-1 slice needs an element
    sizes = [1 if d in batching or d in collapsed else draw(_window(shape[d])) for d in dims]
    # Indices: batch dims (those paired with operand batching dims sized like them) + index vector.
    extra = draw(st.lists(SIDES, max_size=2))
    batch_shape = [shape[d] for d in batching] + extra
    order = draw(st.permutations(range(len(batch_shape))))
    batch_shape = [batch_shape[i] for i in order]
    indices_batching = tuple(order.index(i) for i in range(len(batching)))
    window_count = rank - len(collapsed) - len(batching)
    out_rank = window_count + len(batch_shape)
    offset_dims = sorted(draw(st.permutations(range(out_rank)))[:window_count])
    dnums = lax.GatherDimensionNumbers(
        offset_dims=tuple(offset_dims),
        collapsed_slice_dims=tuple(collapsed),
        start_index_map=tuple(start_index_map),
        operand_batching_dims=tuple(batching),
        start_indices_batching_dims=indices_batching,
    )
    return shape, (*batch_shape, len(start_index_map)), dnums, tuple(sizes)


@settings(parent=RULE_SETTINGS, max_examples=examples(50))
@given(
    data=st.data(),
    case=gathers(),
    dtype=st.sampled_from(ALL_DTYPES),
    index_dtype=st.sampled_from(INTEGERS),
    mode=st.sampled_from(MODES),
    sorted_unique=st.booleans(),
)
def test_lax_gather_with_generated_dimension_numbers(data, case, dtype, index_dtype, mode, sorted_unique):
    shape, index_shape, dnums, sizes = case
    operand = data.draw(values(dtype, shape))
    bound = max(shape, default=1) + 2
    indices = data.draw(index_arrays(index_dtype, index_shape, -bound, bound))
    fill = data.draw(st.sampled_from([None, 3])) if mode == "fill" else None

    def program(x, i):
        return lax.gather(
            x,
            i,
            dnums,
            sizes,
            mode=mode,
            fill_value=fill,
            indices_are_sorted=sorted_unique,
            unique_indices=sorted_unique,
        )

    with wide(dtype, index_dtype):
        check(program, operand, indices, expect="gather")


@st.composite
def scatters(draw, distinct: bool):
    """A valid lax.scatter call: operand, index and update shapes and dimension numbers.

    `distinct`: no two updates meet (one index row per batching slice), for plain `scatter`.
    """
    rank = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(SIDES, min_size=rank, max_size=rank)))
    dims = list(range(rank))
    batching = _subset(draw, dims, max_size=2)
    free = [d for d in dims if d not in batching]
    to_operand = _indexed(draw, free)
    inserted = _subset(draw, free)
    window_dims = [d for d in dims if d not in batching and d not in inserted]
    windows = [draw(_window(shape[d])) for d in window_dims]
    extra = [] if distinct else draw(st.lists(SIDES, max_size=2))
    if rank == 0:  # XLA's scatter simplifier rejects a scalar operand with several index rows
        extra = [min(size, 1) for size in extra]
    batch_shape = [shape[d] for d in batching] + extra
    order = draw(st.permutations(range(len(batch_shape))))
    batch_shape = [batch_shape[i] for i in order]
    indices_batching = tuple(order.index(i) for i in range(len(batching)))
    update_rank = len(batch_shape) + len(window_dims)
    window_update_dims = sorted(draw(st.permutations(range(update_rank)))[: len(window_dims)])
    update_shape, batch_sizes, window_sizes = [], iter(batch_shape), iter(windows)
    for d in range(update_rank):
        update_shape.append(next(window_sizes) if d in window_update_dims else next(batch_sizes))
    dnums = lax.ScatterDimensionNumbers(
        update_window_dims=tuple(window_update_dims),
        inserted_window_dims=tuple(inserted),
        scatter_dims_to_operand_dims=tuple(to_operand),
        operand_batching_dims=tuple(batching),
        scatter_indices_batching_dims=indices_batching,
    )
    return shape, (*batch_shape, len(to_operand)), tuple(update_shape), dnums


@pytest.mark.parametrize("primitive", sorted(SCATTERS))
@settings(parent=RULE_SETTINGS, max_examples=examples(15))
@given(
    data=st.data(),
    case=scatters(distinct=False),
    dtype=st.sampled_from(ALL_DTYPES),
    index_dtype=st.sampled_from(INTEGERS),
    mode=st.sampled_from(MODES),
)
def test_lax_scatter_combiners_with_generated_dimension_numbers(
    data, case, primitive, dtype, index_dtype, mode
):
    shape, index_shape, update_shape, dnums = case
    if dtype == np.bool_ and primitive in ("scatter-add", "scatter-sub", "scatter-mul"):
        dtype = np.dtype(np.uint8)  # lax.add, sub and mul have no boolean form
    operand = data.draw(values(dtype, shape))
    bound = max(shape, default=1) + 2
    indices = data.draw(index_arrays(index_dtype, index_shape, -bound, bound))
    updates = data.draw(values(dtype, update_shape))
    scatter = SCATTERS[primitive]
    with wide(dtype, index_dtype):
        check(lambda x, i, u: scatter(x, i, u, dnums, mode=mode), operand, indices, updates, expect=primitive)


@settings(parent=RULE_SETTINGS, max_examples=examples(25))
@given(
    data=st.data(),
    case=scatters(distinct=True),
    dtype=st.sampled_from(ALL_DTYPES),
    index_dtype=st.sampled_from(INTEGERS),
    mode=st.sampled_from(MODES),
)
def test_lax_scatter_with_generated_dimension_numbers(data, case, dtype, index_dtype, mode):
    shape, index_shape, update_shape, dnums = case
    operand = data.draw(values(dtype, shape))
    bound = max(shape, default=1) + 2
    indices = data.draw(index_arrays(index_dtype, index_shape, -bound, bound))
    updates = data.draw(values(dtype, update_shape))
    program = lambda x, i, u: lax.scatter(x, i, u, dnums, mode=mode, unique_indices=True)  # noqa: E731
    with wide(dtype, index_dtype):
        check(program, operand, indices, updates, expect="scatter")


def test_duplicate_scatter_add_indices_sum_in_update_order():
    # In order, 1e8 + 1 rounds back to 1e8 in float32 and the result is 0; any other order gives 1.
    updates = np.array([1e8, 1.0, -1e8], np.float32)
    check(
        lambda x, u: x.at[np.array([2, 2, 2])].add(u), np.zeros(3, np.float32), updates, expect="scatter-add"
    )


def test_overlapping_scatter_windows_add_in_index_row_order():
    """Windows of two index rows overlap; the window dimension comes first in the updates, so
    an element-order loop and XLA's row-order loop would sum the shared float32 in another order."""
    dnums = lax.ScatterDimensionNumbers((0,), (), (0,))
    operand = np.zeros(4, np.float32)
    updates = np.array([[1.0, 1e8, -1e8], [1e-8, 3.0, 1.0], [2.0, 1.0, 5.0]], np.float32)
    indices = np.array([[0], [1], [1]], np.int32)
    check(lambda x, i, u: lax.scatter_add(x, i, u, dnums), operand, indices, updates, expect="scatter-add")


# ---- dynamic slices ----------------------------------------------------------------------------
@settings(parent=RULE_SETTINGS, max_examples=examples(25))
@given(
    data=st.data(),
    dtype=st.sampled_from(ALL_DTYPES),
    index_dtype=st.sampled_from(INTEGERS),
    negative=st.booleans(),
)
def test_dynamic_slice_clamps_its_starts_like_xla(data, dtype, index_dtype, negative):
    shape = data.draw(shapes(max_dims=3))
    sizes = tuple(data.draw(st.integers(0, dim)) for dim in shape)
    operand = data.draw(values(dtype, shape))
    bound = 2 * max(shape, default=1) + 2
    starts = [data.draw(index_arrays(index_dtype, (), -bound, bound)) for _ in shape]
    with wide(dtype, index_dtype):
        # allow_negative_indices=False hands raw negative starts to the primitive (XLA clamps).
        program = lambda x, *s: lax.dynamic_slice(x, s, sizes, allow_negative_indices=negative)  # noqa: E731
        check(program, operand, *starts, expect="dynamic_slice")


@settings(parent=RULE_SETTINGS, max_examples=examples(25))
@given(
    data=st.data(),
    dtype=st.sampled_from(ALL_DTYPES),
    index_dtype=st.sampled_from(INTEGERS),
    negative=st.booleans(),
)
def test_dynamic_update_slice_clamps_its_starts_like_xla(data, dtype, index_dtype, negative):
    shape = data.draw(shapes(max_dims=3))
    operand = data.draw(values(dtype, shape))
    update = data.draw(values(dtype, tuple(data.draw(st.integers(0, dim)) for dim in shape)))
    bound = 2 * max(shape, default=1) + 2
    starts = [data.draw(index_arrays(index_dtype, (), -bound, bound)) for _ in shape]
    with wide(dtype, index_dtype):
        program = lambda x, u, *s: lax.dynamic_update_slice(x, u, s, allow_negative_indices=negative)  # noqa: E731
        check(program, operand, update, *starts, expect="dynamic_update_slice")


# ---- vmap (batching dims) and gradients (scatter-add) -----------------------------------------
@settings(parent=RULE_SETTINGS, max_examples=examples(6))
@given(data=st.data(), dtype=st.sampled_from(ALL_DTYPES), batch=st.integers(0, 3))
def test_vmapped_indexing_uses_batching_dims_like_xla(data, dtype, batch):
    shape = data.draw(shapes(min_dims=1, max_dims=2, min_side=1))
    operand = data.draw(values(dtype, (batch, *shape)))
    starts = data.draw(index_arrays(np.int32, (batch,), -shape[0] - 2, 2 * shape[0] + 2))
    sizes = (data.draw(st.integers(0, shape[0])), *shape[1:])
    update = data.draw(values(dtype, (batch, *sizes)))
    rest = (0,) * (len(shape) - 1)
    with wide(dtype):
        slicer = jax.vmap(lambda x, s: lax.dynamic_slice(x, (s, *rest), sizes))
        check_where_emitted(slicer, operand, starts, expect="gather")
        updater = jax.vmap(lambda x, u, s: lax.dynamic_update_slice(x, u, (s, *rest)))
        check_where_emitted(updater, operand, update, starts, expect="scatter")
        check_where_emitted(jax.vmap(lambda x, s: x[s]), operand, starts, expect="gather")
        picked = data.draw(values(dtype, (batch, *shape[1:])))
        setter = jax.vmap(lambda x, s, u: x.at[s].set(u))
        check_where_emitted(setter, operand, starts, picked, expect="scatter")
        if dtype != np.bool_:
            twice = lambda v: lax.broadcast(v, (2,))  # noqa: E731  (a duplicate index per row)
            adder = jax.vmap(lambda x, s, u: x.at[twice(s)].add(twice(u)))
            check_where_emitted(adder, operand, starts, picked, expect="scatter-add")


@settings(parent=RULE_SETTINGS, max_examples=examples(10))
@given(data=st.data(), dtype=st.sampled_from(FLOATS), mode=st.sampled_from(API_MODES))
def test_gradients_of_gathers_scatter_add_like_xla(data, dtype, mode):
    shape = data.draw(shapes(min_dims=1, max_dims=2, min_side=1))
    operand = data.draw(values(dtype, shape))
    index = data.draw(index_arrays(np.int32, shapes(max_dims=2, max_side=6), -shape[0] - 1, shape[0] + 1))
    weights = data.draw(values(dtype, indexed_shape(shape, 0, index.shape)))
    with wide(dtype):
        # The cotangent of x[i] is `weights`: the gradient is their scatter-add, duplicates summed.
        def picked(x, i, w):
            return jnp.sum(w * x.at[i].get(mode=mode))

        check_where_emitted(jax.grad(picked), operand, index, weights, expect="scatter-add")
        along = data.draw(index_arrays(np.int32, shape, -shape[-1] - 1, shape[-1] + 1))
        along_weights = data.draw(values(dtype, shape))

        def took(x, i, w):
            return jnp.sum(w * jnp.take_along_axis(x, i, axis=-1, mode=mode))

        check_where_emitted(jax.grad(took), operand, along, along_weights, expect="scatter-add")


def test_gradient_of_a_dynamic_slice_is_a_dynamic_update_slice():
    x = np.arange(10, dtype=np.float32)
    program = jax.grad(lambda x, s: jnp.sum(lax.dynamic_slice(x, (s,), (4,)) * 3.0))
    for start in (-20, -3, 0, 4, 9, 100):
        check(program, x, np.int32(start), expect="dynamic_update_slice")


@settings(parent=RULE_SETTINGS, max_examples=examples(4))
@given(index=st.integers(-6, 6), mode=st.sampled_from(API_MODES))
def test_prng_key_arrays_are_indexed_as_whole_keys(index, mode):
    """Typed keys (key<fry>) gather, scatter and slice as their raw words, as JAX lowers them."""
    keys = jax.random.split(jax.random.key(3), 5)
    spare = jax.random.split(jax.random.key(4), 2)
    at = np.array([index, 1], np.int32)
    check(lambda k, i: k.at[i].get(mode=mode), keys, at, expect="gather")
    check(lambda k, i, s: k.at[i].set(s, mode=mode), keys, at, spare, expect="scatter")
    check(lambda k, i: lax.dynamic_slice(k, (i[0],), (2,)), keys, at, expect="dynamic_slice")
    check(
        lambda k, i, s: lax.dynamic_update_slice(k, s, (i[0],)),
        keys,
        at,
        spare,
        expect="dynamic_update_slice",
    )


# ---- optax's integer-label cross-entropy (gather forward, scatter-add backward) ----------------
@settings(parent=RULE_SETTINGS, max_examples=examples(10))
@given(data=st.data(), batch=st.integers(0, 9), classes=st.integers(1, 12))
def test_integer_label_cross_entropy_gather_and_scatter_are_exact(data, batch, classes):
    """optax's gather of the label logit and its transpose, on their own: bit for bit.

    `softmax_cross_entropy_with_integer_labels` takes the label logit with
    `take_along_axis(logits, labels[..., None], axis=-1)`; its gradient is the scatter-add of the
    cotangent at the labels. The cotangent here is an input, so no rounding of exp or log enters.
    Labels outside [0, classes) reach the fill (NaN) and dropped-update paths.
    """
    logits = data.draw(arrays(np.float32, (batch, classes)))
    labels = data.draw(index_arrays(np.int32, (batch,), -classes - 2, classes + 2))
    cotangent = data.draw(arrays(np.float32, (batch,)))

    def label_logit(logits, labels):
        return jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]

    check(label_logit, logits, labels, expect="gather")
    check(lambda x, y, g: jax.vjp(lambda x: label_logit(x, y), x)[1](g)[0], logits, labels, cotangent,
          expect="scatter-add")  # fmt: skip
    program = jax.make_jaxpr(optax.softmax_cross_entropy_with_integer_labels)(logits, labels)
    assert any(eqn.primitive.name == "gather" for eqn in _all_eqns(program.jaxpr))


def _all_eqns(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", None)
            if inner is not None:
                yield from _all_eqns(getattr(inner, "jaxpr", inner))


#: float32 machine epsilon (an upper bound on ulp(v) / |v|) and unit roundoff.
EPS32, U32 = 2.0**-23, 2.0**-24


@settings(parent=RULE_SETTINGS, max_examples=examples(5))
@given(data=st.data(), batch=st.integers(1, 16), classes=st.integers(2, 12))
def test_integer_label_cross_entropy_and_its_gradient_match_xla(data, batch, classes):
    """The whole loss and gradient, float32 logits [B, C] and int32 labels [B], against XLA.

    Gather and scatter-add are exact (the test above), and so is every correctly rounded step on
    equal inputs; what differs is exp and log (each within 4 ulps on either side: NumPy's
    validated bound for its float32 ufuncs, which XLA's approximations also meet) and the order of
    the sums (within (n - 1) roundings of the sum on either side). With S = sum(exp(z - m)) in
    [1, C], M = max|z| and L = log C:
    - S differs relatively by at most dS = 2*4*EPS + 2*(C-1)*U;
    - each example's log(S) + m - z_y by dS + 2*4*EPS*L (log) + 2*EPS*(L + 2M) (the two additions
      rounding differing inputs, one ulp of the result each);
    - the mean of B of them, in [0, L + 2M], adds 2*(B-1)*U*(L + 2M) (sum order) + EPS*(L + 2M);
    - the gradient exp(z - m) / (B*S) - onehot/B differs relatively by 2*4*EPS + dS + 2*EPS (the
      division and product) in a term of size <= 1/B, then EPS/B for the final addition and U/B
      for XLA contracting it with the product into one fused multiply-add.
    """
    logits = data.draw(arrays(np.float32, (batch, classes), elements=st.floats(-30, 30, width=32)))
    labels = data.draw(index_arrays(np.int32, (batch,), 0, classes - 1))
    loss_fn = lambda x, y: optax.softmax_cross_entropy_with_integer_labels(x, y).mean()  # noqa: E731
    program = jax.make_jaxpr(jax.value_and_grad(loss_fn))(logits, labels)
    want_loss, want_grad = (np.asarray(v) for v in jax.jit(jax.value_and_grad(loss_fn))(logits, labels))
    got_loss, got_grad = Interpreter(program)(logits, labels)
    assert (got_loss.dtype, got_loss.shape) == (want_loss.dtype, want_loss.shape)
    assert (got_grad.dtype, got_grad.shape) == (want_grad.dtype, want_grad.shape)
    size = float(np.log(classes)) + 2 * float(np.abs(logits).max())
    d_sum = 2 * 4 * EPS32 + 2 * (classes - 1) * U32
    per_example = d_sum + 2 * 4 * EPS32 * np.log(classes) + 2 * EPS32 * size
    loss_bound = per_example + 2 * (batch - 1) * U32 * size + EPS32 * size
    grad_bound = (2 * 4 * EPS32 + d_sum + 2 * EPS32 + EPS32 + U32) / batch
    np.testing.assert_allclose(got_loss, want_loss, rtol=0, atol=loss_bound)
    np.testing.assert_allclose(got_grad, want_grad, rtol=0, atol=grad_bound)


# ---- the float64 reference and refusals --------------------------------------------------------
def test_float64_reference_of_fill_gathers_and_scatter_adds():
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    index = np.array([0, 5, -1, 3, 3], np.int32)
    check_widened(lambda x, i: jnp.take(x, i, axis=1, mode="fill"), x, index, expect="gather")
    check_widened(lambda x, i: x.at[:, i].add(x[:, :1] / 3), x, index, expect="scatter-add")
    check_widened(lambda x, i: lax.dynamic_slice(x, (i[1], i[2]), (2, 2)), x, index, expect="dynamic_slice")


def test_unsupported_gather_mode_is_refused_by_name():
    operand, indices = np.arange(4.0), np.array([[1]], np.int32)
    dnums = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
    with pytest.raises(NotImplementedError, match="gather: mode=ONE_HOT"):
        RULES["gather"](
            operand, indices, dimension_numbers=dnums, slice_sizes=(1,), mode=lax.GatherScatterMode.ONE_HOT
        )


def test_scatter_apply_is_refused_by_name():
    program = jax.make_jaxpr(lambda x: x.at[np.array([1, 1])].apply(jnp.sin))(np.zeros(3, np.float32))
    with pytest.raises(NotImplementedError, match="scatter: an update_jaxpr"):
        Interpreter(program)(np.zeros(3, np.float32))


@pytest.mark.parametrize(
    ("primitive", "call"),
    [
        ("dynamic_slice", lambda x: RULES["dynamic_slice"](x, np.int32(0), slice_sizes=(1, 1))),
        ("dynamic_update_slice", lambda x: RULES["dynamic_update_slice"](x, x[:1, :1], np.int32(0))),
    ],
)
def test_dynamic_slices_need_one_start_per_dimension(primitive, call):
    """JAX binds one start per dimension; fewer (a dynamic shape) are refused by name."""
    with pytest.raises(NotImplementedError) as refused:
        call(np.zeros((2, 3), np.float32))
    assert str(refused.value) == f"{primitive}: 1 start indices for a rank-2 operand (dynamic shapes)"


@pytest.mark.parametrize("mode", ["drop", "fill"])
def test_a_scatter_window_outside_in_any_one_dimension_is_dropped(mode):
    """Two indexed dimensions: a window outside the operand in the first but inside in the second
    (and the reverse) is skipped, as XLA skips every window not wholly inside."""
    x = np.zeros((3, 4), np.float32)
    rows, cols = np.array([5, 1, 2, 1], np.int32), np.array([1, 3, 9, 0], np.int32)
    updates = np.array([10.0, 20.0, 30.0, 40.0], np.float32)
    program = lambda x, i, j, v: x.at[i, j].add(v, mode=mode)  # noqa: E731
    check(program, x, rows, cols, updates, expect="scatter-add")
    closed = jax.make_jaxpr(program)(x, rows, cols, updates)
    (got,) = Interpreter(closed)(x, rows, cols, updates)
    assert got.sum() == 60.0 and got[1, 3] == 20.0 and got[1, 0] == 40.0
