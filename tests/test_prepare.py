"""Parsing idx files and preparing the array file: real MNIST, real malformed files, and tiny made ones."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import struct
from datetime import datetime
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
    with pytest.raises(
        IdxFormatError, match=f"^{name}: content SHA-256 is .*; delete the file and rerun the download$"
    ):
        run_prepare(folder, dataset_config)


# ---- a tiny idx dataset made here: every manifest field against the value it must have ----------

TINY_NAMES = {role: f"{role}.gz" for role in ROLES}


def tiny_dataset(
    folder: Path, *, train_shape=(6, 3, 2), test_shape=(4, 3, 2), label_dims=None, provenance=ROLES
):
    """Write four gzip idx files (images 0..255 cycling, labels 0..2) and a provenance file."""
    folder.mkdir(parents=True)
    arrays, files = {}, {}
    for split, shape in (("train", train_shape), ("test", test_shape)):
        images = (np.arange(np.prod(shape)) % 256).astype(np.uint8).reshape(shape)
        labels = (np.arange(shape[0]) % 3).astype(np.uint8)
        arrays[f"{split}_images"], arrays[f"{split}_labels"] = images, labels
    for role, array in arrays.items():
        magic = IMAGES_MAGIC if role.endswith("images") else LABELS_MAGIC
        dims = label_dims if (label_dims and role == "test_labels") else array.shape
        magic = (magic & ~0xFF) | len(dims)  # the magic's last byte counts the dimensions
        content = idx_bytes(magic, dims, array.tobytes())
        (folder / TINY_NAMES[role]).write_bytes(gzip.compress(content, mtime=0))
        digest = hashlib.sha256(content).hexdigest()
        files[role] = {"name": TINY_NAMES[role], "sha256": digest, "bytes": len(content)}
    origin = [{"role": r, "mirror": f"mirror-{r}", "url": f"https://m/{TINY_NAMES[r]}"} for r in provenance]
    (folder / "download.json").write_text(json.dumps({"files": origin}))
    return arrays, files


class TickingClock:
    """A clock that advances by `step` on every reading, starting at 100."""

    def __init__(self, step: float):
        self.now, self.step = 100.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def prepare_tiny(folder: Path, files: dict, classes: int = 3, clock=None) -> dict:
    return prepare_dataset(
        "tiny",
        files,
        classes,
        folder,
        folder / "download.json",
        folder / "tiny.npz",
        folder / "manifest.json",
        **({"clock": clock} if clock else {}),
    )


def test_the_manifest_states_every_file_and_the_arrays_exactly(tmp_path):
    folder = tmp_path / "tiny"
    arrays, files = tiny_dataset(folder)
    manifest = prepare_tiny(folder, files)
    assert manifest == json.loads((folder / "manifest.json").read_text())
    assert (manifest["dataset"], manifest["classes"], manifest["image_shape"]) == ("tiny", 3, [3, 2])
    assert manifest["counts"] == {"train": 6, "test": 4}
    with np.load(folder / "tiny.npz") as stored:
        assert sorted(stored.files) == sorted(ROLES)
        for role in ROLES:
            np.testing.assert_array_equal(stored[role], arrays[role])
            assert stored[role].dtype == np.uint8
    assert manifest["arrays"] == {
        "path": "tiny.npz",
        "sha256": hashlib.sha256((folder / "tiny.npz").read_bytes()).hexdigest(),
    }
    for role in ROLES:
        archive = (folder / TINY_NAMES[role]).read_bytes()
        content = gzip.decompress(archive)
        assert manifest["files"][role] == {
            "name": TINY_NAMES[role],
            "content_sha256": files[role]["sha256"],
            "content_bytes": len(content),
            "archive_sha256": hashlib.sha256(archive).hexdigest(),
            "archive_bytes": len(archive),
            "mirror": f"mirror-{role}",
            "url": f"https://m/{TINY_NAMES[role]}",
            "shape": list(arrays[role].shape),
        }
    assert datetime.fromisoformat(manifest["created_utc"]).utcoffset().total_seconds() == 0
    assert manifest["created_utc"].endswith("+00:00")


def test_the_parse_and_preparation_times_are_the_clock_s(tmp_path):
    folder = tmp_path / "tiny"
    _, files = tiny_dataset(folder)
    manifest = prepare_tiny(folder, files, clock=TickingClock(0.1234567))
    # one tick per parse of each of the 4 files; 9 readings from the start to the manifest
    assert manifest["parse_s"] == round(4 * 0.1234567, 4) == 0.4938
    assert manifest["prepare_s"] == round(9 * 0.1234567, 3) == 1.111


def test_a_file_the_download_did_not_record_has_no_origin(tmp_path):
    folder = tmp_path / "tiny"
    _, files = tiny_dataset(folder, provenance=("train_images",))
    manifest = prepare_tiny(folder, files)
    assert manifest["files"]["train_images"]["mirror"] == "mirror-train_images"
    assert (
        manifest["files"]["test_labels"]["mirror"] is None and manifest["files"]["test_labels"]["url"] is None
    )


def assert_nothing_written(folder: Path):
    assert not (folder / "tiny.npz").exists() and not (folder / "manifest.json").exists()
    assert not list(folder.glob(".*.part"))


def test_labels_with_more_than_one_dimension_are_refused_by_their_magic(tmp_path):
    """An idx magic's last byte is the number of dimensions: 2-D labels carry 0x0802, not 0x0801."""
    folder = tmp_path / "tiny"
    _, files = tiny_dataset(folder, label_dims=(2, 2))
    with pytest.raises(IdxFormatError, match="^test_labels.gz: magic number is 2050 .* expected 2049"):
        prepare_tiny(folder, files)
    assert_nothing_written(folder)


def test_test_images_of_another_size_are_refused(tmp_path):
    folder = tmp_path / "tiny"
    _, files = tiny_dataset(folder, test_shape=(4, 2, 3))
    with pytest.raises(
        IdxFormatError,
        match=r"^test_images.gz: image size \(2, 3\) differs from the training images' \(3, 2\)",
    ):
        prepare_tiny(folder, files)
    assert_nothing_written(folder)


def test_a_label_outside_the_classes_is_refused(tmp_path):
    folder = tmp_path / "tiny"
    _, files = tiny_dataset(folder)
    with pytest.raises(IdxFormatError, match="label 2 at item 2 is outside 0..1"):
        prepare_tiny(folder, files, classes=2)
    assert_nothing_written(folder)


@pytest.mark.parametrize("damage", ["not gzip", "cut"])
def test_an_archive_that_is_not_whole_gzip_is_named(tmp_path, damage):
    folder = tmp_path / "tiny"
    _, files = tiny_dataset(folder)
    path = folder / TINY_NAMES["train_labels"]
    archive = path.read_bytes()
    path.write_bytes(b"<html>" if damage == "not gzip" else archive[: len(archive) // 2])
    with pytest.raises(IdxFormatError, match="^train_labels.gz: not a complete gzip file"):
        prepare_tiny(folder, files)
    assert_nothing_written(folder)


def test_an_images_magic_where_labels_belong_is_refused(tmp_path):
    folder = tmp_path / "tiny"
    _, files = tiny_dataset(folder)
    labels = np.zeros(4, np.uint8)
    content = idx_bytes(IMAGES_MAGIC, (4,), labels.tobytes())
    (folder / TINY_NAMES["test_labels"]).write_bytes(gzip.compress(content))
    files["test_labels"]["sha256"] = hashlib.sha256(content).hexdigest()
    with pytest.raises(IdxFormatError, match="^test_labels.gz: magic number is 2051"):
        prepare_tiny(folder, files)


def test_labels_that_do_not_count_the_images_name_both_files(tmp_path):
    folder = tmp_path / "tiny"
    _, files = tiny_dataset(folder)
    content = idx_bytes(LABELS_MAGIC, (5,), bytes(5))  # 6 training images
    (folder / TINY_NAMES["train_labels"]).write_bytes(gzip.compress(content))
    files["train_labels"]["sha256"] = hashlib.sha256(content).hexdigest()
    with pytest.raises(
        IdxFormatError, match="^train_labels.gz: item count is 5, but train_images.gz holds 6 images"
    ):
        prepare_tiny(folder, files)
    assert_nothing_written(folder)
