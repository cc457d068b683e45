"""Turn verified idx archives into one compact array file plus a manifest of where it came from.

The array file (`<name>.npz`, uint8, uncompressed so it loads in milliseconds) is what every lane
reads; the manifest records, per source file, both hashes, sizes and the mirror that served it, so
a result can be traced back to the exact bytes it was trained on.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from gradlanes.atomic import atomic_path, write_json
from gradlanes.data.idx import IMAGES_MAGIC, LABELS_MAGIC, IdxFormatError, check_split, parse_idx
from gradlanes.hashing import sha256_file

SPLITS = ("train", "test")
ROLES = ("train_images", "train_labels", "test_images", "test_labels")


def _read_content(path: Path, pinned_sha256: str) -> tuple[bytes, str]:
    try:
        content = gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as exc:
        raise IdxFormatError(f"{path.name}: not a complete gzip file ({exc})") from exc
    content_sha256 = hashlib.sha256(content).hexdigest()
    if content_sha256 != pinned_sha256:
        raise IdxFormatError(
            f"{path.name}: content SHA-256 is {content_sha256}, pinned {pinned_sha256}; "
            "delete the file and rerun the download"
        )
    return content, content_sha256


def prepare_dataset(
    name: str,
    files: Mapping[str, Mapping[str, str]],
    classes: int,
    source_dir: str | os.PathLike,
    provenance_path: str | os.PathLike,
    arrays_path: str | os.PathLike,
    manifest_path: str | os.PathLike,
    clock: Callable[[], float] = time.perf_counter,
) -> dict:
    """Parse the four idx archives in `source_dir`; write the array file and manifest atomically.

    `clock` times the parse and the whole preparation (a test passes one that ticks by a known step).
    """
    started = clock()
    source_dir = Path(source_dir)
    provenance = {item["role"]: item for item in json.loads(Path(provenance_path).read_text())["files"]}
    arrays: dict[str, np.ndarray] = {}
    entries: dict[str, dict] = {}
    parse_s = 0.0
    for role in ROLES:
        spec = files[role]
        path = source_dir / spec["name"]
        content, content_sha256 = _read_content(path, spec["sha256"])
        magic = IMAGES_MAGIC if role.endswith("images") else LABELS_MAGIC
        parse_started = clock()
        array = parse_idx(content, spec["name"], magic)
        parse_s += clock() - parse_started
        arrays[role] = array
        origin = provenance.get(role, {})
        entries[role] = {
            "name": spec["name"],
            "content_sha256": content_sha256,
            "content_bytes": len(content),
            "archive_sha256": sha256_file(path),
            "archive_bytes": path.stat().st_size,
            "mirror": origin.get("mirror"),
            "url": origin.get("url"),
            "shape": list(array.shape),
        }
    for split in SPLITS:
        check_split(
            arrays[f"{split}_images"],
            arrays[f"{split}_labels"],
            files[f"{split}_images"]["name"],
            files[f"{split}_labels"]["name"],
            classes,
        )
    if arrays["train_images"].shape[1:] != arrays["test_images"].shape[1:]:
        raise IdxFormatError(
            f"{files['test_images']['name']}: image size {arrays['test_images'].shape[1:]} differs "
            f"from the training images' {arrays['train_images'].shape[1:]}"
        )
    with atomic_path(arrays_path) as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, **arrays)
    manifest = {
        "dataset": name,
        "classes": classes,
        "image_shape": list(arrays["train_images"].shape[1:]),
        "counts": {split: int(arrays[f"{split}_labels"].shape[0]) for split in SPLITS},
        "files": entries,
        "arrays": {"path": Path(arrays_path).name, "sha256": sha256_file(arrays_path)},
        "parse_s": round(parse_s, 4),
        "prepare_s": round(clock() - started, 3),
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_json(manifest_path, manifest)
    return manifest
