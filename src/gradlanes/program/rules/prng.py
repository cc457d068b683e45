"""jax.random inside a program: key wrapping, threefry2x32 and random bits, bit for bit as XLA.

A train step that draws dropout masks (or any noise) from a key it is given traces to JAX's PRNG
primitives (`random_seed`, `random_split`, `random_fold_in`, `random_bits`, `random_wrap`,
`random_unwrap`, `random_clone`), and lower-level code to `threefry2x32` and `iota_2x32_shape`
themselves. XLA runs each of them as the threefry2x32 hash (Salmon et al. 2011, 20 rounds) over
counters laid out in one of two ways, chosen by `jax_threefry_partitionable` when the program is
lowered; the rules here compute the same words from the same counters in NumPy, for key arrays of
any shape (a batch of keys is a leading shape). Only the threefry2x32 implementation is supported;
a key of another implementation (rbg, unsafe_rbg, philox...) is refused by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from gradlanes.program.jaxcompat import is_extended, key_data, key_impl, wrap_key_data
from gradlanes.program.rules.registry import rule

THREEFRY = "threefry2x32"
_UINT32 = np.dtype(np.uint32)
#: The most 32-bit words one key hashes in one pass of the original (non-partitionable) layout;
#: beyond it JAX changes layout (blocks of split keys), a path only arrays of 16 GiB of bits reach.
_MAX_WORDS = np.iinfo(np.uint32).max
#: The most elements one draw counts with 32-bit counters (their high words all 0); XLA goes on to
#: 64-bit counts, which only arrays of 16 GiB and more need.
_MAX_COUNTS = 2**32
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)  # Threefry's key-schedule constant C240


@dataclass(frozen=True)
class KeyArray:
    """A typed PRNG key array on the host: the raw words of every key, and JAX's key dtype.

    `data` is uint32[*shape, *impl.key_shape] (threefry2x32: two words a key), as
    `jax.random.key_data` gives it. `dtype` is the jaxpr's key dtype (key<fry>); rules that make
    keys may leave it None, and the interpreter stamps the declared dtype on the result.
    """

    data: np.ndarray
    dtype: Any = None

    # The properties hand their logic to module functions, which mutation testing reaches
    # (mutmut leaves decorated functions, properties included, unmutated).
    @property
    def key_shape(self) -> tuple[int, ...]:
        return _key_shape(self.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return _batch_shape(self.data, self.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def impl_name(self) -> str:
        """The PRNG implementation's name; a key made by a rule here (no dtype yet) is threefry2x32."""
        return _dtype_impl_name(self.dtype)

    def stamped(self, dtype: Any) -> KeyArray:
        return self if self.dtype is dtype else KeyArray(self.data, dtype)

    @classmethod
    def from_jax(cls, keys: Any) -> KeyArray:
        return cls(key_data(keys), keys.dtype)

    def to_jax(self):
        return wrap_key_data(self.data, self.dtype)


def _key_shape(dtype: Any) -> tuple[int, ...]:
    return tuple(key_impl(dtype).key_shape) if dtype is not None else (2,)


def _batch_shape(data: np.ndarray, dtype: Any) -> tuple[int, ...]:
    return data.shape[: data.ndim - len(_key_shape(dtype))]


def _dtype_impl_name(dtype: Any) -> str:
    return _impl_name(key_impl(dtype)) if dtype is not None else THREEFRY


def _impl_name(impl: Any) -> str:
    return str(impl.name)


def _require_threefry(name: str, primitive: str) -> None:
    if name != THREEFRY:
        raise NotImplementedError(
            f"{primitive}: PRNG implementation {name!r} is not supported by the interpreter "
            f"(only {THREEFRY}); use jax.random.key(seed) with the default impl, or engine 'xla'"
        )


def _key_words(keys: KeyArray, primitive: str) -> tuple[np.ndarray, np.ndarray]:
    """The two words of every threefry key, each of the key array's shape (checked when wrapped)."""
    _require_threefry(keys.impl_name, primitive)
    data = np.asarray(keys.data)
    return data[..., 0], data[..., 1]


def _threefry_data(data: np.ndarray, primitive: str) -> np.ndarray:
    if data.dtype != _UINT32 or data.shape[-1:] != (2,):
        raise TypeError(f"{primitive}: threefry2x32 key data is uint32[..., 2], not {data.dtype}{data.shape}")
    return data


def _partitionable() -> bool:
    """JAX's counter layout, read as XLA reads it: when the program is run (lowered), not traced.

    A JAX without the flag has only the partitionable layout (its default since 0.5).
    """
    return bool(getattr(jax.config, "jax_threefry_partitionable", True))


# ---- the hash ----------------------------------------------------------------------------------
def threefry2x32(key1: Any, key2: Any, count1: Any, count2: Any) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32 (20 rounds) of the counter pairs under the key pairs, broadcast together.

    The state is two uint32 arrays of the result's shape updated in place (NumPy's array arithmetic
    wraps modulo 2**32 as XLA's does); the key schedule stays at the keys' own shape.
    """
    k0, k1, c0, c1 = (np.asarray(w, dtype=_UINT32) for w in (key1, key2, count1, count2))
    shape = np.broadcast_shapes(k0.shape, k1.shape, c0.shape, c1.shape)
    schedule = (k0, k1, k0 ^ k1 ^ _PARITY)
    x0, x1, spill = (np.empty(shape, _UINT32) for _ in range(3))
    np.add(c0, k0, out=x0)
    np.add(c1, k1, out=x1)
    for injection in range(5):
        for rotation in _ROTATIONS[injection % 2]:
            x0 += x1
            np.right_shift(x1, _UINT32.type(32 - rotation), out=spill)  # x1 rotated left
            x1 <<= _UINT32.type(rotation)
            x1 |= spill
            x1 ^= x0
        x0 += schedule[(injection + 1) % 3]
        x1 += schedule[(injection + 2) % 3]
        x1 += _UINT32.type(injection + 1)
    return x0, x1


def iota_2x32(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The row-major index of every element of `shape` as a 64-bit count: (high words, low words)."""
    high, low = _counts(shape, "iota_2x32_shape")
    return np.broadcast_to(high, shape).copy(), low


def _counts(shape: tuple[int, ...], primitive: str) -> tuple[np.ndarray, np.ndarray]:
    """`iota_2x32` with its high words a single 0: every count fits in 32 bits (refused otherwise)."""
    size = math.prod(shape)
    if size > _MAX_COUNTS:
        raise NotImplementedError(
            f"{primitive}: shape={shape} has {size} elements, more than the interpreter's limit of "
            f"{_MAX_COUNTS} threefry counters (16 GiB of counters alone); use engine 'xla' or draw less"
        )
    return np.uint32(0), np.arange(size, dtype=_UINT32).reshape(shape)


def _hash_flat(key1: np.ndarray, key2: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """JAX's `threefry_2x32(key, counts)` for 1-d counts, every key at once: uint32[*keys, n].

    The counts are padded to even length and cut in halves that are hashed as pairs; the two
    output halves are concatenated and the padding dropped.
    """
    size = counts.shape[0]
    if size % 2:
        counts = np.append(counts, _UINT32.type(0))
    half = counts.shape[0] // 2
    first, second = threefry2x32(key1[..., None], key2[..., None], counts[:half], counts[half:])
    return np.concatenate([first, second], axis=-1)[..., :size]


# ---- rules -------------------------------------------------------------------------------------
def _threefry2x32(key1, key2, count1, count2):
    return list(threefry2x32(key1, key2, count1, count2))


rule("threefry2x32", exact_dtypes=True)(_threefry2x32)


def _iota_2x32_shape(*, shape):
    return list(iota_2x32(tuple(shape)))


rule("iota_2x32_shape")(_iota_2x32_shape)


def _random_seed(seeds, *, impl):
    """threefry_seed of every seed: the high and low 32 bits of its (sign-extended) integer value."""
    _require_threefry(_impl_name(impl), "random_seed")
    seeds = np.asarray(seeds)
    if seeds.dtype.kind not in "iu":
        raise TypeError(f"random_seed: seeds must be integers, got {seeds.dtype}")
    wide = seeds.astype(np.int64 if seeds.dtype.kind == "i" else np.uint64).view(np.uint64)
    high = np.zeros(seeds.shape, _UINT32)  # XLA's logical shift by 32 of a narrower seed gives 0
    if seeds.dtype.itemsize == 8:
        high = np.asarray(wide >> np.uint64(32)).astype(_UINT32)
    return KeyArray(np.stack([high, wide.astype(_UINT32)], axis=-1))


rule("random_seed")(_random_seed)


def _random_wrap(base, *, impl):
    _require_threefry(_impl_name(impl), "random_wrap")
    return KeyArray(_threefry_data(np.asarray(base), "random_wrap"))


rule("random_wrap")(_random_wrap)


def _random_unwrap(keys):
    _key_words(keys, "random_unwrap")
    return np.asarray(keys.data)


rule("random_unwrap")(_random_unwrap)


def _random_clone(keys):
    _key_words(keys, "random_clone")
    return KeyArray(keys.data)


rule("random_clone")(_random_clone)


def _random_split(keys, *, shape):
    key1, key2 = _key_words(keys, "random_split")
    shape = tuple(shape)
    if _partitionable():
        spread = (Ellipsis,) + (None,) * len(shape)
        first, second = threefry2x32(key1[spread], key2[spread], *_counts(shape, "random_split"))
        return KeyArray(np.stack([first, second], axis=-1))
    count = 2 * math.prod(shape)
    _check_words(count, "random_split", f"shape={shape}")
    words = _hash_flat(key1, key2, np.arange(count, dtype=_UINT32))
    return KeyArray(words.reshape((*keys.shape, *shape, 2)))


rule("random_split")(_random_split)


def _random_fold_in(keys, messages):
    """threefry_2x32(key, threefry_seed(message)): the counters (0, message), keys and messages broadcast."""
    key1, key2 = _key_words(keys, "random_fold_in")
    messages = np.asarray(messages)
    if messages.dtype.kind not in "iu":
        raise TypeError(f"random_fold_in: messages must be integers, got {messages.dtype}")
    first, second = threefry2x32(key1, key2, np.uint32(0), messages.astype(_UINT32))
    return KeyArray(np.stack([first, second], axis=-1))


rule("random_fold_in")(_random_fold_in)


_BIT_DTYPES = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: _UINT32, 64: np.dtype(np.uint64)}


def _random_bits(keys, *, bit_width, shape):
    key1, key2 = _key_words(keys, "random_bits")
    if bit_width not in _BIT_DTYPES:
        raise NotImplementedError(f"random_bits: bit_width={bit_width} (threefry2x32 gives 8, 16, 32 or 64)")
    shape = tuple(shape)
    if _partitionable():
        return _bits_partitionable(key1, key2, bit_width, shape)
    return _bits_original(key1, key2, bit_width, shape).reshape((*keys.shape, *shape))


rule("random_bits", exact_dtypes=True)(_random_bits)


def _bits_partitionable(key1: np.ndarray, key2: np.ndarray, bit_width: int, shape: tuple[int, ...]):
    """One hash per element, its counter the element's index: 64 bits are both words, fewer their xor."""
    spread = (Ellipsis,) + (None,) * len(shape)
    first, second = threefry2x32(key1[spread], key2[spread], *_counts(shape, "random_bits"))
    if bit_width == 64:
        return (first.astype(np.uint64) << np.uint64(32)) | second.astype(np.uint64)
    # The narrower widths keep the low bits, as XLA's convert from uint32 does.
    return (first ^ second).astype(_BIT_DTYPES[bit_width])


def _bits_original(key1: np.ndarray, key2: np.ndarray, bit_width: int, shape: tuple[int, ...]):
    """A stream of ceil(bits / 32) words per key, cut into the elements: flat, [*keys, size]."""
    size = math.prod(shape)
    words_needed = -(-bit_width * size // 32)
    _check_words(words_needed, "random_bits", f"bit_width={bit_width} shape={shape}")
    words = _hash_flat(key1, key2, np.arange(words_needed, dtype=_UINT32))
    if bit_width == 32:
        return words
    if bit_width == 64:  # the first half of the stream are the high words, the second the low
        high, low = words[..., :size], words[..., size:]
        return (high.astype(np.uint64) << np.uint64(32)) | low.astype(np.uint64)
    # 8 and 16: each word's pieces, lowest bits first (the stream viewed as little-endian bytes).
    dtype = _BIT_DTYPES[bit_width]
    offsets = (bit_width * np.arange(32 // bit_width)).astype(_UINT32)
    pieces = (words[..., None] >> offsets) & _UINT32.type(np.iinfo(dtype).max)
    return pieces.reshape((*words.shape[:-1], pieces.shape[-2] * pieces.shape[-1]))[..., :size].astype(dtype)


def _check_words(words: int, primitive: str, params: str) -> None:
    if words >= _MAX_WORDS:
        raise NotImplementedError(
            f"{primitive}: {params} needs {words} threefry words per key with "
            f"jax_threefry_partitionable off, more than the interpreter's limit of {_MAX_WORDS - 1}; "
            "turn jax_threefry_partitionable on (JAX's default) or draw fewer"
        )


# ---- other primitives on key arrays ------------------------------------------------------------
#: Primitives whose rules above take or make `KeyArray`s themselves.
KEY_RULES = frozenset(
    {
        "random_seed",
        "random_wrap",
        "random_unwrap",
        "random_clone",
        "random_split",
        "random_fold_in",
        "random_bits",
    }
)
#: Primitives that move whole keys about (indexing a batch of keys, `k1, k2 = split(key)`, `vmap`'s
#: broadcasts): XLA runs them on the physical words, each key's words one more trailing axis, and so
#: does `on_key_words`, with each primitive's own rule.
_WORDS_AS_IS = frozenset(
    {
        "squeeze",
        "concatenate",
        "stack",
        "unstack",
        "rev",
        "split",
        "copy",
        "copy_p",
        "device_put",
        "optimization_barrier",
    }
)
KEY_LAYOUT = _WORDS_AS_IS | {
    "slice",
    "reshape",
    "broadcast_in_dim",
    "transpose",
    "dynamic_slice",
    "dynamic_update_slice",
    "gather",
    "scatter",
    "select_n",
    "eq",
    "ne",
}


def meets_keys(eqn: Any) -> bool:
    """True when an equation that is not a PRNG primitive has a key array among its operands or results."""
    return eqn.primitive.name not in KEY_RULES and any(
        is_extended(v.aval.dtype) for v in (*eqn.invars, *eqn.outvars)
    )


def on_key_words(eqn: Any, fn: Any) -> tuple[Any, dict]:
    """The rule and params that run `eqn` (a `KEY_LAYOUT` primitive on key arrays) on the keys' words.

    Params change as XLA's lowering changes them for extended dtypes (jax/_src/interpreters/mlir.py
    slice_op, dynamic_slice; lax.py _transpose_lower; slicing.py _gather_lower_opaque): the
    trailing word axes are appended to shapes, sizes and window dimensions, with start index 0.
    """
    name = eqn.primitive.name
    key_dtype = next(v.aval.dtype for v in (*eqn.invars, *eqn.outvars) if is_extended(v.aval.dtype))
    if name not in KEY_LAYOUT:
        raise NotImplementedError(
            f"{name} on PRNG key arrays ({key_dtype}) is not supported by the interpreter; only "
            f"{', '.join(sorted(KEY_LAYOUT))} move keys about there"
        )
    key_shape = tuple(key_impl(key_dtype).key_shape)
    params = dict(eqn.params)
    out_ndim = len(eqn.outvars[0].aval.shape)

    def words_axes(start: int) -> tuple[int, ...]:
        return tuple(range(start, start + len(key_shape)))

    # A negative axis would count from the words' axis. squeeze, rev and concatenate refuse negative
    # dimensions when bound; split, stack and unstack take their `axis` as given.
    if params.get("axis") is not None and params["axis"] < 0:
        raise NotImplementedError(f"{name} on PRNG key arrays: negative axis={params['axis']}")
    if name in ("eq", "ne"):
        return _key_comparison(name == "eq", len(key_shape)), {}
    if name == "slice":
        strides = params.get("strides") or (1,) * len(params["start_indices"])
        params.update(
            start_indices=(*params["start_indices"], *(0,) * len(key_shape)),
            limit_indices=(*params["limit_indices"], *key_shape),
            strides=(*strides, *(1,) * len(key_shape)),
        )
    elif name == "reshape":
        if params.get("dimensions") is not None:
            raise NotImplementedError(f"reshape on PRNG key arrays: dimensions={params['dimensions']}")
        params["new_sizes"] = (*params["new_sizes"], *key_shape)
    elif name == "broadcast_in_dim":
        params["shape"] = (*params["shape"], *key_shape)
        params["broadcast_dimensions"] = (*params["broadcast_dimensions"], *words_axes(out_ndim))
    elif name == "transpose":
        params["permutation"] = (*params["permutation"], *words_axes(out_ndim))
    elif name == "dynamic_slice":
        params["slice_sizes"] = (*params["slice_sizes"], *key_shape)
    elif name == "gather":
        dnums = params["dimension_numbers"]
        params["dimension_numbers"] = dnums._replace(offset_dims=(*dnums.offset_dims, *words_axes(out_ndim)))
        params["slice_sizes"] = (*params["slice_sizes"], *key_shape)
    elif name == "scatter":
        dnums = params["dimension_numbers"]
        updates_ndim = len(eqn.invars[2].aval.shape)
        params["dimension_numbers"] = dnums._replace(
            update_window_dims=(*dnums.update_window_dims, *words_axes(updates_ndim))
        )
    # The words' axis is taken whole, so its start is 0 (any start would be clamped to 0).
    zero_starts = (0,) * len(key_shape) if name in ("dynamic_slice", "dynamic_update_slice") else ()
    makes_keys = [is_extended(v.aval.dtype) for v in eqn.outvars]
    multiple = eqn.primitive.multiple_results
    selects = name == "select_n"
    spread = (...,) + (None,) * len(key_shape)

    def run(*operands, **word_params):
        words = [np.asarray(x.data) if isinstance(x, KeyArray) else x for x in operands]
        if selects:  # the predicate chooses whole keys: spread it over their words
            words[0] = np.broadcast_to(np.asarray(words[0])[spread], words[1].shape)
        result = fn(*words, *zero_starts, **word_params)
        results = result if multiple else [result]
        wrapped = [KeyArray(np.asarray(r)) if key else r for r, key in zip(results, makes_keys, strict=True)]
        return wrapped if multiple else wrapped[0]

    return run, params


def _key_comparison(equal: bool, word_axes: int):
    """Keys are equal when all their words are (XLA's _opaque_eq_hlo), unequal when any differs."""
    axes = tuple(range(-word_axes, 0))

    def compare(x: KeyArray, y: KeyArray) -> np.ndarray:
        a, b = np.asarray(x.data), np.asarray(y.data)
        return np.all(a == b, axis=axes) if equal else np.any(a != b, axis=axes)

    return compare
