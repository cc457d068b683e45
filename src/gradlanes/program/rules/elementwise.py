"""Elementwise rules: arithmetic, comparisons, logic, conversions and selection, with JAX's semantics."""

from __future__ import annotations

import numpy as np

from gradlanes.program.rules.registry import binary, rule, unary

for _name, _fn in {
    "neg": np.negative,
    "exp": np.exp,
    "exp2": np.exp2,
    "log": np.log,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "sqrt": np.sqrt,
    "cos": np.cos,
    "sin": np.sin,
    "tan": np.tan,
    "tanh": np.tanh,
    "abs": np.abs,
    "sign": np.sign,
    "floor": np.floor,
    "ceil": np.ceil,
    "not": np.logical_not,
    "is_finite": np.isfinite,
    "square": np.square,
    "rsqrt": lambda x: np.reciprocal(np.sqrt(x)),
    "logistic": lambda x: np.reciprocal(np.exp(-x) + x.dtype.type(1)),
    "stop_gradient": lambda x: x,
    "copy": lambda x: x,
    "copy_p": lambda x: x,
}.items():
    unary(_name, _fn)

for _name, _fn in {
    "add": np.add,
    "add_any": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "rem": np.fmod,
    "atan2": np.arctan2,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "and": np.logical_and,
    "or": np.logical_or,
    "xor": np.logical_xor,
    "nextafter": np.nextafter,
}.items():
    binary(_name, _fn)


@rule("div")
def _div(x, y, **_):
    if np.issubdtype(np.result_type(x, y), np.integer):  # XLA integer division rounds to zero
        return np.trunc(np.true_divide(x, y)).astype(np.result_type(x, y))
    return np.true_divide(x, y)


@rule("pow")
def _pow(x, y, **_):
    x = np.asarray(x)
    return np.power(x, np.asarray(y).astype(x.dtype))


@rule("integer_pow")
def _integer_pow(x, *, y, **_):
    if y == 1:
        return x
    if y == 2:
        return np.multiply(x, x)
    return np.power(x, x.dtype.type(y)) if y > 0 else np.reciprocal(np.power(x, x.dtype.type(-y)))


@rule("convert_element_type")
def _convert(x, *, new_dtype, **_):
    return np.asarray(x).astype(new_dtype, copy=False)


def _bitwise_select(which: np.ndarray, on_true: np.ndarray, on_false: np.ndarray) -> np.ndarray:
    """np.where(which, on_true, on_false) without branches, bit for bit the same.

    np.where branches per element, and on a ReLU mask (true about half the time, at random) the
    branch predictor loses: 2.6 ms for a 4,096x128 select here. Selecting bit patterns under an
    all-ones/all-zeros mask, in place, takes 0.2 ms when the other side is +0.0 (ReLU's backward)
    and copies exactly the chosen values, NaNs included.
    """
    bits = np.dtype(f"i{on_true.dtype.itemsize}")
    mask = np.empty(np.broadcast_shapes(which.shape, on_true.shape, on_false.shape), bits)
    np.copyto(mask, which, casting="unsafe")  # 1 / 0
    np.negative(mask, out=mask)  # all ones / all zeros
    chosen = np.bitwise_and(on_true.view(bits), mask)
    if not _is_positive_zero(on_false):
        np.invert(mask, out=mask)
        np.bitwise_and(on_false.view(bits), mask, out=mask)
        np.bitwise_or(chosen, mask, out=chosen)
    return chosen.view(on_true.dtype)


def _is_positive_zero(x: np.ndarray) -> bool:
    """True for a single +0.0 broadcast to any shape (all strides 0): its bit pattern is all zeros."""
    return (x.ndim == 0 or not any(x.strides)) and not x.reshape(-1)[:1].view(f"i{x.dtype.itemsize}").any()


@rule("select_n")
def _select_n(which, *cases, **_):
    if len(cases) == 2:
        on_false, on_true = np.asarray(cases[0]), np.asarray(cases[1])
        which = np.asarray(which)
        if which.dtype == np.bool_ and on_true.dtype == on_false.dtype and on_true.dtype.kind == "f":
            return _bitwise_select(which, on_true, on_false)
        return np.where(which, on_true, on_false)
    return np.choose(np.asarray(which, dtype=np.int64), np.broadcast_arrays(*cases))


@rule("clamp")
def _clamp(low, x, high, **_):
    return np.clip(x, low, high)
