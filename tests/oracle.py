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
from collections.abc import Callable, Iterator
from typing import Any

import jax
import ml_dtypes
import numpy as np

from gradlanes.program.interpreter import Interpreter
from gradlanes.program.jaxcompat import is_extended, key_data, sub_jaxprs
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


def assert_same(want: np.ndarray, got: np.ndarray, ulps: float = 0.0, label: str = "") -> None:
    """`got` has `want`'s dtype, shape and values (within `ulps` for floats; NaN where NaN)."""
    assert got.dtype == want.dtype, f"{label}: dtype {got.dtype}, JAX gives {want.dtype}"
    assert got.shape == want.shape, f"{label}: shape {got.shape}, JAX gives {want.shape}"
    if want.dtype.kind not in "fc" or ulps == 0:
        np.testing.assert_array_equal(got, want, err_msg=label, strict=True)
        return
    w, g = want.astype(np.float64), got.astype(np.float64)
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


def check(fn: Callable, *args: Any, ulps: float = 0.0, expect: str | None = None) -> set[str]:
    """Run `fn(*args)` on XLA and in the interpreter and compare every output; return the primitives.

    `expect` names a primitive the traced program must contain (the rule under test).
    """
    closed = jax.make_jaxpr(fn)(*args)
    found = primitives(closed)
    if expect is not None:
        assert expect in found, f"{expect} not in the traced program ({sorted(found)})"
    flat_args = jax.tree_util.tree_leaves(args)
    want = [_host(x) for x in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    got = [_host(x) for x in Interpreter(closed)(*flat_args)]
    assert len(got) == len(want), f"{len(got)} outputs, JAX gives {len(want)}"
    for index, (w, g) in enumerate(zip(want, got, strict=True)):
        assert_same(w, np.asarray(g), ulps, f"output {index} of {expect or fn}")
    if expect is not None:
        CASES_RUN[expect] += 1
    return found
