"""Another idx dataset, made from MNIST: the project must take it through config.yaml alone.

"Transposed MNIST": every image with its rows and columns swapped, labels unchanged. Each of the
784 inputs now carries other pixels, so every product, kink and gradient differs from MNIST's
while the default lanes still train on it (an inverted MNIST, dense where MNIST is sparse, makes
the TypeShade lanes' SGD at 0.1 diverge: a different experiment, not another dataset for the same
one). Written as gzip idx files with the SHA-256 pins of their content, plus the config overlay.

    python tests/derived.py OUT_FOLDER [MNIST_FOLDER]   # prints the overlay path
"""

from __future__ import annotations

import gzip
import hashlib
import sys
from pathlib import Path

import numpy as np
import yaml

ROLES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}
NAME = "transposed_mnist"
IMAGE_HEADER = 16  # magic, count, rows, columns


def write_transposed_mnist(out: Path, mnist: Path) -> Path:
    """Write the four archives to `out` and return a config overlay selecting them."""
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for role, name in ROLES.items():
        content = bytearray(gzip.decompress((mnist / name).read_bytes()))
        if role.endswith("images"):
            pixels = np.frombuffer(content, np.uint8, offset=IMAGE_HEADER).reshape(-1, 28, 28)
            content[IMAGE_HEADER:] = np.ascontiguousarray(pixels.transpose(0, 2, 1)).tobytes()
        target = out / f"transposed-{name}"
        target.write_bytes(gzip.compress(bytes(content), compresslevel=6, mtime=0))
        digest = hashlib.sha256(content).hexdigest()
        files[role] = {"name": target.name, "sha256": digest, "bytes": len(content)}
    overlay = out / f"{NAME}.yaml"
    dataset = {"name": NAME, "classes": 10, "mirrors": [str(out.resolve())], "files": files}
    overlay.write_text(yaml.safe_dump({"dataset": dataset}))
    return overlay


if __name__ == "__main__":
    repo = Path(__file__).resolve().parents[1]
    source = Path(sys.argv[2]) if len(sys.argv) > 2 else repo.parent / "shared" / "datasets" / "mnist"
    print(write_transposed_mnist(Path(sys.argv[1]), source))
