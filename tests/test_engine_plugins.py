"""Engines are plugins: a throwaway package installed by pip registers one, and a lane runs on it.

The package knows gradlanes only through `gradlanes.engines.base` and the `gradlanes.engines`
entry-point group, as a third-party engine would; nothing in gradlanes names it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import yaml

from gradlanes.engines.base import EnginePlugin
from gradlanes.engines.registry import UnknownEngine, engine_names, get_engine
from gradlanes.layout import work
from workflow import REPO, output_of, run_snakemake

SUBSET = REPO / ".test" / "config.yaml"
SLICE_FLOORS = REPO / "results" / "checks" / "slice-floors.json"

#: A complete engine in a few lines: each captured program through plain `jax.jit`.
TINY_ENGINE = """
import jax
import numpy as np

from gradlanes.engines.base import EnginePlugin
from gradlanes.program.jaxcompat import jaxpr_as_fun


class TinyEngine:
    platform = "cpu"
    device_kind = "tiny"

    def __init__(self, program):
        self.program = program
        self.dispatches = 0
        self.forward = jax.jit(jaxpr_as_fun(program.forward))
        self.gradient = jax.jit(jaxpr_as_fun(program.gradient))

    def prepare(self, params):
        leaves = self.program.flatten_params(params)
        self.carry = [*leaves, *jax.jit(jaxpr_as_fun(self.program.init_state))(*leaves)]

    def compile_step(self):
        self.train_step = jax.jit(jaxpr_as_fun(self.program.step))

    def stage(self, images, labels):
        return images, labels

    def step(self, batch):
        *self.carry, loss = self.train_step(*self.carry, *batch)
        self.dispatches += 1
        return [float(loss)]

    def logits(self, images):
        return np.asarray(self.forward(*self.carry[: self.program.n_params], images)[0])

    def params(self):
        return self.program.unflatten_params([np.asarray(p) for p in self.carry[: self.program.n_params]])

    def loss_and_grad(self, params, images, labels):
        loss, *grads = self.gradient(*self.program.flatten_params(params), images, labels)
        return float(loss), self.program.unflatten_params([np.asarray(g) for g in grads])


def create(exp, program):
    return TinyEngine(program)


PLUGIN = EnginePlugin(name="tiny", summary="jax.jit of each program", create=create)
"""

PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "gradlanes-tiny-engine"
version = "0.0.1"

[project.entry-points."gradlanes.engines"]
tiny = "tiny_engine:PLUGIN"
"""


@pytest.fixture(scope="module")
def tiny_engine_site(tmp_path_factory):
    """The throwaway package, installed with pip into its own folder (not into the project's .venv)."""
    source = tmp_path_factory.mktemp("tiny-src")
    (source / "pyproject.toml").write_text(PYPROJECT)
    (source / "tiny_engine.py").write_text(textwrap.dedent(TINY_ENGINE))
    site = tmp_path_factory.mktemp("tiny-site")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*pip, "--no-index", "--target", str(site), str(source)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(site.glob("gradlanes_tiny_engine-*.dist-info/entry_points.txt"))
    return site


def test_builtin_engines_register_through_the_entry_points():
    assert {"xla", "interpreter", "handkernel"} <= set(engine_names())
    for name in ("xla", "interpreter", "handkernel"):
        assert isinstance(get_engine(name), EnginePlugin) and get_engine(name).name == name


def test_an_unknown_engine_names_what_is_installed():
    with pytest.raises(UnknownEngine, match=r"no engine 'nope' is installed \(engines: .*xla.*Add an engine"):
        get_engine("nope")


def test_a_plugin_refuses_settings_it_cannot_run():
    problems = get_engine("handkernel").settings_errors("k", {"model": "mlp", "device": "gpu"})
    assert problems == [
        "'lanes.k.model' is 'mlp', but engine 'handkernel' implements only model 'softmax'",
        "'lanes.k.device' is 'gpu', but engine 'handkernel' runs on 'cpu'",
    ]
    assert get_engine("xla").settings_errors("x", {"device": "gpu", "matmul_precision": "tf32"}) == []


@pytest.mark.slow
def test_a_lane_runs_on_an_engine_from_an_installed_package(tiny_engine_site, subset_copy, tmp_path):
    """In a copy of the subset run: its data, program and xla_cpu record are there, so only the
    new lane trains (snakemake reruns nothing else: the other rules' inputs and params are as
    they were)."""
    workdir, mirror = subset_copy
    config = yaml.safe_load(SUBSET.read_text())
    tiny = {**config["lanes"]["xla_cpu"], "engine": "tiny"}
    # The targets are work-area records: nothing is published, so the published subset (whose
    # lanes are another set) need not refuse the run.
    overrides = {**mirror, "lanes": {"tiny": tiny}, "replace_published": True}
    env = {"PYTHONPATH": str(tiny_engine_site)}
    targets = [work("mnist").record("tiny", 0), work("mnist").record("xla_cpu", 0)]
    xla_before = (workdir / targets[1]).read_bytes()
    process = run_snakemake(workdir, *targets, configfile=SUBSET, overrides=overrides, env=env)
    assert process.returncode == 0, output_of(process)
    tiny_record, xla_record = (json.loads((workdir / target).read_text()) for target in targets)
    assert (workdir / targets[1]).read_bytes() == xla_before
    assert tiny_record["status"] == "ok" and tiny_record["engine"] == "tiny"
    assert tiny_record["device_kind"] == "tiny" and tiny_record["dispatches"] >= tiny["steps"]
    assert tiny_record["program"] == xla_record["program"]  # one experiment, one captured program
    # The subset's seed-0 floor for this experiment (results/checks/slice-floors.md: derived from
    # xla_cpu's accuracy under every numerics-matrix cell): the tiny lane is xla_cpu's settings and
    # captured program, through jax.jit as the xla engine runs it.
    floors = json.loads(SLICE_FLOORS.read_text())["experiments"][f"{tiny['model']}/{tiny['loss']}"]
    assert "xla_cpu" in floors["lanes"]
    assert tiny_record["accuracy"]["percent"] >= floors["floor"]
    # Two engines, one experiment: as close as the calibrated bound for host vs xla_cpu allows.
    bound = config["agreement"]["pairs"]["host_vs_xla_cpu"]["final_loss_rel"]
    final = xla_record["loss"]["final"]
    assert abs(tiny_record["loss"]["final"] - final) <= bound * final

    without = run_snakemake(tmp_path / "without", "-n", configfile=SUBSET, overrides=overrides)
    assert without.returncode != 0
    assert "'lanes.tiny.engine': no engine 'tiny' is installed" in output_of(without)
