"""Another idx dataset, made from MNIST: the project must take it through config.yaml alone.

"Negative MNIST": every pixel inverted (255 - p), labels unchanged. Every input is now non-zero, so
the first layer's products, its gradient and the ReLU kinks are dense where MNIST's are sparse,
which is what broke the old agreement bounds on other data. Written as gzip idx files with the
SHA-256 pins of their content, plus the config overlay that names them.

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
NAME = "negative_mnist"
IMAGE_HEADER = 16  # magic, count, rows, columns


def write_negative_mnist(out: Path, mnist: Path) -> Path:
    """Write the four archives to `out` and return a config overlay selecting them."""
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for role, name in ROLES.items():
        content = bytearray(gzip.decompress((mnist / name).read_bytes()))
        if role.endswith("images"):
            pixels = np.frombuffer(content, np.uint8, offset=IMAGE_HEADER)
            content[IMAGE_HEADER:] = (255 - pixels).tobytes()
        target = out / f"negative-{name}"
        target.write_bytes(gzip.compress(bytes(content), compresslevel=6, mtime=0))
        files[role] = {"name": target.name, "sha256": hashlib.sha256(content).hexdigest()}
    overlay = out / "negative_mnist.yaml"
    overlay.write_text(
        yaml.safe_dump({"dataset": {"name": NAME, "classes": 10, "mirrors": [str(out)], "files": files}})
    )
    return overlay


if __name__ == "__main__":
    repo = Path(__file__).resolve().parents[1]
    source = Path(sys.argv[2]) if len(sys.argv) > 2 else repo.parent / "shared" / "datasets" / "mnist"
    print(write_negative_mnist(Path(sys.argv[1]), source))
