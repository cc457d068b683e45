"""The captured programs: traced once, data as inputs, the same numbers as the functions traced."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import yaml
from conftest import REPO, small_lane

from gradlanes.capture import capture
from gradlanes.compiles import compile_window
from gradlanes.experiment import resolve
from gradlanes.interpreter import Interpreter
from gradlanes.jaxcompat import jaxpr_as_fun
from gradlanes.models import ModelSpec, init_params

CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())
COMBINATIONS = [
    small_lane(loss="mse", optimizer="adam"),
    small_lane(loss="xent", optimizer="adam", schedule="cosine"),
    small_lane(loss="xent", optimizer="sgd", learning_rate=0.1),
    small_lane(model="softmax", loss="xent", optimizer="sgd", init="zeros", learning_rate=0.1),
    small_lane(model="softmax", loss="mse", optimizer="adam", schedule="cosine", batch_size="full"),
]


def experiment(settings, seed=0):
    return resolve("probe", settings, seed, 784, 10, 60000, 10000)


def random_batch(exp, seed):
    rng = np.random.default_rng(seed)
    return (
        rng.random((exp.batch_size, 784), dtype=np.float32),
        rng.integers(0, 10, exp.batch_size).astype(np.int32),
    )


@pytest.mark.parametrize(
    "settings", COMBINATIONS, ids=lambda s: f"{s['model']}-{s['loss']}-{s['optimizer']}-{s['schedule']}"
)
def test_step_program_takes_everything_as_input(settings):
    exp = experiment(settings)
    program = capture(exp)
    step = program.step
    assert [np.size(c) for c in step.consts if np.size(c) > 1] == []
    assert len(step.jaxpr.invars) == program.n_params + program.n_state + 2
    images, labels = step.jaxpr.invars[-2:]
    assert images.aval.shape == (exp.batch_size, 784) and labels.aval.shape == (exp.batch_size,)
    assert str(labels.aval.dtype) == "int32"
    assert program.ir["step"]["total"] >= program.ir["step"]["top"] > program.ir["forward"]["top"]
    assert {"dot_general", "reduce_sum"} <= set(program.primitives)


@pytest.mark.parametrize(
    "settings", COMBINATIONS, ids=lambda s: f"{s['model']}-{s['loss']}-{s['optimizer']}-{s['schedule']}"
)
def test_interpreted_step_matches_jit_for_several_batches(settings):
    exp = experiment(settings)
    program = capture(exp)
    params = program.flatten_params(init_params(exp.model, 3))
    interpreter = Interpreter(program.step)
    state = Interpreter(program.init_state)(*params)
    jitted = jax.jit(jaxpr_as_fun(program.step))
    carry_interp = carry_jit = [*params, *state]
    for batch_seed in range(3):  # one program, three different mini-batches, three steps
        batch = random_batch(exp, batch_seed)
        *carry_interp, loss_interp = interpreter(*carry_interp, *batch)
        *carry_jit, loss_jit = [np.asarray(x) for x in jitted(*carry_jit, *batch)]
        np.testing.assert_allclose(loss_interp, loss_jit, rtol=1e-6)
        # Adam divides by sqrt(v): where a gradient is near zero, float32 rounding in it moves the
        # update by up to a few percent of the learning rate, hence an absolute tolerance of lr/100.
        for mine, theirs in zip(carry_interp, carry_jit, strict=True):
            np.testing.assert_allclose(mine, theirs, rtol=2e-5, atol=exp.learning_rate / 100)
            assert mine.dtype == theirs.dtype


def test_capturing_compiles_nothing():
    with compile_window() as window:
        capture(experiment(small_lane()))
    assert window.count == 0


def test_initial_weights_are_bit_identical_per_seed_and_differ_across_seeds():
    spec = ModelSpec("mlp", 784, 10, 128, "lecun_normal")
    first, again, other = init_params(spec, 7), init_params(spec, 7), init_params(spec, 8)
    for name in first:
        assert first[name].tobytes() == again[name].tobytes()
    assert not np.array_equal(first["w1"], other["w1"])
    assert float(np.std(first["w1"])) == pytest.approx(np.sqrt(1 / 784), rel=0.15)
    assert not first["b1"].any()


def test_config_lanes_sharing_a_model_share_a_key():
    lanes = CONFIG["lanes"]
    keys = {name: experiment({**lanes[name]}).model.key for name in ("xla_gpu", "xla_cpu", "host")}
    assert len(set(keys.values())) == 1
    assert experiment(lanes["softmax_kernel"]).model.key == experiment(lanes["softmax_xla"]).model.key
