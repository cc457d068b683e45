"""Rules over sliding windows: convolutions and pooling, forward and backward, as whole-array NumPy.

Every rule reads its windows through one strided view of the (padded, dilated) operand, never a
Python loop over pixels; the loops that remain run over the offsets of one window (4 for 2x2
pooling, 25 for a 5x5 kernel), each a whole-array operation. What each computes is XLA's CPU
semantics, read from jax/_src/lax/windowed_reductions.py and convolution.py and checked
against XLA in tests/test_rules_windows.py:

- A window reduction starts from its init value and folds in the window's elements in row-major
  order, skipping padding and base-dilation holes; of a scalar operand, XLA returns the operand
  and ignores the init. Here holes hold the monoid's identity (-0.0 for a float sum: +0 would
  turn a -0 sum into +0), which folds in without changing a bit, and the fold runs offset by
  offset, so float sums round exactly as XLA's do, in the operand's own dtype (XLA does not
  widen a float16 window sum).
- max and min are IEEE 754-2019 maximum/minimum: NaN wins, and +0 > -0 in either order (NumPy's
  maximum returns either zero on a tie; `_fold_extreme` settles them).
- select_and_scatter_add (max pooling's gradient) is lowered on CPU with the operand padded by
  the select's identity (-inf for `ge`), so padding positions are candidates like any element. In
  each window the first element is selected and each later one replaces it unless
  `select(selected, candidate)` holds: ties go to the first, a NaN candidate replaces the
  selection and is itself replaced by the next element. Each source is added to 0 at its
  selected position, several in the order of the source elements, in the source's dtype.
  Negative padding is refused: JAX traces it (the gradient of a max pool with negative padding)
  but cannot run it, so there is no result to match.
- select_and_gather_add (its JVP) is a variadic reduce_window on CPU: (-inf, 0) is the init,
  padding and holes are skipped, and each element replaces the running pair unless
  `select(running key, element key)` holds.
- conv_general_dilated converts both operands to the result dtype, multiplies and accumulates
  16-bit floats in float32 and rounds once, and wraps integers; `precision` changes nothing on
  CPU. The sums run in BLAS's order, not XLA's (Eigen's), so float results agree within the
  rounding bound of a sum, bit for bit when every partial sum is exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import as_strided

from gradlanes.program.rules.registry import rule

#: At most this many window offsets for the scatter form of a convolution (one add per offset).
MAX_SCATTER_OFFSETS = 256


def _ints(values: Sequence) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _pairs(padding: Sequence) -> tuple[tuple[int, int], ...]:
    return tuple((int(lo), int(hi)) for lo, hi in padding)


def _dilated(size: int, dilation: int) -> int:
    return 0 if size == 0 else (size - 1) * dilation + 1


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype == ml_dtypes.bfloat16


def _lowest(dtype: np.dtype):
    """The identity of max in `dtype` (-inf, the most negative integer, False)."""
    if _is_float(dtype):
        return dtype.type(-np.inf)
    if dtype == np.bool_:
        return np.False_
    return np.iinfo(dtype).min


def _highest(dtype: np.dtype):
    if _is_float(dtype):
        return dtype.type(np.inf)
    if dtype == np.bool_:
        return np.True_
    return np.iinfo(dtype).max


def _alike(x: np.ndarray, shape: Sequence[int], dtype, fill) -> np.ndarray:
    """A new array of `shape` full of `fill`, laid out in `x`'s memory order (axes by decreasing
    stride).

    Arrays that meet in one ufunc call are iterated fastest when they share a layout; gradients
    and convolutions here return transposed views, so new arrays follow their operands' order.
    (Always filled: an unfilled array would hold whatever memory it was given.)
    """
    order = sorted(range(x.ndim), key=lambda axis: -abs(x.strides[axis]))
    out = np.empty([shape[axis] for axis in order], dtype).transpose(np.argsort(order))
    out[...] = fill
    return out


def _spread(x: np.ndarray, fill, padding: Sequence[tuple[int, int]], dilation: Sequence[int]) -> np.ndarray:
    """`x` with dilation-1 `fill`s between neighbours and (lo, hi) `fill`s at the ends of each axis.

    Negative padding crops, as lax.pad and XLA's windows do. Returns `x` itself when there is
    nothing to insert.
    """
    if all(d == 1 for d in dilation) and all(lo == 0 and hi == 0 for lo, hi in padding):
        return x
    shape = [
        max(_dilated(n, d) + lo + hi, 0) for n, d, (lo, hi) in zip(x.shape, dilation, padding, strict=True)
    ]
    out = _alike(x, shape, x.dtype, fill)
    target, source = [], []
    for n, size, d, (lo, _) in zip(x.shape, shape, dilation, padding, strict=True):
        # element i lands at lo + i*d; keep those inside [0, size)
        first = -(lo // d) if lo < 0 else 0
        last = min(n - 1, (size - 1 - lo) // d)
        if first > last:
            return out
        target.append(slice(lo + first * d, lo + last * d + 1, d))
        source.append(slice(first, last + 1))
    out[tuple(target)] = x[tuple(source)]
    return out


def _unspread(padded: np.ndarray, padding: Sequence[tuple[int, int]], shape: Sequence[int]) -> np.ndarray:
    """The inverse of `_spread` without dilation or negative padding: the part of `padded` that is `x`."""
    return padded[tuple(slice(lo, lo + n) for n, (lo, _) in zip(shape, padding, strict=True))]


def _window_counts(
    sizes: Sequence[int], window: Sequence[int], strides: Sequence[int], dilation: Sequence[int]
) -> tuple[int, ...]:
    """How many windows fit along each axis (XLA's shape rule, with dilated windows)."""
    counts = []
    for n, w, s, d in zip(sizes, window, strides, dilation, strict=True):
        span = _dilated(w, d)
        counts.append((n - span) // s + 1 if n >= span else 0)
    return tuple(counts)


def _windows(
    x: np.ndarray, window: Sequence[int], strides: Sequence[int], dilation: Sequence[int], lead: int = 0
) -> np.ndarray:
    """A read-only view `v[a..., o..., k...] = x[a..., o*stride + k*dilation]` over x's axes after `lead`."""
    counts = _window_counts(x.shape[lead:], window, strides, dilation)
    steps = x.strides[lead:]
    return as_strided(
        x,
        x.shape[:lead] + counts + tuple(window),
        x.strides[:lead]
        + tuple(t * s for t, s in zip(steps, strides, strict=True))
        + tuple(t * d for t, d in zip(steps, dilation, strict=True)),
        writeable=False,
    )


def _offset_slices(counts: Sequence[int], offset: Sequence[int], strides: Sequence[int]) -> tuple:
    """Basic slices of the operand holding element `offset` of every window (a view, for writing)."""
    return (Ellipsis,) + tuple(
        slice(k, k + (n - 1) * s + 1, s) if n else slice(0, 0)
        for n, k, s in zip(counts, offset, strides, strict=True)
    )


_BITS = {2: np.uint16, 4: np.uint32, 8: np.uint64}


# ---- window reductions --------------------------------------------------------------------------
def _additive_identity(dtype: np.dtype):
    """-0.0 for floats: -0 + x is x for every x, +0 + -0 is not (so padding a -0 sum with +0 would
    change it); 0 otherwise."""
    return dtype.type(-0.0) if _is_float(dtype) else dtype.type(0)


def _one(dtype: np.dtype):
    return dtype.type(1)


def _all_bits(dtype: np.dtype):
    return dtype.type(~dtype.type(0))  # bool too: ~False is True


def _zero(dtype: np.dtype):
    return dtype.type(0)


#: Binary monoids a reduce_window body may be: the fold, and the identity that pads and holes hold.
MONOIDS: dict[str, tuple[Callable, Callable[[np.dtype], object]]] = {
    "add": (np.add, _additive_identity),
    "mul": (np.multiply, _one),
    "max": (np.maximum, _lowest),  # floats take `_fold_extreme`, which settles the sign of zeros
    "min": (np.minimum, _highest),
    "and": (np.bitwise_and, _all_bits),
    "or": (np.bitwise_or, _zero),
    "xor": (np.bitwise_xor, _zero),
}


def _fold_windows(
    x: np.ndarray,
    init,
    monoid: str,
    window_dimensions,
    window_strides,
    padding,
    base_dilation,
    window_dilation,
) -> np.ndarray:
    """init folded with every window's elements in row-major order (XLA's reduce_window on CPU)."""
    fold, identity = MONOIDS[monoid]
    x = np.asarray(x)
    if x.ndim == 0:  # XLA hands a scalar operand back as it is, without the init
        return x
    window = _ints(window_dimensions)
    padded = _spread(x, identity(x.dtype), _pairs(padding), _ints(base_dilation))
    view = _windows(padded, window, _ints(window_strides), _ints(window_dilation))
    if monoid in ("max", "min") and _is_float(x.dtype):
        plain = np.asarray(init).tobytes() == np.asarray(identity(x.dtype)).tobytes()
        return _fold_extreme(view, x, None if plain else init, maximum=monoid == "max")
    offsets = iter(np.ndindex(*window))
    acc = fold(init, view[(Ellipsis, *next(offsets))])  # in x's dtype: JAX gives init the operand's
    for offset in offsets:
        acc = fold(acc, view[(Ellipsis, *offset)])
    return acc


def _fold_extreme(view: np.ndarray, x: np.ndarray, init, *, maximum: bool) -> np.ndarray:
    """IEEE max/min of each window of `view` (windows of `x`, then the window axes) and `init`.

    `init` None means the identity. NumPy's maximum propagates NaN as XLA's does and can differ
    only in the sign of a zero result, when a -0 is among the elements: a max is -0 only when
    no element is +0 (every element's sign bit set: the AND of their bits keeps it), a min is
    -0 when any element is -0 (the OR). Only those zero results, usually few, are looked at
    again (none after a ReLU, whose outputs have no sign bit).
    """
    pick = np.maximum if maximum else np.minimum
    offsets = iter(np.ndindex(*view.shape[x.ndim :]))
    acc = view[(Ellipsis, *next(offsets))]  # max from -inf is the first element itself
    if init is not None:
        acc = pick(init, acc)
    for offset in offsets:
        acc = pick(acc, view[(Ellipsis, *offset)])
    zero = acc == 0
    negative_zero_init = init is not None and bool(np.signbit(init))
    if not zero.any() or not (negative_zero_init or np.signbit(x).any()):
        return acc
    bits = _BITS[view.dtype.itemsize]
    at = np.nonzero(zero)
    members = view[at].view(bits).reshape(len(at[0]), -1)
    signs = (np.bitwise_and if maximum else np.bitwise_or).reduce(members, axis=1)
    if init is not None:
        signs = (np.bitwise_and if maximum else np.bitwise_or)(signs, np.asarray(init).view(bits))
    acc = np.array(acc)
    acc.view(bits)[at] = signs & bits(1 << (8 * view.dtype.itemsize - 1))
    return acc


def _window_params(params: dict) -> tuple:
    return tuple(
        params[name]
        for name in ("window_dimensions", "window_strides", "padding", "base_dilation", "window_dilation")
    )


def _reduce_window_sum(operand, **params):
    operand = np.asarray(operand)
    return _fold_windows(operand, operand.dtype.type(0), "add", *_window_params(params))


rule("reduce_window_sum")(_reduce_window_sum)


def _reduce_window_max(operand, **params):
    operand = np.asarray(operand)
    return _fold_windows(operand, _lowest(operand.dtype), "max", *_window_params(params))


rule("reduce_window_max")(_reduce_window_max)


def _reduce_window_min(operand, **params):
    operand = np.asarray(operand)
    return _fold_windows(operand, _highest(operand.dtype), "min", *_window_params(params))


rule("reduce_window_min")(_reduce_window_min)


def _body_monoids(jaxpr, count: int) -> list[str]:
    """For a reduce_window body, the monoid folding each operand; raises for any other body.

    A body is supported when output i is one add/mul/max/min/and/or/xor of accumulator i and
    element i (each output on its own, so variadic bodies like an arg-max pair are refused).
    """
    ops = [
        eqn.primitive.name for eqn in jaxpr.eqns
    ]  # a Jaxpr or a ClosedJaxpr: both have eqns, invars, outvars
    refusal = NotImplementedError(
        f"reduce_window: the interpreter runs bodies that fold each operand with one of "
        f"{', '.join(sorted(MONOIDS))}; this body is {{{'; '.join(ops) or 'empty'}}}"
    )
    if len(jaxpr.outvars) != count:
        raise refusal
    accumulators, elements = jaxpr.invars[:count], jaxpr.invars[count:]
    monoids = []
    for acc, element, out in zip(accumulators, elements, jaxpr.outvars, strict=True):
        eqn = next((e for e in jaxpr.eqns if out in e.outvars), None)
        # (Equations no output comes from are dead code; the monoids are binary, so this is
        # `acc op element` or `element op acc`, which fold alike: all seven commute, up to which
        # NaN's payload a sum of two NaNs keeps.)
        if eqn is None or eqn.primitive.name not in MONOIDS or set(eqn.invars) != {acc, element}:
            raise refusal
        monoids.append(eqn.primitive.name)
    return monoids


def _reduce_window(*operands_and_inits, jaxpr, consts=(), **params):
    count = len(operands_and_inits) // 2
    if consts:
        raise NotImplementedError("reduce_window: bodies with constants are not supported")
    monoids = _body_monoids(jaxpr, count)
    operands, inits = operands_and_inits[:count], operands_and_inits[count:]
    results = []
    for operand, init, monoid in zip(operands, inits, monoids, strict=True):
        results.append(_fold_windows(operand, init, monoid, *_window_params(params)))
    return results


rule("reduce_window")(_reduce_window)


def _selector(select_prim) -> tuple[str, Callable]:
    name = select_prim.name
    if name not in ("ge", "le"):
        raise NotImplementedError(
            f"select_prim={name}: only ge (max pooling) and le (min pooling) are supported"
        )
    return name, (np.greater_equal if name == "ge" else np.less_equal)


def _select_and_scatter_add(source, operand, *, select_prim, window_dimensions, window_strides, padding, **_):
    source, operand = np.asarray(source), np.asarray(operand)
    name, select = _selector(select_prim)
    window, strides, padding = _ints(window_dimensions), _ints(window_strides), _pairs(padding)
    if any(lo < 0 or hi < 0 for lo, hi in padding):
        raise NotImplementedError(
            f"select_and_scatter_add: negative padding {padding} is not supported (JAX traces it "
            f"but cannot run it: its lowering slices at a negative start)"
        )
    ones = (1,) * operand.ndim
    identity = _lowest(operand.dtype) if name == "ge" else _highest(operand.dtype)
    padded = _spread(operand, identity, padding, ones)
    view = _windows(padded, window, strides, ones)
    counts = view.shape[: operand.ndim]
    offsets = list(np.ndindex(*window))
    chosen = _selected(view, operand, offsets, name, select)
    out = _alike(padded, padded.shape, source.dtype, 0)
    # XLA adds each source to the init 0, so a -0 source lands as +0; adding +0 for the windows
    # that chose elsewhere then changes nothing. (Laid out as the windows are.)
    source = np.add(source, source.dtype.type(0), out=_alike(padded, counts, source.dtype, 0))
    if all(w <= s for w, s in zip(window, strides, strict=True)):
        # Windows that do not overlap give each position one source at most.
        for offset, mask in zip(offsets, chosen, strict=True):
            _masked(source, mask, out[_offset_slices(counts, offset, strides)])
    else:
        # Each position receives its sources in source order: windows further on in row-major
        # order reach it through earlier offsets, so the offsets run backwards.
        for offset, mask in zip(offsets[::-1], chosen[::-1], strict=True):
            out[_offset_slices(counts, offset, strides)] += _masked(source, mask)
    return _unspread(out, padding, operand.shape)


rule("select_and_scatter_add")(_select_and_scatter_add)


def _selected(view: np.ndarray, operand: np.ndarray, offsets: list, name: str, select) -> list[np.ndarray]:
    """Per window offset, where XLA's select_and_scatter picks that offset's element.

    XLA's chain (keep the selection while select(selected, candidate) holds) picks the first
    extreme when there is no NaN: found from the extreme with one compare per offset. NaN makes
    the chain order-dependent, and then it runs as it is.
    """
    counts = view.shape[: operand.ndim]
    if len(offsets) == 1:
        return [_alike(operand, counts, np.bool_, True)]
    elements = [view[(Ellipsis, *offset)] for offset in offsets]
    if not (_is_float(operand.dtype) and np.isnan(operand).any()):
        pick = np.maximum if name == "ge" else np.minimum
        extreme = elements[0]
        for element in elements[1:]:
            extreme = pick(extreme, element)
        taken = np.zeros_like(extreme, np.bool_)
        chosen = []
        for element in elements:
            hit = element == extreme
            hit &= ~taken
            taken |= hit
            chosen.append(hit)
        return chosen
    index = np.zeros_like(elements[0], np.intp)
    best = np.array(elements[0])
    replace = np.empty_like(elements[0], np.bool_)
    for at, element in enumerate(elements[1:], 1):
        np.logical_not(select(best, element), out=replace)
        np.copyto(best, element, where=replace)
        np.copyto(index, at, where=replace)
    return [index == at for at in range(len(offsets))]


def _masked(values: np.ndarray, mask: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """`values` where `mask`, +0 elsewhere: a product with the mask, on the bits for floats.

    (Bitwise, so NaN and inf are dropped as exactly as np.where would, in a fraction of its time.)
    """
    if values.dtype == np.bool_:
        return np.logical_and(values, mask, out=out)
    if _is_float(values.dtype):
        bits = _BITS[values.dtype.itemsize]
        product = np.multiply(values.view(bits), mask, out=None if out is None else out.view(bits))
        return product.view(values.dtype)
    return np.multiply(values, mask, out=out, dtype=values.dtype)


def _select_and_gather_add(
    tangents,
    operand,
    *,
    select_prim,
    window_dimensions,
    window_strides,
    padding,
    base_dilation,
    window_dilation,
    **_,
):
    tangents, operand = np.asarray(tangents), np.asarray(operand)
    name, select = _selector(select_prim)
    if operand.ndim == 0:  # a reduce_window on CPU, which hands a scalar back as it is
        return tangents
    if not _is_float(operand.dtype):
        raise NotImplementedError(
            f"select_and_gather_add: operand dtype {operand.dtype} (XLA's init is -inf)"
        )
    window, strides = _ints(window_dimensions), _ints(window_strides)
    padding, base_dilation, window_dilation = _pairs(padding), _ints(base_dilation), _ints(window_dilation)
    spread = lambda x: _windows(  # noqa: E731
        _spread(x, x.dtype.type(0), padding, base_dilation), window, strides, window_dilation
    )  # padding and holes: zero keys and values (never read) and present False
    keys, values = spread(operand), spread(tangents)
    present = spread(_alike(operand, operand.shape, np.bool_, True))
    counts = keys.shape[: operand.ndim]
    best_key = _alike(operand, counts, operand.dtype, -np.inf if name == "ge" else np.inf)
    best_value = _alike(operand, counts, tangents.dtype, 0)
    for offset in np.ndindex(*window):
        at = (Ellipsis, *offset)
        replace = present[at] & ~select(best_key, keys[at])
        best_key = np.where(replace, keys[at], best_key)
        best_value = np.where(replace, values[at], best_value)
    return best_value


rule("select_and_gather_add")(_select_and_gather_add)


# ---- convolution --------------------------------------------------------------------------------
def _conv_dtypes(dtype: np.dtype, preferred) -> tuple[np.dtype, np.dtype]:
    """(result dtype, dtype the products and sums are computed in) of a convolution.

    XLA converts the operands to the result dtype first (an int16 operand of a float16 result
    is rounded to float16, a float16 one of a bfloat16 result to bfloat16), then multiplies and
    sums 16-bit floats in float32 and rounds once, and wraps integers (computed here modulo
    2**64 and truncated, which is the same). Booleans: AND and OR, or 0/1 counts for a numeric
    result.
    """
    out = dtype if preferred is None else np.dtype(preferred)
    if dtype.kind == "c" or out.kind == "c":
        raise NotImplementedError(f"conv_general_dilated: complex dtype {dtype} is not supported")
    if _is_float(out):
        return out, np.dtype(np.float64 if out == np.float64 else np.float32)
    return out, np.dtype(np.uint64)


def _conv_general_dilated(
    lhs,
    rhs,
    *,
    window_strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    dimension_numbers,
    feature_group_count=1,
    batch_group_count=1,
    preferred_element_type=None,
    **_,
):
    lhs, rhs = np.asarray(lhs), np.asarray(rhs)
    out_dtype, compute = _conv_dtypes(lhs.dtype, preferred_element_type)
    lhs_spec, rhs_spec, out_spec = (_ints(spec) for spec in dimension_numbers)
    x, w = np.transpose(lhs, lhs_spec), np.transpose(rhs, rhs_spec)
    x = x.astype(out_dtype, copy=False).astype(compute, copy=False)
    w = w.astype(out_dtype, copy=False).astype(compute, copy=False)
    canonical = _convolve(
        x,
        w,
        _ints(window_strides),
        _pairs(padding),
        _ints(lhs_dilation),
        _ints(rhs_dilation),
        int(feature_group_count),
        int(batch_group_count),
    )
    if out_dtype == np.bool_:
        result = canonical != 0
    elif compute.kind == "u":
        result = canonical.astype(_BITS.get(out_dtype.itemsize, np.uint8), copy=False).view(out_dtype)
    else:
        result = canonical.astype(out_dtype, copy=False)
    return np.transpose(result, np.argsort(out_spec))


rule("conv_general_dilated")(_conv_general_dilated)


def _convolve(x, w, strides, padding, lhs_dilation, rhs_dilation, feature_groups, batch_groups):
    """out[n, o, y] = sum over (i, k) of x_padded[n, i, y*stride + k*rhs_dilation] * w[o, i, k].

    x is (N, C, *spatial), w is (O, I, *kernel), both canonical; the result is (N/batch_groups,
    O, *out_spatial). Feature groups split C and O into G blocks convolved pairwise; batch groups
    split N and O alike (lhs batch index b*N/B + n feeds output features of block b).
    """
    spatial = x.shape[2:]
    kernel = w.shape[2:]
    padded = [_dilated(n, d) + lo + hi for n, d, (lo, hi) in zip(spatial, lhs_dilation, padding, strict=True)]
    counts = _window_counts(padded, kernel, strides, rhs_dilation)
    groups = feature_groups * batch_groups
    batch, out_features = x.shape[0] // batch_groups, w.shape[0]
    per_group_in, per_group_out = w.shape[1], out_features // groups
    taps = math.prod(kernel)
    if math.prod(counts) * batch * out_features == 0 or taps * per_group_in == 0:
        return np.zeros((batch, out_features, *counts), x.dtype)
    # Two ways to compute it, moving different amounts of memory: gathering every window into a
    # patch matrix (im2col) copies out*I*taps elements; scattering (col2im) multiplies the
    # kernel with the unpadded input, O*taps products per input element, and adds each product
    # into its window. Measured on LeNet-5's five convolutions (forward and gradients), a
    # scattered product costs about 1.7 times a gathered element (it is written, then read
    # back by a strided add), so the scatter is taken when it has under half as many: the
    # transposed convolutions of input gradients (padding of kernel-1, lhs dilation).
    gathered = groups * batch * math.prod(counts) * per_group_in * taps
    scattered = groups * per_group_out * taps * batch * math.prod(spatial)
    if taps <= MAX_SCATTER_OFFSETS and 2 * scattered < gathered:
        return _convolve_scattered(
            x, w, strides, padding, lhs_dilation, rhs_dilation, feature_groups, batch_groups, counts
        )
    return _convolve_gathered(
        x, w, strides, padding, lhs_dilation, rhs_dilation, feature_groups, batch_groups
    )


def _grouped(x, w, feature_groups, batch_groups):
    """x as (Gb, N/Gb, Gf, C/Gf, *spatial) and w as (G, O/G, I, *kernel), G = Gb*Gf (one is 1)."""
    groups = feature_groups * batch_groups
    xs = x.reshape(
        batch_groups, x.shape[0] // batch_groups, feature_groups, x.shape[1] // feature_groups, *x.shape[2:]
    )
    ws = w.reshape(groups, w.shape[0] // groups, *w.shape[1:])
    return xs, ws


def _convolve_gathered(x, w, strides, padding, lhs_dilation, rhs_dilation, feature_groups, batch_groups):
    """im2col: every window copied once into a patch matrix, then one (batched) matrix product."""
    rank = x.ndim - 2
    padded = _spread(x, x.dtype.type(0), ((0, 0), (0, 0), *padding), (1, 1, *lhs_dilation))
    view = _windows(padded, w.shape[2:], strides, rhs_dilation, lead=2)  # (N, C, *out, *kernel)
    xs, ws = _grouped(view, w, feature_groups, batch_groups)  # (Gb, Nb, Gf, I, *out, *kernel)
    groups = feature_groups * batch_groups
    out_axes = list(range(4, 4 + rank))
    kernel_axes = list(range(4 + rank, 4 + 2 * rank))
    # Rows (batch, out positions) and columns (input features, taps) of the patch matrix, each in
    # memory order, and whichever holds the longer unit-stride run innermost: the copy then
    # moves long runs (NumPy copies short strided runs several times slower).
    rows = _memory_order([1, *out_axes], xs)
    cols = _memory_order([3, *kernel_axes], xs)
    rows_inner = _unit_run(rows, xs) >= _unit_run(cols, xs)
    order = [0, 2, *(cols + rows if rows_inner else rows + cols)]
    patches = np.ascontiguousarray(xs.transpose(order))
    n_rows, n_cols = math.prod(xs.shape[a] for a in rows), math.prod(xs.shape[a] for a in cols)
    # the kernel's columns in the patch's column order: w axes (G, O/G, I, *kernel)
    w_cols = [2 if a == 3 else 3 + (a - 4 - rank) for a in cols]
    kernel_matrix = ws.transpose(0, 1, *w_cols).reshape(groups, ws.shape[1], n_cols)
    if rows_inner:
        product = np.matmul(kernel_matrix, patches.reshape(groups, n_cols, n_rows))  # (G, O/G, rows)
        product = product.reshape(groups, ws.shape[1], *(xs.shape[a] for a in rows))
        lead = 2
    else:
        product = np.matmul(patches.reshape(groups, n_rows, n_cols), kernel_matrix.transpose(0, 2, 1))
        product = product.reshape(groups, *(xs.shape[a] for a in rows), ws.shape[1])
        lead = 1
    # back to (Nb, G, O/G, *out): find where each row axis went
    position = {axis: lead + i for i, axis in enumerate(rows)}
    feature_axis = 1 if rows_inner else product.ndim - 1
    product = product.transpose(position[1], 0, feature_axis, *(position[a] for a in out_axes))
    return product.reshape(product.shape[0], -1, *product.shape[3:])


def _memory_order(axes: list[int], array: np.ndarray) -> list[int]:
    """`axes` sorted by decreasing stride (size-1 axes first: they do not matter)."""
    return sorted(axes, key=lambda a: (array.shape[a] != 1, -abs(array.strides[a])))


def _unit_run(axes: list[int], array: np.ndarray) -> int:
    """Length of the contiguous run of the innermost of `axes` (0 when it is not unit-stride)."""
    inner = axes[-1]
    return array.shape[inner] if abs(array.strides[inner]) == array.itemsize else 0


def _convolve_scattered(
    x, w, strides, padding, lhs_dilation, rhs_dilation, feature_groups, batch_groups, counts
):
    """col2im: (kernel x unpadded input) in one product, then one slice added per window offset.

    Input element s sits at lo + s*lhs_dilation of the padded operand; it meets kernel tap k in
    the window at y when y*stride + k*rhs_dilation equals that position. The batch is the
    innermost axis of the product and of the result, so each add runs over whole rows of
    batch x positions (a 5x5 kernel's 25 adds would otherwise loop over short rows).
    """
    rank = x.ndim - 2
    spatial, kernel = x.shape[2:], w.shape[2:]
    xs, ws = _grouped(x, w, feature_groups, batch_groups)  # (Gb, Nb, Gf, I, *spatial)
    groups, batch = feature_groups * batch_groups, xs.shape[1]
    per_group_out, per_group_in = ws.shape[1], ws.shape[2]
    inputs = xs.transpose(0, 2, 3, *range(4, 4 + rank), 1).reshape(groups, per_group_in, -1)
    taps = ws.transpose(0, 1, *range(3, 3 + rank), 2).reshape(groups, -1, per_group_in)
    product = np.matmul(taps, inputs).reshape(groups, per_group_out, *kernel, *spatial, batch)
    out = np.zeros((groups, per_group_out, *counts, batch), x.dtype)
    meets = [
        [_meeting(n, c, s, d, rd, lo, k) for k in range(kk)]
        for n, c, s, d, rd, (lo, _), kk in zip(
            spatial, counts, strides, lhs_dilation, rhs_dilation, padding, kernel, strict=True
        )
    ]
    for offset in np.ndindex(*kernel):
        pairs = [meets[axis][k] for axis, k in enumerate(offset)]
        if any(p is None for p in pairs):
            continue
        out_at = (slice(None), slice(None), *(p[0] for p in pairs))
        in_at = (slice(None), slice(None), *offset, *(p[1] for p in pairs))
        out[out_at] += product[in_at]
    out = out.transpose(2 + rank, 0, 1, *range(2, 2 + rank))
    return out.reshape(batch, groups * per_group_out, *counts)


def _meeting(size, count, stride, lhs_dilation, rhs_dilation, low, tap):
    """(out slice, input slice) along one axis where input s meets tap `tap` of window y, or None."""
    position = low + np.arange(size) * lhs_dilation - tap * rhs_dilation
    window = position // stride
    hit = np.flatnonzero((position % stride == 0) & (position >= 0) & (window < count))
    if hit.size == 0:
        return None
    first, last, y_first = int(hit[0]), int(hit[-1]), int(window[hit[0]])
    if hit.size == 1:
        return slice(y_first, y_first + 1), slice(first, first + 1)
    step = int(hit[1] - hit[0])
    y_step = step * lhs_dilation // stride
    return slice(y_first, y_first + (hit.size - 1) * y_step + 1, y_step), slice(first, last + 1, step)
