"""Turn a digit a person drew, at any size, into an MNIST-style 28x28 input.

MNIST digits are white on black, size-normalised to fit a 20x20 box (aspect kept) and centred by
centre of mass in a 28x28 field. A drawing is read as greyscale (transparency on white), inverted
when its background is light, cropped to the ink, scaled and centred the same way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError


class ImageUnreadable(ValueError):
    pass


def load_greyscale(path: str | Path) -> np.ndarray:
    try:
        with Image.open(path) as image:
            image.load()
            if image.mode in ("RGBA", "LA", "P"):
                image = image.convert("RGBA")
                background = Image.new("RGBA", image.size, (255, 255, 255, 255))
                image = Image.alpha_composite(background, image)
            return np.asarray(image.convert("L"), dtype=np.float32)
    except FileNotFoundError as error:
        raise ImageUnreadable(f"{path}: no such file") from error
    except (UnidentifiedImageError, OSError) as error:
        raise ImageUnreadable(f"{path}: not an image Pillow can read ({error})") from error


def mnist_style(grey: np.ndarray, field: int = 28, box: int = 20) -> np.ndarray:
    """A [H, W] greyscale drawing -> [field, field] uint8, white digit on black, MNIST-centred."""
    border = np.concatenate([grey[0], grey[-1], grey[:, 0], grey[:, -1]])
    ink = 255 - grey if np.median(border) > 127 else grey.copy()
    ink -= np.median(np.concatenate([ink[0], ink[-1], ink[:, 0], ink[:, -1]]))
    ink = np.clip(ink, 0, 255)
    if ink.max() < 32:
        raise ImageUnreadable("the image has no visible strokes to classify")
    rows = np.flatnonzero(ink.max(axis=1) > 0.1 * ink.max())
    cols = np.flatnonzero(ink.max(axis=0) > 0.1 * ink.max())
    crop = ink[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
    scale = box / max(crop.shape)
    size = (max(1, round(crop.shape[1] * scale)), max(1, round(crop.shape[0] * scale)))
    small = np.asarray(
        Image.fromarray(crop.astype(np.uint8)).resize(size, Image.Resampling.LANCZOS), np.float32
    )
    canvas = np.zeros((field, field), np.float32)
    top, left = (field - small.shape[0]) // 2, (field - small.shape[1]) // 2
    canvas[top : top + small.shape[0], left : left + small.shape[1]] = small
    total = canvas.sum()
    ys, xs = np.indices(canvas.shape)
    shift_y = int(round(field / 2 - 0.5 - (ys * canvas).sum() / total))
    shift_x = int(round(field / 2 - 0.5 - (xs * canvas).sum() / total))
    canvas = np.roll(canvas, (shift_y, shift_x), axis=(0, 1))
    return np.clip(canvas * (255 / max(canvas.max(), 1)), 0, 255).astype(np.uint8)
