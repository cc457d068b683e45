"""Rules that move, reshape, slice, reduce or index arrays without arithmetic on their values."""

from __future__ import annotations

import numpy as np

from gradlanes.program.rules.registry import rule


@rule("broadcast_in_dim")
def _broadcast_in_dim(x, *, shape, broadcast_dimensions, **_):
    x = np.asarray(x)
    expanded = [1] * len(shape)
    for source, target in enumerate(broadcast_dimensions):
        expanded[target] = x.shape[source]
    return np.broadcast_to(x.reshape(expanded), shape)


@rule("reshape")
def _reshape(x, *, new_sizes, dimensions=None, **_):
    if dimensions is not None:
        x = np.transpose(x, dimensions)
    return np.reshape(x, new_sizes)


@rule("squeeze")
def _squeeze(x, *, dimensions, **_):
    return np.squeeze(x, axis=tuple(dimensions))


@rule("optimization_barrier")
def _optimization_barrier(*xs, **_):
    return list(xs)


@rule("transpose")
def _transpose(x, *, permutation, **_):
    return np.transpose(x, permutation)


@rule("reduce_sum")
def _reduce_sum(x, *, axes, **_):
    return np.sum(x, axis=tuple(axes), dtype=x.dtype)


@rule("reduce_max")
def _reduce_max(x, *, axes, **_):
    return np.max(x, axis=tuple(axes))


@rule("reduce_min")
def _reduce_min(x, *, axes, **_):
    return np.min(x, axis=tuple(axes))


@rule("argmax")
def _argmax(x, *, axes, index_dtype, **_):
    return np.argmax(x, axis=axes[0]).astype(index_dtype)


@rule("argmin")
def _argmin(x, *, axes, index_dtype, **_):
    return np.argmin(x, axis=axes[0]).astype(index_dtype)


@rule("iota")
def _iota(*, dtype, shape, dimension, **_):
    line = np.arange(shape[dimension], dtype=dtype)
    expanded = [1] * len(shape)
    expanded[dimension] = shape[dimension]
    return np.broadcast_to(line.reshape(expanded), shape)


@rule("concatenate")
def _concatenate(*xs, dimension, **_):
    return np.concatenate(xs, axis=dimension)


@rule("slice")
def _slice(x, *, start_indices, limit_indices, strides=None, **_):
    strides = strides or (1,) * x.ndim
    return x[tuple(slice(s, e, k) for s, e, k in zip(start_indices, limit_indices, strides, strict=True))]
