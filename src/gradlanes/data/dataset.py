"""Load the prepared array file into what training reads: flattened float32 pixels in [0, 1].

Pixels are divided by 255 and nothing else (no mean/std normalisation), as in the prior art.
Subsets are the first N images of each split, so every lane with the same sizes sees the same data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Dataset:
    train_images: np.ndarray  # [N, D] float32
    train_labels: np.ndarray  # [N] int32
    test_images: np.ndarray  # [M, D] float32
    test_labels: np.ndarray  # [M] int32
    test_pixels: np.ndarray  # [M, H, W] uint8, for drawing digits

    @property
    def inputs(self) -> int:
        return self.train_images.shape[1]

    def train_batch(self, indices: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Images and labels of one batch from `batching`; None means the whole training set."""
        if indices is None:
            return self.train_images, self.train_labels
        return self.train_images[indices], self.train_labels[indices]


def scale(images: np.ndarray) -> np.ndarray:
    flat = images.reshape(images.shape[0], -1)
    return np.multiply(flat, np.float32(1 / 255), dtype=np.float32)


def load(path: str | Path, train_images: int | None = None, test_images: int | None = None) -> Dataset:
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path} does not exist; run `snakemake --cores all {path}` to prepare it")
    with np.load(path) as arrays:
        train = arrays["train_images"][:train_images]
        test = arrays["test_images"][:test_images]
        return Dataset(
            train_images=scale(train),
            train_labels=arrays["train_labels"][:train_images].astype(np.int32),
            test_images=scale(test),
            test_labels=arrays["test_labels"][:test_images].astype(np.int32),
            test_pixels=test,
        )
