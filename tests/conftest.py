"""Shared fixtures: the real MNIST files in ../shared and a real local HTTP mirror serving them."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import Phase, settings
from mirror import MirrorServer
from prerequisites import require

REPO = Path(__file__).resolve().parents[1]

if os.environ.get("GRADLANES_MUTATION"):
    # tools/mutation.py: each mutant only needs pass or fail. A failing property test would shrink
    # its example (an XLA compile per try) until mutmut's CPU limit and count as a timeout; without
    # shrinking or the example database it fails at the same first example, in seconds.
    settings.register_profile("mutation", phases=[Phase.explicit, Phase.generate], database=None)
    settings.load_profile("mutation")
SHARED_MNIST = Path(os.environ.get("GRADLANES_SHARED", REPO.parent / "shared")) / "datasets/mnist"
CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())


@pytest.fixture(scope="session")
def shared_mnist() -> Path:
    require(
        (SHARED_MNIST / "train-images-idx3-ubyte.gz").is_file(),
        f"real MNIST not found at {SHARED_MNIST}: clone gradlanes beside a shared/ folder "
        "(as CI does) or set GRADLANES_SHARED to a folder holding datasets/mnist/",
    )
    return SHARED_MNIST


@pytest.fixture(scope="session")
def mirror_server(shared_mnist):
    with MirrorServer(shared_mnist) as server:
        yield server


@pytest.fixture
def dataset_config() -> dict:
    return {**CONFIG["dataset"]}


@pytest.fixture(scope="session")
def prepared_mnist(shared_mnist, tmp_path_factory) -> dict:
    """The real MNIST prepared once per session: paths of the array file and manifest."""
    import json

    from gradlanes.data.prepare import ROLES, prepare_dataset

    folder = tmp_path_factory.mktemp("mnist")
    files = CONFIG["dataset"]["files"]
    (folder / "download.json").write_text(json.dumps({"files": [{"role": r} for r in ROLES]}))
    for role in ROLES:
        (folder / files[role]["name"]).symlink_to(shared_mnist / files[role]["name"])
    prepare_dataset(
        "mnist", files, 10, folder, folder / "download.json", folder / "mnist.npz", folder / "manifest.json"
    )
    return {"arrays": folder / "mnist.npz", "manifest": folder / "manifest.json"}


@pytest.fixture(autouse=True)
def _order_free_draws(request, monkeypatch):
    """A module's shared generator (`rng`, seeded by its `RNG_SEED`) starts afresh for each test.

    Without it a test's inputs were the draws the tests before it left, so a new order
    (pytest-randomly) gave it new data; each test now sees the same draws whatever ran first.
    """
    seed = getattr(request.module, "RNG_SEED", None)
    if seed is not None:
        monkeypatch.setattr(request.module, "rng", np.random.default_rng(seed))


def small_lane(**overrides) -> dict:
    """Lane settings small enough for unit tests (seconds, not minutes)."""
    settings = {
        "engine": "xla",
        "device": "cpu",
        "model": "mlp",
        "hidden": 32,
        "init": "lecun_normal",
        "loss": "xent",
        "optimizer": "adam",
        "learning_rate": 1e-3,
        "schedule": "constant",
        "batch_size": 64,
        "steps": 12,
        "train_images": 512,
        "test_images": 200,
        "eval_every": 4,
        "log_rows": 4,
    }
    settings.update(overrides)
    return settings


def pytest_terminal_summary(terminalreporter):
    """Generated interpreter-vs-XLA cases per rule, and the interpreter's coverage of the corpus."""
    from corpus import RESULTS, corpus
    from oracle import CASES_RUN

    from gradlanes.program.interpreter import RULES, STRUCTURED
    from gradlanes.program.jaxcompat import CALL_JAXPR_PARAM

    if RESULTS:
        programs = corpus()
        ran = [p.name for p in programs if RESULTS.get(p.name, "").startswith("ran")]
        supported = [p.name for p in programs if RESULTS.get(p.name) == "supported" or p.name in ran]
        terminalreporter.write_sep("-", "interpreter coverage of the training-program corpus")
        terminalreporter.write_line(
            f"corpus: {len(ran)} / {len(programs)} programs ran and matched XLA under the float64-reference "
            f"measure; {len(supported)} / {len(RESULTS)} of those this run checked are fully supported; "
            f"{len(RULES) + len(STRUCTURED) + len(CALL_JAXPR_PARAM)} primitives supported"
        )
        for name in sorted(RESULTS):
            if not RESULTS[name].startswith(("ran", "supported")):
                terminalreporter.write_line(f"  {name}: {RESULTS[name]}")
    if CASES_RUN:
        per_rule = ", ".join(f"{name} {count}" for name, count in sorted(CASES_RUN.items()))
        terminalreporter.write_sep("-", "interpreter rules checked against XLA")
        terminalreporter.write_line(
            f"{sum(CASES_RUN.values())} generated cases over {len(CASES_RUN)} primitives: {per_rule}"
        )
