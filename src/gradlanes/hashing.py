"""SHA-256 of a file, read in blocks: what a download, a prepared dataset and a publish are checked by."""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK_BYTES = 1 << 20


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()
