"""Publishing an experiment: all files or none, never over another experiment, never half-done."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from gradlanes import atomic
from gradlanes.layout import PUBLISHED_RECEIPT, name_errors, published, work
from gradlanes.publish import Identity, PublishRefused, publish
from workflow import REPO

MNIST_PINS = {"train_images": "a" * 64, "test_images": "b" * 64}


def identity(**changes) -> Identity:
    fields = dict(
        experiment="mnist", dataset="mnist", dataset_sha256=MNIST_PINS, lanes=("a", "b"), seeds=(0, 1)
    )
    return Identity(**{**fields, **changes})


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def work_files(tmp_path) -> dict[str, Path]:
    """A small finished work area: two records, a summary and a captured program of two files."""
    root = tmp_path / "work"
    files = {}
    for name, text in {
        "runs/a/seed-0/record.json": '{"lane": "a"}',
        "runs/b/seed-0/record.json": '{"lane": "b"}',
        "summary.md": "# summary\n",
    }.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        files[name] = path
    program = root / "programs" / "p1"
    program.mkdir(parents=True)
    (program / "step.jaxpr.txt").write_text("{ lambda ; a:f32[]. let  in (a,) }\n")
    manifest = {"files": {"step.jaxpr.txt": {"sha256": sha(program / "step.jaxpr.txt"), "bytes": 36}}}
    (program / "program.json").write_text(json.dumps(manifest))
    files["programs/p1/program.json"] = program / "program.json"
    return files


def test_publish_copies_every_file_with_a_receipt_of_their_hashes(work_files, tmp_path):
    target = tmp_path / "results" / "mnist"
    receipt = publish(work_files, target, identity())
    names = set(tree(target))
    assert names == {*work_files, "programs/p1/step.jaxpr.txt", PUBLISHED_RECEIPT}
    for name, entry in receipt["files"].items():
        assert sha(target / name) == entry["sha256"] and (target / name).stat().st_size == entry["bytes"]
    assert json.loads((target / PUBLISHED_RECEIPT).read_text()) == receipt
    assert receipt["identity"]["lanes"] == ["a", "b"] and receipt["identity"]["seeds"] == [0, 1]
    assert [p.name for p in target.parent.iterdir()] == ["mnist"]  # no staging folder left


def test_republishing_replaces_the_whole_folder(work_files, tmp_path):
    target = tmp_path / "results" / "mnist"
    publish(work_files, target, identity())
    (target / "stale.txt").write_text("from an older run")
    work_files["runs/a/seed-0/record.json"].write_text('{"lane": "a", "run": 2}')
    publish(work_files, target, identity())
    assert not (target / "stale.txt").exists()
    assert (target / "runs/a/seed-0/record.json").read_text() == '{"lane": "a", "run": 2}'


@pytest.mark.parametrize(
    "other, what",
    [
        (identity(dataset="transposed_mnist"), "dataset: published 'mnist', this run 'transposed_mnist'"),
        (identity(dataset_sha256={**MNIST_PINS, "test_images": "c" * 64}), "dataset content"),
        (identity(lanes=("a", "b", "c")), "lanes: published ['a', 'b'], this run ['a', 'b', 'c']"),
        (identity(seeds=(0,)), "seeds: published [0, 1], this run [0]"),
        (identity(lane_seeds={"b": (1,)}), "seeds per lane: published {'a': [0, 1], 'b': [0, 1]}"),
    ],
)
def test_another_experiment_is_refused_and_the_folder_left_byte_identical(work_files, tmp_path, other, what):
    target = tmp_path / "results" / "mnist"
    publish(work_files, target, identity())
    before = tree(target)
    with pytest.raises(PublishRefused, match="holds another experiment") as refused:
        publish(work_files, target, other)
    assert what in str(refused.value)
    assert "--config experiment=NAME" in str(refused.value) and "replace_published=true" in str(refused.value)
    assert tree(target) == before
    publish(work_files, target, other, replace=True)  # said on purpose: replaced
    assert json.loads((target / PUBLISHED_RECEIPT).read_text())["identity"] == other.as_dict()


def test_a_folder_not_written_by_publish_is_refused(work_files, tmp_path):
    target = tmp_path / "results" / "mnist"
    target.mkdir(parents=True)
    (target / "notes.md").write_text("mine")
    with pytest.raises(PublishRefused, match="was not written by publish"):
        publish(work_files, target, identity())
    assert tree(target) == {"notes.md": b"mine"}


def test_a_program_file_that_differs_from_its_manifest_is_refused_before_anything_changes(
    work_files, tmp_path
):
    target = tmp_path / "results" / "mnist"
    publish(work_files, target, identity())
    before = tree(target)
    (work_files["programs/p1/program.json"].parent / "step.jaxpr.txt").write_text("tampered")
    with pytest.raises(PublishRefused, match="differs from its manifest"):
        publish(work_files, target, identity())
    assert tree(target) == before


def test_a_failure_while_copying_leaves_the_published_folder_intact(work_files, tmp_path):
    target = tmp_path / "results" / "mnist"
    publish(work_files, target, identity())
    before = tree(target)
    work_files["runs/b/seed-0/record.json"].unlink()  # vanishes mid-publish
    with pytest.raises(FileNotFoundError):
        publish(work_files, target, identity())
    assert tree(target) == before
    assert sorted(p.name for p in target.parent.iterdir()) == ["mnist"]


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_replace_folder_swaps_whole_folders(tmp_path, monkeypatch, exchange):
    swapped = []
    real = atomic._renameat2_exchange
    if exchange:
        monkeypatch.setattr(
            atomic, "_renameat2_exchange", lambda a, b: swapped.append(real(a, b)) or swapped[-1]
        )
    else:
        monkeypatch.setattr(atomic, "_renameat2_exchange", lambda a, b: False)
    target, staged = tmp_path / "target", tmp_path / "staged"
    for folder, text in ((target, "old"), (staged, "new")):
        folder.mkdir()
        (folder / "file").write_text(text)
    (target / "only-old").write_text("x")
    atomic.replace_folder(staged, target)
    assert tree(target) == {"file": b"new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]
    assert swapped == ([True] if exchange else [])  # Linux here: the atomic exchange really ran


def test_a_swap_killed_between_renames_is_recovered(tmp_path):
    target = tmp_path / "target"
    aside = atomic.aside_path(target)
    aside.mkdir()
    (aside / "file").write_text("published")
    assert atomic.recover_folder(target) is True
    assert tree(target) == {"file": b"published"} and not aside.exists()
    assert atomic.recover_folder(target) is False


def test_what_a_killed_publish_leaves_is_ignored_by_git():
    """Staging and set-aside folders, and the work area, never show in `git status results/`."""
    paths = [
        "results/.mnist.publishing/runs/a/seed-0/record.json",
        "results/.mnist.replaced/summary.md",
        work("mnist").record("host", 0),
    ]
    done = subprocess.run(
        ["git", "-C", str(REPO), "check-ignore", "--no-index", *paths], capture_output=True, text=True
    )
    assert done.stdout.split() == paths
    assert (
        subprocess.run(
            ["git", "-C", str(REPO), "check-ignore", "--no-index", "-q", published("mnist").record("host", 0)]
        ).returncode
        == 1
    )  # published records are tracked


@pytest.mark.parametrize(
    "name, message",
    [("bench", "holds machine-wide files"), ("checks", "holds machine-wide files"), ("My Run", "lower-case"),
     ("bench.md", "lower-case")],  # a name with a dot could be a published file's
)  # fmt: skip
def test_experiment_names_that_would_collide_or_break_paths_are_refused(name, message):
    assert message in " ".join(name_errors(name))
    assert name_errors("mnist") == [] and name_errors("fashion_mnist-2") == []


def test_a_receipt_from_before_lane_seeds_means_every_lane_ran_every_seed(work_files, tmp_path):
    target = tmp_path / "results" / "mnist"
    publish(work_files, target, identity())
    receipt = json.loads((target / PUBLISHED_RECEIPT).read_text())
    del receipt["identity"]["lane_seeds"]
    (target / PUBLISHED_RECEIPT).write_text(json.dumps(receipt))
    publish(work_files, target, identity(lane_seeds={"a": (1, 0), "b": (0, 1)}))  # the same: not refused
    with pytest.raises(PublishRefused, match="seeds per lane"):
        publish(work_files, target, identity(lane_seeds={"a": (0,)}))


def test_reordered_lanes_and_seeds_are_the_same_experiment(work_files, tmp_path):
    target = tmp_path / "results" / "mnist"
    publish(work_files, target, identity())
    publish(work_files, target, identity(lanes=("b", "a"), seeds=(1, 0)))  # not refused
