"""Elementwise rules against XLA: every primitive, every dtype it accepts, edge values included.

Each generated case runs one program holding the primitive once per accepted dtype and per shape
(a scalar, a zero-size array and a 2x5 array, plus a 2x5-with-scalar pair for binary operations),
so one XLA compile serves every case of a primitive (cases differ in values only, drawn from a
hypothesis seed). Values mix each dtype's edge values (0, -0.0, ±1, extremes, ±inf, NaN,
subnormals, integer-range boundaries, halves), random bit patterns (every NaN payload and
subnormal) and moderate values. Exact operations are compared bit for bit (the budgets below say
which are not, and why); the value check of `oracle.check` does not see the sign of zero, so
`test_zero_signs_and_specials` compares bits on a grid of special values. float rules also go
through `oracle.check_widened` on float32 inputs. Shape handling (broadcasting, 0-d, zero-size,
odd shapes) gets its own cases from `oracle.shapes()`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from jax import lax
from oracle import (
    ALL_DTYPES,
    FLOATS,
    INTEGERS,
    RULE_SETTINGS,
    SIGNED,
    arrays,
    assert_same,
    check_widened,
    primitives,
    shapes,
    x64,
)
from oracle import check as oracle_check

from gradlanes.program.interpreter import RULES, Interpreter
from gradlanes.program.rules import elementwise

BOOL = np.dtype(np.bool_)
BF16, F16, F32, F64 = (
    np.dtype(ml_dtypes.bfloat16),
    np.dtype(np.float16),
    np.dtype(np.float32),
    np.dtype(np.float64),
)
NUMERIC = INTEGERS + FLOATS
ORDERED = (BOOL,) + INTEGERS + FLOATS
BOOL_OR_INT = (BOOL,) + INTEGERS


@functools.cache
def interpreter_flushes() -> bool:
    """Whether the interpreter runs in XLA's float environment (1e-39 + 0 is 0, as on XLA), or in
    NumPy's IEEE mode, the difference tests/oracle.py declares (no subnormal inputs then). Asked
    when a test needs it, not at import: a broken interpreter then fails tests, not collection."""
    x = np.float32(1e-39)
    (total,) = Interpreter(jax.make_jaxpr(lax.add)(x, x))(x, np.float32(0))
    return not total


def _skip_unless_flushing():
    if not interpreter_flushes():
        pytest.skip("the interpreter runs in NumPy's IEEE mode")


_PREPARED: dict = {}


def check(fn, *args, ulps=0.0, expect: str | None = None):
    """`oracle.check`, with two additions. `ulps` may be a function of an output's dtype: the
    oracle's check runs with the largest budget (one XLA compile for every dtype), then each
    output is compared again, with its own budget, on the same executable and plan. bfloat16
    results are compared as float32 (exactly the same values), since the oracle compares bfloat16
    with assert_array_equal, which sees no NaN in it and takes no ulps; a bfloat16 ulp is 2^16
    float32 ulps at the same value, subnormals included. The optimization barrier keeps XLA from
    fusing the conversion into the operation (its excess precision would skip the rounding to
    bfloat16). Returns the function checked."""
    key = (
        fn,
        jax.config.jax_enable_x64,
        tuple((np.shape(a), np.result_type(a)) for a in jax.tree_util.tree_leaves(args)),
    )
    if key not in _PREPARED:
        dtypes = [np.dtype(o.dtype) for o in jax.tree_util.tree_leaves(jax.eval_shape(fn, *args))]
        checked = fn
        if BF16 in dtypes:

            def checked(*operands):
                results = lax.optimization_barrier(fn(*operands))
                return jax.tree_util.tree_map(
                    lambda r: r.astype(jnp.float32) if r.dtype == BF16 else r, results
                )

        _PREPARED[key] = checked, dtypes
    checked, dtypes = _PREPARED[key]
    budgets = [(ulps(d) if callable(ulps) else ulps) * (2**16 if d == BF16 else 1) for d in dtypes]
    oracle_check(checked, *args, ulps=max(budgets, default=0.0), expect=expect)
    if len(set(budgets)) > 1:
        closed = jax.make_jaxpr(checked)(*args)
        want = jax.tree_util.tree_leaves(jax.jit(checked)(*args))
        got = Interpreter(closed)(*jax.tree_util.tree_leaves(args))
        for index, (w, g, budget) in enumerate(zip(want, got, budgets, strict=True)):
            assert_same(np.asarray(w), np.asarray(g), budget, f"output {index} of {expect} ({dtypes[index]})")
    return checked


# ---- error budgets --------------------------------------------------------------------------------
# Exact operations (IEEE + - * / sqrt, comparisons, integer and bit operations, conversions,
# selection, rounding to integers) are compared bit for bit: budget 0.
#
# A transcendental function f ("leaf") gets 2 (X + N) ulps of XLA's result:
# - X: JAX's documented CPU maximum error of f, in ulps of the exact result (docs/accuracy.md,
#   "Numerical accuracy"; exhaustive for float32 unary functions and 16-bit types, sampled, so a
#   lower bound, for float64).
# - N: ours, in ulps of the exact result: NumPy's validated `ulperrortol` for the function
#   (numpy/_core/tests/data/umath-validation-set-*.csv), or glibc's maximum for functions NumPy
#   computes with the C library (arctan2, power: sysdeps/x86_64/fpu/libm-test-ulps), both counted
#   from the correctly rounded result, plus the 0.5 that one is from the exact value.
# - Both within X and N ulps of the exact value: within X + N of each other in its ulps.
#   `oracle.check` counts ulps of XLA's result, which are half as large when a power of two lies
#   between it and the exact value, hence the 2. Equivalently the two results differ by a relative
#   2 (X + N) u at most (u = 2^-24 for float32, 2^-53 for float64, 2^-11 and 2^-8 for float16 and
#   bfloat16), since an ulp is at least |value| u; `formula_budget` propagates such relative
#   differences through XLA's formulas.
# float16/bfloat16 leaves are float32 leaves rounded once on both sides (XLA's lowering converts
# around each): ours is within 0.5 + 2^-13 ulps of the exact value, X16 from JAX's float16 and
# bfloat16 tables; results on these grids differ by whole or half ulps, which absorbs the 2^-13.
#
# (X, N) per leaf for float32 and float64; X for (float16, bfloat16).
LEAF_32 = {
    "exp": (1.5, 3.5),
    "log": (1.5, 4.5),
    "log1p": (3.0, 2.5),
    "expm1": (6.5, 3.5),
    "sin": (0.5, 2.5),
    "cos": (0.5, 2.5),
    "tan": (0.5, 4.5),
    "tanh": (5.0, 2.5),
    "cbrt": (0.5, 2.5),
    "atan2": (0.5, 2.5),  # glibc atan2f: 2
    # JAX's table has no pow: XLA CPU calls the C library's powf, as NumPy's float32 power does
    # (glibc: 1 ulp; identical results, but the budget does not rely on that).
    "pow": (1.5, 1.5),
    # Ours is 1 / sqrt(x): two correctly rounded operations, a relative 2u, at most 2 ulps.
    "rsqrt": (2.0, 2.0),
}
LEAF_64 = {
    "exp": (2.0, 1.5),
    "log": (0.5, 1.5),
    # JAX's table says >= 2.0 (sampled); XLA's float64 log1p loses 7 bits on about
    # (1 - sqrt 2, sqrt(1/2) - 1): 129.0 ulps from glibc's log1p (1 ulp) at most over 2M uniform
    # samples of each of [-0.42, -0.41) and [-0.41, -0.3), 2 elsewhere (test_log1p_where_xla_loses_bits).
    "log1p": (130.0, 1.5),
    "expm1": (4.5, 1.5),
    "sin": (0.5, 1.5),
    "cos": (0.5, 1.5),
    "tan": (0.5, 1.5),
    "tanh": (7.0, 2.5),
    "cbrt": (0.5, 2.5),
    "atan2": (0.5, 0.5),  # glibc atan2: correctly rounded in its tests
    "pow": (1.5, 1.5),  # glibc pow: 1 ulp, both sides (as for float32)
    "rsqrt": (1.5, 2.0),
}
LEAF_16 = {
    "exp": (1.0, 0.5),
    "log": (1.0, 0.5),
    "log1p": (1.0, 0.5),
    "expm1": (2.5, 0.5),
    "sin": (1.0, 0.5),
    "cos": (1.0, 0.5),
    "tan": (1.0, 0.5),
    "tanh": (0.5, 0.5),
    "cbrt": (1.0, 0.5),
    "atan2": (1.0, 1.0),
    "pow": (0.5, 0.5),  # no table entry: XLA's is powf rounded once (its bfloat16 HLO shows it)
    "rsqrt": (0.5, 0.5),
}


def leaf_budget(name: str, dtype: np.dtype) -> float:
    """2 (X + N) for one leaf: in ulps of XLA's result, and as a relative difference in u."""
    if dtype in (F16, BF16):
        return 2 * (LEAF_16[name][dtype == BF16] + 0.5)
    x, n = (LEAF_64 if dtype == F64 else LEAF_32)[name]
    return 2 * (x + n)


def formula_budget(name: str, dtype: np.dtype) -> float:
    """Functions XLA expands into formulas, which the interpreter evaluates the same way, in the
    same order and precision: the sides differ only where a leaf does (identical inputs to every
    exact operation give identical results). In units of u, each later correctly rounded
    operation adds 2 (one rounding per side), a sum of same-sign terms or a product passes its
    operands' relative differences through, a difference a - b amplifies them by (a + b) / (a - b)."""
    leaf = functools.partial(leaf_budget, dtype=dtype)
    if name == "exp2":  # exp(log(2) * x): the product is the same rounded value on both sides
        return leaf("exp")
    if name == "logistic":  # 1 / (1 + e), e = exp(-x): e <= 1 + e, then the add and the divide
        return leaf("exp") + 2 + 2
    if name in ("asin", "acos", "atan"):  # one atan2 of identical operands (asin doubles it: exact)
        return leaf("atan2")
    if name in ("sinh", "cosh"):
        if dtype in (F16, BF16):
            # chlo computes the whole formula in float32 and rounds once: float32 results a few
            # float32 ulps apart round to the same or to adjacent float16/bfloat16 values.
            return 1
        if name == "cosh":  # exp(x - log 2) + exp(-log 2 - x): a sum of positive terms
            return leaf("exp") + 2
        # |x| < 1: e = expm1(x) is in (-0.632, 1.718); e + 1 amplifies e's difference by
        # |e / (e + 1)| <= 1.718; e / (e + 1) adds both; e + e / (e + 1) sums same-sign terms;
        # / 2 is exact.
        e = leaf("expm1")
        small = e + (1.718 * e + 2) + 2 + 2
        # |x| >= 1: exp(x - log 2) - exp(-log 2 - x), amplified by coth|x| <= coth 1 < 1.314.
        large = 1.314 * leaf("exp") + 2
        return float(np.ceil(max(small, large)))
    if name in ("asinh", "acosh"):
        # log1p of an argument both sides compute identically, or log(|x|) + log 2 (positive).
        return max(leaf("log1p"), leaf("log") + 2)
    if name == "atanh":  # (log1p(x) - log1p(-x)) / 2: terms of opposite signs, magnitudes add
        return leaf("log1p") + 2
    raise KeyError(name)


# ---- generated values -----------------------------------------------------------------------------
def _float_edges(dtype: np.dtype) -> np.ndarray:
    info = ml_dtypes.finfo(dtype) if dtype == BF16 else np.finfo(dtype)
    tiny, sub = float(info.smallest_normal), float(info.smallest_subnormal)
    values = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 2.0, 3.0, -3.0, 10.0, 100.0]
    values += [np.inf, -np.inf, np.nan, -np.nan, float(info.max), -float(info.max), tiny, -tiny]
    values += [sub, -sub, tiny - sub, -(tiny - sub), float(info.eps), 1 - float(info.eps) / 2]
    values += [127.5, 128.0, -128.5, -129.0, 255.5, 256.0, 32767.5, 32768.0, -32769.0, 65535.5]
    values += [65536.0, 2.0**31, -(2.0**31), 2.0**32, 2.0**63, -(2.0**63), 2.0**64, 1e10, -1e10]
    values += [2.0**24 + 1, 2.0**53 + 1, np.pi / 2, 0.7, -0.3, 88.7, 89.0, -87.3, -104.0, 709.7]
    values += [1e-5, -1e-8, 0.999, 1.0001, 1e19, 2e19, 1.7e38, 0.49999997]
    with np.errstate(over="ignore"):
        return np.array(values, np.float64).astype(np.float32 if dtype == BF16 else dtype).astype(dtype)


def _integer_edges(dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    width = 8 * dtype.itemsize
    values = {0, 1, 2, 3, 5, 6, 7, 8, 31, 32, 33, 63, 64, 127, 128, 255, 256, info.max, info.max - 1}
    values |= {info.min, info.min + 1, info.max // 2, info.max // 2 + 1, width - 1, width, width + 1}
    values |= {-1, -2, -3, -5, -8, -64, -width}
    values |= {2**k + d for k in range(width) for d in (-1, 0, 1)}
    values |= {-(2**k) for k in range(width)}
    return np.array(sorted(v for v in values if info.min <= v <= info.max), dtype=dtype)


def _edges(dtype: np.dtype) -> np.ndarray:
    if dtype == BOOL:
        return np.array([False, True])
    return _integer_edges(dtype) if dtype.kind in "iu" else _float_edges(dtype)


def _moderate(rng: np.random.Generator, dtype: np.dtype, size: int) -> np.ndarray:
    if dtype == BOOL:
        return rng.random(size) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -40), min(info.max, 40), size, endpoint=True).astype(dtype)
    scale = 10.0 ** rng.integers(-3, 3, size, endpoint=True)
    return (rng.standard_normal(size) * scale).astype(np.float32).astype(dtype)


def values(
    rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...], subnormals: bool = True
) -> np.ndarray:
    """An array of `dtype`: a third edge values, a quarter random bit patterns, the rest moderate;
    without `subnormals` (or where the interpreter runs in NumPy's IEEE mode) each subnormal
    becomes the smallest normal of its sign."""
    size = int(np.prod(shape, dtype=np.int64))
    edges = _edges(dtype)
    picked = edges[rng.integers(0, len(edges), size)]
    bits = rng.integers(0, 256, size * dtype.itemsize, dtype=np.uint8).view(dtype)
    if dtype == BOOL:
        bits = bits.view(np.uint8) & 1 == 1
    choice = rng.random(size)
    out = np.where(choice < 0.35, picked, np.where(choice < 0.6, bits, _moderate(rng, dtype, size)))
    out = out.astype(dtype).reshape(shape)
    if (interpreter_flushes() and subnormals) or dtype.kind not in "fV":
        return out
    # NumPy's IEEE mode (oracle.arrays has no subnormals), or an operand whose subnormals XLA's
    # kernels read by their bits (see READS_SUBNORMAL_BITS): the smallest normal of the sign, an
    # edge value of its own.
    subnormal, wide = _subnormal(out)
    tiny = float(ml_dtypes.finfo(dtype).smallest_normal)
    return np.where(subnormal, np.copysign(tiny, wide).astype(dtype), out)


def _subnormal(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where float array `x` is subnormal, and `x` in float64 (which keeps every sign)."""
    with np.errstate(invalid="ignore"):  # bfloat16 NaN payloads
        wide = x.astype(np.float64)
    return (wide != 0) & (np.abs(wide) < float(ml_dtypes.finfo(x.dtype).smallest_normal)), wide


def shift_amounts(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Shift amounts: every in-range amount, the width, past it, and negative ones."""
    width = 8 * dtype.itemsize
    pool = [*range(width + 2), width * 2, int(np.iinfo(dtype).max)]
    if dtype.kind == "i":
        pool += [-1, -width, int(np.iinfo(dtype).min)]
    size = int(np.prod(shape, dtype=np.int64))
    return np.array(pool, dtype=object).astype(dtype)[rng.integers(0, len(pool), size)].reshape(shape)


SEEDS = st.integers(0, 2**32 - 1)
#: Cases per primitive: each holds every accepted dtype in four shapes (31 values a dtype for a
#: binary operation). No shrinking: a case is a seed, and a smaller seed is no simpler case.
EXAMPLES = settings(parent=RULE_SETTINGS, max_examples=examples(8), phases=[Phase.explicit, Phase.generate])
#: Shapes of a case's operands: a zero-size and a 2x5 array, and for the specs whose rules treat
#: scalars and broadcasts apart (`scalars`), a scalar and a 2x5 array with a scalar, as literals
#: appear in jaxprs. Every rule also meets 0-d arrays and NumPy scalars, without XLA, in
#: `test_rules_return_jaxs_dtype_and_shape_themselves`.
CASE_SHAPES = ((), (0,), (2, 5))


# ---- the specs ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Spec:
    """How to exercise one primitive: `op` on operands of one dtype, the dtypes it accepts."""

    op: Any
    dtypes: tuple
    arity: int = 1
    ulps: Any = 0  # a number, or a function of the dtype
    operands: Any = None  # (rng, dtype, shape, position) -> array; default `values`
    widened: bool = False  # check the float64 reference on float32 inputs too
    expect: str | None = None
    scalars: bool = False  # 0-d operands alone too (rules with paths of their own for them)
    subnormals: bool = True  # subnormal operands (False: see READS_SUBNORMAL_BITS)


def _unary(fn, dtypes, **kw):
    return Spec(fn, dtypes, 1, **kw)


def _binary(fn, dtypes, **kw):
    return Spec(fn, dtypes, 2, **kw)


def _shift_operands(rng, dtype, shape, position):
    return values(rng, dtype, shape) if position == 0 else shift_amounts(rng, dtype, shape)


def _leaf(name):
    return lambda dtype: leaf_budget(name, dtype)


def _formula(name):
    return lambda dtype: formula_budget(name, dtype)


def _unary_float(name, fn, budget, **kw):
    return _unary(fn, FLOATS, ulps=budget, widened=True, expect=name, **kw)


SPECS: dict[str, Spec] = {
    # arithmetic (exact: correctly rounded, float16/bfloat16 through float32, integers wrap)
    "add": _binary(lax.add, NUMERIC, widened=True),
    "sub": _binary(lax.sub, NUMERIC, widened=True),
    "mul": _binary(lax.mul, NUMERIC, widened=True),
    "div": _binary(lax.div, NUMERIC, widened=True, scalars=True),
    "rem": _binary(lax.rem, INTEGERS + FLOATS, widened=True),
    "max": _binary(lax.max, ORDERED, widened=True, scalars=True),
    "min": _binary(lax.min, ORDERED, widened=True, scalars=True),
    "atan2": _binary(lax.atan2, FLOATS, ulps=_leaf("atan2"), widened=True, subnormals=False),
    "pow": _binary(lax.pow, FLOATS, ulps=_leaf("pow"), widened=True, scalars=True, subnormals=False),
    "nextafter": _binary(lax.nextafter, FLOATS, scalars=True),
    "mulhi": _binary(lax.mulhi, INTEGERS),
    "square": _unary(lax.square, NUMERIC, widened=True),
    "neg": _unary(lax.neg, NUMERIC, widened=True),
    "abs": _unary(lax.abs, SIGNED + FLOATS, widened=True),
    "sign": _unary(lax.sign, NUMERIC, widened=True),
    "floor": _unary(lax.floor, FLOATS, widened=True),
    "ceil": _unary(lax.ceil, FLOATS, widened=True),
    "round": _unary(
        lambda x: (
            lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
            lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
        ),
        FLOATS,
        widened=True,
    ),
    "is_finite": _unary(lax.is_finite, FLOATS, widened=True),
    "sqrt": _unary(lax.sqrt, FLOATS, widened=True),  # correctly rounded on both sides
    # comparisons and logic
    "eq": _binary(lax.eq, ORDERED),
    "ne": _binary(lax.ne, ORDERED),
    "lt": _binary(lax.lt, ORDERED),
    "le": _binary(lax.le, ORDERED),
    "gt": _binary(lax.gt, ORDERED),
    "ge": _binary(lax.ge, ORDERED),
    "and": _binary(lax.bitwise_and, BOOL_OR_INT),
    "or": _binary(lax.bitwise_or, BOOL_OR_INT),
    "xor": _binary(lax.bitwise_xor, BOOL_OR_INT),
    "not": _unary(lax.bitwise_not, BOOL_OR_INT),
    "population_count": _unary(lax.population_count, INTEGERS),
    "clz": _unary(lax.clz, INTEGERS),
    "shift_left": _binary(lax.shift_left, INTEGERS, operands=_shift_operands),
    "shift_right_logical": _binary(lax.shift_right_logical, INTEGERS, operands=_shift_operands),
    "shift_right_arithmetic": _binary(lax.shift_right_arithmetic, INTEGERS, operands=_shift_operands),
    # transcendental leaves
    "exp": _unary_float("exp", lax.exp, _leaf("exp")),
    "log": _unary_float("log", lax.log, _leaf("log")),
    "log1p": _unary_float("log1p", lax.log1p, _leaf("log1p")),
    "expm1": _unary_float("expm1", lax.expm1, _leaf("expm1")),
    "sin": _unary_float("sin", lax.sin, _leaf("sin")),
    "cos": _unary_float("cos", lax.cos, _leaf("cos")),
    "tan": _unary_float("tan", lax.tan, _leaf("tan")),
    "tanh": _unary_float("tanh", lax.tanh, _leaf("tanh")),
    "cbrt": _unary_float("cbrt", lax.cbrt, _leaf("cbrt"), subnormals=False),
    "rsqrt": _unary_float("rsqrt", lax.rsqrt, _leaf("rsqrt")),
    # formulas XLA expands
    "exp2": _unary_float("exp2", lax.exp2, _formula("exp2")),
    "logistic": _unary_float("logistic", lax.logistic, _formula("logistic")),
    "asin": _unary_float("asin", lax.asin, _formula("asin")),
    "acos": _unary_float("acos", lax.acos, _formula("acos")),
    "atan": _unary_float("atan", lax.atan, _formula("atan")),
    "sinh": _unary_float("sinh", lax.sinh, _formula("sinh")),
    "cosh": _unary_float("cosh", lax.cosh, _formula("cosh")),
    "asinh": _unary_float("asinh", lax.asinh, _formula("asinh")),
    "acosh": _unary_float("acosh", lax.acosh, _formula("acosh")),
    "atanh": _unary_float("atanh", lax.atanh, _formula("atanh")),
    # identities
    "copy": _unary(lambda x: lax.copy_p.bind(x), ALL_DTYPES),
    "stop_gradient": _unary(lax.stop_gradient, ALL_DTYPES),
    "reduce_precision": _unary(
        lambda x: [lax.reduce_precision(x, e, m) for e, m in ((5, 10), (8, 7), (2, 1), (4, 3), (11, 0))],
        FLOATS,
        widened=True,
    ),
}


def _budget(spec: Spec, dtype: np.dtype) -> float:
    return spec.ulps(dtype) if callable(spec.ulps) else spec.ulps


@functools.cache
def _program(name: str, arity: int, count: int):
    """One function applying primitive `name` to `count` groups of `arity` operands (one object per
    program, so XLA's compile cache serves every case)."""
    op = SPECS[name].op

    def program(*operands):
        return [op(*operands[i : i + arity]) for i in range(0, arity * count, arity)]

    return program


def _operand_sets(spec: Spec, dtype: np.dtype, rng: np.random.Generator) -> list[np.ndarray]:
    make = spec.operands or (lambda rng, dtype, shape, position: values(rng, dtype, shape, spec.subnormals))
    shapes_ = CASE_SHAPES if spec.scalars else CASE_SHAPES[1:]
    groups = [[make(rng, dtype, shape, k) for k in range(spec.arity)] for shape in shapes_]
    if spec.arity == 2 and spec.scalars:  # an array with a scalar, as literals appear in jaxprs
        groups.append([make(rng, dtype, (2, 5), 0), make(rng, dtype, (), 1)])
    return [x for group in groups for x in group]


def check_spec(name: str, seed: int) -> None:
    """One generated case of `name`: every accepted dtype in one program, each output with its
    dtype's budget."""
    spec = SPECS[name]
    rng = np.random.default_rng(seed)
    operands = [x for dtype in spec.dtypes for x in _operand_sets(spec, dtype, rng)]
    count = len(operands) // spec.arity
    with x64():
        check(
            _program(name, spec.arity, count),
            *operands,
            ulps=lambda dtype: _budget(spec, dtype),
            expect=spec.expect or name,
        )


@pytest.mark.parametrize("name", sorted(SPECS))
@EXAMPLES
@given(seed=SEEDS)
def test_generated_cases_match_xla(name, seed):
    check_spec(name, seed)


WIDENED = tuple(sorted(name for name, spec in SPECS.items() if spec.widened))


@functools.cache
def _widened_program(names: tuple[str, ...], arities: tuple[int, ...], counts: tuple[int, ...]):
    """Every widened primitive's program in one (one XLA compile in float64)."""

    def program(*operands):
        results, at = [], 0
        for name, arity, count in zip(names, arities, counts, strict=True):
            results.append(_program(name, arity, count)(*operands[at : at + arity * count]))
            at += arity * count
        return results

    return program


@settings(parent=EXAMPLES, max_examples=examples(4))
@given(seed=SEEDS)
def test_float64_reference_matches_xla_in_float64(seed):
    """The float64 reference (Interpreter(widen=True)) of each float rule's float32 program equals
    XLA running it in float64: exact operations bit for bit, leaves and formulas within their
    float64 budgets above (the reference evaluates the same formulas). All rules in one program,
    checked at the largest budget, then each output at its own."""
    rng = np.random.default_rng(seed)
    operand_sets = [_operand_sets(SPECS[name], F32, rng) for name in WIDENED]
    arities = tuple(SPECS[name].arity for name in WIDENED)
    counts = tuple(len(ops) // arity for ops, arity in zip(operand_sets, arities, strict=True))
    program = _widened_program(WIDENED, arities, counts)
    operands = [x for ops in operand_sets for x in ops]
    budgets = [_budget(SPECS[name], F64) for name in WIDENED]
    check_widened(program, *operands, ulps=max(budgets))
    closed = jax.make_jaxpr(program)(*operands)
    reference = Interpreter(closed, widen=True)(*operands)
    with x64():
        wide = [x.astype(np.float64) if x.dtype == F32 else x for x in operands]
        want = jax.tree_util.tree_leaves(jax.jit(program)(*wide))
    per_output = []
    for name, ops, arity, count, budget in zip(WIDENED, operand_sets, arities, counts, budgets, strict=True):
        leaves = jax.tree_util.tree_leaves(jax.eval_shape(_program(name, arity, count), *ops))
        per_output += [budget] * len(leaves)
    for index, (w, g, budget) in enumerate(zip(want, reference, per_output, strict=True)):
        assert_same(np.asarray(w), np.asarray(g), budget, f"float64 reference, output {index}")


@pytest.mark.parametrize("name", sorted(SPECS))
def test_rules_return_jaxs_dtype_and_shape_themselves(name):
    """The plan casts results to the declared dtype, which would hide a rule that computes in the
    wrong one: each rule is called directly here, on every dtype and shape of its cases."""
    spec = SPECS[name]
    rng = np.random.default_rng(0)
    with x64(), np.errstate(all="ignore"):
        for dtype in spec.dtypes:
            operands = _operand_sets(spec, dtype, rng)
            groups = [operands[k : k + spec.arity] for k in range(0, len(operands), spec.arity)]
            scalars = [values(rng, dtype, ()) for _ in range(spec.arity)]
            groups += [scalars, [x[()] for x in scalars]]  # 0-d arrays, and NumPy scalars
            for group in groups:
                closed = jax.make_jaxpr(spec.op)(*group)
                for eqn in closed.jaxpr.eqns:
                    inputs = [group[closed.jaxpr.invars.index(v)] for v in eqn.invars]
                    result = np.asarray(RULES[eqn.primitive.name](*inputs, **eqn.params))
                    (out,) = eqn.outvars
                    assert result.dtype == out.aval.dtype, f"{name} on {dtype}: {result.dtype}"
                    assert result.shape == out.aval.shape, f"{name} on {dtype}: {result.shape}"


# ---- parametrized primitives ------------------------------------------------------------------------
#: The special cases of JAX's lowering (0, 1, 2, 3, -1) and longer chains (7 = 4 + 2 + 1, 31).
INT_POWERS = (0, 1, 2, 3, 7, 31)
FLOAT_POWERS = INT_POWERS + (-1, -2, -7)


@functools.cache
def _integer_pow_program(integer: tuple[bool, ...]):
    """integer_pow of every power on pairs (array, scalar) of operands, one pair a dtype."""

    def program(*operands):
        results = []
        for k, is_integer in enumerate(integer):
            x, s = operands[2 * k : 2 * k + 2]
            results += [(lax.integer_pow(x, y), lax.integer_pow(s, y)) for y in _powers(is_integer)]
        return results

    return program


def _powers(is_integer: bool) -> tuple[int, ...]:
    return INT_POWERS if is_integer else FLOAT_POWERS


@EXAMPLES
@given(seed=SEEDS)
def test_integer_pow_is_xlas_chain_of_multiplications(seed):
    """Bit for bit: the same multiplications in the same order (integers wrap)."""
    rng = np.random.default_rng(seed)
    operands = [v for dtype in NUMERIC for v in (values(rng, dtype, (2, 5)), values(rng, dtype, ()))]
    with x64():
        check(_integer_pow_program(tuple(d.kind in "iu" for d in NUMERIC)), *operands, expect="integer_pow")
    check_widened(_integer_pow_program((False,)), values(rng, F32, (2, 5)), values(rng, F32, ()))


@functools.cache
def _pow_int_program():
    return lambda x, y: lax.pow(x, y)


@EXAMPLES
@given(seed=SEEDS)
def test_pow_with_an_integer_exponent(seed):
    """JAX converts the integer exponent to x's dtype, then calls pow: the pow leaf's budget."""
    rng = np.random.default_rng(seed)
    with x64():
        for dtype in FLOATS:
            for exponent in (np.int8, np.int32, np.int64, np.uint32):
                y = values(rng, np.dtype(exponent), (2, 5))
                check(
                    _pow_int_program(),
                    values(rng, dtype, (2, 5)),
                    y,
                    ulps=leaf_budget("pow", dtype),
                    expect="pow",
                )


@functools.cache
def _select_program(counts: tuple[int, ...]):
    """select_n over consecutive groups of operands: a predicate, then `count` cases."""

    def program(*operands):
        results, at = [], 0
        for count in counts:
            results.append(lax.select_n(operands[at], *operands[at + 1 : at + 1 + count]))
            at += 1 + count
        return results

    return program


#: (predicate dtype, number of cases): integer predicates out of range too (-2 .. 6).
PREDICATES = ((BOOL, 2), (np.dtype(np.int32), 3), (np.dtype(np.uint8), 5), (np.dtype(np.int8), 2), (BOOL, 1))


@EXAMPLES
@given(seed=SEEDS)
def test_select_n_for_every_dtype_and_predicate(seed):
    """Boolean and integer predicates (out of range too: XLA clamps to the first or last case),
    1 to 5 cases, scalar predicates with array cases, and the bit select of large float arrays
    (80x64 is past the size where the rule switches from np.where)."""
    rng = np.random.default_rng(seed)
    operands, counts = [], []
    for dtype in ALL_DTYPES:
        for shape in (
            ((), (0,), (2, 5), (80, 64)) if dtype.kind == "f" or dtype == BF16 else ((), (0,), (2, 5))
        ):
            cases = [values(rng, dtype, shape) for _ in range(5)]
            for which_shape in dict.fromkeys((shape, ())) if shape == (2, 5) else (shape,):
                for which_dtype, count in PREDICATES if shape == (2, 5) else PREDICATES[:2]:
                    if which_dtype == BOOL:
                        which = rng.random(which_shape) < 0.5
                    else:
                        which = rng.integers(-2, 7, which_shape).astype(which_dtype)
                    operands += [np.asarray(which), *cases[:count]]
                    counts.append(count)
    with x64():
        check(_select_program(tuple(counts)), *operands, expect="select_n")
    cases = [values(rng, F32, (2, 5)) for _ in range(3)]
    check_widened(_select_program((2, 3)), rng.random((2, 5)) < 0.5, *cases[:2], np.int32(1), *cases)


@functools.cache
def _clamp_program():
    return lambda low, x, high, low_s, high_s: (lax.clamp(low, x, high), lax.clamp(low_s, x, high_s))


@EXAMPLES
@given(seed=SEEDS)
def test_clamp_with_array_and_scalar_bounds(seed):
    """min(max(x, low), high) with XLA's max and min: NaN propagates, low > high gives high."""
    rng = np.random.default_rng(seed)
    with x64():
        for dtype in ORDERED:
            x, low, high = (values(rng, dtype, (2, 5)) for _ in range(3))
            check(
                _clamp_program(), low, x, high, values(rng, dtype, ()), values(rng, dtype, ()), expect="clamp"
            )
    f32 = [values(rng, F32, shape) for shape in ((2, 5),) * 3 + ((),) * 2]
    check_widened(_clamp_program(), *f32)


@functools.cache
def _convert_program(targets: tuple, scalars: bool):
    if not scalars:
        return lambda x: [lax.convert_element_type(x, t) for t in targets]
    return lambda x, s: [(lax.convert_element_type(x, t), lax.convert_element_type(s, t)) for t in targets]


@settings(parent=EXAMPLES, max_examples=examples(4))
@given(seed=SEEDS)
def test_convert_element_type_between_every_pair_of_dtypes(seed):
    """float -> int truncates and saturates (NaN -> 0); int -> float rounds to nearest (int64,
    uint64 too); float64 -> float16 and everything -> bfloat16 round through float32; -> bool is
    x != 0 (NaN true); bool -> anything is 0/1; integers wrap. One program a source dtype (a
    single program of all 169 conversions compiles slower than 13 of 13)."""
    rng = np.random.default_rng(seed)
    with x64():
        for source in ALL_DTYPES:  # scalars from the float sources (their own code paths)
            if _is_float_dtype(source):
                x, s = values(rng, source, (3, 4)), values(rng, source, ())
                check(_convert_program(tuple(ALL_DTYPES), True), x, s, expect="convert_element_type")
            else:
                check(
                    _convert_program(tuple(ALL_DTYPES), False),
                    values(rng, source, (3, 4)),
                    expect="convert_element_type",
                )
    # 32-bit targets only: check_widened traces without x64, where int64 would become int32.
    narrow_targets = tuple(t for t in INTEGERS if t.itemsize < 8) + (BOOL,)
    check_widened(_convert_program(narrow_targets, True), values(rng, F32, (3, 4)), values(rng, F32, ()))


def _is_float_dtype(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype == BF16


@functools.cache
def _bitcast_program(targets: tuple):
    return lambda *xs: [lax.bitcast_convert_type(x, t) for x, t in zip(xs, targets, strict=True)]


@EXAMPLES
@given(seed=SEEDS)
def test_bitcast_convert_type_same_and_changing_widths(seed):
    """The same bits: equal widths keep the shape; narrower adds a last dimension (little-endian
    order), wider consumes one of the ratio's size. bool only to itself."""
    rng = np.random.default_rng(seed)
    pairs = [(BOOL, BOOL)] + [(a, b) for a in NUMERIC for b in NUMERIC]
    operands, targets = [], []
    for source, target in pairs:
        ratio = target.itemsize // source.itemsize
        # 0-d and zero-size operands from float32 and uint8 sources (every width change from them)
        every_shape = source in (F32, np.dtype(np.uint8)) or source == target
        shapes_ = ((), (0,), (2, 3)) if every_shape else ((2, 3),)
        for shape in (
            shapes_ if ratio <= 1 else [(*shape[:-1], ratio) if shape else (ratio,) for shape in shapes_]
        ):
            operands.append(values(rng, source, shape))
            targets.append(target)
    with x64():
        check(_bitcast_program(tuple(targets)), *operands, expect="bitcast_convert_type")


@functools.cache
def _total_order_program(primitive, count: int):
    def program(*operands):
        triples = [operands[3 * k : 3 * k + 3] for k in range(count)]
        return [(primitive.bind(x, y), primitive.bind(x, s), primitive.bind(y, y)) for x, y, s in triples]

    return program


def _total_order_primitives():
    from jax._src.lax import lax as lax_internal  # not public API: skipped where JAX drops them

    return {name: getattr(lax_internal, f"{name}_p", None) for name in ("eq_to", "le_to", "lt_to")}


@pytest.mark.parametrize("name", ["eq_to", "le_to", "lt_to"])
@EXAMPLES
@given(seed=SEEDS)
def test_total_order_comparisons(name, seed):
    """-NaN < -inf < ... < -0.0 < +0.0 < ... < inf < NaN, NaNs ordered by payload; every dtype in
    one program (x, y, scalar per dtype)."""
    primitive = _total_order_primitives()[name]
    if primitive is None:
        pytest.skip(f"this JAX has no {name} primitive")
    rng = np.random.default_rng(seed)
    operands = [
        v for d in ORDERED for v in (values(rng, d, (2, 5)), values(rng, d, (2, 5)), values(rng, d, ()))
    ]
    with x64():
        check(_total_order_program(primitive, len(ORDERED)), *operands, expect=name)


# ---- shapes from oracle.shapes(): broadcasting, 0-d and zero-size arrays of any rank ---------------
SHAPE_CASES = {
    "add": (lambda x, y, s: (lax.add(x, y), lax.add(x, s)), F32),
    "max": (lambda x, y, s: (lax.max(x, y), lax.max(s, x), lax.max(x, jnp.float32(0))), F32),
    "div": (lambda x, y, s: (lax.div(x, y), lax.rem(x, s)), np.dtype(np.int32)),
    "exp": (lambda x, y, s: lax.exp(x), F32),
    "sign": (lambda x, y, s: lax.sign(x), BF16),
    "select_n": (lambda x, y, s: lax.select_n((x > y).astype(jnp.int32) + (x > s), x, y, s + x), F32),
    "convert_element_type": (lambda x, y, s: lax.convert_element_type(x, jnp.int8), F16),
    "shift_right_logical": (lambda x, y, s: lax.shift_right_logical(x, y), np.dtype(np.int16)),
    "integer_pow": (lambda x, y, s: lax.integer_pow(x, 5), F32),
}


@pytest.mark.parametrize("name", sorted(SHAPE_CASES))
@settings(parent=RULE_SETTINGS, max_examples=examples(6))
@given(data=st.data())
def test_any_shape(name, data):
    fn, dtype = SHAPE_CASES[name]
    shape = data.draw(shapes())
    x = data.draw(arrays(dtype, shape))
    y = data.draw(arrays(dtype, shape))
    s = data.draw(arrays(dtype, ()))
    if name == "select_n":  # select_n needs equal case shapes; s broadcasts through the add
        s = np.asarray(s)
    ulps = leaf_budget("exp", F32) if name == "exp" else 0
    check(fn, x, y, s, ulps=ulps, expect=name)


# ---- hand-picked edge cases -----------------------------------------------------------------------
def _bits_equal(want: np.ndarray, got: np.ndarray) -> bool:
    """Same bits, except that any NaN equals any NaN (payloads are not XLA's contract)."""
    want, got = np.asarray(want), np.asarray(got)
    if want.dtype != got.dtype or want.shape != got.shape:
        return False
    if want.dtype.kind not in "fV" and want.dtype != BF16:
        return np.array_equal(want, got)
    nan = np.isnan(want.astype(np.float32)) & np.isnan(got.astype(np.float32))
    unsigned = np.dtype(f"u{want.dtype.itemsize}")
    return bool(np.all(nan | (want.view(unsigned) == got.view(unsigned))))


def check_bits(fn, *args, expect: str) -> None:
    """`check`, and the sign of every zero as well (the value check treats -0.0 == +0.0), on the
    function `check` ran (bfloat16 widened exactly: the same bits in the upper half)."""
    fn = check(fn, *args, expect=expect)
    closed = jax.make_jaxpr(fn)(*args)
    flat = jax.tree_util.tree_leaves(args)
    want = [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    got = Interpreter(closed)(*flat)
    paths = [
        jax.tree_util.keystr(path)
        for path, _ in jax.tree_util.tree_leaves_with_path(jax.eval_shape(fn, *args))
    ]
    for path, w, g in zip(paths, want, got, strict=True):
        assert _bits_equal(w, g), f"{expect} output {path}: bits {np.asarray(g)!r}, XLA {w!r}"


SPECIALS = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, np.inf, -np.inf, np.nan, 3.0]

ZERO_SIGN_CASES = {
    "add": lambda x, y: lax.add(x, y),
    "sub": lambda x, y: lax.sub(x, y),
    "mul": lambda x, y: lax.mul(x, y),
    "div": lambda x, y: lax.div(x, y),
    "rem": lambda x, y: lax.rem(x, y),
    "max": lambda x, y: (lax.max(x, y), lax.max(x, jnp.zeros_like(x)), lax.max(jnp.zeros_like(x), x)),
    "min": lambda x, y: (lax.min(x, y), lax.min(x, jnp.zeros_like(x)), lax.min(-jnp.zeros_like(x), x)),
    # a zero of either sign as a broadcast constant on either side (the rules' fast paths)
    "extremum_constants": lambda x, y: [
        op(*((x, zero) if first else (zero, x)))
        for op in (lax.max, lax.min)
        for zero in (jnp.zeros_like(x), jnp.full_like(x, -0.0))
        for first in (True, False)
    ],
    "clamp": lambda x, y: (
        lax.clamp(jnp.zeros_like(x), x, y),
        lax.clamp(-jnp.zeros_like(x), x, jnp.zeros_like(x)),
    ),
    "sign": lambda x, y: lax.sign(x),
    "neg": lambda x, y: lax.neg(x),
    "abs": lambda x, y: lax.abs(x),
    "floor": lambda x, y: lax.floor(x),
    "ceil": lambda x, y: lax.ceil(x),
    "round": lambda x, y: (lax.round(x, 0), lax.round(x, 1)),
    "sqrt": lambda x, y: lax.sqrt(x),
    "square": lambda x, y: lax.square(x),
    "integer_pow": lambda x, y: (lax.integer_pow(x, 3), lax.integer_pow(x, -1), lax.integer_pow(x, 0)),
    "nextafter": lambda x, y: lax.nextafter(x, y),
    "select_n": lambda x, y: lax.select_n(x < y, x, y),
    "convert_element_type": lambda x, y: [lax.convert_element_type(x, t) for t in FLOATS],
    "reduce_precision": lambda x, y: lax.reduce_precision(x, 5, 2),
}


def test_zero_signs_and_specials():
    """Every pair of special values (±0, ±1, halves, ±inf, NaN), every float dtype, every case of
    ZERO_SIGN_CASES in one program (one compile), bit for bit."""
    grid_x, grid_y = np.meshgrid(SPECIALS, SPECIALS)
    operands = [grid.astype(dtype) for dtype in FLOATS for grid in (grid_x, grid_y)]
    names = sorted(ZERO_SIGN_CASES)

    def program(*xs):
        pairs = [(xs[2 * k], xs[2 * k + 1]) for k in range(len(FLOATS))]
        return {name: [ZERO_SIGN_CASES[name](x, y) for x, y in pairs] for name in names}

    with x64():
        check_bits(program, *operands, expect="sign")


def test_integer_bitwise_ops_are_bitwise_not_logical():
    """The issue's wrong answers: 6 & 3 is 2 (not 1), ~0 is -1 (not 1); booleans stay logical."""
    six, three = np.int32(6), np.int32(3)
    fn = lambda a, b: (a & b, a | b, a ^ b, ~a, lax.bitwise_not(b))  # noqa: E731
    check(fn, six, three, expect="and")
    (got,) = Interpreter(jax.make_jaxpr(lambda a, b: a & b)(six, three))(six, three)
    assert got == 2
    (got,) = Interpreter(jax.make_jaxpr(lambda a: ~a)(np.int32(0)))(np.int32(0))
    assert got == -1
    check(fn, np.array([True, False]), np.array([True, True]), expect="not")


def test_integer_division_edges_of_every_width():
    """Round toward zero; x / 0 is all ones, x % 0 is x; INT_MIN / -1 is INT_MIN, remainder 0
    (and INT_MIN / -2 an ordinary quotient); int64 division exact past 2**53 (the issue's
    (2**53 + 1) // 1)."""
    with x64():
        for dtype in INTEGERS:
            info = np.iinfo(dtype)
            x = [
                7,
                -7,
                7,
                -7,
                int(info.min),
                int(info.max),
                int(info.min),
                0,
                5,
                int(info.max),
                int(info.min),
            ]
            y = [2, 2, -2, -2, -1, 0, 0, 0, 3, -1, -2]
            if dtype.kind == "u":
                x, y = [abs(v) % (int(info.max) + 1) for v in x], [abs(v) for v in y]
            x, y = np.array(x, dtype=object).astype(dtype), np.array(y, dtype=object).astype(dtype)
            check(lambda a, b: (lax.div(a, b), lax.rem(a, b)), x, y, expect="div")
        big = np.array([2**53 + 1, -(2**62) - 3, 2**63 - 1], np.int64)
        check(
            lambda a, b: (lax.div(a, b), lax.rem(a, b), a // b),
            big,
            np.array([1, 7, 2], np.int64),
            expect="div",
        )


def test_select_n_on_scalars_with_a_nonzero_false_branch():
    """The issue's crash: 0-d operands (NumPy returns scalars from 0-d ufuncs)."""
    for which in (True, False):
        check(
            lambda p, a, b: lax.select_n(p, a, b),
            np.bool_(which),
            np.float32(2.5),
            np.float32(-1.5),
            expect="select_n",
        )
    big = np.full((128, 64), 3.0, np.float32)
    check(lambda p, a: lax.select_n(p, a, jnp.full_like(a, -7.0)), np.bool_(True), big, expect="select_n")


def test_jnp_statistics_and_masked_logsumexp_gradients():
    """jnp.mean/var/std and value_and_grad of logsumexp with `where` (the issue's crashes). Small
    integers, so every sum is exact and XLA's summation order cannot matter; logsumexp rows are
    constant where unmasked, so exp(x - max) is exactly 1 and the one inexact step is log(count)
    (the log leaf's budget) plus the add of the max (+2)."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    check(lambda a: (jnp.mean(a), jnp.var(a, axis=0), jnp.std(a, axis=1)), x, expect="div")
    rows = np.repeat(np.array([[1.0], [2.5], [-3.0]], np.float32), 4, axis=1)
    mask = np.array([[True, False, True, True], [True, True, True, True], [False, True, False, False]])

    def per_row(a):
        return jax.scipy.special.logsumexp(a, axis=1, where=mask)

    check(per_row, rows, ulps=leaf_budget("log", F32) + 2, expect="select_n")
    check(jax.grad(lambda a: per_row(a).sum()), rows, expect="select_n")  # 1 / count or 0: exact


def test_subnormals_flush_as_on_xla():
    """In XLA's float environment (elementwise.xla_float_environment) subnormal inputs and
    results flush as on XLA CPU: 1e-39 + 0 is 0 and 1e-39 == 3e-39; bit operations (neg, abs,
    select, copies) keep them."""
    _skip_unless_flushing()
    tiny = np.array([1e-39, -1e-39, 3e-39, 1e-45], np.float32)
    other = np.array([0.0, 0.0, 1e-39, -3e-39], np.float32)

    def fn(a, b):
        return (
            a + b,
            a * b,
            a == b,
            a < b,
            lax.max(a, b),
            -a,
            abs(a),
            jnp.where(a > 0, a, b),
            a.astype(jnp.float64),
        )

    with x64():
        check_bits(fn, tiny, other, expect="add")
        (sum_,) = Interpreter(jax.make_jaxpr(lambda a, b: a + b)(tiny, other))(tiny, other)
        assert not sum_[:2].any()
        check_bits(
            lambda a: (lax.sin(a), lax.tanh(a), lax.expm1(a), lax.log1p(a), lax.exp(a)), tiny, expect="sin"
        )


def test_log1p_where_xla_loses_bits():
    """float64 log1p and atanh (its formula) across the interval where XLA's log1p is up to 129
    ulps off, densely, within their budgets; float32 there too (XLA's float32 log1p is accurate)."""
    x = np.linspace(-0.4143, -0.29, 4001)
    with x64():
        check(lambda a: (lax.log1p(a), lax.atanh(a), lax.atanh(-a)), x, ulps=formula_budget("atanh", F64))
    check(lambda a: (lax.log1p(a),), x.astype(F32), ulps=leaf_budget("log1p", F32))


#: Primitives whose subnormal operands XLA CPU's kernels read by their bits while its arithmetic
#: reads them as zero (DAZ): float32 cbrt of every one of the 2^24 subnormals is -5.5951735e-16,
#: whatever its sign; pow(-129, 1e-39) is NaN and pow(1e-39, 0.5) is 2^-75; atan2(-4.9e-39, 1) keeps
#: the subnormal. NumPy's kernels for them differ by CPU (SVML on AVX-512 reads zero, the C library
#: on AVX2 reads the bits), so the rules define the answer as XLA's on the flushed operands, the
#: same on every machine; the generated cases give them no subnormals, this test checks them.
READS_SUBNORMAL_BITS = ("atan2", "cbrt", "pow")


def _subnormals(rng: np.random.Generator, dtype: np.dtype, size: int) -> np.ndarray:
    """Random subnormals of both signs (and some zeros), as bit patterns of `dtype`."""
    bits = np.dtype(f"u{dtype.itemsize}")
    mantissa = rng.integers(0, 1 << ml_dtypes.finfo(dtype).nmant, size, dtype=np.uint64)
    sign = rng.integers(0, 2, size, dtype=np.uint64) << np.uint64(8 * dtype.itemsize - 1)
    return (mantissa | sign).astype(bits).view(dtype)


def _flush(x: np.ndarray) -> np.ndarray:
    """Subnormals to zero of their sign, as DAZ reads them."""
    subnormal, wide = _subnormal(x)
    return np.where(subnormal, np.copysign(0.0, wide).astype(x.dtype), x)


@pytest.mark.parametrize("name", READS_SUBNORMAL_BITS)
def test_subnormal_operands_read_as_zero_where_xla_kernels_read_bits(name):
    """Each operand in turn subnormal (the others generated values, subnormals included), every
    float dtype whose subnormals are subnormal in float32 (float16's are not, and stay): the
    interpreter gives bit for bit what it gives on the flushed operands, and that is within the
    leaf budget of XLA on the flushed operands."""
    _skip_unless_flushing()
    spec = SPECS[name]
    rng = np.random.default_rng(7)
    for dtype in (F32, F64, BF16):
        for position in range(spec.arity):
            operands = [values(rng, dtype, (64,)) for _ in range(spec.arity)]
            operands[position] = np.where(
                rng.random(64) < 0.75, _subnormals(rng, dtype, 64), operands[position]
            )
            flushed = [_flush(x) for x in operands]
            program = _program(name, spec.arity, 1)
            with x64():
                closed = jax.make_jaxpr(program)(*operands)
                got = Interpreter(closed)(*operands)
                on_flushed = Interpreter(closed)(*flushed)
                assert_same(
                    np.asarray(on_flushed[0]), np.asarray(got[0]), 0, f"{name} {dtype} operand {position}"
                )
                want = jax.tree_util.tree_leaves(jax.jit(program)(*flushed))
            budget = _budget(spec, dtype)
            assert_same(
                np.asarray(want[0]), np.asarray(got[0]), budget, f"{name} {dtype} operand {position} vs XLA"
            )


def test_relu_max_against_literal_zero_gives_positive_zero():
    """max(x, 0.0) (ReLU's forward, the fast path): -0.0 becomes +0.0, as on XLA; NumPy's float
    kernels return the second operand on a tie, which the fast path relies on."""
    x = np.tile(np.array([-0.0, 0.0, -1.0, 2.0, np.nan], np.float32), (1024, 1))
    check_bits(jax.nn.relu, x, expect="max")
    check_bits(lambda a: lax.max(a, jnp.float32(0.0)), x[:, 0], expect="max")


def test_large_arrays_use_the_bit_select_exactly():
    which = np.random.default_rng(0).random((256, 64)) < 0.5
    on_true = np.random.default_rng(1).standard_normal((256, 64)).astype(np.float32)
    on_true[0, :5] = [np.nan, np.inf, -np.inf, -0.0, 1e-39]
    which[0, :5] = True
    check_bits(
        lambda w, a, b: (lax.select_n(w, b, a), lax.select_n(w, a, jnp.zeros_like(a))),
        which,
        on_true,
        -on_true,
        expect="select_n",
    )


def test_logistic_is_one_over_one_plus_exp():
    """XLA's float32 logistic is 1 / (1 + exp(-x)) (JAX's lowering), not 0.5 + 0.5 tanh(x / 2):
    at x = -20 the tanh form gives 0 (tanh(-10) rounds to -1) where this one gives 2.06e-9."""
    x = np.array([-90.0, -20.0, -1.0, -0.0, 1.0, 20.0, 90.0, np.inf, -np.inf, np.nan], np.float32)
    check(lax.logistic, x, ulps=formula_budget("logistic", F32), expect="logistic")
    assert 2.0e-9 < float(jax.jit(lax.logistic)(np.float32(-20.0))) < 2.1e-9


def _accuracy_refusal(name: str, accuracy) -> str:
    return (
        f"{name}: accuracy={accuracy!r} (a tolerance) is not honoured by the interpreter; "
        "use accuracy=None, DEFAULT or HIGHEST"
    )


def test_unsupported_accuracy_is_named():
    tolerance = lax.Tolerance(rtol=1e-9)
    program = jax.make_jaxpr(lambda x: lax.exp(x, accuracy=tolerance))(np.float32(1))
    with pytest.raises(NotImplementedError) as refused:
        Interpreter(program)(np.float32(1))
    assert str(refused.value) == _accuracy_refusal("exp", tolerance)
    x = np.array([2.0], np.float32)
    with pytest.raises(NotImplementedError) as refused:  # lax.pow takes no accuracy (yet): direct
        RULES["pow"](x, x, accuracy=tolerance)
    assert str(refused.value) == _accuracy_refusal("pow", tolerance)
    assert RULES["pow"](x, x, accuracy=lax.AccuracyMode.HIGHEST) == 4
    check(
        lambda x: lax.exp(x, accuracy=lax.AccuracyMode.HIGHEST),
        np.array([1.0, -1.0, 0.5, 10.0], np.float32),
        ulps=leaf_budget("exp", F32),
        expect="exp",
    )


COVERED = set(SPECS) | {
    "add_any",
    "integer_pow",
    "select_n",
    "clamp",
    "convert_element_type",
    "bitcast_convert_type",
    "eq_to",
    "le_to",
    "lt_to",
}


def test_add_any_accumulates_gradients():
    """add_any is the adjoint's sum of cotangents, traced from a gradient (floats only)."""
    program = jax.make_jaxpr(jax.grad(lambda y: jnp.sum(y * y + y)))(np.ones(3, np.float32))
    assert "add_any" in primitives(program)
    for dtype in FLOATS:
        x = np.array([1.5, -2.0, 0.25, -0.0], dtype)
        with x64():
            check(jax.grad(lambda y: jnp.sum(y * y + y)), x, expect="add_any")


#: (sys.platform, platform.machine(), the fenv words, the word index and the bits to set).
#: glibc's fenv_t: on x86_64 the x87 environment (7 words) then MXCSR, whose FTZ and DAZ bits are
#: 0x8000 and 0x0040; on aarch64 FPCR then FPSR, FPCR's FZ bit 24 flushing inputs and outputs.
FLOAT_ENVIRONMENTS = [
    ("linux", "x86_64", (8, 7, 0x8040)),
    ("linux", "AMD64", (8, 7, 0x8040)),
    ("linux", "aarch64", (2, 0, 1 << 24)),
    ("linux", "ARM64", (2, 0, 1 << 24)),
    ("linux", "riscv64", None),
    ("darwin", "arm64", None),
    ("win32", "AMD64", None),
]


@pytest.mark.parametrize(("system", "machine", "expected"), FLOAT_ENVIRONMENTS)
def test_the_float_environment_follows_glibcs_layout(monkeypatch, system, machine, expected):
    """The environment is read once at import; here it is read again on each platform in turn."""
    from gradlanes.program.rules import elementwise

    monkeypatch.setattr(elementwise.sys, "platform", system)
    monkeypatch.setattr(elementwise.platform, "machine", lambda: machine)
    assert elementwise._environment_bits() == expected


def _settable_float_environment() -> tuple[int, int, int]:
    """This machine's (fenv words, word index, flush bits), or the test is skipped."""
    from gradlanes.program.rules import elementwise

    found = elementwise._environment_bits()
    if found is None or not hasattr(elementwise._LIBC, "fesetenv"):
        pytest.skip("not Linux on x86_64 or aarch64: subnormals keep IEEE gradual underflow here")
    return found


def test_this_machines_float_environment_flushes_and_is_restored(monkeypatch):
    from gradlanes.program.rules import elementwise

    found = _settable_float_environment()
    monkeypatch.setattr(elementwise, "_ENVIRONMENT", found)
    tiny = np.float32(2.0**-140)  # a subnormal
    with elementwise.xla_float_environment():
        inside = tiny * np.float32(1)
    assert inside == 0 and tiny * np.float32(1) == tiny


#: (primitive, operands, params): dtypes JAX's own rules refuse before a jaxpr exists, so only a
#: direct call reaches the rule's refusal; it names the primitive and the dtype.
REFUSED_DTYPES = [
    ("clz", (np.float32(1),), {}),
    ("population_count", (np.float32(1),), {}),
    ("not", (np.float32(1),), {}),
    ("and", (np.float32(1), np.float32(1)), {}),
    ("shift_left", (np.float32(1), np.float32(1)), {}),
    ("mulhi", (np.float32(1), np.float32(1)), {}),
    ("nextafter", (np.int32(1), np.int32(2)), {}),
    ("pow", (np.int32(2), np.int32(3)), {}),
    ("integer_pow", (np.bool_(True),), {"y": 2}),
    ("sign", (np.bool_(True),), {}),
    ("neg", (np.bool_(True),), {}),
    ("abs", (np.bool_(True),), {}),
    ("div", (np.bool_(True), np.bool_(True)), {}),
    ("rem", (np.bool_(True), np.bool_(True)), {}),
    ("exp", (np.int32(1),), {}),
    ("reduce_precision", (np.int32(1),), {"exponent_bits": 8, "mantissa_bits": 7}),
    # complex numbers, which no rule computes: JAX would trace them, the interpreter refuses
    ("add", (np.complex64(1), np.complex64(1)), {}),
    ("mul", (np.complex64(1), np.complex64(1)), {}),
    ("max", (np.complex64(1), np.complex64(1)), {}),
    ("min", (np.complex128(1), np.complex128(1)), {}),
    ("neg", (np.complex64(1),), {}),
    ("abs", (np.complex64(1),), {}),
]


@pytest.mark.parametrize(
    ("primitive", "operands", "params"), REFUSED_DTYPES, ids=[c[0] for c in REFUSED_DTYPES]
)
def test_a_dtype_the_rule_cannot_run_is_refused_by_name(primitive, operands, params):
    operands = [np.asarray(x) for x in operands]
    with pytest.raises(NotImplementedError) as refused:
        RULES[primitive](*operands, **params)
    assert str(refused.value) == f"{primitive}: the interpreter has no rule for dtype {operands[0].dtype}"


def test_64_bit_mulhi_with_a_zero_or_negative_operand():
    """The signed 64-bit high half corrects the unsigned one only for a negative operand: a zero
    one (either side) needs no correction, and -1 needs one."""
    x = np.array([0, 0, -1, 5, -1, 2**62, -(2**63)], np.int64)
    y = np.array([7, -7, 0, 0, -1, -3, -1], np.int64)
    with x64():
        check(lax.mulhi, x, y, expect="mulhi")
        check(lax.mulhi, x.view(np.uint64), y.view(np.uint64), expect="mulhi")


# ---- division by a broadcast ----------------------------------------------------------------------
BROADCAST_SHAPE = (3, 4, 5)
#: Which axes of BROADCAST_SHAPE a broadcast_in_dim keeps (the rest it repeats); None: a full array.
KEPT_AXES = [(), (0,), (1,), (2,), (0, 1), (0, 2), (1, 2), None]


def _quotient_pairs(dtype: np.dtype, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Small integers p, q whose quotient p / q and product p * (1 / q) differ in `dtype` (float32
    or float64), so each case below tells a division from XLA's rewrite to a reciprocal."""
    rng = np.random.default_rng(3)
    p, q = (rng.integers(1, 200, 40 * count).astype(dtype) for _ in range(2))
    differ = p / q != p * (dtype.type(1) / q)
    return p[differ][:count], q[differ][:count]


def _broadcast_operand(values: np.ndarray, kept):
    """A function building BROADCAST_SHAPE from `values`: a full array, or a broadcast_in_dim of
    the axes `kept` (its source the first values, reshaped)."""
    size = int(np.prod(BROADCAST_SHAPE))
    if kept is None:
        return lambda a: a[:size].reshape(BROADCAST_SHAPE)
    source = [BROADCAST_SHAPE[axis] for axis in kept]
    count = int(np.prod(source, dtype=np.int64))
    return lambda a: lax.broadcast_in_dim(a[:count].reshape(source), BROADCAST_SHAPE, kept)


def test_division_by_a_broadcast_is_xlas_rewrite_for_every_pattern():
    """XLA rewrites A / Broadcast(B) to A * Broadcast(1 / B), except where it first moves the
    broadcast past the division: A a broadcast of one value, or of the same axes as B. Every pair
    of patterns over three axes (a full array, a broadcast keeping any subset of axes), every
    float dtype, bit for bit; on float32 and float64 each case divides operands whose quotient and
    reciprocal product differ, so the test tells the two apart."""
    cases = [(kx, ky) for kx in KEPT_AXES for ky in KEPT_AXES if ky is not None]
    operands = []
    for dtype in FLOATS:
        p, q = _quotient_pairs(np.dtype(np.float64 if dtype == F64 else np.float32), 60)
        operands += [p.astype(dtype), q.astype(dtype)]

    def program(*xs):
        results = []
        for k in range(0, len(xs), 2):
            a, b = xs[k], xs[k + 1]
            for kx, ky in cases:
                results.append(_broadcast_operand(a, kx)(a) / _broadcast_operand(b, ky)(b))
            results.append(a[:5] / b[0])  # a 0-d divisor beside an array
            results.append(a[0] / b[:5])  # a 0-d dividend
            degenerate = lax.broadcast_in_dim(b[:5], (1, 5), (1,))  # repeats nothing
            results.append(a[:5].reshape(1, 5) / degenerate)
            for kept, count in (((1,), 5), ((0,), 2)):  # an axis of length 2 repeated
                results.append(a[:10].reshape(2, 5) / lax.broadcast_in_dim(b[:count], (2, 5), kept))
        return results

    with x64():
        check_bits(program, *operands, expect="div")
    for dtype in (F32, F64):
        p, q = _quotient_pairs(dtype, 60)
        assert not np.array_equal(p / q, p * (dtype.type(1) / q))


# ---- where the rules flush by themselves ----------------------------------------------------------
def _smallest_normal(dtype: np.dtype) -> float:
    return float(ml_dtypes.finfo(dtype).smallest_normal)


#: Per float dtype: dividends, 0-d divisors whose reciprocal XLA flushes (huge) or keeps (exactly
#: the smallest normal; float16's reciprocals are computed in float32, where its subnormals are
#: normal), integer_pow bases whose chains pass through a subnormal or the smallest normal, and
#: the smallest normal (asin's atan2 halves it: a subnormal XLA flushes, except in float16).
FLUSH_OPERANDS = {
    F32: ([1e30, -1e30, 4.0, 1e10], [3e38, 2.0**126], [2e-13, -2e-13, 7e-20, 3e-6, 5e-20]),
    F64: ([1e300, -1e300, 4.0, 1e200], [1e308, 2.0**1022], [2.15e-103, -2.15e-103, 1.5e-154, 1e-44]),
    BF16: ([1e30, -1e30, 4.0, 1e10], [3e38, 2.0**126], [2e-13, -2e-13, 7e-20, 3e-6, 5e-20]),
    F16: ([1000.0, -1000.0, 4.0, 60000.0], [40000.0, 16384.0], [0.03, -0.03, 0.005, 0.2]),
}
CHAIN_POWERS = (-2, -3, -7, 3, 5)


@pytest.mark.parametrize("processor_flushes", [True, False], ids=["ftz-daz", "rules-alone"])
def test_intermediate_subnormals_flush_as_on_xla(processor_flushes, monkeypatch):
    """Results that are normal numbers although an intermediate one is subnormal, which XLA
    flushes: a division by a huge broadcast (XLA's reciprocal), integer_pow chains (1 / x^n),
    asin of the smallest normal (its atan2 is a subnormal). Each dtype, inside XLA's float
    environment and where it cannot be set, when the rules flush by themselves (float16 never
    flushes: computed in float32, its subnormals are normal there). Also integer chains, which
    have nothing to flush. Every case was checked to depend on the flush: see the assertion."""
    if not processor_flushes:
        monkeypatch.setattr(elementwise, "_ENVIRONMENT", None)
    operands = []
    for dtype, (dividends, divisors, bases) in FLUSH_OPERANDS.items():
        operands += [np.array(dividends, dtype), *(np.array(d, dtype) for d in divisors)]
        tiny = _smallest_normal(dtype)
        operands += [np.array(bases, dtype), np.array([tiny, -tiny], dtype)]
    operands.append(np.array([3, -2, 7, 0], np.int32))

    def program(*xs):
        out = []
        for k in range(0, len(xs) - 1, 5):
            dividends, huge, exact, bases, tiny = xs[k : k + 5]
            out += [dividends / huge, dividends / exact, lax.asin(tiny)]
            out += [lax.integer_pow(bases, n) for n in CHAIN_POWERS]
        out += [lax.integer_pow(xs[-1], n) for n in (2, 3, 5)]
        return out

    with x64():
        check(program, *operands, expect="integer_pow")
    # the cases depend on the flush: unflushed, the float32 ones come out otherwise
    f32_dividends = np.array(FLUSH_OPERANDS[F32][0], F32)
    assert (f32_dividends * (np.float32(1) / np.float32(3e38)) != 0).all()
    assert np.isfinite(np.float32(1) / (np.float32(7e-20) * np.float32(7e-20)))


# ---- parameters and layouts the generated cases do not reach --------------------------------------
def test_reduce_precision_down_to_one_exponent_bit_and_refused_below():
    """exponent_bits 1 (and mantissa_bits 0) is the narrowest format XLA accepts; below it the
    rule refuses by name (JAX refuses exponent_bits 0 before a jaxpr exists: a direct call)."""
    x = values(np.random.default_rng(5), F32, (64,))
    check(lambda a: [lax.reduce_precision(a, 1, m) for m in (0, 1, 3)], x, expect="reduce_precision")
    for exponent_bits, mantissa_bits in ((0, 3), (1, -1), (0, -1)):
        with pytest.raises(NotImplementedError) as refused:
            RULES["reduce_precision"](x, exponent_bits=exponent_bits, mantissa_bits=mantissa_bits)
        assert str(refused.value) == (
            f"reduce_precision: exponent_bits={exponent_bits}, mantissa_bits={mantissa_bits} "
            "(needs exponent_bits >= 1, mantissa_bits >= 0)"
        )


def test_round_refuses_an_unknown_method_by_name():
    with pytest.raises(NotImplementedError) as refused:
        RULES["round"](np.float32(1.5), rounding_method=2)
    assert str(refused.value) == "round: rounding_method=2 is not supported"


def test_bitcast_of_views_empty_arrays_and_a_wrong_last_dimension():
    """Transposed and broadcast operands (views the interpreter's rules make), zero-size arrays
    to a narrower and a wider dtype, and the refusal of a last dimension that does not fit."""
    x = np.arange(24, dtype=np.float32).reshape(4, 6) * np.float32(1.37)
    check(
        lambda a: (
            [lax.bitcast_convert_type(a.T, t) for t in (jnp.int32, jnp.uint16, jnp.uint8, jnp.bfloat16)]
            + [lax.bitcast_convert_type(jnp.broadcast_to(a[0], (3, 6)), jnp.int16)]
            + [lax.bitcast_convert_type(lax.bitcast_convert_type(a.T, jnp.uint16), jnp.float32)]
        ),
        x,
        expect="bitcast_convert_type",
    )
    bitcast = RULES["bitcast_convert_type"]
    for operand, new_dtype, shape in (
        (np.zeros((0,), np.float32), np.int16, (0, 2)),
        (np.zeros((0, 2), np.int16), np.float32, (0,)),
        (np.zeros((0, 3), np.float64), np.uint8, (0, 3, 8)),
    ):
        result = bitcast(operand, new_dtype=new_dtype)
        assert (result.dtype, result.shape) == (np.dtype(new_dtype), shape)
    for operand in (np.float32(1), np.zeros(3, np.float32)):
        with pytest.raises(ValueError) as refused:
            bitcast(operand, new_dtype=np.float64)
        assert str(refused.value) == (
            f"bitcast_convert_type: float32{list(np.shape(operand))} to float64 needs a last dimension of 2"
        )


#: float64 values that round differently to float16/bfloat16 directly and through float32:
#: 1 + half an ulp of the narrow format + 2^-30 is past the midpoint (directly: up), but rounds to
#: the midpoint in float32 first (then to even: down). (ml_dtypes already converts to bfloat16
#: through float32; NumPy converts float64 to float16 directly.)
DOUBLE_ROUNDING = {
    BF16: [1 + 2.0**-8 + 2.0**-30, -(1 + 2.0**-8 + 2.0**-30), 3 * (1 + 2.0**-8 + 2.0**-31)],
    F16: [1 + 2.0**-11 + 2.0**-30, -(1 + 2.0**-11 + 2.0**-30), 1024 * (1 + 2.0**-11 + 2.0**-31)],
}
#: DOUBLE_ROUNDING[F16] rounded once, and through float32 (both worked by hand).
F16_ROUNDED_ONCE = [1 + 2.0**-10, -(1 + 2.0**-10), 1025.0]
F16_ROUNDED_TWICE = [1.0, -1.0, 1024.0]


def test_conversions_to_bfloat16_round_through_float32():
    """From float64 and from integers wider than float32's mantissa, as XLA does on every CPU (the
    integers to float16 too, where float32 is exact in float16's range)."""
    wide = np.array(DOUBLE_ROUNDING[BF16] + DOUBLE_ROUNDING[F16], np.float64)
    integers = np.array([2**24 + 2**16 + 1, (2**24 + 2**16 + 1) * 2**8, -(2**40 + 2**32 + 1)], np.int64)
    with x64():
        check(
            lambda a, n: (
                [lax.convert_element_type(a, BF16)] + [lax.convert_element_type(n, t) for t in (BF16, F16)]
            ),
            wide,
            integers,
            expect="convert_element_type",
        )


def test_float64_to_float16_rounds_once_on_every_machine():
    """XLA CPU's float64 -> float16 is the CPU's: one rounding where LLVM lowers it to one
    instruction (AVX-512 FP16), two through float32 below (`XLA_FLAGS=--xla_cpu_max_isa=AVX2`
    shows both on one Sapphire Rapids). The interpreter gives the one IEEE answer everywhere, and
    XLA here gives one of the two."""
    cases = np.array(DOUBLE_ROUNDING[F16], np.float64)
    with x64():
        jaxpr = jax.make_jaxpr(lambda a: lax.convert_element_type(a, F16))(cases)
        (interpreted,) = Interpreter(jaxpr)(cases)
        compiled = np.asarray(jax.jit(lambda a: lax.convert_element_type(a, F16))(cases))
    np.testing.assert_array_equal(interpreted, np.array(F16_ROUNDED_ONCE, F16), strict=True)
    assert compiled.tolist() in (F16_ROUNDED_ONCE, F16_ROUNDED_TWICE), compiled


def test_convert_element_type_returns_the_new_dtype_itself():
    """The plan casts each result to its declared dtype, which would hide a rule returning the
    right values in another dtype (bfloat16 widened to float32 and returned as it is): each pair
    of dtypes called directly."""
    rng = np.random.default_rng(2)
    with np.errstate(all="ignore"):
        for source in ALL_DTYPES:
            x = values(rng, source, (6,))
            for target in ALL_DTYPES:
                result = RULES["convert_element_type"](x, new_dtype=target, weak_type=False, sharding=None)
                assert (result.dtype, result.shape) == (target, x.shape), f"{source} -> {target}"


def test_float_to_integer_just_under_the_top_of_each_range():
    """max - 1 (and max - 2) of each integer type as a float converts to itself, not to max: the
    saturation bound is max + 1, exact as a float."""
    wide, narrow = [], []
    for dtype in INTEGERS:
        top = int(np.iinfo(dtype).max)
        cases = [float(top - 1), float(top - 2), -float(top - 1)]
        wide.append(np.array(cases, np.float64))
        if top < 2**24:
            narrow.append(np.array(cases, np.float32))
    with x64():
        check(
            lambda ws, ns: [lax.convert_element_type(v, t) for v in ws + ns for t in INTEGERS],
            wide,
            narrow,
            expect="convert_element_type",
        )


def _neighbours(dtype: np.dtype) -> np.ndarray:
    """Floats beside their next float up and down, negative and positive, small and large."""
    centre = np.array([1.0, 1.5, 3.0, 1e4, 0.25, 2.0**-10], np.float64).astype(dtype)
    centre = np.concatenate([centre, -centre])
    bits = np.dtype(f"i{dtype.itemsize}")
    return np.stack([centre, (centre.view(bits) + 1).view(dtype), (centre.view(bits) - 1).view(dtype)])


def test_total_order_of_adjacent_floats():
    """Floats one ulp apart in both directions, of both signs (every bit of the total-order key
    matters: a key off in its low bit swaps neighbours)."""
    with x64():
        for dtype in FLOATS:
            x = _neighbours(dtype)
            pairs = [(x[0], x[1]), (x[1], x[0]), (x[0], x[2]), (x[2], x[0]), (x[0], x[0])]
            check(
                lambda *xs: [
                    op.bind(a, b)
                    for a, b in zip(xs[::2], xs[1::2], strict=True)
                    for op in _total_order_primitives().values()
                    if op is not None
                ],
                *[v for pair in pairs for v in pair],
                expect="lt_to",
            )


def test_large_selects_with_a_broadcast_or_a_leading_zero_on_false():
    """The bit select's shortcut (on_false all +0.0) is taken only for a broadcast +0.0: not for a
    broadcast of another value, nor for a full array that merely starts with +0.0 (1-D and 2-D)."""
    rng = np.random.default_rng(4)
    which = rng.random((128, 64)) < 0.5
    on_true = rng.standard_normal((128, 64)).astype(np.float32)
    on_false = rng.standard_normal((128, 64)).astype(np.float32)
    on_false.flat[0] = 0.0
    check_bits(
        lambda w, a, b: (
            lax.select_n(w, jnp.full_like(a, -7.0), a),
            lax.select_n(w, b, a),
            lax.select_n(w.reshape(-1), b.reshape(-1), a.reshape(-1)),
            lax.select_n(w, jnp.zeros_like(a), a),
        ),
        which,
        on_true,
        on_false,
        expect="select_n",
    )


def test_pow_with_a_scalar_exponent_is_the_c_librarys_pow():
    """NumPy's power takes shortcuts for a scalar (stride-0) exponent: sqrt for 0.5, which gives
    NaN for -inf and -0.0 for -0.0 where pow gives +inf and +0.0. Also a one-element array."""
    x = np.array([-np.inf, -0.0, 0.0, 4.0, 2.0, np.inf], np.float32)
    for exponent in (0.5, 2.0, -1.0):
        check_bits(
            lambda a, e=exponent: (lax.pow(a, jnp.float32(e)), lax.pow(a[:1], jnp.float32(e))),
            x,
            expect="pow",
        )
    assert np.isnan(np.power(x[:1], np.float32(0.5)))  # the shortcut this guards against


def test_the_float_environment_adds_its_bits_only_and_nests():
    """Inside, the environment is the one saved with the flush bits set and nothing else changed
    (the exception masks kept); a nested environment leaves the outer one flushing."""
    found = _settable_float_environment()
    import ctypes

    words, index, bits = found

    def current():
        env = (ctypes.c_uint32 * words)()
        elementwise._LIBC.fegetenv(env)
        return list(env)

    outside = current()
    with elementwise.xla_float_environment():
        inside = current()
        with elementwise.xla_float_environment():
            assert elementwise._Mode.flushing is True
        assert elementwise._Mode.flushing is True and current() == inside
    assert elementwise._Mode.flushing is False and current() == outside
    expected = list(outside)
    expected[index] |= bits
    assert inside == expected


# ---- where a formula switches branches ------------------------------------------------------------
def _sinh_large(x):
    log_half = jnp.asarray(-np.log(2), x.dtype)
    return lax.exp(x + log_half) - lax.exp(log_half - x)


def _sinh_small(x):
    e = lax.expm1(x)
    return (e + e / (e + jnp.asarray(1, x.dtype))) * jnp.asarray(0.5, x.dtype)


def _in_f32(formula):
    """chlo computes sinh in float32 for float16/bfloat16 and rounds once."""
    return lambda x: formula(x.astype(jnp.float32)).astype(x.dtype) if x.dtype in (F16, BF16) else formula(x)


def _log_plus_log2(x):
    """The large branch of acosh and of asinh (for positive x): log(x) + log 2."""
    return lax.log(x) + jnp.asarray(np.log(2), x.dtype)


def _acosh_small(x):
    below = lax.sqrt(x + jnp.asarray(-1, x.dtype))
    return lax.log1p(below * (lax.sqrt(x + jnp.asarray(1, x.dtype)) + below))


def _asinh_small(x):
    square = x * x
    return lax.log1p(x + square / (lax.sqrt(square + jnp.asarray(1, x.dtype)) + jnp.asarray(1, x.dtype)))


def _below(value: float, dtype: np.dtype) -> float:
    """The largest `dtype` value under `value` (itself a `dtype` value)."""
    bits = np.dtype(f"u{dtype.itemsize}")
    return float(np.array(np.array(value, dtype).view(bits) - 1, bits).view(dtype).astype(np.float64))


def _branch_points(dtype: np.dtype) -> dict[str, tuple[list[float], list[float]]]:
    """Per formula: (inputs of its large branch, inputs of its small branch) at and beside chlo's
    thresholds: |x| < 1 for sinh, x >= max / 2 for acosh, |x| >= sqrt(max) for asinh (positive
    x: the sign is applied after the branch)."""
    top = float(ml_dtypes.finfo(dtype).max)
    root = float(np.array(np.sqrt(top), dtype).astype(np.float64))
    return {
        "sinh": ([1.0, -1.0, 1.5, -1.5], [_below(1.0, dtype), -_below(1.0, dtype), 0.5]),
        "acosh": ([top / 2, top], [_below(top / 2, dtype), top / 3]),
        "asinh": ([root, 2 * root], [_below(root, dtype)]),
    }


FORMULA_BRANCHES = {
    "sinh": (lax.sinh, _in_f32(_sinh_large), _in_f32(_sinh_small)),
    "acosh": (lax.acosh, _log_plus_log2, _acosh_small),
    "asinh": (lax.asinh, _log_plus_log2, _asinh_small),
}


def _on_each_engine(program, closed, operands, dtype):
    """(engine, its output leaves as `dtype`) for XLA and the interpreter, for the same-engine
    relations below (each engine's results compared only with its own)."""
    for engine, results in (
        ("XLA", jax.jit(program)(*operands)),
        ("interpreter", Interpreter(closed)(*operands)),
    ):
        yield engine, [np.asarray(r).astype(dtype) for r in jax.tree_util.tree_leaves(results)]


def test_formula_branches_switch_where_chlos_do():
    """At and beside each threshold, the primitive equals, bit for bit, its own branch formula
    evaluated by the same engine from the same leaves: on XLA (which confirms chlo's threshold)
    and in the interpreter. Same-engine relations need no error budget, so a threshold off by
    one value shows wherever the two branches round apart (in float16/bfloat16 by whole ulps:
    acosh's small branch overflows at max / 2 in bfloat16)."""
    operands, layout = [], []
    for dtype in FLOATS:
        for name, (large, small) in _branch_points(dtype).items():
            operands += [np.array(large, dtype), np.array(small, dtype)]
            layout.append((dtype, name))

    def program(*xs):
        out = []
        for (_, name), large, small in zip(layout, xs[::2], xs[1::2], strict=True):
            primitive, large_branch, small_branch = FORMULA_BRANCHES[name]
            out.append((primitive(large), large_branch(large), primitive(small), small_branch(small)))
        return out

    with x64():
        closed = jax.make_jaxpr(program)(*operands)
        for engine, leaves in _on_each_engine(program, closed, operands, np.float64):
            for k, (dtype, name) in enumerate(layout):
                prim_large, large, prim_small, small = leaves[4 * k : 4 * k + 4]
                assert np.array_equal(prim_large, large), f"{engine} {name} {dtype}: not the large branch"
                assert np.array_equal(prim_small, small), f"{engine} {name} {dtype}: not the small branch"
    with np.errstate(over="ignore"):  # the cases tell the branches apart: bfloat16 acosh at max / 2
        at_half = np.array(_branch_points(BF16)["acosh"][0][:1], BF16)
        (small_there,) = Interpreter(jax.make_jaxpr(_acosh_small)(at_half))(at_half)
    assert np.isinf(np.asarray(small_there, np.float32)).all()


#: Leaves XLA CPU computes for float16/bfloat16 as its float32 kernel rounded once, bit for bit on
#: every value of both (checked below on XLA itself). expm1 and tanh are not: XLA treats small
#: arguments apart; nor is float16 sin.
NARROW_AS_FLOAT32 = ("exp", "log", "log1p", "cos", "tan", "sqrt", "rsqrt", "cbrt")


def test_narrow_leaves_are_their_float32_leaf_rounded_once():
    """For every float16 and bfloat16 value, each engine's narrow leaf equals its own float32
    leaf rounded once: a same-engine relation, so exact with no budget, on any machine. Computing
    in float64 instead rounds some differently (float16 exp of 0.0073, bfloat16 exp of 6.84)."""
    operands = []
    for dtype in (F16, BF16):
        every = np.arange(1 << 16, dtype=np.uint16).view(dtype)
        operands.append(every[~np.isnan(every.astype(np.float32))])

    def program(*xs):
        return [
            (getattr(lax, name)(x), getattr(lax, name)(x.astype(jnp.float32)).astype(x.dtype))
            for x in xs
            for name in NARROW_AS_FLOAT32
        ]

    closed = jax.make_jaxpr(program)(*operands)
    with np.errstate(all="ignore"):
        for engine, leaves in _on_each_engine(program, closed, operands, np.float32):
            labels = [(dtype, name) for dtype in (F16, BF16) for name in NARROW_AS_FLOAT32]
            for (dtype, name), narrow, rounded in zip(labels, leaves[::2], leaves[1::2], strict=True):
                same = (narrow.view(np.uint32) == rounded.view(np.uint32)) | (
                    np.isnan(narrow) & np.isnan(rounded)
                )
                assert same.all(), (
                    f"{engine} {name} {dtype}: {int((~same).sum())} values not float32 rounded once"
                )
    every = operands[0].astype(np.float32)
    with np.errstate(all="ignore"):  # the test can tell: float64 rounds some float16 exp apart
        assert not np.array_equal(np.exp(every).astype(F16), np.exp(every.astype(np.float64)).astype(F16))


BINARY = tuple(sorted(name for name, spec in SPECS.items() if spec.arity == 2))


@pytest.mark.parametrize("name", BINARY)
def test_a_scalar_first_operand_beside_an_array(name):
    """lax's binary primitives take a 0-d operand on either side of an array (the generated
    cases put it second): each binary rule with a 0-d first operand, every dtype it accepts."""
    spec = SPECS[name]
    rng = np.random.default_rng(6)
    make = spec.operands or (lambda rng, dtype, shape, position: values(rng, dtype, shape, spec.subnormals))
    operands = [make(rng, dtype, shape, k) for dtype in spec.dtypes for k, shape in enumerate([(), (2, 5)])]
    with x64():
        check(
            _program(name, 2, len(operands) // 2),
            *operands,
            ulps=lambda dtype: _budget(spec, dtype),
            expect=spec.expect or name,
        )


def test_pow_of_one_and_two_element_arrays():
    """_power copies its operands (doubling a single element) so NumPy sees full arrays: arrays of
    one and two elements keep each element's own power."""
    x = np.array([2.0, 3.0], np.float32)
    y = np.array([0.5, 3.0], np.float32)
    check_bits(lambda a, b: (lax.pow(a, b), lax.pow(a[:1], b[:1]), lax.pow(a[1:], b[1:])), x, y, expect="pow")
