"""The NumPy jaxpr interpreter against JAX's own evaluation: rule by rule, then whole programs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from test_rules_elementwise import LEAF_32

from gradlanes.engines.compiles import compile_window
from gradlanes.program.interpreter import RULES, Interpreter, UnsupportedPrimitive
from gradlanes.program.jaxcompat import eval_jaxpr
from gradlanes.program.rules import STRUCTURED
from gradlanes.run.numerics import FLOAT32_U, probabilistic_bound, reduction_chain

RNG_SEED = 1234  # reseeded for every test (conftest: _order_free_draws)
rng = np.random.default_rng(RNG_SEED)


def f32(*shape, low=-2.0, high=2.0):
    return rng.uniform(low, high, shape).astype(np.float32)


def positive(*shape):
    return f32(*shape, low=0.1, high=3.0)


def ints(*shape):
    return rng.integers(-5, 6, shape).astype(np.int32)


def bools(*shape):
    return rng.random(shape) > 0.5


# primitive name -> (function to trace, fresh random inputs)
CASES = {
    "neg": (lambda x: -x, lambda: [f32(3, 4)]),
    "exp": (jnp.exp, lambda: [f32(3, 4)]),
    "exp2": (jnp.exp2, lambda: [f32(3, 4)]),
    "log": (jnp.log, lambda: [positive(3, 4)]),
    "log1p": (jnp.log1p, lambda: [positive(3, 4)]),
    "expm1": (jnp.expm1, lambda: [f32(3, 4)]),
    "sqrt": (jnp.sqrt, lambda: [positive(5)]),
    "rsqrt": (lax.rsqrt, lambda: [positive(5)]),
    "cos": (jnp.cos, lambda: [f32(5)]),
    "sin": (jnp.sin, lambda: [f32(5)]),
    "tan": (jnp.tan, lambda: [f32(5, low=-1, high=1)]),
    "tanh": (jnp.tanh, lambda: [f32(5)]),
    "logistic": (jax.nn.sigmoid, lambda: [f32(5)]),
    "abs": (jnp.abs, lambda: [f32(5)]),
    "sign": (jnp.sign, lambda: [f32(5)]),
    "floor": (jnp.floor, lambda: [f32(5)]),
    "ceil": (jnp.ceil, lambda: [f32(5)]),
    "not": (jnp.logical_not, lambda: [bools(5)]),
    "is_finite": (jnp.isfinite, lambda: [np.array([1.0, np.inf, -np.inf, np.nan], np.float32)]),
    "square": (lax.square, lambda: [f32(5)]),
    "stop_gradient": (lax.stop_gradient, lambda: [f32(5)]),
    "copy": (lambda x: lax.copy_p.bind(x), lambda: [f32(5)]),
    "copy_p": (lambda x: lax.copy_p.bind(x), lambda: [f32(5)]),
    "optimization_barrier": (lambda x, y: lax.optimization_barrier((x, y)), lambda: [f32(5), ints(2)]),
    "add": (jnp.add, lambda: [f32(3, 4), f32(3, 4)]),
    "add_any": (lambda x: jax.grad(lambda y: jnp.sum(y * y + y))(x), lambda: [f32(4)]),
    "sub": (jnp.subtract, lambda: [f32(3, 4), f32(4)]),
    "mul": (jnp.multiply, lambda: [f32(3, 4), f32(3, 1)]),
    "div": (jnp.divide, lambda: [f32(3, 4), positive(3, 4)]),
    "max": (jnp.maximum, lambda: [f32(3, 4), f32(3, 4)]),
    "min": (jnp.minimum, lambda: [f32(3, 4), f32(3, 4)]),
    "rem": (lax.rem, lambda: [f32(6), positive(6)]),
    "atan2": (jnp.arctan2, lambda: [f32(6), f32(6)]),
    "eq": (lambda x, y: x == y, lambda: [ints(8), ints(8)]),
    "ne": (lambda x, y: x != y, lambda: [ints(8), ints(8)]),
    "lt": (lambda x, y: x < y, lambda: [f32(8), f32(8)]),
    "le": (lambda x, y: x <= y, lambda: [ints(8), ints(8)]),
    "gt": (lambda x, y: x > y, lambda: [f32(8), f32(8)]),
    "ge": (lambda x, y: x >= y, lambda: [ints(8), ints(8)]),
    "and": (jnp.logical_and, lambda: [bools(6), bools(6)]),
    "or": (jnp.logical_or, lambda: [bools(6), bools(6)]),
    "xor": (jnp.logical_xor, lambda: [bools(6), bools(6)]),
    "nextafter": (jnp.nextafter, lambda: [f32(6), f32(6)]),
    "pow": (lambda x, n: x**n, lambda: [positive(5), ints(5)]),
    "integer_pow": (lambda x: (x**3, x**2, x**-2, x**1), lambda: [positive(5)]),
    "convert_element_type": (lambda x: x.astype(jnp.int32), lambda: [f32(6, low=-9, high=9)]),
    "select_n": (
        lambda p, a, b, c, i: (jnp.where(p, a, b), lax.select_n(i, a, b, c)),
        lambda: [bools(5), f32(5), f32(5), f32(5), rng.integers(0, 3, 5).astype(np.int32)],
    ),
    "clamp": (lambda x: lax.clamp(np.float32(-0.5), x, np.float32(0.5)), lambda: [f32(7)]),
    "broadcast_in_dim": (lambda x: jnp.broadcast_to(x[None, :, None], (4, 3, 2)), lambda: [f32(3)]),
    "reshape": (lambda x: x.reshape(2, 6), lambda: [f32(3, 4)]),
    "squeeze": (lambda x: jnp.squeeze(x, 1), lambda: [f32(3, 1, 4)]),
    "transpose": (lambda x: jnp.transpose(x, (2, 0, 1)), lambda: [f32(2, 3, 4)]),
    "reduce_sum": (lambda x: (x.sum(0), x.sum((0, 2))), lambda: [f32(3, 4, 5)]),
    "reduce_max": (lambda x: x.max(1), lambda: [f32(3, 4)]),
    "reduce_min": (lambda x: x.min(0), lambda: [f32(3, 4)]),
    "argmax": (lambda x: jnp.argmax(x, 1), lambda: [f32(5, 7)]),
    "argmin": (lambda x: jnp.argmin(x, 0), lambda: [f32(5, 7)]),
    "iota": (lambda x: x + lax.broadcasted_iota(jnp.int32, (3, 4), 1), lambda: [ints(3, 4)]),
    "concatenate": (lambda x, y: jnp.concatenate([x, y], 1), lambda: [f32(3, 2), f32(3, 4)]),
    "slice": (lambda x: x[1:3, ::2], lambda: [f32(4, 6)]),
    "dot_general": (
        lambda a, b, c, d, v: (a @ b, a.T @ c, jnp.einsum("bij,bjk->bik", d, d), v @ b, a @ b.T[0]),
        lambda: [f32(5, 3), f32(3, 4), f32(5, 6), f32(2, 3, 3), f32(3)],
    ),
}


def covered_by_rule_tests() -> set[str]:
    """Primitives named by the `COVERED` set of each tests/test_rules_*.py module (generated cases).

    Modules of targeted branch tests (test_rules_special_igamma.py, ...) name none: they add no
    primitive the module with the generated cases does not already cover."""
    import importlib
    from pathlib import Path

    names: set[str] = set()
    for path in sorted(Path(__file__).parent.glob("test_rules_*.py")):
        names |= set(getattr(importlib.import_module(path.stem), "COVERED", ()))
    return names


def test_every_rule_has_a_case():
    covered = set(CASES) | covered_by_rule_tests()
    registered = set(RULES) | set(STRUCTURED)
    assert registered <= covered, f"rules without a test case: {sorted(registered - covered)}"


#: Error budget of one float32 result, in ulps of the exact (float64 reference) result. Exact
#: operations get 0; IEEE's correctly rounded ones (+ - * / sqrt) 0.5; a result of two roundings
#: (x**3 = (x*x)*x, x**-2 = 1/(x*x), 1/sqrt(x)) 2: each rounding errs by at most u times its own
#: result, relative errors add through * / and sqrt, so the result is off by < 2u|r|(1 + u), and
#: u|r| < ulp(r); 4 million draws from [0.1, 3) measured up to 1.28, 1.49 and 1.48 ulps, above 1 in
#: 1-2 % of them (the budget of 1 it had held only for the draws one test order made);
#: transcendental functions the larger of XLA's and NumPy's ulps from the exact value where
#: test_rules_elementwise's LEAF_32 table has them (XLA's float32 expm1: 6.5, from JAX's table),
#: else 4, NumPy's validated maximum for its float32 ufuncs
#: (numpy/_core/tests/data/umath-validation-set-*.csv: 2 to 4 ulps).
#: Reductions add the probabilistic bound of their length (gradlanes.run.numerics).
ROUNDED = {"add", "add_any", "sub", "mul", "div", "sqrt", "square"}
TWO_ROUNDINGS = {"integer_pow", "rsqrt"}
TRANSCENDENTAL = {
    "exp",
    "exp2",
    "log",
    "log1p",
    "expm1",
    "cos",
    "sin",
    "tan",
    "tanh",
    "logistic",
    "atan2",
    "pow",
}
REDUCTIONS = {"reduce_sum", "dot_general"}
#: Defined by the float format itself: the float64 reference steps to the next float64, so the
#: float32 results must equal JAX's bit for bit instead.
FORMAT_DEFINED = {"nextafter"}


def ulp_budget(name: str) -> float:
    if name in LEAF_32:  # JAX's float32 accuracy table (XLA) and NumPy's (ours), from the exact value
        return max(LEAF_32[name])
    if name in TRANSCENDENTAL:
        return 4.0
    if name in TWO_ROUNDINGS:
        return 2.0
    return 0.5 if name in ROUNDED | REDUCTIONS else 0.0


def within_budget(name, got, reference, scale, chain):
    """|got - reference| <= the budget per rounding along the case's chain of operations, elementwise.

    For sums and products the ulp is taken of the result's magnitude evaluation (the program on
    |inputs|), so cancellation cannot shrink the budget below what the terms' rounding allows;
    reductions add their probabilistic bound. NaN must be NaN on both sides.
    """
    got64 = np.asarray(got, np.float64)
    ulp = np.spacing(np.abs(reference).astype(got.dtype)).astype(np.float64)
    if name in ROUNDED | REDUCTIONS:
        ulp = np.maximum(ulp, np.spacing(np.abs(scale).astype(got.dtype)).astype(np.float64))
    allowed = ulp_budget(name) * chain * ulp
    if name in REDUCTIONS:
        allowed = allowed + probabilistic_bound(chain) * FLOAT32_U * scale
    same_nan = np.isnan(got64) == np.isnan(reference)
    close = np.abs(got64 - reference) <= allowed
    equal = got64 == reference  # infinities
    return bool(np.all(same_nan & (close | equal | np.isnan(reference))))


@pytest.mark.numerics
@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_matches_jax_within_float32_error_of_the_float64_reference(name):
    fn, make_inputs = CASES[name]
    inputs = make_inputs()
    program = jax.make_jaxpr(fn)(*inputs)
    traced = {eqn.primitive.name for eqn in program.jaxpr.eqns}
    for eqn in program.jaxpr.eqns:  # look one level into jit-wrapped jnp functions
        if "jaxpr" in eqn.params and hasattr(eqn.params["jaxpr"], "jaxpr"):
            traced |= {e.primitive.name for e in eqn.params["jaxpr"].jaxpr.eqns}
    assert name.removesuffix("_p") in traced or name in traced, f"{name} not in {traced}"
    expected = [np.asarray(x) for x in eval_jaxpr(program, *inputs)]
    got = Interpreter(program)(*inputs)
    reference = Interpreter(program, widen=True)(*inputs)
    magnitudes = Interpreter(program, widen=True)(*[np.abs(x) if x.dtype.kind == "f" else x for x in inputs])
    chains = reduction_chain(program.jaxpr)
    for want, have, exact, scale, chain in zip(expected, got, reference, magnitudes, chains, strict=True):
        assert have.dtype == want.dtype
        assert have.shape == want.shape
        if want.dtype.kind != "f" or name in FORMAT_DEFINED:
            np.testing.assert_array_equal(have, want)
            continue
        for engine, value in (("interpreter", have), ("jax", want)):
            assert within_budget(name, value, exact, np.abs(scale), chain), (engine, value, exact)


def test_nested_jit_and_custom_jvp_are_evaluated():
    program = jax.make_jaxpr(lambda x: jax.jit(lambda y: jax.nn.relu(y) * 2)(x))(f32(6))
    names = {eqn.primitive.name for eqn in program.jaxpr.eqns}
    assert "jit" in names
    x = f32(6)
    np.testing.assert_array_equal(Interpreter(program)(x)[0], np.maximum(x, 0) * 2)


def test_unsupported_primitive_is_named_before_running():
    program = jax.make_jaxpr(lambda x: jnp.linalg.eigh(x)[0])(f32(3, 3))
    with pytest.raises(UnsupportedPrimitive, match=r"primitive\(s\) eigh used in the captured probe"):
        Interpreter(program, "probe")


def test_interpreter_compiles_nothing():
    program = jax.make_jaxpr(lambda a, b: jnp.tanh(a @ b).sum())(f32(4, 3), f32(3, 2))
    inputs = [f32(4, 3), f32(3, 2)]
    with compile_window() as window:
        Interpreter(program)(*inputs)
    assert window.count == 0


def test_select_is_bit_exact_with_nans_infs_and_broadcasting():
    which = rng.random((64, 8)) > 0.5
    on_true = f32(64, 8)
    on_true[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    which[0, :4] = True
    on_false = np.broadcast_to(np.float32(0), (64, 8))
    program = jax.make_jaxpr(lambda w, a, b: lax.select_n(w, b, a))(
        which, on_true, np.zeros((64, 8), np.float32)
    )
    (got,) = Interpreter(program)(which, on_true, on_false)
    expected = np.where(which, on_true, on_false)
    assert got.tobytes() == expected.tobytes()


def test_select_against_a_broadcast_zero_matches_where():
    which = rng.random((256, 16)) > 0.5
    on_true = f32(256, 16)
    on_true[3, 3], which[3, 3] = np.nan, False  # a NaN not chosen must not leak through
    zero = np.broadcast_to(np.float32(0), (256, 16))
    program = jax.make_jaxpr(lambda w, a, b: lax.select_n(w, b, a))(
        which, on_true, np.zeros((256, 16), np.float32)
    )
    (got,) = Interpreter(program)(which, on_true, zero)
    assert got.tobytes() == np.where(which, on_true, np.float32(0)).tobytes()


def test_inputs_that_are_not_numpy_arrays_are_converted_first():
    program = jax.make_jaxpr(lambda a, b: a * b + 1)(f32(3), np.float32(2))
    (got,) = Interpreter(program)(jnp.arange(3, dtype=jnp.float32), 2.0)
    np.testing.assert_array_equal(got, np.arange(3, dtype=np.float32) * 2 + 1)
    assert got.dtype == np.float32


def test_numpy_inputs_of_another_dtype_run_at_the_programs_dtype():
    """A float64 array given to a float32 program is rounded to float32 first: the sum then rounds
    as float32 does (1e8 + 5 + 5 is 1.0000002e8 in float32 steps, 1.0000001e8 in float64)."""
    program = jax.make_jaxpr(lambda x: lax.reduce_window(x, np.float32(0), lax.add, (3,), (1,), "VALID"))(
        f32(3)
    )
    (got,) = Interpreter(program)(np.array([1e8, 5.0, 5.0]))
    assert got.dtype == np.float32
    assert got.tobytes() == np.array([np.float32(1e8) + np.float32(5) + np.float32(5)]).tobytes()


def test_a_wrong_number_of_inputs_is_named():
    program = jax.make_jaxpr(lambda a, b: a * b)(f32(3), f32(3))
    with pytest.raises(TypeError) as refused:
        Interpreter(program, "train step")(f32(3))
    assert str(refused.value) == "the captured train step takes 2 inputs, got 1"


def test_the_interpreter_doc_lists_every_primitive_with_a_rule():
    import re
    from pathlib import Path

    from gradlanes.program.jaxcompat import CALL_JAXPR_PARAM

    text = (Path(__file__).resolve().parents[1] / "docs" / "interpreter.md").read_text()
    block = text.split("<!-- primitives:start -->")[1].split("<!-- primitives:end -->")[0]
    rows = [line.split("|")[2] for line in block.splitlines() if line.startswith("| ") and "---" not in line]
    listed = {name for row in rows[1:] for name in re.findall(r"`([\w-]+)`", row.split("(")[0])}
    assert listed == set(RULES) | set(STRUCTURED) | set(CALL_JAXPR_PARAM)


# ---- the plan and its edges --------------------------------------------------------------------
def test_an_unsupported_primitive_inside_a_nested_program_is_named_in_full():
    """find_unsupported walks nested jaxprs (here a scan body), and the error says what to do."""
    program = jax.make_jaxpr(
        lambda x: lax.scan(lambda c, row: (c + jnp.linalg.eigh(row.reshape(1, 1))[0].sum(), c), 0.0, x)
    )(f32(3, 1))
    with pytest.raises(UnsupportedPrimitive) as refused:
        Interpreter(program, "probe")
    assert str(refused.value) == (
        "the interpreter has no rule for primitive(s) eigh used in the captured probe; add a rule to "
        "gradlanes.program.rules or run this lane on engine 'xla'"
    )


def test_widened_dtypes_of_the_float64_reference():
    """Every float narrower than float64 (float16 and bfloat16 too) and complex64 widen; the rest,
    and JAX's PRNG key dtype, stay."""
    from gradlanes.program.interpreter import widened

    assert widened(np.float16) == widened(np.float32) == widened(jnp.bfloat16) == np.float64
    assert widened(np.complex64) == np.complex128
    for kept in (np.float64, np.complex128, np.int8, np.int32, np.uint64, np.bool_):
        assert widened(kept) == np.dtype(kept)
    key_dtype = jax.random.key(0).dtype
    assert widened(key_dtype) is key_dtype


def test_the_reference_widens_dtype_parameters_but_not_bit_level_rules():
    """With widen, a convert_element_type to float16 yields float64 (the exact value), while a
    bitcast and nextafter still see the program's own dtypes (EXACT_DTYPES)."""
    x = np.array([1.0, 1 / 3, -2.5e-3, 70000.0], np.float32)
    program = jax.make_jaxpr(
        lambda a: (
            a.astype(jnp.float16),
            lax.bitcast_convert_type(a, jnp.int32),
            lax.nextafter(a, jnp.full_like(a, np.inf)),
        )
    )(x)
    half, bits, after = Interpreter(program, widen=True)(x)
    assert half.dtype == np.float64 and np.array_equal(half, x.astype(np.float64))
    assert bits.dtype == np.int32 and np.array_equal(bits, x.view(np.int32))
    assert np.array_equal(after, np.nextafter(x, np.float32(np.inf)).astype(np.float64))


def test_constant_equations_are_evaluated_once_when_planned():
    """An equation of literals only (autodiff's `div 1.0 64.0`) becomes a value of the plan, not a
    step; the steps left are the ones that read an input."""
    program = jax.make_jaxpr(lambda x: x * (jnp.float32(1) / jnp.float32(64)) + jnp.zeros(3, jnp.float32))(
        f32(3)
    )
    interpreter = Interpreter(program)
    names = [step.fn for step in interpreter._plan.steps]
    assert len(names) == 2, names  # the mul and the add; the div and the broadcast are folded
    x = f32(3)
    np.testing.assert_array_equal(interpreter(x)[0], x * np.float32(1 / 64))


def test_each_intermediate_is_dropped_after_its_last_reader():
    """Peak memory near XLA's: every step frees the slots it read last (inputs and intermediates),
    never an output, a literal or a constant; a value read twice is freed at its second reader."""
    program = jax.make_jaxpr(lambda x: (((x * 2) + x) * 3, x - 1))(f32(4))
    plan = Interpreter(program)._plan
    outputs = set(plan.output_slots)
    held = {slot for slot, value in enumerate(plan.template) if value is not None}
    readers: dict[int, list[int]] = {}
    for index, step in enumerate(plan.steps):
        for slot in step.ins:
            readers.setdefault(slot, []).append(index)
    for slot, at in readers.items():
        freed_at = [index for index, step in enumerate(plan.steps) if slot in step.frees]
        expected = [] if slot in outputs or slot in held else [max(at)]
        assert freed_at == expected, (slot, at, freed_at)
    assert any(step.frees for step in plan.steps)


def test_outputs_are_ordinary_arrays_even_where_rules_return_views():
    """A broadcast (read-only, stride 0) or transposed result comes back as a C-contiguous,
    writeable array of the same values; a 0-d result stays 0-d."""
    program = jax.make_jaxpr(lambda x: (jnp.broadcast_to(x, (3, 4)), x[None, :].T, x.sum()))(f32(4))
    x = f32(4)
    wide, column, total = Interpreter(program)(x)
    for value in (wide, column):
        assert value.flags.c_contiguous and value.flags.writeable
    np.testing.assert_array_equal(wide, np.broadcast_to(x, (3, 4)))
    np.testing.assert_array_equal(column, x[:, None])
    assert total.shape == () and isinstance(total, np.ndarray)


def test_multiple_results_of_a_nested_call_keep_their_declared_dtypes():
    """A nested jit returns several values; each is held at its declared dtype (an integer and a
    float from one call)."""
    program = jax.make_jaxpr(jax.jit(lambda x: (x.astype(jnp.int16), x * 2)))(f32(5, low=-9, high=9))
    x = f32(5, low=-9, high=9)
    small, double = Interpreter(program)(x)
    assert (small.dtype, double.dtype) == (np.int16, np.float32)
    np.testing.assert_array_equal(small, x.astype(np.int16))


def test_a_nested_plan_given_the_wrong_number_of_operands_refuses():
    """Structured rules (scan, while, cond) call their bodies' plans with operand lists they slice
    themselves: one operand too few or too many is an error there, never a body run on a partial
    or shifted environment."""
    from gradlanes.program.interpreter import _Planner

    body = jax.make_jaxpr(lambda a, b: a * b)(f32(3), f32(3))
    a, b = f32(3), f32(3)
    for widen in (False, True):
        run = _Planner(widen)(body.jaxpr, body.consts)
        np.testing.assert_array_equal(run(a, b)[0], a * b)
        for operands in ((a,), (a, b, a)):
            with pytest.raises(ValueError, match="zip"):
                run(*operands)


def test_a_rule_returning_fewer_results_than_its_equation_declares_is_an_error(monkeypatch):
    """A multiple-result rule that drops one (here `split`, patched to keep its first half only)
    fails the step, instead of leaving the declared output unset and returning it as None."""
    program = jax.make_jaxpr(lambda x: jnp.split(x, 2))(f32(4))
    assert [eqn.primitive.name for eqn in program.jaxpr.eqns] == ["split"]
    split = RULES["split"]
    monkeypatch.setitem(RULES, "split", lambda *operands, **params: split(*operands, **params)[:1])
    with pytest.raises(ValueError, match="zip"):
        Interpreter(program)(f32(4))


def test_keys_the_interpreter_returned_can_be_fed_back_in():
    """A training loop carries its PRNG key from step to step: a key the interpreter returned (a
    KeyArray) is a valid input to the next call, and the chain of keys is JAX's."""
    from gradlanes.program.rules.prng import KeyArray

    step = jax.make_jaxpr(lambda key: jax.random.fold_in(key, 7))(jax.random.key(0))
    run = Interpreter(step)
    theirs = mine = jax.random.key(3)
    for _ in range(3):
        theirs = jax.random.fold_in(theirs, 7)
        (mine,) = run(mine)
        assert isinstance(mine, KeyArray)
    np.testing.assert_array_equal(mine.data, jax.random.key_data(theirs))


def test_dtype_parameters_given_as_scalar_types_widen_like_dtypes():
    """Under widen a dtype-valued parameter becomes float64 whether it is a dtype or a NumPy scalar
    type; values of other kinds (shapes, numbers, strings) pass through untouched."""
    from gradlanes.program.interpreter import _widen_param

    for narrow in (np.float32, np.dtype(np.float16), np.complex64):
        assert _widen_param(narrow) in (np.float64, np.complex128)
    assert _widen_param(np.int32) == np.dtype(np.int32)
    for other in ((2, 3), 7, "HIGHEST", None, int):
        assert _widen_param(other) is other


def test_the_oracle_notices_a_rule_that_writes_into_its_operands(monkeypatch):
    """oracle.check runs every generated case with the caller's arrays uncopied, as the engine
    does, and fails when one comes back changed (a neg that negates in place, here)."""
    from oracle import check

    monkeypatch.setitem(RULES, "neg", lambda x, **_: np.negative(x, out=x))
    with pytest.raises(AssertionError, match="wrote into an input"):
        check(lambda x: -x, f32(4), expect="neg")


def test_overflow_division_by_zero_and_invalid_operations_are_values_not_warnings():
    """As on XLA, exp's overflow, x / 0 and log of a negative are inf and NaN, silently: NumPy
    would warn on each (a RuntimeWarning per step of a training run), so the interpreter turns
    its floating-point error reports off while it runs."""
    import warnings

    program = jax.make_jaxpr(lambda x: (jnp.exp(x), x / jnp.zeros_like(x), jnp.log(-x)))(f32(2))
    x = np.array([100.0, 0.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = Interpreter(program)(x)
    expected = ([np.inf, 1.0], [np.inf, np.nan], [np.nan, -np.inf])  # IEEE's, and XLA's
    for have, want, xla in zip(got, expected, eval_jaxpr(program, x), strict=True):
        np.testing.assert_array_equal(have, np.array(want, np.float32))
        np.testing.assert_array_equal(np.asarray(xla), np.array(want, np.float32))


def test_every_unsupported_primitive_is_named_those_in_nested_jaxprs_too(monkeypatch):
    """One refusal names every primitive without a rule, the top level's and a nested jaxpr's alike,
    so a user adds the rules in one go instead of meeting them one run at a time."""
    from gradlanes.program.interpreter import find_unsupported

    program = jax.make_jaxpr(lambda x: jax.jit(jnp.cos)(jnp.sin(x)))(f32(3))
    monkeypatch.delitem(RULES, "sin")
    monkeypatch.delitem(RULES, "cos")
    assert find_unsupported(program.jaxpr) == {"sin", "cos"}
    with pytest.raises(UnsupportedPrimitive, match=r"primitive\(s\) cos, sin used in the captured program;"):
        Interpreter(program)


def test_a_call_equation_without_its_jaxpr_is_unsupported_by_name():
    """A call-like primitive whose body the interpreter cannot find (a JAX that renamed the
    parameter) is reported under the primitive's own name, not run as if it were empty."""
    from gradlanes.program.interpreter import find_unsupported

    program = jax.make_jaxpr(jax.jit(jnp.cos))(f32(3))
    (call,) = program.jaxpr.eqns
    bodiless = program.jaxpr.replace(eqns=[call.replace(params={})])
    assert find_unsupported(bodiless) == {call.primitive.name}


CONSTANT = np.full(3, 3e38, np.float32)
INDICES = np.arange(3, dtype=np.int32)


def constants_program():
    """Closed-over arrays become the program's constants: `mul c 10.0` on one is folded when the
    plan is built (and overflows), and both constants are returned as they are."""
    return jax.make_jaxpr(
        lambda x: (x + jnp.asarray(CONSTANT) * 10, jnp.asarray(INDICES), jnp.asarray(CONSTANT))
    )(np.ones(3, np.float32))


def test_constants_keep_their_dtypes_and_values():
    program = constants_program()
    assert len(program.consts) == 2
    x = np.ones(3, np.float32)
    for got, want in zip(
        Interpreter(program)(x),
        jax.jit(lambda a: eval_jaxpr(program, a))(x),
        strict=True,
    ):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, np.asarray(want))


def test_folding_constants_when_planning_overflows_silently():
    """XLA folds `3e38 * 10` to inf without a word: so does the plan, also where warnings are errors."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run = Interpreter(constants_program())
    (total, _, _) = run(np.ones(3, np.float32))
    assert np.isposinf(total).all()


def test_a_folded_rule_returning_fewer_results_than_declared_is_an_error(monkeypatch):
    """As at run time (above), so when the plan folds an equation on constants: `split` of a
    closed-over array, patched to drop its second half, fails instead of leaving an output unset."""
    program = jax.make_jaxpr(
        lambda x: [x + part for part in jnp.split(jnp.asarray(np.arange(4.0, dtype=np.float32)), 2)]
    )(f32(2))
    split = RULES["split"]
    monkeypatch.setitem(RULES, "split", lambda *operands, **params: split(*operands, **params)[:1])
    with pytest.raises(ValueError, match="zip"):
        Interpreter(program)
