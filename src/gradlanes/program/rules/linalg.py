"""Contractions: dot_general with XLA CPU's types and accumulation, as one BLAS call where it can be.

What XLA computes, read off the HLO it compiles (and JAX's lowering, lax.py `_dot_general_lower`):

- The result dtype is `preferred_element_type`, else the "higher" operand type (JAX's
  `_dot_general_dtype_rule`, after XLA's primitive_util); operands of different dtypes are first
  converted to the result dtype.
- A result wider than the operands (int8 -> int32, bool -> int32, int32 -> float32, bfloat16 ->
  float32) converts the operands first and accumulates in the result type. A narrower one (float32
  -> float16, float32 -> int32) accumulates in the operands' type and converts the sum, float -> int
  conversions truncating, saturating and sending NaN to 0.
- float16 and bfloat16 accumulate in float32 and round once. Integers wrap; bool is or-of-ands.
- A contraction of length 1 is a multiply (-0.0 kept); a longer one starts from +0.0.
Float sums differ from XLA's in order only, so the tests bound the difference; the rest is exact.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from jax import lax

from gradlanes.program.rules.registry import rule
from gradlanes.program.rules.sorting import is_float

_F32 = np.dtype(np.float32)


def _finfo(dtype: np.dtype):
    return ml_dtypes.finfo(dtype) if dtype.kind == "V" else np.finfo(dtype)


def _type_rank(dtype: np.dtype) -> tuple:
    """JAX's order of dot operand types: complex, then exponent range, mantissa, bits, signedness
    (so floats rank above integers, and int32 above uint32)."""
    if is_float(dtype) or dtype.kind == "c":
        info = _finfo(dtype)
        return (dtype.kind == "c", info.maxexp, info.nmant, info.bits, True)
    bits = 1 if dtype == np.bool_ else 8 * dtype.itemsize
    return (False, -1, -1, bits, dtype.kind != "u")


def result_dtype(lhs: np.dtype, rhs: np.dtype, preferred) -> np.dtype:
    if preferred is not None:
        return np.dtype(preferred)
    return lhs if _type_rank(lhs) >= _type_rank(rhs) else rhs


def convert(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """XLA's convert: float -> integer truncates toward zero, saturates, and sends NaN to 0."""
    if x.dtype == dtype:
        return x
    if not is_float(x.dtype) or dtype.kind not in "iu":
        return x.astype(dtype)
    info = np.iinfo(dtype)
    wide = np.trunc(x.astype(np.float64))
    high, low = wide >= float(info.max), wide <= float(info.min)
    out = np.where(high | low | np.isnan(wide), 0, wide).astype(dtype)
    out[high], out[low] = info.max, info.min
    return out


def _check_precision(precision) -> None:
    """Precision enums are hints XLA CPU ignores; an explicit algorithm changes the arithmetic."""
    if precision is None or precision == lax.DotAlgorithmPreset.DEFAULT:
        return
    if isinstance(precision, tuple) and all(isinstance(p, lax.Precision) for p in precision):
        return
    if isinstance(precision, lax.Precision):
        return
    raise NotImplementedError(f"dot_general: precision={precision!r} (a dot algorithm) is not supported")


def _dot_general(lhs, rhs, *, dimension_numbers, precision=None, preferred_element_type=None, **_):
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    _check_precision(precision)
    lhs, rhs = np.asarray(lhs), np.asarray(rhs)
    out_dtype = result_dtype(lhs.dtype, rhs.dtype, preferred_element_type)
    if (
        not lhs_batch
        and lhs.ndim == 2
        and rhs.ndim == 2
        and len(lhs_contract) == 1
        and lhs.dtype == rhs.dtype == out_dtype
        and out_dtype.kind == "f"
        and out_dtype.itemsize >= 4
        and lhs.shape[lhs_contract[0]] > 1
    ):
        # The hot case: a float32 (float64 when widened) matrix product. Transposed views go to
        # BLAS without a copy.
        a = lhs if lhs_contract[0] == 1 else lhs.T
        b = rhs if rhs_contract[0] == 0 else rhs.T
        return a @ b
    if lhs.dtype != rhs.dtype:
        lhs, rhs = convert(lhs, out_dtype), convert(rhs, out_dtype)
    if _type_rank(out_dtype) > _type_rank(lhs.dtype):
        lhs, rhs = convert(lhs, out_dtype), convert(rhs, out_dtype)
    accumulate = _F32 if is_float(lhs.dtype) and lhs.dtype.itemsize < 4 else lhs.dtype
    out = _contract(
        lhs.astype(accumulate, copy=False),
        rhs.astype(accumulate, copy=False),
        tuple(map(int, lhs_contract)),
        tuple(map(int, rhs_contract)),
        tuple(map(int, lhs_batch)),
        tuple(map(int, rhs_batch)),
    )
    return convert(np.asarray(out), out_dtype)


rule("dot_general")(_dot_general)


def _contract(lhs, rhs, lhs_contract, rhs_contract, lhs_batch, rhs_batch) -> np.ndarray:
    """dot_general as one batched matmul: [batch, lhs free, contract] @ [batch, contract, rhs free]."""
    lhs_free = tuple(d for d in range(lhs.ndim) if d not in lhs_contract and d not in lhs_batch)
    rhs_free = tuple(d for d in range(rhs.ndim) if d not in rhs_contract and d not in rhs_batch)
    size = lambda arr, dims: math.prod(arr.shape[d] for d in dims)  # noqa: E731
    batch, contract = size(lhs, lhs_batch), size(lhs, lhs_contract)
    a = np.transpose(lhs, lhs_batch + lhs_free + lhs_contract).reshape(batch, size(lhs, lhs_free), contract)
    b = np.transpose(rhs, rhs_batch + rhs_contract + rhs_free).reshape(batch, contract, size(rhs, rhs_free))
    if contract == 1 and is_float(a.dtype):
        out = a * b  # XLA rewrites a length-1 contraction into a multiply, which keeps -0.0
    else:
        out = np.matmul(a, b)
    shape = (
        [lhs.shape[d] for d in lhs_batch]
        + [lhs.shape[d] for d in lhs_free]
        + [rhs.shape[d] for d in rhs_free]
    )
    return out.reshape(shape)
