"""What the rest of gradlanes knows about a prepared dataset, read once from its manifest.

`prepare_dataset` writes `manifest.json` beside the arrays; the experiment, the init-weights job,
the records and the checks all take their sizes and hashes from a `DatasetDescription` made from
it, never from hard-coded MNIST numbers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class DatasetDescription:
    name: str
    classes: int
    image_shape: tuple[int, ...]
    train_count: int
    test_count: int
    content_sha256: dict[str, str]  # role (train_images, ...) -> SHA-256 of the decompressed file

    @property
    def inputs(self) -> int:
        """Pixels per image: the models' input width."""
        return math.prod(self.image_shape)

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any]) -> DatasetDescription:
        return cls(
            name=manifest["dataset"],
            classes=int(manifest["classes"]),
            image_shape=tuple(int(size) for size in manifest["image_shape"]),
            train_count=int(manifest["counts"]["train"]),
            test_count=int(manifest["counts"]["test"]),
            content_sha256={role: entry["content_sha256"] for role, entry in manifest["files"].items()},
        )

    @classmethod
    def read(cls, path: str | Path) -> DatasetDescription:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} does not exist; run `snakemake --cores all {path}` to prepare it"
            )
        return cls.from_manifest(json.loads(path.read_text()))


#: MNIST's shape, for what classifies a single drawn image without a prepared dataset at hand.
MNIST = DatasetDescription("mnist", 10, (28, 28), 60000, 10000, {})
