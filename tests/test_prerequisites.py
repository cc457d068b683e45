"""A missing prerequisite is a skip on a laptop and an error in CI: no silent skips there."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from prerequisites import require, under_ci

from workflow import REPO

NEEDS_SHARED = "tests/test_lane.py::test_xla_lane_compiles_its_step_exactly_once"


def pytest_without_shared(tmp_path, ci: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["GRADLANES_SHARED"] = str(tmp_path / "no-shared-here")
    if ci is not None:
        env["CI"] = ci
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        NEEDS_SHARED,
    ]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_without_shared_a_laptop_skips_and_says_how_to_get_it(tmp_path):
    done = pytest_without_shared(tmp_path, ci=None)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "1 skipped" in done.stdout and "real MNIST not found at" in done.stdout
    assert "GRADLANES_SHARED" in done.stdout


@pytest.mark.slow
def test_without_shared_ci_fails_loudly(tmp_path):
    done = pytest_without_shared(tmp_path, ci="true")
    assert done.returncode == 1, done.stdout[-2000:]
    assert "1 error" in done.stdout or "1 failed" in done.stdout
    assert "real MNIST not found at" in done.stdout
    assert "CI=true: a missing prerequisite fails instead of skipping" in done.stdout


@pytest.mark.parametrize(
    ("value", "ci"), [("true", True), ("1", True), ("TRUE", True), ("", False), ("false", False)]
)
def test_what_counts_as_ci(monkeypatch, value, ci):
    monkeypatch.setenv("CI", value)
    assert under_ci() is ci


def test_an_available_prerequisite_is_silent(monkeypatch):
    monkeypatch.setenv("CI", "true")
    require(True, "never said")
