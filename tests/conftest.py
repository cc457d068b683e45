"""Shared fixtures: the real MNIST files in ../shared and a real local HTTP mirror serving them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from mirror import MirrorServer

REPO = Path(__file__).resolve().parents[1]
SHARED_MNIST = Path(os.environ.get("GRADLANES_SHARED", REPO.parent / "shared")) / "datasets/mnist"
CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())


@pytest.fixture(scope="session")
def shared_mnist() -> Path:
    if not (SHARED_MNIST / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(
            f"real MNIST not found at {SHARED_MNIST}: clone gradlanes beside a shared/ folder "
            "(as CI does) or set GRADLANES_SHARED to a folder holding datasets/mnist/"
        )
    return SHARED_MNIST


@pytest.fixture(scope="session")
def mirror_server(shared_mnist):
    with MirrorServer(shared_mnist) as server:
        yield server


@pytest.fixture
def dataset_config() -> dict:
    return {**CONFIG["dataset"]}
