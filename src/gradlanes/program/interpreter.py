"""A host interpreter for captured jaxprs: every equation evaluated in NumPy, no XLA at run time.

After JAX's "Writing custom Jaxpr interpreters" and autodidax: an environment of values, a rule
table keyed by primitive name, recursion into nested jaxprs (`jit`, `custom_jvp_call`, ...). Two
things make it a fast engine as well as a correctness one: each jaxpr is turned once into a flat
plan (variables become slots of a list, literals are pre-placed, dead values are dropped as soon as
their last reader has run), and every rule is a whole-array NumPy call, never a Python loop over
elements. Unsupported primitives are found before the first step by walking the whole program.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from gradlanes.program.jaxcompat import (
    CALL_JAXPR_PARAM,
    ClosedJaxpr,
    Jaxpr,
    Literal,
    called_jaxpr,
    sub_jaxprs,
)

Rule = Callable[..., Any]
RULES: dict[str, Rule] = {}


def rule(*names: str):
    def register(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
        return fn

    return register


def _unary(name: str, fn: Callable[[np.ndarray], np.ndarray]) -> None:
    RULES[name] = lambda x, **_: fn(x)


def _binary(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
    RULES[name] = lambda x, y, **_: fn(x, y)


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
    _unary(_name, _fn)

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
    _binary(_name, _fn)


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


@rule("dot_general")
def _dot_general(lhs, rhs, *, dimension_numbers, preferred_element_type=None, **_):
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    lhs_contract, rhs_contract = tuple(map(int, lhs_contract)), tuple(map(int, rhs_contract))
    lhs_batch, rhs_batch = tuple(map(int, lhs_batch)), tuple(map(int, rhs_batch))
    if not lhs_batch and lhs.ndim == 2 and rhs.ndim == 2 and len(lhs_contract) == 1:
        # The hot case: a plain matrix product. Transposed views go to BLAS without a copy.
        a = lhs if lhs_contract[0] == 1 else lhs.T
        b = rhs if rhs_contract[0] == 0 else rhs.T
        out = a @ b
    else:
        lhs_free = [d for d in range(lhs.ndim) if d not in lhs_contract and d not in lhs_batch]
        rhs_free = [d for d in range(rhs.ndim) if d not in rhs_contract and d not in rhs_batch]
        batch_shape = [lhs.shape[d] for d in lhs_batch]
        free_shape = [lhs.shape[d] for d in lhs_free] + [rhs.shape[d] for d in rhs_free]
        size = lambda arr, dims: int(np.prod([arr.shape[d] for d in dims], dtype=np.int64))  # noqa: E731
        batch, contract = size(lhs, lhs_batch), size(lhs, lhs_contract)
        a = np.transpose(lhs, lhs_batch + tuple(lhs_free) + lhs_contract).reshape(
            batch, size(lhs, lhs_free), contract
        )
        b = np.transpose(rhs, rhs_batch + rhs_contract + tuple(rhs_free)).reshape(
            batch, contract, size(rhs, rhs_free)
        )
        out = np.matmul(a, b).reshape(batch_shape + free_shape)
    if preferred_element_type is not None:
        out = out.astype(preferred_element_type, copy=False)
    return out


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
        elif name not in RULES:
            missing.add(name)
        for sub in sub_jaxprs(eqn):
            missing |= find_unsupported(sub)
    return missing


def widened(dtype: Any) -> np.dtype:
    """The float64 reference's dtype for `dtype`: every narrower float becomes float64.

    float16 and bfloat16 widen too: the reference stands for the exact result, not for the
    rounding a program asked for. Integers, booleans and float64 are left alone.
    """
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
        dtype_of = widened if widen else np.dtype

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
                template[slot] = np.asarray(value).astype(dtype, copy=False)

        const_slots = [slot_of(v) for v in jaxpr.constvars]
        for slot, value in zip(const_slots, consts, strict=True):
            value = np.asarray(value)
            template[slot] = value.astype(dtype_of(value.dtype), copy=False)
        self.input_slots = [slot_of(v) for v in jaxpr.invars]
        steps = []
        for eqn in jaxpr.eqns:
            ins = [slot_of(v) for v in eqn.invars]
            outs = [slot_of(v) for v in eqn.outvars]
            dtypes = [dtype_of(v.aval.dtype) for v in eqn.outvars]
            call = called_jaxpr(eqn)
            if call is not None:
                fn, params, multiple = _Plan(*call, widen=widen).run, {}, True
            else:
                fn, params = RULES[eqn.primitive.name], dict(eqn.params)
                if widen:
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


def _as_dtype(value: Any, dtype: np.dtype) -> Any:
    return value if value.dtype == dtype else value.astype(dtype)


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
                f"the captured {label}; add a rule to gradlanes.program.interpreter.RULES or run this "
                "lane on engine 'xla'"
            )
        self._plan = _Plan(program.jaxpr, program.consts, widen=widen)
        self._widened_inputs = [widened(v.aval.dtype) for v in program.jaxpr.invars] if widen else None

    def __call__(self, *args: Any) -> list[np.ndarray]:
        if self._widened_inputs is not None:
            args = [
                np.asarray(a).astype(d, copy=False) for a, d in zip(args, self._widened_inputs, strict=True)
            ]
        return [_materialize(value) for value in self._plan.run(*args)]


def _materialize(value: Any) -> np.ndarray:
    """Outputs may be NumPy scalars or broadcast views; make them ordinary arrays (0-d kept 0-d)."""
    value = np.asarray(value)
    return value if value.flags.c_contiguous and value.flags.writeable else np.array(value, order="C")
