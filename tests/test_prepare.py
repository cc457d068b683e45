"""Parsing idx files and preparing the array file: real MNIST, and real malformed files."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from gradlanes.data.idx import IMAGES_MAGIC, LABELS_MAGIC, IdxFormatError, check_split, parse_idx
from gradlanes.data.prepare import ROLES, prepare_dataset


def idx_bytes(magic: int, dims: tuple[int, ...], payload: bytes) -> bytes:
    return struct.pack(">I", magic) + struct.pack(f">{len(dims)}I", *dims) + payload


def test_parse_idx_round_trip():
    data = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    parsed = parse_idx(idx_bytes(IMAGES_MAGIC, data.shape, data.tobytes()), "x", IMAGES_MAGIC)
    np.testing.assert_array_equal(parsed, data)


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (idx_bytes(LABELS_MAGIC, (3,), b"\0\1\2"), "magic number is 2049 (0x00000801), expected 2051"),
        (idx_bytes(IMAGES_MAGIC, (2, 2, 2), b"\0" * 7), "file length is 23 bytes"),
        (idx_bytes(IMAGES_MAGIC, (2, 2, 2), b"\0" * 9), "require exactly 24"),
        (idx_bytes(IMAGES_MAGIC, (0, 2, 2), b""), "include a zero"),
        (b"\0\0", "too short"),
    ],
)
def test_parse_idx_names_the_bad_field(blob, message):
    with pytest.raises(IdxFormatError, match="^broken.idx: ") as caught:
        parse_idx(blob, "broken.idx", IMAGES_MAGIC)
    assert message in str(caught.value)


def test_split_checks():
    images = np.zeros((3, 2, 2), np.uint8)
    with pytest.raises(IdxFormatError, match="item count is 2, but img holds 3 images"):
        check_split(images, np.zeros(2, np.uint8), "img", "lab", 10)
    with pytest.raises(IdxFormatError, match="label 12 at item 1 is outside 0..9"):
        check_split(images, np.array([1, 12, 3], np.uint8), "img", "lab", 10)


def stage(shared: Path, dest: Path, dataset_config: dict) -> Path:
    """Copy the verified archives plus a provenance file into `dest`, as download_dataset would."""
    dest.mkdir(parents=True)
    files = []
    for role in ROLES:
        name = dataset_config["files"][role]["name"]
        shutil.copyfile(shared / name, dest / name)
        files.append({"role": role, "mirror": str(shared), "url": str(shared / name)})
    (dest / "download.json").write_text(json.dumps({"files": files}))
    return dest


def run_prepare(folder: Path, dataset_config: dict, classes: int = 10) -> dict:
    return prepare_dataset(
        "mnist",
        dataset_config["files"],
        classes,
        folder,
        folder / "download.json",
        folder / "mnist.npz",
        folder / "manifest.json",
    )


def test_prepare_real_mnist(shared_mnist, dataset_config, tmp_path):
    folder = stage(shared_mnist, tmp_path / "mnist", dataset_config)
    manifest = run_prepare(folder, dataset_config)
    arrays = np.load(folder / "mnist.npz")
    assert arrays["train_images"].shape == (60000, 28, 28)
    assert arrays["test_images"].shape == (10000, 28, 28)
    assert arrays["train_images"].dtype == np.uint8
    assert np.bincount(arrays["test_labels"]).tolist()[:3] == [980, 1135, 1032]
    assert manifest["counts"] == {"train": 60000, "test": 10000}
    assert manifest["parse_s"] < 1.0
    for role in ROLES:
        entry = manifest["files"][role]
        assert entry["content_sha256"] == dataset_config["files"][role]["sha256"]
        archive = (folder / entry["name"]).read_bytes()
        assert entry["archive_sha256"] == hashlib.sha256(archive).hexdigest()
        assert entry["mirror"] == str(shared_mnist)


def rewrite(folder: Path, name: str, edit) -> str:
    content = edit(gzip.decompress((folder / name).read_bytes()))
    (folder / name).write_bytes(gzip.compress(content))
    return hashlib.sha256(content).hexdigest()


def test_wrong_magic_is_named(shared_mnist, dataset_config, tmp_path):
    folder = stage(shared_mnist, tmp_path / "mnist", dataset_config)
    config = json.loads(json.dumps(dataset_config))
    name = config["files"]["test_images"]["name"]
    config["files"]["test_images"]["sha256"] = rewrite(
        folder, name, lambda c: struct.pack(">I", 2049) + c[4:]
    )
    with pytest.raises(IdxFormatError, match=f"^{name}: magic number is 2049"):
        run_prepare(folder, config)
    assert not (folder / "mnist.npz").exists() and not (folder / "manifest.json").exists()
    assert not list(folder.glob(".*.part"))


def test_count_mismatch_is_named(shared_mnist, dataset_config, tmp_path):
    folder = stage(shared_mnist, tmp_path / "mnist", dataset_config)
    config = json.loads(json.dumps(dataset_config))
    name = config["files"]["test_labels"]["name"]
    config["files"]["test_labels"]["sha256"] = rewrite(
        folder, name, lambda c: struct.pack(">II", 2049, 9999) + c[8:-1]
    )
    with pytest.raises(IdxFormatError, match=f"^{name}: item count is 9999, but "):
        run_prepare(folder, config)
    assert not (folder / "mnist.npz").exists()


def test_content_not_matching_pin_is_refused(shared_mnist, dataset_config, tmp_path):
    folder = stage(shared_mnist, tmp_path / "mnist", dataset_config)
    name = dataset_config["files"]["train_labels"]["name"]
    rewrite(folder, name, lambda c: c[:-1] + bytes([(c[-1] + 1) % 10]))
    with pytest.raises(IdxFormatError, match=f"^{name}: content SHA-256 is .* rerun the download"):
        run_prepare(folder, dataset_config)
