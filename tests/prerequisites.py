"""What a test needs but the suite cannot make: a skip locally, an error under CI=true.

A test whose prerequisite is missing here (the real MNIST in ../shared, the GPU machine's wheel
set) is skipped with the command that provides it, so a first `make test` on a laptop still runs
the rest. CI provides every one of them (`.ci/run` sets CI=true), so there a missing prerequisite
fails the test instead: a green CI run never hides tests that did not run. Skips for what a
machine cannot have (a GPU, a SLURM outside `make test-cluster`, a primitive this JAX lacks) are
not prerequisites; they stay skips, each with its reason in pytest's summary (-ra).
"""

from __future__ import annotations

import os

import pytest

CI_WORDS = ("true", "1", "yes")


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in CI_WORDS


def require(available: bool, reason: str) -> None:
    """Go on when `available`; else skip with `reason`, or fail with it under CI=true."""
    if available:
        return
    if under_ci():
        pytest.fail(f"{reason} (CI=true: a missing prerequisite fails instead of skipping)", pytrace=False)
    pytest.skip(reason)
