"""Rules that move, reshape, slice, pad or reduce arrays, with XLA CPU's results bit for bit.

Data movement keeps every bit. Reductions follow what XLA computes (see `sorting` for the float
order and the flushed denormals they share):

- A reduction over one element (or none of the axes) is folded away by XLA: the element itself,
  -0.0 and subnormals kept. Over two or more, the identity takes part (a float sum is never -0.0)
  and a subnormal result is stored as zero. Subnormal terms of a sum are not flushed here (a pass
  over the operand on every training step for a difference below the smallest normal); those of a
  product are, since one changes the product entirely.
- Sums and products accumulate in the operand's own format, float16 and bfloat16 included (each
  add rounded to 16 bits, as XLA's reduce does); NumPy's pairwise sum, and a pairwise tree for the
  16-bit formats, where NumPy would add sequentially. The order differs from XLA's vectorised one,
  so float results differ from XLA's within the rounding of a sum (the tests bound it); integers
  wrap and are exact in any order.
- max/min propagate NaN, order -0.0 below +0.0 and see flushed subnormals as zeros; argmax/argmin
  take the first of equal keys and the first NaN.
"""

from __future__ import annotations

import functools
import math

import ml_dtypes
import numpy as np

from gradlanes.program.rules import sorting  # noqa: F401  (registers sort, top_k and the scans)
from gradlanes.program.rules.registry import rule
from gradlanes.program.rules.sorting import (
    flush_denormals,
    is_float,
    negative_zero_class,
    positive_zero_class,
    signed_zeros_like_xla,
    zero_class,
)

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

# ---- data movement ----------------------------------------------------------------------------


def _broadcast_in_dim(x, *, shape, broadcast_dimensions, **_):
    x = np.asarray(x)
    expanded = [1] * len(shape)
    for source, target in enumerate(broadcast_dimensions):
        expanded[target] = x.shape[source]
    return np.broadcast_to(x.reshape(expanded), shape)


rule("broadcast_in_dim")(_broadcast_in_dim)


def _reshape(x, *, new_sizes, dimensions=None, **_):
    # lax.reshape(dimensions=...) binds a transpose into the reshape (JAX 0.10 and 0.11 both keep
    # the parameter when it is not the identity): transpose first, then reshape in row-major order
    if dimensions is not None:
        x = np.transpose(x, dimensions)
    return np.reshape(x, new_sizes)


rule("reshape")(_reshape)


def _squeeze(x, *, dimensions, **_):
    return np.squeeze(x, axis=tuple(dimensions))


rule("squeeze")(_squeeze)


def _optimization_barrier(*xs, **_):
    return list(xs)


rule("optimization_barrier")(_optimization_barrier)


def _transpose(x, *, permutation, **_):
    return np.transpose(x, permutation)


rule("transpose")(_transpose)


def _iota(*, dtype, shape, dimension, **_):
    """Indices along `dimension`; XLA converts the exact index, so float16 rounds and int8 wraps."""
    dtype = np.dtype(dtype)
    count = shape[dimension]
    if is_float(dtype):
        line = np.arange(count, dtype=np.float64).astype(dtype)  # one rounding of an exact index
    else:
        line = np.arange(count, dtype=np.int64).astype(dtype)  # wraps modulo 2^bits
    expanded = [1] * len(shape)
    expanded[dimension] = count
    return np.broadcast_to(line.reshape(expanded), shape)


rule("iota")(_iota)


def _concatenate(*xs, dimension, **_):
    return np.concatenate(xs, axis=dimension)


rule("concatenate")(_concatenate)


def _slice(x, *, start_indices, limit_indices, strides=None, **_):
    x = np.asarray(x)
    strides = strides or (1,) * x.ndim
    return x[tuple(slice(s, e, k) for s, e, k in zip(start_indices, limit_indices, strides, strict=True))]


rule("slice")(_slice)


def _stack(*xs, axis, **_):
    return np.stack([np.asarray(x) for x in xs], axis=axis)


rule("stack")(_stack)


def _unstack(x, *, axis, **_):
    return [np.take(np.asarray(x), index, axis=axis) for index in range(np.shape(x)[axis])]


rule("unstack")(_unstack)


def _rev(x, *, dimensions, **_):
    return np.flip(x, axis=tuple(dimensions)) if len(dimensions) else np.asarray(x)


rule("rev")(_rev)


def _split(x, *, sizes, axis, **_):
    return np.split(np.asarray(x), np.cumsum(sizes)[:-1], axis=axis)


rule("split")(_split)


def _pad(x, padding_value, *, padding_config, **_):
    """lax.pad: `interior` values between elements, then `low`/`high` at the ends (negative crops)."""
    x = np.asarray(x)
    config = [(int(low), int(high), int(interior)) for low, high, interior in padding_config]
    if any(interior < 0 for _, _, interior in config):
        raise NotImplementedError(f"pad: negative interior padding in padding_config={padding_config}")
    placed, crop, grown = [], [], []
    for n, (low, high, interior) in zip(x.shape, config, strict=True):
        spread = n + max(n - 1, 0) * interior
        start = max(low, 0)
        grown.append(start + spread + max(high, 0))
        placed.append(slice(start, start + spread, interior + 1))
        crop.append(slice(max(-low, 0), grown[-1] - max(-high, 0)))
    out = np.full(grown, padding_value, dtype=x.dtype)
    out[tuple(placed)] = x
    return out[tuple(crop)]


rule("pad")(_pad)


# ---- reductions -------------------------------------------------------------------------------


def _reduced_size(x: np.ndarray, axes) -> int:
    return math.prod(x.shape[a] for a in axes)


def _the_element(x: np.ndarray, axes) -> np.ndarray:
    """A reduction over one element, as XLA folds it: that element, bit for bit (NumPy's sum would
    start from +0.0 and lose a -0.0)."""
    return x.reshape([n for d, n in enumerate(x.shape) if d not in axes])


def _tree_reduce(ufunc: np.ufunc, x: np.ndarray, axes: tuple[int, ...], identity) -> np.ndarray:
    """A pairwise reduction over `axes`, every step rounded to x's format (for 16-bit floats).

    NumPy's own reduction of bfloat16 adds sequentially, which stalls once the running sum's ulp
    passes the terms (4,097 halves sum to 256); halving the rows keeps the error near log2(n) ulps.
    """
    kept = x.ndim - len(axes)
    rows = np.moveaxis(x, axes, tuple(range(kept, x.ndim)))
    rows = rows.reshape(*rows.shape[:kept], _reduced_size(x, axes))
    if rows.shape[-1] == 0:
        return np.full(rows.shape[:-1], identity, x.dtype)
    while rows.shape[-1] > 1:
        half = rows.shape[-1] // 2
        paired = ufunc(rows[..., :half], rows[..., half : 2 * half])
        rows = paired if rows.shape[-1] % 2 == 0 else np.concatenate([paired, rows[..., 2 * half :]], axis=-1)
    return rows[..., 0]


def _reduce_sum(x, *, axes, **_):
    x = np.asarray(x)
    axes = tuple(axes)
    if _reduced_size(x, axes) == 1:
        return _the_element(x, axes)
    if is_float(x.dtype) and x.dtype.itemsize == 2:
        out = _tree_reduce(np.add, x, axes, 0)
    else:
        out = np.sum(x, axis=axes, dtype=x.dtype)
    if is_float(x.dtype):
        # XLA stores a subnormal sum as zero, and adds the identity +0.0: every zero is +0.0.
        zero = zero_class(out)
        if zero.any():
            out = np.where(zero, x.dtype.type(0), out)
    return out


rule("reduce_sum")(_reduce_sum)


def _reduce_prod(x, *, axes, **_):
    x = np.asarray(x)
    axes = tuple(axes)
    if _reduced_size(x, axes) == 1:
        return _the_element(x, axes)
    if not is_float(x.dtype) or x.size == 0:
        return np.prod(x, axis=axes, dtype=x.dtype)
    x = flush_denormals(x)  # a subnormal factor is zero to XLA, which changes products entirely
    if x.dtype.itemsize == 2:
        return flush_denormals(_tree_reduce(np.multiply, x, axes, 1))
    return flush_denormals(np.prod(x, axis=axes, dtype=x.dtype))


rule("reduce_prod")(_reduce_prod)


def _extreme(x, axes, largest: bool) -> np.ndarray:
    x = np.asarray(x)
    axes = tuple(axes)
    if _reduced_size(x, axes) == 1:
        return _the_element(x, axes)
    if x.dtype == _BFLOAT16:
        return _extreme(x.astype(np.float32), axes, largest).astype(_BFLOAT16)
    if is_float(x.dtype):
        initial = -np.inf if largest else np.inf
    elif x.dtype == np.bool_:
        initial = not largest
    else:
        info = np.iinfo(x.dtype)
        initial = info.min if largest else info.max
    out = (np.max if largest else np.min)(x, axis=axes, initial=initial)
    if not is_float(x.dtype):
        return out
    if largest:
        return signed_zeros_like_xla(out, lambda: np.any(positive_zero_class(x), axis=axes))
    return signed_zeros_like_xla(out, lambda: ~np.any(negative_zero_class(x), axis=axes))


def _reduce_max(x, *, axes, **_):
    return _extreme(x, axes, largest=True)


rule("reduce_max")(_reduce_max)


def _reduce_min(x, *, axes, **_):
    return _extreme(x, axes, largest=False)


rule("reduce_min")(_reduce_min)


def _comparison_keys(x) -> np.ndarray:
    """Values as XLA's comparisons see them (flushed subnormals; bfloat16 exactly as float32)."""
    x = np.asarray(x)
    if x.dtype == _BFLOAT16:
        x = x.astype(np.float32)
    return flush_denormals(x) if is_float(x.dtype) else x


def _argmax(x, *, axes, index_dtype, **_):
    (axis,) = axes
    return np.argmax(_comparison_keys(x), axis=axis).astype(index_dtype)


rule("argmax")(_argmax)


def _argmin(x, *, axes, index_dtype, **_):
    (axis,) = axes
    return np.argmin(_comparison_keys(x), axis=axis).astype(index_dtype)


rule("argmin")(_argmin)


def _bitwise_reduction(x, *, ufunc: np.ufunc, all_ones: bool, axes, **_):
    x = np.asarray(x)
    identity = np.zeros((), x.dtype)
    return ufunc.reduce(x, axis=tuple(axes), initial=~identity if all_ones else identity)


# Bound with functools.partial rather than made as closures at import, so that mutation testing
# (tools/mutation.py) reaches the rule's body.
for _name, _ufunc, _all_ones in (
    ("reduce_and", np.bitwise_and, True),
    ("reduce_or", np.bitwise_or, False),
    ("reduce_xor", np.bitwise_xor, False),
):
    rule(_name)(functools.partial(_bitwise_reduction, ufunc=_ufunc, all_ones=_all_ones))
