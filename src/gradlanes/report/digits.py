"""Draw test digits as ASCII art beside the verdict, so a reader can check predictions by eye."""

from __future__ import annotations

import numpy as np

RAMP = " .:-=+*#%@"


def ascii_digit(pixels: np.ndarray) -> list[str]:
    """A [H, W] uint8 image as H/2 lines of W characters (two pixel rows per line)."""
    rows = pixels.astype(np.float32)
    if rows.shape[0] % 2:
        rows = np.vstack([rows, np.zeros((1, rows.shape[1]), np.float32)])
    paired = (rows[0::2] + rows[1::2]) / 2
    levels = np.minimum((paired / 256 * len(RAMP)).astype(int), len(RAMP) - 1)
    return ["".join(RAMP[v] for v in line) for line in levels]


def render(pixels: np.ndarray, predictions: np.ndarray, labels: np.ndarray, title: str) -> str:
    """The digits with "predicted P, label L" beside the middle line of each."""
    blocks = [title, ""]
    for index, (image, predicted, label) in enumerate(zip(pixels, predictions, labels, strict=True)):
        lines = ascii_digit(image)
        verdict = "right" if predicted == label else "WRONG"
        middle = len(lines) // 2
        blocks.append(f"test image {index}:")
        for number, line in enumerate(lines):
            note = (
                f"   predicted {int(predicted)}, label {int(label)} ({verdict})" if number == middle else ""
            )
            blocks.append(f"|{line}|{note}".rstrip())
        blocks.append("")
    return "\n".join(blocks)
