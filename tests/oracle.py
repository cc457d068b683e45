"""JAX as the oracle for the interpreter's rules: trace a function, run it on XLA and in NumPy, compare.

Every rule test goes through `check`: the function is traced once (`jax.make_jaxpr`), run by XLA
(`jax.jit` of the same function) and by the interpreter on the same inputs, and each output must
have XLA's dtype and shape and its values: bit for bit for integers, booleans and exactly rounded
float operations (`ulps=0`), within `ulps` units in the last place for the others, with NaN where
XLA has NaN and the same infinities. `primitives` lists every primitive in the traced program
(nested jaxprs included), so a case can assert it exercises the rule it is named for.

Rule modules' tests keep a `CASES` table (primitive -> how to exercise it); `test_interpreter`
checks that every registered rule is named by some module's table.
"""

from __future__ import annotations

import collections
import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import jax
import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from hypothesis_profiles import examples
from jax import lax
from jax._src import config as jax_config  # trace_context: the settings jit keys its cache on

from gradlanes.program.interpreter import Interpreter
from gradlanes.program.jaxcompat import Literal, is_extended, key_data, rebind, sub_jaxprs
from gradlanes.program.rules.prng import KeyArray

#: Every dtype a rule may see, as NumPy holds it (bfloat16 through ml_dtypes, as JAX does).
FLOATS = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32), np.dtype(np.float64))
SIGNED = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
UNSIGNED = tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
INTEGERS = SIGNED + UNSIGNED
ALL_DTYPES = (np.dtype(np.bool_),) + INTEGERS + FLOATS

#: Generated cases compared with XLA in this test run, per primitive under test (`check`'s `expect`);
#: conftest prints the tally at the end of the run.
CASES_RUN: collections.Counter[str] = collections.Counter()


@contextlib.contextmanager
def x64() -> Iterator[None]:
    """64-bit types enabled while tracing and running (restored after, so tests stay independent)."""
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)


def primitives(closed) -> set[str]:
    """Every primitive name in a closed jaxpr, nested jaxprs included."""
    found: set[str] = set()

    def walk(jaxpr) -> None:
        for eqn in jaxpr.eqns:
            found.add(eqn.primitive.name)
            for sub in sub_jaxprs(eqn):
                walk(sub)

    walk(closed.jaxpr)
    return found


def _ulp(values: np.ndarray) -> np.ndarray:
    """The spacing of `values` in their own format, as float64 (bfloat16 has no np.spacing)."""
    if values.dtype == ml_dtypes.bfloat16:
        magnitude = np.abs(values.astype(np.float64))
        exponent = np.floor(np.log2(np.maximum(magnitude, float(ml_dtypes.finfo(ml_dtypes.bfloat16).tiny))))
        return np.exp2(exponent - 7)
    return np.spacing(np.abs(values)).astype(np.float64)


def flush_subnormals(values: np.ndarray) -> np.ndarray:
    """Subnormal float32/float64/bfloat16 values replaced by a zero of their sign, as XLA's CPU code
    stores them.

    XLA's CPU backend runs with flush-to-zero and denormals-are-zero set: a result below the
    smallest normal becomes 0, a subnormal operand reads as 0. The interpreter runs its rules in
    the same processor mode (`elementwise.xla_float_environment`), but BLAS threads and the C
    library do not all honour it, so results are compared with subnormals flushed on both sides
    and generated inputs hold none (`arrays`). float16 is computed in float32, where its
    subnormals are normal numbers: XLA keeps them, and so does this comparison.
    """
    if values.dtype.kind != "f" and values.dtype != ml_dtypes.bfloat16 or values.dtype == np.float16:
        return values
    tiny = ml_dtypes.finfo(values.dtype).smallest_normal
    wide = values.astype(np.float64)
    signed_zero = np.copysign(np.zeros_like(wide), wide).astype(values.dtype)
    return np.where(np.abs(wide) < float(tiny), signed_zero, values)


def assert_same(want: np.ndarray, got: np.ndarray, ulps: float = 0.0, label: str = "") -> None:
    """`got` has `want`'s dtype, shape and values (within `ulps` for floats; NaN where NaN)."""
    assert got.dtype == want.dtype, f"{label}: dtype {got.dtype}, JAX gives {want.dtype}"
    assert got.shape == want.shape, f"{label}: shape {got.shape}, JAX gives {want.shape}"
    want, got = flush_subnormals(want), flush_subnormals(got)
    floating = want.dtype.kind == "f" or want.dtype == ml_dtypes.bfloat16
    if not floating or ulps == 0:
        if want.dtype == ml_dtypes.bfloat16:  # NumPy's testing sees no NaN in bfloat16: as float32
            want, got = want.astype(np.float32), got.astype(np.float32)
        np.testing.assert_array_equal(got, want, err_msg=label, strict=True)
        if floating:  # bit for bit means the sign of a zero too
            zeros = (want == 0) & (got == 0)
            wrong = np.signbit(want[zeros]) != np.signbit(got[zeros])
            assert not wrong.any(), f"{label}: {int(wrong.sum())} zero(s) of the other sign than JAX's"
        return
    w, g = want.astype(np.float64), got.astype(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf: `exact` covers it
        return _assert_close(w, g, want, ulps, label)


def _assert_close(w: np.ndarray, g: np.ndarray, want: np.ndarray, ulps: float, label: str) -> None:
    nan = np.isnan(w)
    assert np.array_equal(nan, np.isnan(g)), f"{label}: NaN where JAX has none, or the reverse"
    exact = w == g
    close = np.abs(w - g) <= ulps * _ulp(want)
    bad = ~(nan | exact | close)
    assert not bad.any(), (
        f"{label}: {int(bad.sum())} value(s) beyond {ulps} ulp: got {g[bad][:5]}, JAX {w[bad][:5]}"
    )


def _host(value: Any) -> np.ndarray:
    """An output as NumPy: PRNG keys (JAX's or the interpreter's `KeyArray`) as their raw words."""
    if isinstance(value, KeyArray):
        return value.data
    if is_extended(getattr(value, "dtype", None)):
        return key_data(value)
    return np.asarray(value)


def xla(fn: Callable) -> Callable:
    """`jax.jit(fn)`, except that convolutions with negative padding crop their input first.

    XLA's CPU convolution (the Eigen path, float types) reads outside its input when a spatial
    dimension has negative low padding (openxla/xla#48713, open; fix proposed in #48748): the
    output positions that should see padding get whatever lies past the buffer, a different
    value from run to run (seen here: 6.5e15 and NaN where the answer is 0, in the kernel
    gradient of a strided convolution). Such a convolution is the same function as slicing the
    input and convolving with the non-negative rest of the padding, which XLA computes
    correctly, so the oracle runs that program; every other program is `jax.jit(fn)` as is.
    """

    def run(*args):
        closed, shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        if not any(_crops(eqn) for eqn in closed.jaxpr.eqns):
            return compiled_once(fn, *args)
        cropping = lambda *leaves: _evaluate_cropping(closed, leaves)  # noqa: E731
        flat = compiled_once(cropping, *jax.tree_util.tree_leaves(args))
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shape), flat)

    return run


#: Executables the oracle compiled in this process: by the function and its argument types (the
#: key jit's own cache uses), and by the exact module XLA was handed.
_BY_FUNCTION: dict[tuple, Any] = {}
_BY_MODULE: dict[tuple[str, str, str], Any] = {}
_MODULE_NAME = re.compile(r"^module @\S+", re.M)
_MAIN_SIGNATURE = re.compile(r"^\s*func\.func public @main\((.*)$", re.M)


def compiled_once(fn: Callable, *args: Any) -> Any:
    """`jax.jit(fn)(*args)`, compiling each distinct program once per test process.

    Generated cases repeat programs: the same primitive, shapes, dtypes and parameters drawn
    again, often traced from a new lambda, which jit's caches (keyed on the Python function)
    compile again. A function seen before with the same argument types and trace settings (x64,
    the PRNG flags: what jit's own cache keys on) runs the executable built for it, as jit would.
    A new one is lowered, and if XLA was already handed the same StableHLO module (its name
    aside: the function's name) with the same argument and result structure, the executable XLA
    built for that module runs: the same code, so the same bits. A module is shared only when it
    takes every argument (jit drops unused ones, and two functions that ignore different arguments
    can lower to one module) and calls no host callback (its text names the callback, not what
    the callback does).
    """
    leaves, tree = jax.tree_util.tree_flatten(args)
    types = tuple((type(x), np.shape(x), str(getattr(x, "dtype", ""))) for x in leaves)
    by_function = (fn, tree, types, jax_config.trace_context())
    executable = _BY_FUNCTION.get(by_function)
    if executable is None:
        lowered = jax.jit(fn).lower(*args)
        text = lowered.as_text(debug_info=False)
        signature = _MAIN_SIGNATURE.search(text)
        shareable = "callback" not in text and signature and signature[1].count("%arg") == len(leaves)
        if not shareable:
            executable = lowered.compile()
        else:
            by_module = (
                _MODULE_NAME.sub("module @oracle", text, count=1),
                str(lowered.in_tree),
                str(lowered.out_tree),
            )
            executable = _BY_MODULE.get(by_module)
            if executable is None:
                executable = _BY_MODULE[by_module] = lowered.compile()
        _BY_FUNCTION[by_function] = executable
    return executable(*args)


def _crops(eqn) -> bool:
    return eqn.primitive is lax.conv_general_dilated_p and any(
        low < 0 or high < 0 for low, high in eqn.params["padding"]
    )


def _evaluate_cropping(closed, args) -> list:
    """Evaluate a closed jaxpr equation by equation (under `jax.jit`), cropping convolutions."""
    env = dict(zip(closed.jaxpr.constvars, closed.consts, strict=True))
    env.update(zip(closed.jaxpr.invars, args, strict=True))
    read = lambda v: v.val if isinstance(v, Literal) else env[v]  # noqa: E731
    for eqn in closed.jaxpr.eqns:
        operands = [read(v) for v in eqn.invars]
        outs = [_cropped_convolution(*operands, **eqn.params)] if _crops(eqn) else rebind(eqn, *operands)
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(v) for v in closed.jaxpr.outvars]


def _cropped_convolution(lhs, rhs, *, padding, lhs_dilation, dimension_numbers, **params):
    """The same convolution with every negative edge of `padding` taken off `lhs` by a slice.

    On the lhs-dilated axis (length (n-1)d+1, element k at position kd) cropping p from the
    start keeps elements from k = ceil(p/d), preceded by kd-p dilation zeros: that is low
    padding kd-p >= 0 of the sliced input. The end is the mirror image.
    """
    geometry = dict(lhs_dilation=lhs_dilation, dimension_numbers=dimension_numbers, **params)
    crops, kept = [], []
    axes = dimension_numbers.lhs_spec[2:]
    for axis, (low, high), dilation in zip(axes, padding, lhs_dilation, strict=True):
        length = lhs.shape[axis]
        last = (length - 1) * dilation  # dilated position of the last element
        first_kept = -(low // dilation) if low < 0 else 0  # ceil(-low / d)
        new_low = first_kept * dilation + low if low < 0 else low
        end = last + high if high < 0 else last  # last dilated position kept
        last_kept = end // dilation if high < 0 else length - 1
        new_high = end - last_kept * dilation if high < 0 else high
        if length == 0 or end < 0 or first_kept > last_kept:
            return lax.conv_general_dilated_p.bind(lhs, rhs, padding=padding, **geometry)
        crops.append((axis, first_kept, last_kept + 1))
        kept.append((new_low, new_high))
    for axis, start, stop in crops:
        lhs = lax.slice_in_dim(lhs, start, stop, axis=axis)
    return lax.conv_general_dilated_p.bind(lhs, rhs, padding=tuple(kept), **geometry)


def check(fn: Callable, *args: Any, ulps: float = 0.0, expect: str | None = None) -> set[str]:
    """Run `fn(*args)` on XLA and in the interpreter and compare every output; return the primitives.

    `expect` names a primitive the traced program must contain (the rule under test).
    """
    closed = jax.make_jaxpr(fn)(*args)
    found = primitives(closed)
    if expect is not None:
        assert expect in found, f"{expect} not in the traced program ({sorted(found)})"
    flat_args = jax.tree_util.tree_leaves(args)
    want = [_host(x) for x in jax.tree_util.tree_leaves(xla(fn)(*args))]
    # NumPy inputs of the program's dtype enter the plan uncopied (the hot path): a rule that
    # wrote into its operands would change the caller's arrays, a model's weights among them.
    given = [(x, x.copy()) for x in flat_args if isinstance(x, np.ndarray)]
    got = [_host(x) for x in Interpreter(closed)(*flat_args)]
    for x, before in given:
        assert x.tobytes() == before.tobytes(), f"the interpreter wrote into an input of {expect or fn}"
    assert len(got) == len(want), f"{len(got)} outputs, JAX gives {len(want)}"
    for index, (w, g) in enumerate(zip(want, got, strict=True)):
        assert_same(w, np.asarray(g), ulps, f"output {index} of {expect or fn}")
    if expect is not None:
        CASES_RUN[expect] += 1
    return found


def check_widened(fn: Callable, *args: Any, ulps: float = 0.0, expect: str | None = None) -> None:
    """The float64 reference of `fn`'s float32 program equals XLA running `fn` in float64.

    `Interpreter(program, widen=True)` stands for the exact result of the float32 program; XLA
    tracing the same function on the same values held in float64 (x64) computes that exact
    result too, to float64 rounding. Correctly rounded operations (+, -, *, /, sqrt, conversions,
    selections, data movement) in the same order give the same float64 bits on both sides, so the
    default is `ulps=0`; a program with transcendental leaves or reordered sums passes the budget
    derived for it (as `oracle.check` does for float32). A wrongly widened parameter, a float64
    bitcast of float32 bits or a float32 rounding left in, is off by about 2^29 float64 ulps.
    """
    closed = jax.make_jaxpr(fn)(*args)
    flat_args = jax.tree_util.tree_leaves(args)
    got = [_host(x) for x in Interpreter(closed, widen=True)(*flat_args)]
    with x64():
        wide_args = jax.tree_util.tree_map(_to_float64, args)
        want = [_host(x) for x in jax.tree_util.tree_leaves(xla(fn)(*wide_args))]
    assert len(got) == len(want), f"{len(got)} outputs, JAX gives {len(want)}"
    for index, (w, g) in enumerate(zip(want, got, strict=True)):
        assert_same(w, np.asarray(g), ulps, f"output {index} of the float64 reference of {expect or fn}")


def _to_float64(value: Any) -> Any:
    value = np.asarray(value) if not is_extended(getattr(value, "dtype", None)) else value
    if getattr(value, "dtype", None) is not None and not is_extended(value.dtype):
        if value.dtype.kind == "f" or value.dtype == ml_dtypes.bfloat16:
            return value.astype(np.float64)
    return value


# ---- generated inputs ------------------------------------------------------------------------
#: Settings of every generated-case test: reproducible in CI (derandomized), no per-example
#: deadline (the first case of each shape pays an XLA compile).
RULE_SETTINGS = settings(
    deadline=None,
    max_examples=examples(40),
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def shapes(min_dims: int = 0, max_dims: int = 3, min_side: int = 0, max_side: int = 4):
    """Array shapes, scalars (shape ()) and zero-size arrays included."""
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)


def arrays(dtype: Any, shape: Any, *, finite: bool = False, elements: Any = None):
    """Arrays of `dtype` (bfloat16 included) whose values reach the edges: extremes, NaN, inf, -0.0.

    `shape` is a shape or a strategy of shapes. `finite` leaves NaN and inf out. Subnormals are
    left out (`flush_subnormals` says why).
    """
    dtype = np.dtype(dtype)
    if dtype == ml_dtypes.bfloat16:
        return arrays(np.float32, shape, finite=finite, elements=elements).map(
            lambda a: a.astype(ml_dtypes.bfloat16)
        )
    if elements is None and dtype.kind == "f":  # no subnormals: XLA's CPU reads them as 0
        elements = st.floats(
            width=8 * dtype.itemsize, allow_nan=not finite, allow_infinity=not finite, allow_subnormal=False
        )
    return hnp.arrays(dtype, shape, elements=elements)
