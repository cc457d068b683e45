"""The captured programs under results/<experiment>/programs/: intact, current, runnable by JAX alone."""

from __future__ import annotations

import hashlib
import json

import jax
import numpy as np
import pytest
import yaml
from prerequisites import require

from gradlanes.data.description import MNIST
from gradlanes.experiment.models import init_params
from gradlanes.experiment.spec import resolve
from gradlanes.program.artifact import ProgramArtifact, ProgramMismatch
from gradlanes.program.capture import capture
from gradlanes.program.jaxcompat import jaxpr_as_fun
from workflow import REPO

#: Every committed program; those of this config's experiment (results/mnist/) are the ones this
#: machine's locked JAX captures again, the others (a GPU machine's, traced by its own JAX release)
#: are checked for integrity alone.
PROGRAMS = sorted((REPO / "results").glob("*/programs/*/program.json"))
CURRENT = sorted((REPO / "results" / "mnist" / "programs").glob("*/program.json"))
CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())


def lane_of(program_id: str) -> str:
    return next(
        lane for lane, s in CONFIG["lanes"].items() if resolve(lane, s, 0, MNIST).program_id == program_id
    )


def test_every_configured_program_is_committed():
    ids = {resolve(lane, s, 0, MNIST).program_id for lane, s in CONFIG["lanes"].items()}
    assert ids == {path.parent.name for path in CURRENT}


@pytest.mark.parametrize("manifest_path", PROGRAMS, ids=lambda p: "/".join(p.parts[-4::2]))
def test_committed_files_match_their_hashes_and_fingerprint(manifest_path):
    manifest = json.loads(manifest_path.read_text())
    files = {name: (manifest_path.parent / name).read_bytes() for name in manifest["files"]}
    for name, content in files.items():
        assert hashlib.sha256(content).hexdigest() == manifest["files"][name]["sha256"], name
    assert ProgramArtifact(manifest["program"], files).fingerprint == manifest["fingerprint"]


@pytest.mark.parametrize("manifest_path", CURRENT, ids=lambda p: p.parent.name)
def test_the_code_still_captures_the_committed_program(manifest_path):
    manifest = json.loads(manifest_path.read_text())
    require(
        manifest["export"]["jax"] == jax.__version__,
        f"committed with jax {manifest['export']['jax']}; this is jax {jax.__version__} (make install "
        "installs the locked one)",
    )
    lane = lane_of(manifest["program"])
    exp = resolve(lane, CONFIG["lanes"][lane], 0, MNIST)
    ProgramArtifact.build(capture(exp), exp.program_id).verify(manifest_path)  # raises on a change


def test_a_changed_program_is_refused_with_what_differs(tmp_path):
    settings = {**CONFIG["lanes"]["xla_cpu"], "steps": 4, "train_images": 64, "test_images": 16}
    exp = resolve("probe", settings, 0, MNIST)
    artifact = ProgramArtifact.build(capture(exp), exp.program_id)
    artifact.write(tmp_path, capture(exp))
    other = resolve("probe", {**settings, "learning_rate": 1e-3}, 0, MNIST)
    with pytest.raises(ProgramMismatch, match=r"differing: .*step\.jax_export.*rerun `snakemake"):
        ProgramArtifact.build(capture(other), exp.program_id).verify(tmp_path / "program.json")


def test_the_committed_step_runs_with_jax_alone():
    """What docs/lanes.md promises: jax.export.deserialize and call, no gradlanes code involved."""
    manifest_path = next(p for p in CURRENT if "mse-adam" in p.parent.name)
    folder = manifest_path.parent
    step = jax.export.deserialize(bytearray((folder / "step.jax_export").read_bytes()))
    init = jax.export.deserialize(bytearray((folder / "init_state.jax_export").read_bytes()))
    inputs = json.loads(manifest_path.read_text())["inputs"]["step"]
    assert len(step.in_avals) == len(inputs)

    lane = lane_of(folder.name)
    exp = resolve(lane, CONFIG["lanes"][lane], 0, MNIST)
    program = capture(exp)
    params = program.flatten_params(init_params(exp.model, 0))
    rng = np.random.default_rng(0)
    images = rng.random(step.in_avals[-2].shape, dtype=np.float32)
    labels = rng.integers(0, 10, step.in_avals[-1].shape).astype(np.int32)
    carry = [*params, *init.call(*params)]
    from_export = step.call(*carry, images, labels)
    from_jaxpr = jax.jit(jaxpr_as_fun(program.step))(*carry, images, labels)
    for exported, traced in zip(from_export, from_jaxpr, strict=True):
        np.testing.assert_array_equal(np.asarray(exported), np.asarray(traced))
