"""Rules that pick or place elements by computed index: gather, scatter, dynamic slices.

These primitives carry XLA's own index semantics, which NumPy indexing does not share: start
indices are clamped so that the whole window fits (gather in `clip` and `promise_in_bounds` mode,
dynamic slices), out-of-bounds windows are filled (gather `fill`) or dropped (scatter `fill`/`drop`
and `promise_in_bounds`), and duplicate scatter indices combine in update order, as XLA CPU's
sequential scatter loop does. Each rule builds one set of broadcast index arrays per call (the
dimension numbers say which operand axis each index, batch or window coordinate lands on) and does
one NumPy fancy-indexing or `ufunc.at` call with them: no loop over elements or index rows.
PRNG key arrays never reach these rules as keys: `prng.on_key_words` hands them their raw words,
with the dimension numbers and sizes extended over the word axes as JAX lowers them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
from jax.lax import GatherScatterMode

from gradlanes.program.rules.registry import rule

_INT32_MAX = np.iinfo(np.int32).max
_MODES = (GatherScatterMode.CLIP, GatherScatterMode.FILL_OR_DROP, GatherScatterMode.PROMISE_IN_BOUNDS)


def _mode(primitive: str, mode) -> GatherScatterMode:
    """The equation's `mode` as JAX's enum; modes XLA has no lowering for are refused by name."""
    mode = mode if isinstance(mode, GatherScatterMode) else GatherScatterMode.from_any(mode)
    if mode not in _MODES:
        raise NotImplementedError(f"{primitive}: mode={mode.name} is not supported by the interpreter")
    return mode


def _clamped(values: np.ndarray, upper: int) -> np.ndarray:
    """Integer `values` (any int dtype) clamped to [0, upper], exactly, as int64.

    XLA compares in the index's own signedness; going through int64 first would turn a uint64
    index above 2**63 into a negative one and clamp it to 0 instead of `upper`.
    """
    values = np.asarray(values)
    if values.dtype.kind == "u":
        ceiling = min(upper, int(np.iinfo(values.dtype).max))
        return np.minimum(values, values.dtype.type(ceiling)).astype(np.int64)
    return np.minimum(np.maximum(values.astype(np.int64), 0), upper)


def _in_window_range(values: np.ndarray, upper: int) -> np.ndarray:
    """Where integer `values` (any int dtype) lie in [0, upper], compared exactly."""
    values = np.asarray(values)
    if upper < 0:
        return np.zeros(values.shape, dtype=bool)
    if values.dtype.kind == "u":
        return values <= values.dtype.type(min(upper, int(np.iinfo(values.dtype).max)))
    return (values >= 0) & (values <= min(upper, int(np.iinfo(values.dtype).max)))


def _placed(values: np.ndarray, axes: Sequence[int], rank: int) -> np.ndarray:
    """`values` reshaped to `rank` dimensions, its own axes at `axes` (in order), size 1 elsewhere."""
    shape = [1] * rank
    for axis, size in zip(axes, values.shape, strict=True):
        shape[axis] = size
    return values.reshape(shape)


def _along(size: int, axis: int, rank: int) -> np.ndarray:
    """0..size-1 along `axis` of a `rank`-dimensional broadcastable array."""
    return _placed(np.arange(size, dtype=np.int64), [axis], rank)


# ---- gather ----------------------------------------------------------------------------------
def _gather(operand, indices, *, dimension_numbers, slice_sizes, mode, fill_value=None, **_):
    indices = np.asarray(indices)
    slice_sizes = tuple(int(s) for s in slice_sizes)
    return _gather_values(np.asarray(operand), indices, dimension_numbers, slice_sizes, mode, fill_value)


rule("gather")(_gather)


def _gather_values(operand, indices, dnums, slice_sizes, mode, fill_value):
    mode = _mode("gather", mode)
    offset_dims = tuple(dnums.offset_dims)
    collapsed = set(dnums.collapsed_slice_dims)
    start_index_map = tuple(dnums.start_index_map)
    operand_batching = tuple(dnums.operand_batching_dims)
    indices_batching = tuple(dnums.start_indices_batching_dims)

    batch_shape = indices.shape[:-1]
    out_rank = len(offset_dims) + len(batch_shape)
    batch_axes = [axis for axis in range(out_rank) if axis not in offset_dims]
    window_dims = [d for d in range(operand.ndim) if d not in collapsed and d not in operand_batching]
    out_shape = [0] * out_rank
    for axis, size in zip(batch_axes, batch_shape, strict=True):
        out_shape[axis] = size
    for axis, d in zip(offset_dims, window_dims, strict=True):
        out_shape[axis] = slice_sizes[d]
    out_shape = tuple(out_shape)
    if 0 in out_shape:
        return np.zeros(out_shape, dtype=operand.dtype)
    if any(size > dim for size, dim in zip(slice_sizes, operand.shape, strict=True)):
        raise NotImplementedError(f"gather: slice_sizes {slice_sizes} exceed operand shape {operand.shape}")
    if any(slice_sizes[d] != 1 for d in operand_batching):
        raise NotImplementedError("gather: an operand_batching_dims slice size other than 1")

    starts = indices
    if mode == GatherScatterMode.FILL_OR_DROP:
        # JAX lowers `fill` as a gather of the indices converted (wrapping) to int32 (int64 for an
        # operand axis past int32), masked where any start lies outside [0, dim - slice size].
        index_dtype = np.int64 if any(dim > _INT32_MAX for dim in operand.shape) else np.int32
        starts = indices.astype(index_dtype)
        upper = [operand.shape[d] - slice_sizes[d] for d in start_index_map]
        inside = np.all((starts >= 0) & (starts <= np.asarray(upper, dtype=index_dtype)), axis=-1)

    # Operand dims addressed by an index or a batch position take NumPy fancy indices; the others
    # are plain slices from 0 (a row gather is then `operand[rows, :]`, not one index per element).
    # The fancy indices live on the output axes they vary along: the batch axes and the offset
    # axes of indexed windows.
    offset_of = dict(zip(window_dims, offset_dims, strict=True))
    picked_dims = [d for d in range(operand.ndim) if d in start_index_map or d in operand_batching]
    sliced_dims = [d for d in range(operand.ndim) if d not in picked_dims]
    fancy_axes = sorted(batch_axes + [offset_of[d] for d in picked_dims if d in offset_of])
    rank = len(fancy_axes)
    where = {axis: position for position, axis in enumerate(fancy_axes)}
    batch_where = [where[axis] for axis in batch_axes]
    fancy: dict[int, np.ndarray] = {}
    for k, d in enumerate(start_index_map):
        fancy[d] = _placed(_clamped(starts[..., k], operand.shape[d] - slice_sizes[d]), batch_where, rank)
    for d, batch_dim in zip(operand_batching, indices_batching, strict=True):
        fancy[d] = _along(batch_shape[batch_dim], batch_where[batch_dim], rank)
    for d in picked_dims:
        if d in offset_of:
            fancy[d] = fancy[d] + _along(slice_sizes[d], where[offset_of[d]], rank)
    key = tuple(fancy[d] for d in picked_dims) + tuple(slice(0, slice_sizes[d]) for d in sliced_dims)
    picked = np.transpose(operand, picked_dims + sliced_dims)[key]
    if not picked_dims:
        picked = picked.reshape((1,) * rank + picked.shape)
    # Collapsed sliced dims (size 1) go; the rest are [fancy axes..., sliced offset axes...].
    kept = [d for d in sliced_dims if d in offset_of]
    picked = picked.reshape(picked.shape[:rank] + tuple(slice_sizes[d] for d in kept))
    axes = fancy_axes + [offset_of[d] for d in kept]
    picked = np.broadcast_to(np.transpose(picked, np.argsort(axes)), out_shape)

    if mode == GatherScatterMode.FILL_OR_DROP:
        fill = np.asarray(fill_value).astype(operand.dtype)
        return np.where(_placed(inside, batch_axes, out_rank), picked, fill)
    return picked


# ---- scatter ---------------------------------------------------------------------------------
def _scatter_targets(primitive, operand, indices, updates, dnums, mode):
    """Flat operand positions and values of the updates XLA applies, in XLA's update order.

    The order is row-major over the scatter (index) dimensions, then over the window: XLA CPU's
    scatter loop takes one index row at a time and combines its whole window before the next, so
    that is the order in which duplicates (overlapping windows too) meet in a float sum.
    """
    mode = _mode(primitive, mode)
    window_update_dims = tuple(dnums.update_window_dims)
    inserted = set(dnums.inserted_window_dims)
    scatter_to_operand = tuple(dnums.scatter_dims_to_operand_dims)
    operand_batching = tuple(dnums.operand_batching_dims)
    indices_batching = tuple(dnums.scatter_indices_batching_dims)

    batch_shape = indices.shape[:-1]
    scatter_update_dims = [d for d in range(updates.ndim) if d not in window_update_dims]
    window_dims = [d for d in range(operand.ndim) if d not in inserted and d not in operand_batching]
    window_size = [1] * operand.ndim
    for d, update_dim in zip(window_dims, window_update_dims, strict=True):
        window_size[d] = updates.shape[update_dim]
    # Updates laid out as [index batch..., window...]: C order is then XLA's update order.
    ordered = np.transpose(updates, scatter_update_dims + list(window_update_dims))
    rank = ordered.ndim
    batch_axes = list(range(len(batch_shape)))

    valid = np.ones(batch_shape, dtype=bool)
    per_dim: list[np.ndarray | int] = [0] * operand.ndim
    for k, d in enumerate(scatter_to_operand):
        upper = operand.shape[d] - window_size[d]
        starts = indices[..., k]
        if mode == GatherScatterMode.CLIP:  # (upper >= 0: an operand with elements fits each window)
            clamped = _clamped(starts, upper)
        else:  # FILL_OR_DROP and PROMISE_IN_BOUNDS: XLA skips every window not wholly inside
            inside = _in_window_range(starts, upper)
            valid &= inside
            clamped = np.where(inside, _clamped(starts, max(upper, 0)), 0)
        per_dim[d] = _placed(clamped, batch_axes, rank)
    for d, batch_dim in zip(operand_batching, indices_batching, strict=True):
        per_dim[d] = _along(batch_shape[batch_dim], batch_dim, rank)
    for k, d in enumerate(window_dims):
        per_dim[d] = per_dim[d] + _along(window_size[d], len(batch_shape) + k, rank)

    strides = np.cumprod((operand.shape[1:] + (1,))[::-1])[::-1] if operand.ndim else ()
    flat = np.zeros((1,) * rank, dtype=np.int64)
    for index, stride in zip(per_dim, strides, strict=True):
        flat = flat + np.asarray(index, dtype=np.int64) * int(stride)
    flat = np.broadcast_to(flat, ordered.shape)
    if valid.all():
        return flat.reshape(-1), ordered.reshape(-1)
    keep = np.broadcast_to(_placed(valid, batch_axes, rank), ordered.shape)
    return flat[keep], ordered[keep]


def _scatter(
    operand, indices, updates, *, primitive, combine, dimension_numbers, mode, update_jaxpr=None, **_
):
    """Every scatter primitive: `primitive` and its `combine` are bound per rule (`functools.partial`
    at the end of this section), so the code runs, and is measured, per call and not at import."""
    if primitive == "scatter" and update_jaxpr is not None:
        # The named scatters' update_jaxpr is their combiner; plain scatter has none unless it
        # comes from `x.at[...].apply(f)`, which applies f once per (possibly repeated) index.
        raise NotImplementedError("scatter: an update_jaxpr (x.at[...].apply) is not supported")
    indices, operand, updates = np.asarray(indices), np.asarray(operand), np.asarray(updates)
    return _scatter_values(primitive, combine, operand, indices, updates, dimension_numbers, mode)


def _scatter_values(primitive, combine, operand, indices, updates, dnums, mode):
    result = np.array(operand, order="C")  # a fresh, writable copy: operands are never changed
    if result.size == 0 or updates.size == 0:
        return result
    positions, values = _scatter_targets(primitive, operand, indices, updates, dnums, mode)
    combine(result.reshape(-1), positions, values.astype(result.dtype, copy=False))
    return result


def _assign(flat, positions, values):
    flat[positions] = values


def _signed_zero_fix(flat, positions, values, negative: bool):
    """XLA's float min/max order -0.0 below +0.0; NumPy's return whichever zero came first.

    A zero result is -0.0 for min (+0.0 for max) exactly when some operand or update value that
    met at that position was that zero.
    """
    if flat.dtype.kind != "f" and flat.dtype.name != "bfloat16":
        return None
    want = np.signbit(flat) if negative else ~np.signbit(flat)
    wanted_zero = (flat == 0) & want
    hit = (values == 0) & (np.signbit(values) if negative else ~np.signbit(values))
    wanted_zero[positions[hit]] = True
    return wanted_zero


def _extremum(flat, positions, values, *, ufunc, negative: bool):
    wanted_zero = _signed_zero_fix(flat, positions, values, negative)
    ufunc.at(flat, positions, values)
    if wanted_zero is not None:
        zero = flat.dtype.type(-0.0 if negative else 0.0)
        flat[wanted_zero & (flat == 0)] = zero


_COMBINERS = {
    "scatter": _assign,
    "scatter-add": np.add.at,
    "scatter-sub": np.subtract.at,
    "scatter-mul": np.multiply.at,
    "scatter-min": functools.partial(_extremum, ufunc=np.minimum, negative=True),
    "scatter-max": functools.partial(_extremum, ufunc=np.maximum, negative=False),
}
for _name, _combine in _COMBINERS.items():
    rule(_name)(functools.partial(_scatter, primitive=_name, combine=_combine))
del _name, _combine


# ---- dynamic slices --------------------------------------------------------------------------
def _dynamic_starts(primitive: str, shape, sizes, starts) -> list[int]:
    """Start indices clamped so the window fits, as XLA's DynamicSlice/DynamicUpdateSlice do."""
    if len(starts) != len(shape):
        raise NotImplementedError(
            f"{primitive}: {len(starts)} start indices for a rank-{len(shape)} operand (dynamic shapes)"
        )
    return [
        min(max(int(np.asarray(start)), 0), dim - size)
        for start, dim, size in zip(starts, shape, sizes, strict=True)
    ]


def _dynamic_slice(operand, *starts, slice_sizes, **_):
    sizes = tuple(int(s) for s in slice_sizes)
    operand = np.asarray(operand)
    begin = _dynamic_starts("dynamic_slice", operand.shape, sizes, starts)
    return operand[tuple(slice(b, b + s) for b, s in zip(begin, sizes, strict=True))]


rule("dynamic_slice")(_dynamic_slice)


def _dynamic_update_slice(operand, update, *starts, **_):
    operand, update = np.asarray(operand), np.asarray(update)
    begin = _dynamic_starts("dynamic_update_slice", operand.shape, update.shape, starts)
    result = np.array(operand, order="C")
    result[tuple(slice(b, b + s) for b, s in zip(begin, update.shape, strict=True))] = update
    return result


rule("dynamic_update_slice")(_dynamic_update_slice)
