"""Parse idx files (the MNIST container format) strictly, with errors that name the bad field.

An idx file is a 4-byte magic number (two zero bytes, a dtype code, the number of dimensions),
one big-endian uint32 per dimension, then the data. gradlanes reads unsigned-byte files only:
magic 2051 (0x0803) for images (count, rows, columns) and 2049 (0x0801) for labels (count).
"""

from __future__ import annotations

import struct

import numpy as np

UBYTE = 0x08
IMAGES_MAGIC = 0x0803  # 2051
LABELS_MAGIC = 0x0801  # 2049


class IdxFormatError(ValueError):
    """A file is not the idx file it claims to be; the message names the file and field."""


def parse_idx(data: bytes, name: str, expected_magic: int) -> np.ndarray:
    """Return the array stored in idx `data`, checking magic, dimensions and exact length."""
    kind = "images" if expected_magic == IMAGES_MAGIC else "labels"
    if len(data) < 4:
        raise IdxFormatError(f"{name}: file is {len(data)} bytes, too short for an idx header")
    (magic,) = struct.unpack(">I", data[:4])
    if magic != expected_magic:
        raise IdxFormatError(
            f"{name}: magic number is {magic} (0x{magic:08x}), expected {expected_magic} "
            f"(0x{expected_magic:08x}) for an idx {kind} file of unsigned bytes"
        )
    ndim = magic & 0xFF
    header_bytes = 4 + 4 * ndim
    if len(data) < header_bytes:
        raise IdxFormatError(
            f"{name}: header declares {ndim} dimensions but the file ends after {len(data)} bytes"
        )
    dims = struct.unpack(f">{ndim}I", data[4:header_bytes])
    if any(d == 0 for d in dims):
        raise IdxFormatError(f"{name}: dimensions {dims} include a zero")
    expected_bytes = header_bytes + int(np.prod(dims, dtype=np.int64))
    if len(data) != expected_bytes:
        raise IdxFormatError(
            f"{name}: file length is {len(data)} bytes, but the header's dimensions {dims} "
            f"require exactly {expected_bytes}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header_bytes).reshape(dims)


def check_split(
    images: np.ndarray, labels: np.ndarray, images_name: str, labels_name: str, classes: int
) -> None:
    """Images and labels of one split must agree in count; labels must lie in 0..classes-1."""
    if images.shape[0] != labels.shape[0]:
        raise IdxFormatError(
            f"{labels_name}: item count is {labels.shape[0]}, but {images_name} holds "
            f"{images.shape[0]} images; the two files of a split must agree"
        )
    if labels.size and int(labels.max()) >= classes:
        bad = int(np.argmax(labels >= classes))
        raise IdxFormatError(
            f"{labels_name}: label {int(labels[bad])} at item {bad} is outside 0..{classes - 1} "
            f"(dataset.classes is {classes})"
        )
