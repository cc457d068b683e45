"""jax.random inside a program: key wrapping, threefry2x32 and random bits, bit for bit as XLA."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gradlanes.program.jaxcompat import key_data, key_impl, wrap_key_data


@dataclass(frozen=True)
class KeyArray:
    """A typed PRNG key array on the host: the raw words of every key, and JAX's key dtype.

    `data` is uint32[*shape, *impl.key_shape] (threefry2x32: two words a key), as
    `jax.random.key_data` gives it. `dtype` is the jaxpr's key dtype (key<fry>); rules that make
    keys may leave it None, and the interpreter stamps the declared dtype on the result.
    """

    data: np.ndarray
    dtype: Any = None

    @property
    def key_shape(self) -> tuple[int, ...]:
        return tuple(key_impl(self.dtype).key_shape) if self.dtype is not None else (2,)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape[: self.data.ndim - len(self.key_shape)]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def stamped(self, dtype: Any) -> KeyArray:
        return self if self.dtype is dtype else KeyArray(self.data, dtype)

    @classmethod
    def from_jax(cls, keys: Any) -> KeyArray:
        return cls(key_data(keys), keys.dtype)

    def to_jax(self):
        return wrap_key_data(self.data, self.dtype)
