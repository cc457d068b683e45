"""Rules that order values: sort, top_k and the cumulative scans, with XLA CPU's order on floats.

Three facts about the code XLA runs on CPU decide these results, and the reductions in `shapes` share
the helpers here:

- It runs with denormals flushed (MXCSR FTZ and DAZ): a float32, float64 or bfloat16 subnormal is a
  zero of its sign to every comparison and arithmetic operation, and a subnormal result is stored as
  that zero. float16 is computed in float32, where its subnormals are normal, so it is not flushed.
  Data movement (slices, transposes, sort's permutation) keeps the bits.
- max and min propagate NaN and put -0.0 below +0.0 (see `signed_zeros_like_xla` for the one
  compiled form that does not). TopK alone compares raw bits: nothing flushed, NaNs by payload.
- A cumulative sum, product or logsumexp is a reduce-window, which XLA's ReduceWindowRewriter turns
  into a two-level tree: blocks of 16 scanned in place, then a scan of the block totals, recursively.
  Each output of a block folds its window from the identity, left to right, so a reversed scan is
  not the forward scan of the reversed array. The float rules here follow that tree, which makes
  their rounding XLA's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import ml_dtypes
import numpy as np

from gradlanes.program.rules.registry import rule

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
#: Formats XLA CPU computes in (or through) float32/float64 with denormals flushed, and their smallest
#: normal magnitude.
_FLUSHED = {
    np.dtype(np.float32): np.float32(np.finfo(np.float32).tiny),
    np.dtype(np.float64): np.float64(np.finfo(np.float64).tiny),
    _BFLOAT16: np.float32(np.finfo(np.float32).tiny),
}
#: Block length of XLA CPU's ReduceWindowRewriter (cpu_compiler.cc), seen in the compiled HLO of a scan.
SCAN_BLOCK = 16


def is_float(dtype: np.dtype) -> bool:
    """float16/32/64 and bfloat16 (whose NumPy kind is 'V', not 'f')."""
    return dtype.kind == "f" or dtype == _BFLOAT16


def flush_denormals(x: np.ndarray) -> np.ndarray:
    """`x` as XLA CPU's arithmetic sees it: subnormals of flushed formats become zeros of their sign."""
    x = np.asarray(x)
    tiny = _FLUSHED.get(x.dtype)
    if tiny is None or x.size == 0:
        return x
    if x.dtype == _BFLOAT16:
        return flush_denormals(x.astype(np.float32)).astype(_BFLOAT16)
    return np.where(np.abs(x) < tiny, np.copysign(x.dtype.type(0), x), x)


def zero_class(x: np.ndarray) -> np.ndarray:
    """Where `x` is a zero to XLA's comparisons: zeros, and subnormals of flushed formats."""
    tiny = _FLUSHED.get(x.dtype)
    return x == 0 if tiny is None else np.abs(x) < tiny


def signed_zeros_like_xla(extreme: np.ndarray, positive: Callable[[], np.ndarray]) -> np.ndarray:
    """A max (or min) from NumPy, with the zero XLA gives where the extreme is a zero.

    NumPy's maximum keeps its first operand on ties, so max(-0.0, +0.0) can be -0.0; XLA's is +0.0,
    and a flushed subnormal is a zero too. Where `extreme` is in the zero class the result is +0.0
    where `positive()` is true (for a max: a +0-class value took part; for a min: no -0-class value
    did), else -0.0. `positive` is only evaluated when some extreme is a zero.

    This is what XLA's reduce gives when it compiles to vector max/min; where it fuses a max with
    an argmax of the same operand it compiles a compare-and-select instead, which returns one of
    the tied zero-class operands as it is (a subnormal, or -0.0 among +0.0), depending on order.
    """
    extreme = np.asarray(extreme)
    zero = zero_class(extreme)
    if not zero.any():
        return extreme
    dtype = extreme.dtype.type
    return np.where(zero, np.where(positive(), dtype(0.0), dtype(-0.0)), extreme)


def positive_zero_class(x: np.ndarray) -> np.ndarray:
    return zero_class(x) & ~np.signbit(x)


def negative_zero_class(x: np.ndarray) -> np.ndarray:
    return zero_class(x) & np.signbit(x)


# ---- sort and top_k -------------------------------------------------------------------------


def _sort_key(x: np.ndarray) -> np.ndarray:
    """A key NumPy orders as JAX's sort comparator does.

    JAX compares floats in a total order after mapping -0.0 to +0.0 and every NaN to one NaN
    (lax._canonicalize_float_for_sort), and that mapping's `x == 0` is a float compare, so flushed
    subnormals become +0.0 too. NumPy's stable sort already ties -0.0 with +0.0 and puts NaNs last,
    tied with each other, so the flushed value is the key. 16-bit floats sort as float32 (exact).
    """
    x = np.asarray(x)
    if not is_float(x.dtype):
        return x
    return flush_denormals(x).astype(np.float32) if x.dtype.itemsize == 2 else flush_denormals(x)


def _sort(*operands, dimension, is_stable=True, num_keys=1, **_):
    """Sort along `dimension`, lexicographically by the first `num_keys` operands, permuting all.

    XLA sorts stably only when asked (`is_stable`); otherwise std::sort may reorder ties, in an order
    no NumPy sort reproduces. The stable order is one of the orders an unstable sort may give, and
    is what this rule returns in both cases: equal wherever the comparator decides the order.
    """
    operands = [np.asarray(x) for x in operands]
    if not 1 <= num_keys <= len(operands):
        raise NotImplementedError(f"sort: num_keys={num_keys} with {len(operands)} operand(s)")
    keys = [_sort_key(x) for x in operands[:num_keys]]
    order = np.lexsort(keys[::-1], axis=dimension)
    return [np.take_along_axis(x, order, axis=dimension) for x in operands]


rule("sort")(_sort)


def _total_order_key(x: np.ndarray) -> np.ndarray:
    """Integers ordered as XLA's TopK compares floats: by their bits, -NaN < -inf < -0.0 < +0.0 < NaN.

    XLA's CPU TopK (runtime_topk.cc, and the sort comparator it decomposes into for other dtypes)
    compares the bit pattern as a signed integer with the magnitude bits of negatives flipped; no
    float comparison, so nothing is flushed and NaNs are ordered by payload.
    """
    if not is_float(x.dtype):
        return x
    signed = np.dtype(f"i{x.dtype.itemsize}")
    bits = np.ascontiguousarray(x).view(signed)
    return np.where(bits < 0, bits ^ signed.type(np.iinfo(signed).max), bits)


def _top_k(x, *, k, axis=None, **_):
    """The k largest along `axis` (the last in JAX versions without the param), ties by lower index."""
    x = np.asarray(x)
    axis = x.ndim - 1 if axis is None else int(axis)
    # ~key reverses the order without overflow (for signed, unsigned and bool alike); a stable
    # ascending sort of it is a descending sort that keeps ties in index order.
    order = np.argsort(~_total_order_key(x), axis=axis, kind="stable")
    order = np.take(order, np.arange(int(k)), axis=axis)
    return [np.take_along_axis(x, order, axis=axis), order.astype(np.int32)]


rule("top_k")(_top_k)


# ---- cumulative scans -----------------------------------------------------------------------

Combine = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _window_scan(x: np.ndarray, combine: Combine, identity, reverse: bool) -> np.ndarray:
    """XLA's reduce-window scan of each row (last axis, at most `SCAN_BLOCK` long).

    Output j folds its window from the identity, left to right: x[0..j] forward, x[j..] reversed.
    """
    n = x.shape[-1]
    if not reverse:
        acc = np.full(x.shape[:-1], identity, x.dtype)
        out = np.empty_like(x)
        for j in range(n):
            acc = combine(acc, x[..., j])
            out[..., j] = acc
        return out
    acc = np.full(x.shape, identity, x.dtype)
    padding = np.full(x.shape, identity, x.dtype)
    for offset in range(n):
        acc = combine(acc, np.concatenate([x[..., offset:], padding[..., :offset]], axis=-1))
    return acc


def _tree_scan(x: np.ndarray, combine: Combine, identity, reverse: bool) -> np.ndarray:
    """The scan of each row as XLA CPU computes it after ReduceWindowRewriter (see the module doc).

    Rows longer than a block are padded with the identity to whole blocks; each block is scanned;
    the block totals (last column; first when reversed) are scanned the same way, recursively,
    shifted by one into an exclusive scan, and combined into every element of the next blocks.
    """
    n = x.shape[-1]
    if n <= SCAN_BLOCK:
        return _window_scan(x, combine, identity, reverse)
    blocks = -(-n // SCAN_BLOCK)
    padded = np.full((*x.shape[:-1], blocks * SCAN_BLOCK), identity, x.dtype)
    padded[..., :n] = x
    tiles = _window_scan(padded.reshape(*x.shape[:-1], blocks, SCAN_BLOCK), combine, identity, reverse)
    edge = np.full((*x.shape[:-1], 1), identity, x.dtype)
    if not reverse:
        totals = _tree_scan(tiles[..., -1], combine, identity, reverse)
        before = np.concatenate([edge, totals[..., :-1]], axis=-1)
    else:
        totals = _tree_scan(tiles[..., 0], combine, identity, reverse)
        before = np.concatenate([totals[..., 1:], edge], axis=-1)
    return combine(tiles, before[..., None]).reshape(padded.shape)[..., :n]


def _flushed(combine: Combine) -> Combine:
    return lambda a, b: flush_denormals(combine(a, b))


def _logaddexp(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """jax.lax's logaddexp (lax/other.py): max + log1p(exp(-|a - b|)), a + b where that is NaN."""
    delta = a - b
    tail = np.maximum(a, b) + np.log1p(np.exp(-np.abs(delta)))
    return np.where(np.isnan(delta), a + b, tail)


_FLOAT_SCANS: dict[str, tuple[Combine, float]] = {
    "cumsum": (np.add, 0.0),
    "cumprod": (np.multiply, 1.0),
    "cumlogsumexp": (_logaddexp, -np.inf),
}


def _float_scan(name: str, x: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
    combine, identity = _FLOAT_SCANS[name]
    if x.dtype in _FLUSHED:
        combine, x = _flushed(combine), flush_denormals(x)
    rows = np.moveaxis(x, axis, -1)
    return np.moveaxis(_tree_scan(rows, combine, x.dtype.type(identity), reverse), -1, axis)


def _integer_scan(accumulate, x: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
    """Integer sums and products wrap, so any order gives XLA's result."""
    if reverse:
        return np.flip(accumulate(np.flip(x, axis), axis=axis, dtype=x.dtype), axis)
    return accumulate(x, axis=axis, dtype=x.dtype)


def folds_single_window(name: str, dtype: np.dtype) -> bool:
    """Whether XLA drops a scan over one element, returning it as is (no identity, no flush).

    Its simplifier recognises a one-element window of add (cumsum) or max/min with their identity;
    cumprod's and cumlogsumexp's are computed, and so is every bfloat16 scan (computed in float32
    between converts, which the simplifier does not see through): read off XLA's results.
    """
    return dtype != _BFLOAT16 and name in ("cumsum", "cummax", "cummin")


def _cumulative(x, *, primitive: str, integer_accumulate, axis, reverse=False, **_):
    x = np.asarray(x)
    axis = int(axis)
    if x.shape[axis] == 0 or (x.shape[axis] == 1 and folds_single_window(primitive, x.dtype)):
        return x
    if is_float(x.dtype):
        return _float_scan(primitive, x, axis, reverse)
    if integer_accumulate is None:
        raise NotImplementedError(f"{primitive}: dtype {x.dtype} (JAX lowers it only for floats)")
    return _integer_scan(integer_accumulate, x, axis, reverse)


# Bound with functools.partial rather than made as closures at import, so that mutation testing
# (tools/mutation.py) reaches the rules' bodies.
for _name, _accumulate in {"cumsum": np.cumsum, "cumprod": np.cumprod, "cumlogsumexp": None}.items():
    rule(_name)(functools.partial(_cumulative, primitive=_name, integer_accumulate=_accumulate))


def _running_extreme(x: np.ndarray, axis: int, reverse: bool, largest: bool) -> np.ndarray:
    """cummax/cummin: max and min are associative under XLA's order, so a running one is exact."""
    ufunc = np.maximum if largest else np.minimum
    if x.dtype == _BFLOAT16:
        return _running_extreme(x.astype(np.float32), axis, reverse, largest).astype(_BFLOAT16)
    if reverse:
        return np.flip(_running_extreme(np.flip(x, axis), axis, False, largest), axis)
    extreme = ufunc.accumulate(x, axis=axis)
    if not is_float(x.dtype):
        return extreme
    if largest:
        return signed_zeros_like_xla(
            extreme, lambda: np.logical_or.accumulate(positive_zero_class(x), axis=axis)
        )
    return signed_zeros_like_xla(
        extreme, lambda: ~np.logical_or.accumulate(negative_zero_class(x), axis=axis)
    )


def _cumulative_extreme(x, *, primitive: str, largest: bool, axis, reverse=False, **_):
    x = np.asarray(x)
    if x.shape[axis] == 0 or (x.shape[axis] == 1 and folds_single_window(primitive, x.dtype)):
        return x
    return _running_extreme(x, int(axis), reverse, largest)


for _name, _largest in {"cummax": True, "cummin": False}.items():
    rule(_name)(functools.partial(_cumulative_extreme, primitive=_name, largest=_largest))
