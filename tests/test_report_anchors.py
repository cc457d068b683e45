"""Published anchors: read from the packaged anchors.yaml, and a malformed entry is named clearly."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from importlib import resources

import pytest

from gradlanes.report.anchors import AnchorError, load_anchors, parse_anchors
from workflow import REPO

ENTRY = """
- source: Someone, somewhere
  experiment: MLP
  steps: 40
  train_images: 512
  test_images: 1000
  wall_s: 19.85
  accuracy: 82.5
  ours: host
"""


def test_shipped_anchors_load_with_their_published_figures():
    anchors = {anchor.source: anchor for anchor in load_anchors()}
    assert len(anchors) == 3
    tlaloc = anchors["Tlaloc, XLA GPU lane (GB10)"]
    assert (tlaloc.ours, tlaloc.length, tlaloc.wall_s, tlaloc.accuracy) == ("xla_gpu", "600", 8.28, 93.66)
    typeshade = anchors["TypeShade, softmax kernels (browser)"]
    assert (typeshade.ours, typeshade.length, typeshade.wall_s) == ("softmax_kernel", "5 epochs", None)


def test_anchors_file_ships_as_package_data():
    # What load_anchors reads is the source's anchors.yaml, not a stale installed copy of it...
    shipped = resources.files("gradlanes.report").joinpath("anchors.yaml").read_bytes()
    assert shipped == (REPO / "src" / "gradlanes" / "report" / "anchors.yaml").read_bytes()
    # ...and a wheel carries it: package-data names it.
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert any(fnmatch("report/anchors.yaml", pattern) for pattern in patterns["gradlanes"])


def test_a_well_formed_entry_parses():
    (anchor,) = parse_anchors(ENTRY)
    assert (anchor.ours, anchor.steps, anchor.epochs, anchor.length) == ("host", 40, None, "40")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda text: text.replace("  ours: host\n", ""),
            "anchor 1 ('Someone, somewhere'): missing key 'ours'",
        ),
        (lambda text: text.replace("accuracy:", "acuracy:"), "missing key 'accuracy'"),
        (lambda text: text + "  notes: fast\n", "anchor 1 ('Someone, somewhere'): unknown key 'notes'"),
        (
            lambda text: text.replace("train_images: 512", "train_images: many"),
            "key 'train_images' must be int",
        ),
        (
            lambda text: text.replace("steps: 40", "epochs: 5\n  steps: 40"),
            "exactly one of 'steps' and 'epochs'",
        ),
        (lambda text: text.replace("steps: 40", "steps: null"), "exactly one of 'steps' and 'epochs'"),
        (lambda text: text.replace("ours: host", "ours: true"), "key 'ours' must be str, not True"),
    ],
)
def test_a_malformed_entry_names_the_entry_and_the_key(edit, message):
    with pytest.raises(AnchorError, match="^anchors.yaml: ") as error:
        parse_anchors(ENTRY + edit(ENTRY), origin="anchors.yaml")
    assert message.replace("anchor 1", "anchor 2") in str(error.value)


def test_a_file_that_is_not_a_list_is_refused():
    with pytest.raises(AnchorError, match="expected a list of anchors, found dict"):
        parse_anchors("source: x\n")
    with pytest.raises(AnchorError, match="anchor 1: expected a mapping of keys, found str"):
        parse_anchors("- just a name\n")
