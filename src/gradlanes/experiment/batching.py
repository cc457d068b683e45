"""The order in which a lane sees its training images, identical for every lane of a seed.

Mini-batches are drawn without replacement from a NumPy PCG64 stream of the seed, reshuffled each
epoch; the last partial batch of an epoch is dropped so every step has the same shape (and so one
compiled program serves them all). A full-batch lane uses every training image, in order, each step.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def batch_order(seed: int, train_images: int, batch_size: int, steps: int) -> Iterator[np.ndarray | None]:
    """Yield, per step, the indices of that step's batch; None means "the whole training set"."""
    if batch_size == train_images:
        for _ in range(steps):
            yield None
        return
    rng = np.random.Generator(np.random.PCG64(seed))
    per_epoch = train_images // batch_size
    produced = 0
    while produced < steps:
        order = rng.permutation(train_images)
        for start in range(0, per_epoch * batch_size, batch_size):
            if produced == steps:
                return
            yield order[start : start + batch_size]
            produced += 1


def first_batch(seed: int, train_images: int, batch_size: int) -> np.ndarray | None:
    return next(batch_order(seed, train_images, batch_size, 1))
