"""The captured programs: traced once, data as inputs, the same numbers as the functions traced."""

from __future__ import annotations

import math
from pathlib import Path

import jax
import numpy as np
import pytest
import scipy.stats
import yaml
from lanes import small_lane

from gradlanes.data.description import MNIST
from gradlanes.engines.compiles import compile_window
from gradlanes.experiment.models import INITIALIZERS, ModelSpec, forward, init_params
from gradlanes.experiment.spec import resolve
from gradlanes.program.capture import capture
from gradlanes.program.interpreter import Interpreter
from gradlanes.program.jaxcompat import jaxpr_as_fun
from gradlanes.run.kinks import grant_kink_decisions
from gradlanes.run.numerics import (
    per_example_scale,
    probabilistic_bound,
    reduction_chain,
    scalar_error,
    scaled_error,
)

REPO = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())
COMBINATIONS = [
    small_lane(loss="mse", optimizer="adam"),
    small_lane(loss="xent", optimizer="adam", schedule="cosine"),
    small_lane(loss="xent", optimizer="sgd", learning_rate=0.1),
    small_lane(model="softmax", loss="xent", optimizer="sgd", init="zeros", learning_rate=0.1),
    small_lane(model="softmax", loss="mse", optimizer="adam", schedule="cosine", batch_size="full"),
    small_lane(model="cnn", loss="xent", optimizer="adam", batch_size=16, schedule="cosine"),
]


def experiment(settings, seed=0):
    return resolve("probe", settings, seed, MNIST)


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


@pytest.mark.numerics
@pytest.mark.parametrize(
    "settings", COMBINATIONS, ids=lambda s: f"{s['model']}-{s['loss']}-{s['optimizer']}-{s['schedule']}"
)
def test_interpreted_and_jitted_programs_match_the_float64_reference_for_several_batches(settings):
    """One program, three mini-batches: every step's loss and gradient, on both engines, within the
    bounds derived from the program (docs/agreement.md: Why these bounds), never a tolerance read off
    a run."""
    exp = experiment(settings)
    program = capture(exp)
    flat = program.flatten_params
    params = flat(init_params(exp.model, 3))
    chains = reduction_chain(program.gradient.jaxpr)
    loss_bound, grad_bound = probabilistic_bound(chains[0]), probabilistic_bound(max(chains[1:]))
    step_loss_bound = probabilistic_bound(reduction_chain(program.step.jaxpr)[-1])
    interpreter, jitted = Interpreter(program.step), jax.jit(jaxpr_as_fun(program.step))
    gradients = {"interpreter": Interpreter(program.gradient), "xla": jax.jit(jaxpr_as_fun(program.gradient))}
    reference = Interpreter(program.gradient, widen=True)
    carry = [*params, *Interpreter(program.init_state)(*params)]
    for batch_seed in range(3):  # one program, three different mini-batches, three steps
        images, labels = random_batch(exp, batch_seed)
        weights = program.unflatten_params(carry[: program.n_params])
        ref_loss, *ref_grads = reference(*carry[: program.n_params], images, labels)
        loss_scale, grad_scale = per_example_scale(exp, weights, images, labels)
        for engine, gradient in gradients.items():
            loss, *grads = [np.asarray(x) for x in gradient(*carry[: program.n_params], images, labels)]
            grads = program.unflatten_params(grads)
            granted, _, _ = grant_kink_decisions(
                exp, weights, images, labels, grads, program.unflatten_params(ref_grads)
            )
            assert scalar_error(loss, ref_loss, loss_scale) <= loss_bound, engine
            assert scaled_error(flat(grads), flat(granted), flat(grad_scale)) <= grad_bound, engine
        *next_interp, loss_interp = interpreter(*carry, images, labels)
        *next_jit, loss_jit = [np.asarray(x) for x in jitted(*carry, images, labels)]
        for loss in (loss_interp, loss_jit):  # the step program's own loss, on the same inputs
            assert scalar_error(loss, ref_loss, loss_scale) <= step_loss_bound
        for mine, theirs in zip(next_interp, next_jit, strict=True):
            assert mine.dtype == theirs.dtype and mine.shape == theirs.shape
        carry = next_interp


def test_capturing_compiles_nothing():
    with compile_window() as window:
        capture(experiment(small_lane()))
    assert window.count == 0


def sample_std_tolerance(n: int, z: float = 6.0) -> float:
    """z standard errors of the std of n draws from lecun_normal, relative to its std sqrt(1/784).

    lecun_normal draws a normal truncated at +-2 of its scale, scaled by 1 / 0.8796 (that truncated
    normal's std) so that its std is exactly sqrt(1 / fan_in). The sample std s of n draws has
    sd(s) / sigma = sqrt((kurtosis - 1) / (4 n)) to first order in 1/n (the delta method on s^2,
    whose variance is (mu_4 - sigma^4) / n); the truncated normal's kurtosis is 2.37, not the
    normal's 3. For 784 x 128 draws that is 0.18 %; 6 of it, 1.1 %, fails a correct initializer on
    a seed with probability 2e-9 and one that drops the 1 / 0.8796 (12 % low) or draws He's scale
    (41 % high) always. What it leaves out (the sample mean's 1/n bias, float32 sums) is below 1e-5.
    """
    kurtosis = 3 + float(scipy.stats.truncnorm(-2, 2).stats(moments="k"))
    return z * math.sqrt((kurtosis - 1) / (4 * n))


def test_initial_weights_are_bit_identical_per_seed_and_differ_across_seeds():
    spec = ModelSpec("mlp", 784, 10, 128, "lecun_normal")
    first, again, other = init_params(spec, 7), init_params(spec, 7), init_params(spec, 8)
    for name in first:
        assert first[name].tobytes() == again[name].tobytes()
    assert not np.array_equal(first["w1"], other["w1"])
    assert float(np.std(first["w1"])) == pytest.approx(
        np.sqrt(1 / 784), rel=sample_std_tolerance(first["w1"].size)
    )
    assert not first["b1"].any()


@pytest.mark.parametrize(
    "spec",
    [
        ModelSpec("mlp", 784, 10, 128, "lecun_normal"),
        ModelSpec("softmax", 784, 10, 128, "zeros"),
        ModelSpec("cnn", 784, 10, 128, "lecun_normal", (28, 28)),
        ModelSpec("mlp", 784, 10, 32, "he_normal"),
    ],
    ids=lambda spec: spec.key,
)
def test_initial_weights_are_the_op_by_op_values_bit_for_bit(spec):
    """The jitted initializer program gives what the initializers give run op by op (the weights
    every record so far started from), for seeds whose 32-bit key halves both vary."""
    shapes = spec.shapes()
    weights = sorted(name for name in shapes if name.startswith("w"))
    initializer = INITIALIZERS[spec.init]()
    for seed in (0, 4, 2**31 - 1):
        keys = jax.random.split(jax.random.key(seed, impl="threefry2x32"), len(weights))
        jitted = init_params(spec, seed)
        for name, shape in shapes.items():
            if name in weights:
                expected = np.asarray(initializer(keys[weights.index(name)], shape, np.float32))
            else:
                expected = np.zeros(shape, np.float32)
            assert jitted[name].dtype == np.float32 and jitted[name].tobytes() == expected.tobytes(), name


def test_lenet_is_sized_by_the_images_and_refuses_images_too_small():
    from gradlanes.data.description import DatasetDescription

    assert ModelSpec.for_dataset("cnn", MNIST).shapes()["w3"] == (5 * 5 * 16, 120)  # S4 maps of 5x5
    wide = DatasetDescription("wide", 3, (28, 20), 100, 10, {})
    spec = ModelSpec.for_dataset("cnn", wide)
    assert spec.shapes()["w3"] == (16 * 5 * 3, 120) and spec.shapes()["w5"] == (84, 3)
    params = init_params(spec, 0)
    images = np.zeros((2, 28 * 20), np.float32)
    assert np.asarray(jax.jit(lambda p, x: forward(spec, p, x))(params, images)).shape == (2, 3)
    tiny = DatasetDescription("tiny", 10, (11, 11), 100, 10, {})
    with pytest.raises(ValueError, match="needs images of at least 12x12 pixels; these are 11x11"):
        ModelSpec.for_dataset("cnn", tiny).shapes()
    with pytest.raises(ValueError, match="convolves 2-D images"):
        ModelSpec("cnn", 784, 10, image_shape=(784,)).shapes()


def test_config_lanes_sharing_a_model_share_a_key():
    lanes = CONFIG["lanes"]
    keys = {name: experiment({**lanes[name]}).model.key for name in ("xla_gpu", "xla_cpu", "host")}
    assert len(set(keys.values())) == 1
    assert experiment(lanes["softmax_kernel"]).model.key == experiment(lanes["softmax_xla"]).model.key


def test_every_model_is_known_to_both_schemas_and_the_tables():
    import json

    from gradlanes.experiment.architecture import MODELS
    from gradlanes.report.rows import MODEL_NAMES
    from gradlanes.schemas import CONFIG, schema_path

    config = yaml.safe_load(schema_path(CONFIG).read_text())
    assert tuple(config["$defs"]["lane"]["properties"]["model"]["enum"]) == MODELS
    record = json.loads((REPO / "src/gradlanes/schemas/record.schema.json").read_text())
    assert tuple(record["properties"]["config"]["properties"]["model"]["enum"]) == MODELS
    assert set(MODEL_NAMES) | {"mlp"} == set(MODELS)
