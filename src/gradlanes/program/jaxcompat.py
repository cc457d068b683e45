"""The one place gradlanes touches `jax.extend` and other names that moved between JAX releases.

gradlanes runs on jax 0.10 (Python 3.11, this machine) and jax 0.11 (the GPU machine). Keeping the
version-sensitive imports here means a JAX upgrade is a one-file change.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax
import jax.core
import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var, jaxpr_as_fun
from jax.extend.random import random_seed, threefry2x32_p, threefry_prng_impl

#: jax.monitoring event recorded once per XLA backend compilation (jax/_src/dispatch.py).
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

#: Primitives that call a nested jaxpr with their own operands, and the param holding it.
CALL_JAXPR_PARAM = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
    "remat": "jaxpr",
    "remat2": "jaxpr",  # jax.checkpoint's primitive in jax 0.10 and 0.11
    "checkpoint": "jaxpr",
}


@contextlib.contextmanager
def without_source_locations() -> Iterator[None]:
    """Trace and lower with no Python source locations in the program.

    Equations otherwise carry tracebacks that end up as file paths in the exported StableHLO, so
    the same program would have a different fingerprint in every checkout.
    """
    previous = jax.config.jax_traceback_in_locations_limit
    jax.config.update("jax_traceback_in_locations_limit", 0)
    try:
        yield
    finally:
        jax.config.update("jax_traceback_in_locations_limit", previous)


def is_extended(dtype) -> bool:
    """True for JAX's extended dtypes (typed PRNG keys, key<fry>), which NumPy cannot hold."""
    if dtype is None or isinstance(dtype, np.dtype):
        return False
    return jax.dtypes.issubdtype(dtype, jax.dtypes.extended)


def key_impl(dtype):
    """The PRNG implementation (threefry2x32, rbg, ...) behind a typed key dtype."""
    return dtype._impl


def key_data(keys) -> np.ndarray:
    """The raw words of a jax typed-key array (uint32[*shape, *key_shape])."""
    return np.asarray(jax.random.key_data(keys))


def wrap_key_data(data: np.ndarray, dtype):
    """A jax typed-key array of `dtype` holding the raw words `data`."""
    return jax.random.wrap_key_data(data, impl=key_impl(dtype))


def eval_jaxpr(program: ClosedJaxpr, *args):
    """JAX's own reference evaluation of a closed jaxpr (op by op, as jax.core.eval_jaxpr does)."""
    reference = getattr(jax.core, "eval_jaxpr", None)
    if reference is not None:
        return reference(program.jaxpr, program.consts, *args)
    return jaxpr_as_fun(program)(*args)


def rebind(eqn: JaxprEqn, *operands) -> list:
    """Apply an equation's primitive, with its params, to `operands`; always a list of outputs.

    Older JAX's `Primitive.get_bind_params` returns `(subfuns, params)`, the JAX pinned here the
    params alone; call-like primitives need it to turn jaxpr params back into what bind takes.
    """
    bound = eqn.primitive.get_bind_params(eqn.params)
    subfuns, params = bound if isinstance(bound, tuple) else ((), bound)
    outs = eqn.primitive.bind(*subfuns, *operands, **params)
    return list(outs) if eqn.primitive.multiple_results else [outs]


def sub_jaxprs(eqn: JaxprEqn) -> list[Jaxpr]:
    """Every jaxpr nested in an equation's params (open form), for walking and counting."""
    found: list[Jaxpr] = []

    def visit(value) -> None:
        if isinstance(value, ClosedJaxpr):
            found.append(value.jaxpr)
        elif isinstance(value, Jaxpr):
            found.append(value)
        elif isinstance(value, (tuple, list)):
            for item in value:
                visit(item)

    for value in eqn.params.values():
        visit(value)
    return found


def called_jaxpr(eqn: JaxprEqn) -> tuple[Jaxpr, list] | None:
    """For a call-like equation, the jaxpr it runs on its operands and that jaxpr's constants."""
    param = CALL_JAXPR_PARAM.get(eqn.primitive.name)
    if param is None or param not in eqn.params:
        return None
    value = eqn.params[param]
    if isinstance(value, ClosedJaxpr):
        return value.jaxpr, list(value.consts)
    return value, []


__all__ = [
    "BACKEND_COMPILE_EVENT",
    "CALL_JAXPR_PARAM",
    "ClosedJaxpr",
    "Jaxpr",
    "JaxprEqn",
    "Literal",
    "Var",
    "called_jaxpr",
    "eval_jaxpr",
    "is_extended",
    "key_data",
    "key_impl",
    "jaxpr_as_fun",
    "random_seed",  # random_seed, threefry2x32_p, threefry_prng_impl: for the PRNG rules' tests
    "sub_jaxprs",
    "threefry2x32_p",
    "threefry_prng_impl",
    "without_source_locations",
    "wrap_key_data",
]


def started_backends() -> frozenset[str] | None:
    """Names of the XLA backends this process has started (empty before the first), None if unknown.

    JAX has no public way to ask without starting them; the `_backends` table of
    jax/_src/xla_bridge.py exists under this name in jax 0.10 and 0.11.
    """
    try:
        from jax._src import xla_bridge
    except ImportError:
        return None
    table = getattr(xla_bridge, "_backends", None)
    return None if table is None else frozenset(table)
