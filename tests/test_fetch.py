"""gradlanes.data.fetch against a real local HTTP mirror: every failure mode hands over cleanly."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from gradlanes.data.fetch import DownloadError, FetchPolicy, FileSpec, fetch_dataset, mirror_url

FAST = FetchPolicy(timeout_s=1.0, retries=2, backoff_s=0.0)


def specs(dataset_config, roles=("train_labels", "test_labels")):
    files = dataset_config["files"]
    return [FileSpec(role, files[role]["name"], files[role]["sha256"]) for role in roles]


def assert_nothing_partial(folder: Path):
    leftovers = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
    assert leftovers == [], f"left behind: {leftovers}"


def test_mirror_url_forms(tmp_path):
    assert mirror_url("https://h/mnist", "a.gz") == "https://h/mnist/a.gz"
    assert mirror_url("https://h/mnist/", "a.gz") == "https://h/mnist/a.gz"
    assert mirror_url("file:///data/mnist/", "a.gz") == "file:///data/mnist/a.gz"
    assert mirror_url(str(tmp_path), "a.gz") == str(tmp_path / "a.gz")


def test_good_mirror_verifies_content(mirror_server, dataset_config, tmp_path):
    fetched = fetch_dataset("mnist", specs(dataset_config), [mirror_server.mirror("good")], tmp_path, FAST)
    for item, spec in zip(fetched, specs(dataset_config), strict=True):
        assert item.content_sha256 == spec.sha256
        data = Path(item.path).read_bytes()
        assert hashlib.sha256(data).hexdigest() == item.archive_sha256
        assert item.archive_bytes == len(data)
        assert item.mirror == mirror_server.mirror("good")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(s.name for s in specs(dataset_config))


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("missing", "HTTP 404"),
        ("html", "body is not gzip (it starts with '<!DOCTYPE html>"),
        ("truncated", "truncated gzip"),
        ("flipped", "content SHA-256 mismatch"),
        ("hang", "no answer within the 1 s timeout"),
    ],
)
def test_bad_mirror_fails_with_reason_and_leaves_nothing(
    mirror_server, dataset_config, tmp_path, mode, expected
):
    target = tmp_path / "mnist"
    started = time.monotonic()
    with pytest.raises(DownloadError) as caught:
        fetch_dataset("mnist", specs(dataset_config), [mirror_server.mirror(mode)], target, FAST)
    message = str(caught.value)
    assert expected in message
    assert mirror_server.mirror(mode) in message
    assert "curl -fLO" in message and "dataset.mirrors" in message
    assert "make run MIRROR=" in message
    assert_nothing_partial(target)
    assert time.monotonic() - started < 20, "a silent mirror must time out, not hang"


def test_one_message_lists_every_mirror(mirror_server, dataset_config, tmp_path):
    mirrors = [
        mirror_server.mirror("missing"),
        mirror_server.mirror("html"),
        "http://127.0.0.1:9/nothing-listens/",
    ]
    with pytest.raises(DownloadError) as caught:
        fetch_dataset("mnist", specs(dataset_config), mirrors, tmp_path / "d", FAST)
    message = str(caught.value)
    for index, mirror in enumerate(mirrors, start=1):
        assert f"mirror {index} {mirror}" in message
    assert "connection failed" in message
    for spec in specs(dataset_config):
        assert f"# must print {spec.sha256}" in message


def test_first_mirror_bad_second_good(mirror_server, dataset_config, tmp_path):
    mirrors = [mirror_server.mirror("flipped"), mirror_server.mirror("good")]
    fetched = fetch_dataset("mnist", specs(dataset_config), mirrors, tmp_path, FAST)
    assert {item.mirror for item in fetched} == {mirror_server.mirror("good")}
    assert all("content SHA-256 mismatch" in item.attempts[0] for item in fetched)


def test_transient_error_is_retried_on_the_same_mirror(mirror_server, dataset_config, tmp_path):
    waits = []
    fetched = fetch_dataset(
        "mnist",
        specs(dataset_config, ("test_labels",)),
        [mirror_server.mirror("flaky")],
        tmp_path,
        FetchPolicy(timeout_s=2, retries=3, backoff_s=0.25),
        sleep=waits.append,
    )
    assert fetched[0].mirror == mirror_server.mirror("flaky")
    assert waits == [0.25]


def test_local_folder_and_file_url_mirrors(shared_mnist, dataset_config, tmp_path):
    for mirror in (str(shared_mnist), shared_mnist.as_uri()):
        dest = tmp_path / mirror.replace("/", "_")
        fetched = fetch_dataset("mnist", specs(dataset_config), [mirror], dest, FAST)
        assert [item.mirror for item in fetched] == [mirror, mirror]


def test_no_mirrors_is_a_config_error(dataset_config, tmp_path):
    with pytest.raises(DownloadError, match="dataset.mirrors"):
        fetch_dataset("mnist", specs(dataset_config), [], tmp_path)


def test_stale_partial_file_is_never_trusted(mirror_server, dataset_config, tmp_path):
    spec = specs(dataset_config, ("test_labels",))[0]
    stale = tmp_path / f".{spec.name}.abc{'.part'}"
    stale.write_bytes(b"half a download")
    fetch_dataset("mnist", [spec], [mirror_server.mirror("good")], tmp_path, FAST)
    assert not stale.exists()
