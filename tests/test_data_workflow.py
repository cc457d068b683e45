"""The real `snakemake` data rules against a real local mirror: success, fallback, failure."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from workflow import output_of, run_snakemake

pytestmark = pytest.mark.slow
TARGET = "resources/mnist/mnist.npz"
FAST = {"timeout_s": 2, "retries": 2, "backoff_s": 0.1}


def overrides(*mirrors: str) -> dict:
    return {"dataset": {"mirrors": list(mirrors)}, "download": FAST}


def test_prepares_arrays_and_manifest(mirror_server, tmp_path):
    process = run_snakemake(tmp_path, TARGET, overrides=overrides(mirror_server.mirror("good")))
    assert process.returncode == 0, output_of(process)
    arrays = np.load(tmp_path / TARGET)
    assert arrays["train_images"].shape == (60000, 28, 28)
    manifest = json.loads((tmp_path / "resources/mnist/manifest.json").read_text())
    assert {e["mirror"] for e in manifest["files"].values()} == {mirror_server.mirror("good")}
    assert (tmp_path / "logs/download_dataset.log").read_text().count("verified from") == 4
    assert "prepared mnist" in (tmp_path / "logs/prepare_dataset.log").read_text()


def test_second_mirror_serves_when_first_is_bad(mirror_server, tmp_path):
    bad, good = mirror_server.mirror("html"), mirror_server.mirror("good")
    process = run_snakemake(tmp_path, TARGET, overrides=overrides(bad, good))
    assert process.returncode == 0, output_of(process)
    manifest = json.loads((tmp_path / "resources/mnist/manifest.json").read_text())
    assert {e["mirror"] for e in manifest["files"].values()} == {good}
    provenance = json.loads((tmp_path / "resources/mnist/download.json").read_text())
    assert all("body is not gzip" in f["attempts"][0] for f in provenance["files"])


def test_every_mirror_failing_gives_one_message_and_no_files(mirror_server, tmp_path):
    mirrors = [mirror_server.mirror("missing"), mirror_server.mirror("truncated")]
    process = run_snakemake(tmp_path, TARGET, overrides=overrides(*mirrors))
    assert process.returncode != 0
    text = output_of(process)
    assert text.count("Could not download dataset 'mnist'") == 1
    assert "HTTP 404" in text and "truncated gzip" in text
    assert "curl -fLO" in text and "dataset.mirrors" in text
    assert "Traceback" not in text
    leftovers = [p for p in (tmp_path / "resources").rglob("*") if p.is_file()]
    assert leftovers == []
    assert "Could not download" in (tmp_path / "logs/download_dataset.log").read_text()


def test_local_folder_mirror(shared_mnist, tmp_path):
    process = run_snakemake(tmp_path, TARGET, overrides=overrides(str(shared_mnist)))
    assert process.returncode == 0, output_of(process)


def test_dry_run_lists_the_dag(tmp_path):
    process = run_snakemake(tmp_path, "-n")
    assert process.returncode == 0, output_of(process)
    for rule in ("download_dataset", "prepare_dataset"):
        assert rule in process.stdout


def test_a_lane_with_seeds_of_its_own_trains_only_those(tmp_path):
    process = run_snakemake(
        tmp_path, "-n", "--quiet", "rules", overrides={"lanes": {"iree_cpu": {"seeds": [1, 3]}}}
    )
    assert process.returncode == 0, output_of(process)
    counts = dict(re.findall(r"^(train_\w+)\s+(\d+)$", process.stdout, re.MULTILINE))
    assert counts["train_iree_cpu"] == "2" and counts["train_host"] == "5", process.stdout


# The one lint gradlanes does not follow: software comes from the project's locked .venv
# (docs/design.md, "Why one lint stays"), not from a per-rule conda env or container.
ACCEPTED_LINT = "Specify a conda environment or container for each rule."


def test_lint_reports_nothing_but_the_deployment_choice(tmp_path):
    process = run_snakemake(tmp_path, "--lint")
    text = output_of(process)
    lints = [line.strip()[2:].rstrip(":") for line in text.splitlines() if line.strip().startswith("* ")]
    assert lints, text
    assert set(lints) == {ACCEPTED_LINT}, text
