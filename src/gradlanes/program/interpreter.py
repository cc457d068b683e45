"""A host interpreter for captured jaxprs: every equation evaluated in NumPy, no XLA at run time.

After JAX's "Writing custom Jaxpr interpreters" and autodidax: an environment of values, a rule
table keyed by primitive name, recursion into nested jaxprs (`jit`, `custom_jvp_call`, ...). Two
things make it a fast engine as well as a correctness one: each jaxpr is turned once into a flat
plan (variables become slots of a list, literals are pre-placed, dead values are dropped as soon as
their last reader has run), and every rule is a whole-array NumPy call, never a Python loop over
elements. Unsupported primitives are found before the first step by walking the whole program. The rules
live in `gradlanes.program.rules`, one module per kind of primitive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from gradlanes.program.jaxcompat import (
    CALL_JAXPR_PARAM,
    ClosedJaxpr,
    Jaxpr,
    Literal,
    called_jaxpr,
    is_extended,
    sub_jaxprs,
)
from gradlanes.program.rules import EXACT_DTYPES, RULES, STRUCTURED, Rule
from gradlanes.program.rules.elementwise import xla_float_environment
from gradlanes.program.rules.prng import KEY_LAYOUT, KeyArray, meets_keys, on_key_words

__all__ = ["RULES", "Interpreter", "UnsupportedPrimitive", "find_unsupported", "widened"]


class UnsupportedPrimitive(NotImplementedError):
    """The program uses a primitive the interpreter has no rule for."""


def find_unsupported(jaxpr: Jaxpr) -> set[str]:
    """Names of primitives anywhere in `jaxpr` (nested jaxprs included) that have no rule."""
    missing = set()
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in CALL_JAXPR_PARAM:
            if called_jaxpr(eqn) is None:
                missing.add(name)
        elif name not in RULES and name not in STRUCTURED:
            missing.add(name)
        elif name in RULES and meets_keys(eqn) and name not in KEY_LAYOUT:
            missing.add(f"{name} (on PRNG keys)")
        for sub in sub_jaxprs(eqn):
            missing |= find_unsupported(sub)
    return missing


def host_dtype(dtype: Any) -> Any:
    """A jaxpr dtype as the interpreter holds it: a NumPy dtype, or JAX's own for PRNG keys."""
    return dtype if is_extended(dtype) else np.dtype(dtype)


def widened(dtype: Any) -> Any:
    """The float64 reference's dtype for `dtype`: every narrower float becomes float64.

    float16 and bfloat16 widen too: the reference stands for the exact result, not for the
    rounding a program asked for. Integers, booleans, float64 and PRNG keys are left alone.
    """
    if is_extended(dtype):
        return dtype
    dtype = np.dtype(dtype)
    if (dtype.kind == "f" and dtype.itemsize < 8) or dtype.name == "bfloat16":
        return np.dtype(np.float64)
    if dtype.kind == "c" and dtype.itemsize < 16:
        return np.dtype(np.complex128)
    return dtype


def _widen_param(value: Any) -> Any:
    """A dtype-valued equation parameter (`new_dtype`, `preferred_element_type`, ...) widened."""
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return widened(value)
    return value


class PlanStep(NamedTuple):
    """One equation of a plan; a tuple, so the run loop unpacks it as fast as a plain one."""

    fn: Rule  # the rule (or a nested plan's `run`)
    ins: list[int]  # slots of the operands
    out: int | list[int]  # slot of the result, or slots of the results when `multiple`
    params: dict[str, Any]
    multiple: bool
    dtype: Any  # the declared result dtype (a list of them when `multiple`)
    frees: Any  # slots whose last reader this is, cleared after it runs


class _Plan:
    """A jaxpr flattened into slot-addressed steps, built once and run many times.

    Equations whose operands are all literals or constants (the `broadcast_in_dim 0.0` and
    `div 1.0 64.0` that autodiff leaves behind) are evaluated once here, not on every call.
    With `widen`, every float value the plan makes (literals, constants, dtype parameters such as
    `convert_element_type`'s target, each equation's declared output dtype) is float64 instead.
    """

    def __init__(self, jaxpr: Jaxpr, consts: Sequence[Any], widen: bool = False):
        slots: dict[Any, int] = {}
        template: list[Any] = []
        dtype_of = widened if widen else host_dtype

        def slot_of(var) -> int:
            if isinstance(var, Literal):
                template.append(np.asarray(var.val, dtype=dtype_of(var.aval.dtype)))
                return len(template) - 1
            if var not in slots:
                slots[var] = len(template)
                template.append(None)
            return slots[var]

        def store(slots_out: list[int], values, dtypes) -> None:
            for slot, value, dtype in zip(slots_out, values, dtypes, strict=True):
                template[slot] = _as_dtype(value if isinstance(value, KeyArray) else np.asarray(value), dtype)

        const_slots = [slot_of(v) for v in jaxpr.constvars]
        for slot, var, value in zip(const_slots, jaxpr.constvars, consts, strict=True):
            template[slot] = host_value(value, dtype_of(var.aval.dtype))
        self.input_slots = [slot_of(v) for v in jaxpr.invars]
        steps = []
        for eqn in jaxpr.eqns:
            ins = [slot_of(v) for v in eqn.invars]
            outs = [slot_of(v) for v in eqn.outvars]
            dtypes = [dtype_of(v.aval.dtype) for v in eqn.outvars]
            call = called_jaxpr(eqn)
            if call is not None:
                fn, params, multiple = _Plan(*call, widen=widen).run, {}, True
            elif eqn.primitive.name in STRUCTURED:
                fn, params = STRUCTURED[eqn.primitive.name](eqn, _Planner(widen))
                multiple = eqn.primitive.multiple_results
            else:
                fn, params = RULES[eqn.primitive.name], dict(eqn.params)
                if meets_keys(eqn):  # slices, gathers ... of key arrays move their words
                    fn, params = on_key_words(eqn, fn)
                elif widen and eqn.primitive.name in EXACT_DTYPES:
                    fn = _at_program_dtypes(fn, [host_dtype(v.aval.dtype) for v in eqn.invars])
                elif widen:
                    params = {key: _widen_param(value) for key, value in params.items()}
                multiple = eqn.primitive.multiple_results
            if all(template[i] is not None for i in ins) and not eqn.effects:
                result = fn(*[template[i] for i in ins], **params)
                store(outs, result if multiple else (result,), dtypes)
                continue
            if multiple:
                steps.append(PlanStep(fn, ins, outs, params, True, dtypes, []))
            else:
                steps.append(PlanStep(fn, ins, outs[0], params, False, dtypes[0], []))
        self.output_slots = [slot_of(v) for v in jaxpr.outvars]
        # Drop each intermediate right after its last reader, so peak memory stays near XLA's.
        keep = set(self.output_slots) | {i for i, v in enumerate(template) if v is not None}
        last_use: dict[int, int] = {}
        for index, step in enumerate(steps):
            for slot in step.ins:
                last_use[slot] = index
        for slot, index in last_use.items():
            if slot not in keep:
                steps[index].frees.append(slot)
        self.steps = [step._replace(frees=tuple(step.frees)) for step in steps]
        self.template = template

    def run(self, *args: Any) -> list[Any]:
        env = list(self.template)
        for slot, value in zip(self.input_slots, args, strict=True):
            env[slot] = value
        for fn, ins, out, params, multiple, dtype, frees in self.steps:
            result = fn(*[env[i] for i in ins], **params)
            if multiple:
                for slot, value, expected in zip(out, result, dtype, strict=True):
                    env[slot] = value if value.dtype is expected else _as_dtype(value, expected)
            else:  # most equations: one output, its dtype usually already right (an identity check)
                env[out] = result if result.dtype is dtype else _as_dtype(result, dtype)
            for slot in frees:
                env[slot] = None
        return [env[i] for i in self.output_slots]


class _Planner:
    """What a structured builder gets to plan its nested jaxprs (`rules.PlanMaker`)."""

    def __init__(self, widen: bool):
        self.widen = widen
        self.dtype_of = widened if widen else host_dtype

    def __call__(self, jaxpr: Jaxpr, consts: Sequence[Any]):
        return _Plan(jaxpr, consts, widen=self.widen).run


def _as_dtype(value: Any, dtype: Any) -> Any:
    if isinstance(value, KeyArray):
        return value.stamped(dtype)
    return value if value.dtype == dtype else value.astype(dtype)


def _at_program_dtypes(fn: Rule, dtypes: list[Any]) -> Rule:
    """`fn` run on its operands cast back to the program's dtypes (for `EXACT_DTYPES` under widen)."""

    def exact(*operands, **params):
        return fn(*[_as_dtype(x, d) for x, d in zip(operands, dtypes, strict=True)], **params)

    return exact


def host_value(value: Any, dtype: Any) -> Any:
    """An input or constant as the plan holds it: a NumPy array of `dtype`, or a `KeyArray`."""
    if is_extended(dtype):
        return (value if isinstance(value, KeyArray) else KeyArray.from_jax(value)).stamped(dtype)
    return np.asarray(value).astype(dtype, copy=False)


class Interpreter:
    """Evaluate a closed jaxpr in NumPy. Checks the whole program for support when built.

    `widen=True` makes the float64 reference of the same program: float inputs, literals,
    constants and every float the program computes are float64, so its outputs are the exact
    result to about 1e-16, against which a float32 engine's rounding can be measured.
    """

    def __init__(self, program: ClosedJaxpr, label: str = "program", *, widen: bool = False):
        missing = find_unsupported(program.jaxpr)
        if missing:
            raise UnsupportedPrimitive(
                f"the interpreter has no rule for primitive(s) {', '.join(sorted(missing))} used in "
                f"the captured {label}; add a rule to gradlanes.program.rules or run this "
                "lane on engine 'xla'"
            )
        # Planning evaluates constant equations: in XLA's float environment too.
        with np.errstate(all="ignore"), xla_float_environment():
            self._plan = _Plan(program.jaxpr, program.consts, widen=widen)
        self._label = label
        dtype_of = widened if widen else host_dtype
        self._input_dtypes = [dtype_of(v.aval.dtype) for v in program.jaxpr.invars]
        # Without widen, NumPy inputs of the right dtype pass through untouched (the hot path).
        self._convert_inputs = widen or any(is_extended(d) for d in self._input_dtypes)

    def __call__(self, *args: Any) -> list[Any]:
        if len(args) != len(self._input_dtypes):
            raise TypeError(
                f"the captured {self._label} takes {len(self._input_dtypes)} inputs, got {len(args)}"
            )
        # Every value in the plan has its declared dtype (the rules rely on it): jax.Arrays,
        # lists, Python numbers and NumPy arrays of another dtype are converted on the way in.
        if self._convert_inputs or not all(
            isinstance(a, np.ndarray | np.generic) and a.dtype == d
            for a, d in zip(args, self._input_dtypes, strict=True)
        ):
            args = [host_value(a, d) for a, d in zip(args, self._input_dtypes, strict=True)]
        # Overflow to inf, 0/0 and the like are values here, as on XLA, not events to warn about;
        # and subnormals flush to zero as XLA's CPU code flushes them (FTZ and DAZ, at no cost).
        with np.errstate(all="ignore"), xla_float_environment():
            return [_materialize(value) for value in self._plan.run(*args)]


def _materialize(value: Any) -> Any:
    """Outputs may be NumPy scalars or broadcast views; make them ordinary arrays (0-d kept 0-d).

    PRNG keys come back as `KeyArray`s (`.to_jax()` makes them JAX's typed keys again).
    """
    if isinstance(value, KeyArray):
        return value
    value = np.asarray(value)
    return value if value.flags.c_contiguous and value.flags.writeable else np.array(value, order="C")
