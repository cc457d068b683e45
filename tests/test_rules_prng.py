"""jax.random in the interpreter against XLA: seeds, splits, fold-ins, random bits and the hash itself.

Every primitive here is integer arithmetic on uint32 words (threefry2x32 and its counters), so every
check is bit for bit. Generated cases draw the counter layout `jax_threefry_partitionable` selects
(set for the case, restored after), typed keys (`jax.random.key`, passed in as key arrays) or raw
uint32 keys (`jax.random.PRNGKey` style, which the program wraps with `random_wrap`), and batches of
keys of any shape, scalars and zero-size ones included. Ordinary primitives that move whole keys
(slices, gathers, selects of key arrays) are checked by hand-picked programs; the end-to-end cases
(uniform, normal, bernoulli, randint, permutation, a dropout train step) run JAX's samplers whole,
so they also exercise the float and integer rules those lower to.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from hypothesis_profiles import examples
from oracle import RULE_SETTINGS, check, shapes, x64
from special_budgets import check_special, normal_sample_budget

from gradlanes.program.interpreter import Interpreter, UnsupportedPrimitive
from gradlanes.program.jaxcompat import random_seed, threefry2x32_p, threefry_prng_impl
from gradlanes.program.rules import prng
from gradlanes.program.rules.prng import (
    KEY_LAYOUT,
    KeyArray,
    _random_bits,
    _random_fold_in,
    _random_seed,
    _random_split,
    _random_wrap,
    on_key_words,
)

COVERED = {
    "random_seed",
    "random_wrap",
    "random_unwrap",
    "random_clone",
    "random_split",
    "random_fold_in",
    "random_bits",
    "threefry2x32",
    "iota_2x32_shape",
}

SEED_DTYPES = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32))
WIDE_SEED_DTYPES = (np.dtype(np.int64), np.dtype(np.uint64))
BIT_WIDTHS = (8, 16, 32, 64)


@contextlib.contextmanager
def counter_layout(partitionable: bool) -> Iterator[None]:
    """`jax_threefry_partitionable` set while tracing and running, restored after."""
    previous = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", partitionable)
    try:
        yield
    finally:
        jax.config.update("jax_threefry_partitionable", previous)


def key_words(batch: tuple[int, ...]):
    """Raw threefry keys of batch shape `batch`: uint32[*batch, 2], any words (0 and 2**32 - 1 too)."""
    return hnp.arrays(np.uint32, (*batch, 2))


def as_input(words: np.ndarray, typed: bool):
    """The keys as the program gets them: a typed key array, or raw words the program wraps itself."""
    return jax.random.wrap_key_data(words) if typed else words


def per_key(fn, batch_ndim: int):
    """`fn` of one key mapped over a batch of keys (jax.random's samplers take a single key)."""
    for _ in range(batch_ndim):
        fn = jax.vmap(fn)
    return fn


layouts = st.booleans()
batches = shapes(max_dims=2, max_side=3)


# ---- the PRNG primitives, generated ------------------------------------------------------------
# One XLA compile costs about 0.2 s here, the interpreter's run next to nothing: a case checks one
# program drawing several shapes at once, so each compile covers more.
@settings(parent=RULE_SETTINGS, max_examples=examples(12))
@given(
    data=st.data(),
    batch=batches,
    draw_shapes=st.lists(shapes(max_dims=3, max_side=5), min_size=1, max_size=2),
    wide=st.booleans(),
    partitionable=layouts,
    typed=st.booleans(),
)
def test_random_bits_match_xla(data, batch, draw_shapes, wide, partitionable, typed):
    """Every bit width (64 needs x64) for each shape drawn, from one batch of keys."""
    words = data.draw(key_words(batch))
    widths = BIT_WIDTHS if wide else BIT_WIDTHS[:-1]

    def draw(key):
        return [jax.random.bits(key, shape, jnp.dtype(f"uint{w}")) for shape in draw_shapes for w in widths]

    with counter_layout(partitionable), x64() if wide else contextlib.nullcontext():
        check(per_key(draw, len(batch)), as_input(words, typed), expect="random_bits")


@settings(parent=RULE_SETTINGS, max_examples=examples(12))
@given(
    data=st.data(),
    batch=batches,
    split_shapes=st.lists(shapes(max_dims=2, max_side=4), min_size=1, max_size=3),
    partitionable=layouts,
    typed=st.booleans(),
)
def test_random_split_matches_xla(data, batch, split_shapes, partitionable, typed):
    words = data.draw(key_words(batch))
    split = per_key(lambda k: [jax.random.split(k, shape) for shape in split_shapes], len(batch))
    with counter_layout(partitionable):
        check(split, as_input(words, typed), expect="random_split")


@settings(parent=RULE_SETTINGS, max_examples=examples(10))
@given(
    data=st.data(),
    batch=shapes(min_dims=1, max_dims=2, max_side=3),
    message_dtype=st.sampled_from([np.dtype(np.uint32), np.dtype(np.int32)]),
    partitionable=layouts,
    typed=st.booleans(),
)
def test_random_fold_in_broadcasts_keys_and_messages_like_xla(
    data, batch, message_dtype, partitionable, typed
):
    """Batched keys with one message, one key with batched messages, and both batched."""
    words, one_key = data.draw(key_words(batch)), data.draw(key_words(()))
    messages, one_message = (
        data.draw(hnp.arrays(message_dtype, batch)),
        data.draw(hnp.arrays(message_dtype, ())),
    )

    def mapped(in_axes):
        fold = jax.random.fold_in
        for _ in range(len(batch)):
            fold = jax.vmap(fold, in_axes=in_axes)
        return fold

    def program(keys, key, messages, message):
        return (
            mapped((0, None))(keys, message),
            mapped((None, 0))(key, messages),
            mapped((0, 0))(keys, messages),
        )

    with counter_layout(partitionable):
        check(
            program,
            as_input(words, typed),
            as_input(one_key, typed),
            messages,
            one_message,
            expect="random_fold_in",
        )


@settings(parent=RULE_SETTINGS, max_examples=examples(14))
@given(data=st.data(), shape=shapes(max_dims=2, max_side=3), wide=st.booleans(), raw=st.booleans())
def test_random_seed_matches_xla_for_every_integer_seed(data, shape, wide, raw):
    """jax.random.key / PRNGKey of seeds of every integer dtype, negative and 64-bit ones included."""
    dtypes = WIDE_SEED_DTYPES + SEED_DTYPES if wide else SEED_DTYPES
    seeds = [data.draw(hnp.arrays(dtype, shape)) for dtype in dtypes]
    make = per_key(jax.random.PRNGKey if raw else jax.random.key, len(shape))
    with x64() if wide else contextlib.nullcontext():
        check(lambda *s: [make(x) for x in s], *seeds, expect="random_seed")


@settings(parent=RULE_SETTINGS, max_examples=examples(6))
@given(data=st.data(), shape=shapes(max_dims=3, max_side=3))
def test_random_seed_of_a_seed_array_at_once(data, shape):
    """The primitive on a whole array of seeds (no vmap), as jax.extend.random.random_seed binds it."""
    seeds = data.draw(hnp.arrays(np.int32, shape))
    check(lambda s: random_seed(s, impl=threefry_prng_impl), seeds, expect="random_seed")


@settings(parent=RULE_SETTINGS, max_examples=examples(10))
@given(data=st.data(), batch=batches)
def test_wrap_and_unwrap_move_words_unchanged(data, batch):
    words = data.draw(key_words(batch))
    wrap = jax.random.wrap_key_data
    check(lambda w: (wrap(w), jax.random.key_data(wrap(w))), words, expect="random_wrap")
    check(jax.random.key_data, wrap(words), expect="random_unwrap")


@settings(parent=RULE_SETTINGS, max_examples=examples(6))
@given(data=st.data(), batch=batches, partitionable=layouts)
def test_random_clone_keys_draw_the_same_bits(data, batch, partitionable):
    words = data.draw(key_words(batch))

    def program(keys):
        clones = jax.random.clone(keys)
        return clones, per_key(lambda k: jax.random.bits(k, (3,)), len(batch))(clones)

    with counter_layout(partitionable):
        check(program, jax.random.wrap_key_data(words), expect="random_clone")


@st.composite
def threefry_shapes(draw):
    """Operand shapes XLA's threefry2x32 takes: one rank; both key words of one shape, both counter
    words of shapes that broadcast with the keys' to the same result (its loop carries them)."""
    result = draw(shapes(max_dims=3, max_side=4))
    keys_full = draw(st.lists(st.booleans(), min_size=len(result), max_size=len(result)))
    keys = tuple(n if full else 1 for n, full in zip(result, keys_full, strict=True))

    def counters():
        return tuple(
            n if k == 1 else draw(st.sampled_from([1, n])) for n, k in zip(result, keys, strict=True)
        )

    return keys, counters(), counters()


@settings(parent=RULE_SETTINGS, max_examples=examples(12))
@given(data=st.data(), operand_shapes=threefry_shapes())
def test_threefry2x32_broadcasts_its_operands_like_xla(data, operand_shapes):
    keys, count1, count2 = operand_shapes
    words = [data.draw(hnp.arrays(np.uint32, shape)) for shape in (keys, keys, count1, count2)]
    check(lambda *w: threefry2x32_p.bind(*w), *words, expect="threefry2x32")


@settings(parent=RULE_SETTINGS, max_examples=examples(5))
@given(
    data=st.data(), draw_shapes=st.lists(shapes(min_dims=1, max_dims=3, max_side=5), min_size=1, max_size=2)
)
def test_iota_2x32_counters_of_raw_key_bits(data, draw_shapes):
    """threefry_prng_impl.random_bits on raw words binds the counter primitive and the hash directly."""
    words = data.draw(key_words(()))

    def draw(key):
        return [threefry_prng_impl.random_bits(key, w, shape) for shape in draw_shapes for w in BIT_WIDTHS]

    with counter_layout(True), x64():
        check(draw, words, expect="iota_2x32_shape")


# ---- hand-picked cases -------------------------------------------------------------------------
def test_threefry2x32_known_answers():
    """Random123's known-answer vectors for Threefry-2x32-20 (kat_vectors), independent of XLA."""
    vectors = [
        ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
        ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
        ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
    ]
    for key, counter, expected in vectors:
        words = [np.array([w], np.uint32) for w in (*key, *counter)]
        check(lambda *w: threefry2x32_p.bind(*w), *words, expect="threefry2x32")
        closed = jax.make_jaxpr(lambda *w: threefry2x32_p.bind(*w))(*words)
        first, second = Interpreter(closed)(*words)
        assert (int(first[0]), int(second[0])) == expected


@pytest.mark.parametrize("partitionable", [True, False])
def test_counter_layout_is_read_when_the_program_runs(partitionable):
    """Like a jit lowered afresh, a planned program draws in the layout of the flag at run time."""
    words = np.array([3, 4], np.uint32)
    closed = jax.make_jaxpr(lambda k: jax.random.bits(k, (5,)))(jax.random.wrap_key_data(words))
    program = Interpreter(closed)
    with counter_layout(partitionable):
        (got,) = program(jax.random.wrap_key_data(words))
        want = np.asarray(jax.jit(lambda k: jax.random.bits(k, (5,)))(jax.random.wrap_key_data(words)))
    np.testing.assert_array_equal(got, want, strict=True)


def test_the_two_layouts_draw_different_bits():
    """The flag matters (so both layouts are really under test): one key, 8 words, both ways."""
    draws = {}
    for partitionable in (True, False):
        with counter_layout(partitionable):
            closed = jax.make_jaxpr(lambda k: jax.random.bits(k, (8,)))(jax.random.key(0))
            (draws[partitionable],) = Interpreter(closed)(jax.random.key(0))
    assert not np.array_equal(draws[True], draws[False])


def test_keys_made_inside_the_program_from_literal_seeds():
    """key(0) has no input: the plan folds it (and what depends only on it) before the first step."""
    for partitionable in (True, False):
        with counter_layout(partitionable):
            check(lambda: jax.random.bits(jax.random.key(0), (4,)), expect="random_bits")
            check(lambda: jax.random.fold_in(jax.random.PRNGKey(-1), 7), expect="random_seed")


def test_large_seed_and_fold_in_messages_wrap_as_xla():
    with x64():
        check(jax.random.key, np.int64(-(2**63)), expect="random_seed")
        check(jax.random.key, np.uint64(2**64 - 1), expect="random_seed")
    check(jax.random.fold_in, jax.random.key(1), np.int32(-1), expect="random_fold_in")
    check(jax.random.fold_in, jax.random.key(1), np.uint32(2**32 - 1), expect="random_fold_in")


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_other_prng_implementations_are_refused_by_name(impl):
    key = jax.random.key(0, impl=impl)
    closed = jax.make_jaxpr(lambda k: jax.random.bits(k, (3,)))(key)
    with pytest.raises(NotImplementedError, match=rf"random_bits: PRNG implementation '{impl}'"):
        Interpreter(closed)(key)
    seeded = jax.make_jaxpr(lambda s: jax.random.key(s, impl=impl))(np.int32(1))
    with pytest.raises(NotImplementedError, match=rf"random_seed: PRNG implementation '{impl}'"):
        Interpreter(seeded)(np.int32(1))


@pytest.mark.parametrize(
    ("primitive", "program"),
    [
        ("random_fold_in", lambda k: jax.random.fold_in(k, 3)),
        ("random_clone", lambda k: jax.random.clone(k)),
        ("random_split", lambda k: jax.random.split(k, 2)),
        ("random_unwrap", lambda k: jax.random.key_data(k)),
    ],
)
def test_every_key_primitive_names_itself_refusing_another_implementation(primitive, program):
    key = jax.random.key(0, impl="rbg")
    closed = jax.make_jaxpr(program)(key)
    assert primitive in {eqn.primitive.name for eqn in closed.jaxpr.eqns}
    with pytest.raises(NotImplementedError, match=rf"^{primitive}: PRNG implementation 'rbg' is not"):
        Interpreter(closed)(key)


@pytest.mark.parametrize("bit_width", [8, 16])
def test_narrow_bits_for_a_batch_of_keys_in_the_original_layout(bit_width):
    """Each key's word stream cut into 8- or 16-bit pieces: three keys, five draws each."""
    keys = jax.random.split(jax.random.key(6), 3)
    dtype = {8: jnp.uint8, 16: jnp.uint16}[bit_width]
    with counter_layout(False):
        check(lambda k: jax.vmap(lambda k: jax.random.bits(k, (5,), dtype))(k), keys, expect="random_bits")


def test_random_bits_of_a_width_threefry_does_not_give_is_refused():
    keys = KeyArray(np.zeros((2,), np.uint32))
    with pytest.raises(NotImplementedError) as refused:
        _random_bits(keys, bit_width=24, shape=(3,))
    assert str(refused.value) == "random_bits: bit_width=24 (threefry2x32 gives 8, 16, 32 or 64)"


def test_wrapping_words_as_another_implementations_keys_is_refused_by_name():
    words = np.zeros((3, 4), np.uint32)  # rbg keys are four words
    closed = jax.make_jaxpr(lambda w: jax.random.wrap_key_data(w, impl="rbg"))(words)
    with pytest.raises(NotImplementedError, match=r"^random_wrap: PRNG implementation 'rbg' is not"):
        Interpreter(closed)(words)


@pytest.mark.parametrize(
    ("primitive", "call"),
    [
        ("random_seed", lambda: _random_seed(np.float32(1.5), impl=threefry_prng_impl)),
        ("random_fold_in", lambda: _random_fold_in(KeyArray(np.zeros(2, np.uint32)), np.float32(1.5))),
    ],
)
def test_seeds_and_messages_must_be_integers(primitive, call):
    """JAX converts them before binding; the rules name a float bound by hand."""
    what = "seeds" if primitive == "random_seed" else "messages"
    with pytest.raises(TypeError, match=rf"^{primitive}: {what} must be integers, got float32$"):
        call()


def test_bits_widen_nothing_under_the_float64_reference():
    """random_bits and threefry2x32 are format-defined: the float64 reference draws the same words."""
    keys = jax.random.split(jax.random.key(5), 3)
    for partitionable in (True, False):
        with counter_layout(partitionable):
            program = lambda k: jax.vmap(lambda k: jax.random.bits(k, (4,)))(k)  # noqa: E731
            closed = jax.make_jaxpr(program)(keys)
            (got,) = Interpreter(closed, widen=True)(keys)
            np.testing.assert_array_equal(got, np.asarray(jax.jit(program)(keys)), strict=True)


# ---- keys moved about by ordinary primitives (slice, squeeze, gather, ...) --------------------
@pytest.mark.parametrize("partitionable", [True, False])
def test_typed_keys_unpacked_indexed_and_reshaped(partitionable):
    """`k1, k2 = split(key)`, keys[i] with a traced i, reshapes, transposes and selects of typed keys."""

    def program(key, i, pick):
        k1, k2 = jax.random.split(key)
        batch = jax.random.split(k2, (2, 3))
        joined = jnp.concatenate([k1[None], k2[None], batch[1, i][None]])
        chosen = jnp.where(pick, batch, jnp.broadcast_to(k1, batch.shape))
        return (
            jax.random.bits(k1, (2,)),
            joined.reshape(3, 1).T,
            batch[::-1, 1:],
            batch[:, ::2],
            batch[:, i],
            batch[:, jnp.array([2, 0])],
            chosen,
            jax.lax.dynamic_update_slice(batch, joined[None, :2], (1, i)),
            batch.at[0, 1].set(k1),
            batch == jnp.roll(batch, 1, axis=1),
            batch != batch[:, :1],
        )

    pick = np.array([[True, False, True], [False, False, True]])
    with counter_layout(partitionable):
        found = check(program, jax.random.key(11), np.int32(1), pick, expect="random_split")
    moves = {"slice", "squeeze", "concatenate", "reshape", "transpose", "rev", "gather", "select_n"}
    assert moves | {"dynamic_update_slice", "scatter", "eq", "ne"} <= found


def test_typed_keys_stacked_and_unstacked():
    keys = jax.random.split(jax.random.key(12), 3)
    check(lambda k: (jnp.stack([k[2], k[0]], axis=0), *jnp.unstack(k)), keys, expect="stack")


def test_arithmetic_on_keys_is_refused_before_running():
    """Only primitives that move whole keys run on their words; anything else is named up front."""
    closed = jax.make_jaxpr(lambda k: jax.lax.pad(k, jax.random.key(0), [(1, 0, 0)]))(
        jax.random.split(jax.random.key(1), 2)
    )
    with pytest.raises(UnsupportedPrimitive, match=r"pad \(on PRNG keys\)"):
        Interpreter(closed)


def test_keys_the_interpreter_returns_become_jax_keys_again():
    """`KeyArray.to_jax` gives JAX's typed keys: same dtype, same words, usable by jax.random."""
    program = lambda k: jax.random.split(k, (2, 3))  # noqa: E731
    key = jax.random.key(9)
    (got,) = Interpreter(jax.make_jaxpr(program)(key))(key)
    as_jax, expected = got.to_jax(), program(key)
    assert got.dtype == expected.dtype  # the declared key dtype, stamped on what a rule made
    assert KeyArray.from_jax(expected).dtype == expected.dtype
    assert as_jax.dtype == expected.dtype and as_jax.shape == expected.shape == (2, 3)
    np.testing.assert_array_equal(jax.random.key_data(as_jax), jax.random.key_data(expected), strict=True)
    np.testing.assert_array_equal(jax.random.bits(as_jax[1, 2]), jax.random.bits(expected[1, 2]), strict=True)


@pytest.mark.parametrize(
    "base",
    [np.zeros((3,), np.uint32), np.zeros((2, 3), np.uint32), np.zeros((2,), np.int32)],
    ids=["3 words", "(2, 3) words", "int32 words"],
)
def test_wrapping_other_than_uint32_pairs_is_refused(base):
    """JAX refuses these when tracing; the rule itself names them for a program built by hand."""
    with pytest.raises(TypeError, match=r"random_wrap: threefry2x32 key data is uint32\[\.\.\., 2\], not "):
        _random_wrap(base, impl=threefry_prng_impl)


def test_keys_selected_by_a_scalar_or_from_a_single_case():
    """A scalar predicate picks whole keys; select_n of one case is that case."""

    def program(key, i):
        k1, k2 = jax.random.split(key)
        batch = jax.random.split(k2, 3)
        return (
            jnp.where(i > 0, k1, k2),
            jax.lax.select_n(i > 0, batch, jnp.broadcast_to(k1, batch.shape)),
            jax.lax.select_n(jnp.zeros(3, jnp.int32), batch),
        )

    for i in (0, 1):
        assert "select_n" in check(program, jax.random.key(3), np.int32(i), expect="random_split")


def test_keys_and_arrays_through_one_optimization_barrier():
    """A barrier over keys and ordinary arrays together gives back keys as keys and arrays as arrays."""

    def program(key, x):
        k, y = jax.lax.optimization_barrier((jax.random.split(key, 2), x * 2.0))
        return jax.random.bits(k[1], (3,)), y

    check(program, jax.random.key(4), np.arange(3, dtype=np.float32), expect="optimization_barrier")
    key, x = jax.random.key(4), np.arange(3, dtype=np.float32)
    barrier = jax.make_jaxpr(lambda k, x: jax.lax.optimization_barrier((k, x)))(key, x)
    keys, floats = Interpreter(barrier)(key, x)
    assert isinstance(keys, KeyArray) and keys.dtype == key.dtype
    assert type(floats) is np.ndarray
    np.testing.assert_array_equal(floats, x, strict=True)


def test_negative_split_axis_on_keys_is_refused():
    """split_p bound with axis=-1 would split the words' axis of a key array: refused when planned."""
    keys = jax.random.split(jax.random.key(2), 4).reshape(2, 2)
    closed = jax.make_jaxpr(lambda k: jax.lax.split_p.bind(k, sizes=(1, 1), axis=-1))(keys)
    with pytest.raises(NotImplementedError, match=r"split on PRNG key arrays: negative axis=-1"):
        Interpreter(closed)


def test_reshape_of_keys_with_dimensions_is_refused():
    """XLA itself cannot lower a transposing reshape of key arrays; the interpreter says so by name."""
    keys = jax.random.split(jax.random.key(2), 6).reshape(2, 3)
    closed = jax.make_jaxpr(lambda k: jax.lax.reshape(k, (6,), dimensions=(1, 0)))(keys)
    with pytest.raises(NotImplementedError, match=r"reshape on PRNG key arrays: dimensions=\(1, 0\)"):
        Interpreter(closed)


def test_on_key_words_names_the_primitive_and_what_is_supported():
    """Called with a primitive that does not move keys, it names it and lists those that do."""
    closed = jax.make_jaxpr(lambda k: jax.lax.pad(k, jax.random.key(0), [(1, 0, 0)]))(
        jax.random.split(jax.random.key(1), 2)
    )
    (pad,) = [eqn for eqn in closed.jaxpr.eqns if eqn.primitive.name == "pad"]
    with pytest.raises(NotImplementedError) as refused:
        on_key_words(pad, lambda *a, **k: None)
    message = str(refused.value)
    assert message.startswith("pad on PRNG key arrays (key<fry>) is not supported by the interpreter")
    assert message.endswith(f"only {', '.join(sorted(KEY_LAYOUT))} move keys about there")


@pytest.mark.parametrize(
    ("primitive", "bit_width", "shape"),
    [
        ("random_bits", 32, (2**32,)),
        ("random_bits", 8, (2**34,)),
        ("random_bits", 16, (2**33,)),
        ("random_bits", 64, (2**31,)),
        ("random_split", None, (2**31,)),
    ],
)
def test_draws_past_the_original_layouts_word_limit_are_refused(monkeypatch, primitive, bit_width, shape):
    """With jax_threefry_partitionable off, 2**32 - 1 words per key or more are refused before hashing.

    Counting that many words takes 16 GiB or more: a wrong word count that the limit lets through
    must fail here, before any array of them is made, not exhaust the machine's memory."""
    limit_check = prng._check_words

    def refusing(words: int, *args) -> None:
        limit_check(words, *args)
        raise AssertionError(f"{primitive} {shape}: {words} words passed the limit check")

    monkeypatch.setattr(prng, "_check_words", refusing)
    draw = _random_split if bit_width is None else functools.partial(_random_bits, bit_width=bit_width)
    params = f"shape={shape}" if bit_width is None else f"bit_width={bit_width} shape={shape}"
    keys = KeyArray(np.zeros((2,), np.uint32))
    with counter_layout(False), pytest.raises(NotImplementedError) as refused:
        draw(keys, shape=shape)
    assert str(refused.value) == (
        f"{primitive}: {params} needs {2**32} threefry words per key with jax_threefry_partitionable off, "
        f"more than the interpreter's limit of {2**32 - 2}; turn jax_threefry_partitionable on "
        "(JAX's default) or draw fewer"
    )


@pytest.mark.parametrize("partitionable", [True, False])
def test_draw_limits_are_inclusive_where_jax_changes_layout(monkeypatch, partitionable):
    """At the limit a draw runs (equal to XLA); one more word or counter is refused.

    The real limits (2**32 - 1 words, 2**32 counters) need 16 GiB arrays to reach, so they are
    lowered here: with 7 words allowed (the original layout) 6 are drawn and 7 refused, as JAX
    switches layout at `max_count >= 2**32 - 1`; with 6 counters (partitionable) 6 run and 7 are refused.
    """
    monkeypatch.setattr(prng, "_MAX_WORDS", 7)
    monkeypatch.setattr(prng, "_MAX_COUNTS", 6)
    key = jax.random.key(8)
    with counter_layout(partitionable):
        check(lambda k: jax.random.bits(k, (6,)), key, expect="random_bits")
        check(lambda k: jax.random.split(k, 3), key, expect="random_split")
        refused = (
            r"random_bits: shape=\(7,\) has 7 elements, more than the interpreter's limit of 6"
            if partitionable
            else r"random_bits: bit_width=32 shape=\(7,\) needs 7 threefry words per key"
        )
        with pytest.raises(NotImplementedError, match=refused):
            Interpreter(jax.make_jaxpr(lambda k: jax.random.bits(k, (7,)))(key))(key)
    with pytest.raises(NotImplementedError, match=r"iota_2x32_shape: shape=\(7,\) has 7 elements"):
        prng.iota_2x32((7,))
    with counter_layout(True), pytest.raises(NotImplementedError, match=r"random_split: shape=\(7,\) has 7"):
        Interpreter(jax.make_jaxpr(lambda k: jax.random.split(k, 7))(key))(key)


# ---- end to end: JAX's samplers and a train step -----------------------------------------------
SAMPLE_SHAPES = [(), (0,), (7,), (3, 5)]


@pytest.mark.parametrize("partitionable", [True, False])
def test_uniform_matches_xla(partitionable):
    """uniform is exact here: 23 random bits under 1.0's exponent, minus 1, then an exact scaling.

    Spans of a power of two make the product exact, so XLA's fused multiply-add rounds exactly
    as the interpreter's multiply then add; a general span may differ by that one rounding.
    """

    def program(key):
        return [
            jax.random.uniform(key, shape, dtype, minval=low, maxval=low + span)
            for shape in SAMPLE_SHAPES
            for dtype in (jnp.float32, jnp.float16, jnp.bfloat16)
            for low, span in ((0.0, 1.0), (-2.0, 4.0))
        ]

    with counter_layout(partitionable):
        check(program, jax.random.key(3), expect="random_bits")
        with x64():
            check(
                lambda k: jax.random.uniform(k, (3, 5), jnp.float64), jax.random.key(3), expect="random_bits"
            )


@pytest.mark.parametrize("partitionable", [True, False])
def test_normal_matches_xla(partitionable):
    """sqrt(2) erf_inv(u) of each layout's uniforms, within the per-element budget that
    tests/special_budgets.py derives for a sample (`normal_sample_budget`)."""
    with counter_layout(partitionable):
        for shape in SAMPLE_SHAPES:
            sampler = functools.partial(jax.random.normal, shape=shape)
            check_special(sampler, [jax.random.key(4)], normal_sample_budget, "erf_inv")


@pytest.mark.parametrize("partitionable", [True, False])
def test_bernoulli_and_randint_match_xla(partitionable):
    """Comparisons of exact uniforms with p, and integer arithmetic on random bits: exact."""

    def program(key, p):
        return [
            *(jax.random.bernoulli(key, 0.3, shape) for shape in SAMPLE_SHAPES),
            jax.random.bernoulli(key, p),
            *(jax.random.randint(key, shape, -3, 10) for shape in SAMPLE_SHAPES),
            jax.random.randint(key, (4, 4), 0, 2**31 - 1),
            jax.random.randint(key, (9,), jnp.int8(-128), jnp.int8(127), jnp.int8),
        ]

    with counter_layout(partitionable):
        check(program, jax.random.key(5), np.linspace(0, 1, 6, dtype=np.float32), expect="random_bits")
        check(lambda k: jax.random.randint(k, (3, 2), -3, 10), jax.random.PRNGKey(6), expect="random_wrap")


@pytest.mark.parametrize("partitionable", [True, False])
def test_permutation_matches_xla(partitionable):
    """permutation splits its key (slices of a typed key array) and sorts random bits."""

    def program(key, x):
        return (
            [jax.random.permutation(key, size) for size in (0, 1, 10)],
            jax.random.permutation(key, x, axis=1, independent=True),
            jax.random.choice(key, 10, (4,), replace=False),
        )

    with counter_layout(partitionable):
        check(program, jax.random.key(8), np.arange(12, dtype=np.float32).reshape(3, 4), expect="random_bits")


def dropout_step(params, x, y, key):
    """One SGD step of a 2-layer MLP with classic dropout drawn from the step's own key.

    Inputs and weights are -1, 0 or 1, targets small integers and the step size a power of two,
    and classic (unscaled) dropout keeps the hidden values integers, so every value of the step
    (sums below 2**24 included) is exact in float32: XLA and the interpreter must agree bit for
    bit whatever order their sums run in.
    """

    def loss(params):
        w1, w2 = params
        h = jax.nn.relu(x @ w1)
        keep = jax.random.bernoulli(key, 0.9, h.shape)
        h = jnp.where(keep, h, 0.0)
        return jnp.mean((h @ w2 - y) ** 2), keep

    (value, keep), grads = jax.value_and_grad(loss, has_aux=True)(params)
    new_params = jax.tree_util.tree_map(lambda p, g: p - g / 64.0, params, grads)
    return new_params, value, keep


@pytest.mark.parametrize("partitionable", [True, False])
def test_mlp_train_step_with_dropout_key_as_input(partitionable):
    rng = np.random.default_rng(0)
    params = tuple(rng.integers(-1, 2, shape).astype(np.float32) for shape in ((6, 16), (16, 4)))
    x = rng.integers(-1, 2, (8, 6)).astype(np.float32)
    y = rng.integers(-2, 3, (8, 4)).astype(np.float32)
    with counter_layout(partitionable):
        for step in range(2):
            key = jax.random.fold_in(jax.random.key(42), step)
            found = check(dropout_step, params, x, y, key, expect="random_bits")
            keep = np.asarray(jax.jit(dropout_step)(params, x, y, key)[2])
            assert 0 < keep.mean() < 1
    assert "dot_general" in found
