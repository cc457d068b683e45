"""The order in which a lane sees its training images, identical for every lane of a seed.

Mini-batches are drawn without replacement from a NumPy PCG64 stream of the seed, reshuffled each
epoch; the last partial batch of an epoch is dropped so every step has the same shape (and so one
compiled program serves them all). A full-batch lane uses every training image, in order, each step.
Test images are evaluated in fixed-size blocks (`eval_blocks`), the last one padded, so one forward
program of one shape serves every evaluation.
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


#: Test images per forward call. The interpreter's forward of the conv net on all 10,000 MNIST
#: test images at once makes 780 MB temporaries (im2col) and takes 3.3 s; ten blocks of 1,000
#: take 1.1 s (2026-12-02, this project's 2-core machine). XLA's time is the same either way.
EVAL_BATCH = 1000


def eval_batch(test_images: int) -> int:
    """The batch of the forward program: a block of test images, or all of them when fewer."""
    return min(test_images, EVAL_BATCH)


def eval_blocks(images: np.ndarray, labels: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The test set in blocks of `eval_batch` images, the last one padded with zero images."""
    size = eval_batch(len(images))
    blocks = []
    for start in range(0, len(images), size):
        block_images, block_labels = images[start : start + size], labels[start : start + size]
        missing = size - len(block_images)
        if missing:  # padding: its logits are dropped (`train._evaluate`)
            padding = np.zeros((missing, *images.shape[1:]), images.dtype)
            block_images = np.concatenate([block_images, padding])
            block_labels = np.concatenate([block_labels, np.zeros(missing, labels.dtype)])
        blocks.append((block_images, block_labels))
    return blocks
