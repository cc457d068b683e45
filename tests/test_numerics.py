"""The float64 reference, float32 error units, derived bounds and granted ReLU kinks.

These are the measures every agreement check and every engine-vs-engine test relies on, so each is
checked against an independent computation: NumPy in float64, hand-derived gradients, known
reduction lengths, and engines made wrong on purpose.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import small_lane
from jax import lax

from gradlanes.data.description import MNIST, DatasetDescription
from gradlanes.engines import handkernel
from gradlanes.experiment.losses import loss_grad_numpy
from gradlanes.experiment.spec import resolve
from gradlanes.program.capture import capture
from gradlanes.program.interpreter import Interpreter, widened
from gradlanes.program.jaxcompat import jaxpr_as_fun
from gradlanes.run.kinks import grant_kink_decisions, undecidable_relus
from gradlanes.run.numerics import (
    CONFIDENCE,
    FLOAT32_U,
    MATMUL_UNIT_ROUNDOFF,
    per_example_scale,
    probabilistic_bound,
    reduction_chain,
    scalar_error,
    scaled_error,
)

pytestmark = pytest.mark.numerics
RNG_SEED = 20261201  # reseeded for every test (conftest: _order_free_draws)
rng = np.random.default_rng(RNG_SEED)


def test_widened_interpreter_evaluates_float32_programs_in_float64():
    def program_fn(x):
        y = lax.convert_element_type(x * 3.0, jnp.float32) / 7.0  # a float32 cast, literals
        return jnp.sum(y), y, jnp.argmax(y), lax.iota(jnp.int32, 4)

    x = rng.standard_normal(64).astype(np.float32)
    program = jax.make_jaxpr(program_fn)(x)
    total, y, index, iota = Interpreter(program, widen=True)(x)
    exact = x.astype(np.float64) * 3.0 / 7.0
    assert (total.dtype, y.dtype, index.dtype, iota.dtype) == (np.float64, np.float64, np.int32, np.int32)
    np.testing.assert_allclose(y, exact, rtol=4e-16)
    np.testing.assert_allclose(total, exact.sum(), rtol=1e-14)
    assert int(index) == int(np.argmax(exact))
    _, rounded, _, _ = Interpreter(program)(x)
    assert rounded.dtype == np.float32 and not np.array_equal(rounded.astype(np.float64), exact)


def test_widened_dtypes():
    assert widened(np.float32) == widened(np.float16) == widened(jnp.bfloat16) == np.float64
    assert widened(np.int32) == np.int32 and widened(np.bool_) == np.bool_
    assert widened(np.complex64) == np.complex128


def softmax_experiment(**overrides):
    settings = small_lane(model="softmax", loss="xent", optimizer="sgd", init="zeros", learning_rate=0.1)
    settings.update(overrides)
    return resolve("probe", settings, 0, MNIST)


def batch(size, inputs=784, classes=10):
    images = rng.random((size, inputs), dtype=np.float32)
    return images, rng.integers(0, classes, size).astype(np.int32)


def test_float64_reference_gradient_equals_the_hand_kernels_in_float64():
    exp = softmax_experiment()
    program = capture(exp)
    params = {"w": 0.05 * rng.standard_normal((784, 10)).astype(np.float32), "b": np.zeros(10, np.float32)}
    images, labels = batch(exp.batch_size)
    loss, *grads = Interpreter(program.gradient, widen=True)(*program.flatten_params(params), images, labels)
    params64 = {k: v.astype(np.float64) for k, v in params.items()}
    loss64, grads64 = handkernel.loss_and_grad(params64, images.astype(np.float64), labels)
    assert float(loss) == pytest.approx(float(loss64), rel=1e-13)
    for name, grad in program.unflatten_params(grads).items():
        np.testing.assert_allclose(grad, grads64[name], rtol=1e-11, atol=1e-16)


def test_reduction_chain_adds_the_lengths_along_the_longest_path():
    program = jax.make_jaxpr(lambda a, b: (jnp.sum(jnp.tanh(a @ b)), a * 2))(
        np.ones((3, 7), np.float32), np.ones((7, 2), np.float32)
    )
    assert reduction_chain(program.jaxpr) == [7 + 1 + 6, 1]  # dot of 7, tanh, sum of 3x2
    nested = jax.make_jaxpr(lambda a, b: jax.jit(lambda x, y: jnp.sum(jnp.tanh(x @ y)))(a, b))(
        np.ones((3, 7), np.float32), np.ones((7, 2), np.float32)
    )
    assert reduction_chain(nested.jaxpr) == [14]


def test_convolutions_and_window_sums_count_the_terms_each_output_sums():
    from jax import lax

    dims = ("NHWC", "HWIO", "NHWC")
    images, kernel = np.ones((4, 8, 8, 3), np.float32), np.ones((5, 5, 3, 6), np.float32)
    conv = lambda k, x: lax.conv_general_dilated(x, k, (1, 1), "VALID", dimension_numbers=dims)  # noqa: E731
    assert reduction_chain(jax.make_jaxpr(conv)(kernel, images).jaxpr) == [5 * 5 * 3]
    # The weight gradient sums over batch x output positions: 4 x 4 x 4, after the 75-term forward.
    weight_grad = jax.make_jaxpr(jax.grad(lambda k, x: conv(k, x).sum()))(kernel, images)
    assert reduction_chain(weight_grad.jaxpr) == [1 + 4 * 4 * 4]  # the cotangent broadcast, then the sum
    pooled = lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")  # noqa: E731
    assert reduction_chain(jax.make_jaxpr(pooled)(images).jaxpr) == [4]
    maxed = lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "VALID")  # noqa: E731
    gradient = jax.make_jaxpr(jax.grad(lambda x: maxed(x).sum()))(images)
    assert "select_and_scatter_add" in {e.primitive.name for e in gradient.jaxpr.eqns}
    assert reduction_chain(gradient.jaxpr) == [1 + 2 * 2]  # 3-wide windows every 2: two overlap a side


def test_the_mlp_gradient_chain_spans_batch_and_layers():
    exp = resolve("probe", small_lane(loss="mse"), 0, MNIST)
    chains = reduction_chain(capture(exp).gradient.jaxpr)
    # w1's gradient sums over the batch after 784-, 32- and 10-long products forward and back
    assert max(chains[1:]) >= exp.batch_size + 784 + 32 + 10
    assert chains[0] >= exp.batch_size * 10  # the loss: one mean over every logit


def test_units_and_bounds():
    reference = [rng.standard_normal((5, 3)), rng.standard_normal(3)]
    scale = [np.abs(rng.standard_normal((5, 3))) + 0.1, np.abs(rng.standard_normal(3)) + 0.1]
    candidate = [r + 2.5 * FLOAT32_U * s for r, s in zip(reference, scale, strict=True)]
    assert scaled_error(candidate, reference, scale) == pytest.approx(2.5, rel=1e-6)
    assert scalar_error(1.0 + 3 * FLOAT32_U * 2.0, 1.0, 2.0) == pytest.approx(3.0, rel=1e-6)
    assert scalar_error(1.0, 1.0, 0.0) == 0.0 and scalar_error(1.0, 2.0, 0.0) == math.inf
    assert probabilistic_bound(400) == pytest.approx(CONFIDENCE * 20)
    tf32 = MATMUL_UNIT_ROUNDOFF["tf32"] / FLOAT32_U
    assert tf32 == 8192 and probabilistic_bound(400, tf32) == pytest.approx(CONFIDENCE * 20 * 8192)


def test_error_scale_is_the_per_example_mean_magnitude_plus_the_rounding_floor():
    exp = softmax_experiment()
    params = {"w": 0.05 * rng.standard_normal((784, 10)).astype(np.float32), "b": np.zeros(10, np.float32)}
    images, labels = batch(exp.batch_size)
    loss_scale, grad_scale = per_example_scale(exp, params, images, labels, chunk=24)
    x = images.astype(np.float64)
    logits = x @ params["w"] + params["b"]
    delta = loss_grad_numpy("xent", logits, labels)  # [B, C] per example
    target = np.eye(10)[labels]
    magnitude = delta + 2 * target  # p + onehot, from delta = p - onehot
    count = len(labels)
    # the mean magnitude of each example's gradient, plus the random walk of each example's
    # rounding floor: |x| (x) (p + onehot) for a softmax, whose 1 - p cancels when p ~ 1
    mean_w = np.abs(x[:, :, None] * delta[:, None, :]).mean(axis=0)
    floor_w = np.sqrt(((x[:, :, None] * magnitude[:, None, :]) ** 2).sum(axis=0)) / count
    np.testing.assert_allclose(grad_scale["w"], mean_w + floor_w, rtol=2e-5, atol=1e-9)
    floor_b = np.sqrt((magnitude**2).sum(axis=0)) / count
    np.testing.assert_allclose(grad_scale["b"], np.abs(delta).mean(axis=0) + floor_b, rtol=2e-5)
    top = logits.max(axis=1)
    log_norm = np.log(np.exp(logits - top[:, None]).sum(axis=1))
    losses = log_norm + top - logits[np.arange(count), labels]
    terms = np.abs(logits[np.arange(count), labels]) + np.abs(top) + log_norm + 1
    assert loss_scale == pytest.approx(losses.mean() + np.sqrt((terms**2).sum()) / count, rel=1e-5)


def test_the_floor_keeps_the_scale_from_vanishing_on_confident_examples():
    exp = softmax_experiment()
    images, labels = batch(exp.batch_size)
    confident = {"w": np.zeros((784, 10), np.float32), "b": np.zeros(10, np.float32)}
    confident["b"][:] = -40.0
    labels[:] = 3
    confident["b"][3] = 40.0  # p(3) = 1 - 1e-35: every example's gradient underflows to ~0
    loss_scale, grad_scale = per_example_scale(exp, confident, images, labels)
    assert loss_scale > 1.0  # the loss (~1e-35) is computed from terms of size 40
    assert grad_scale["b"][3] > 0.1  # 1 - p from p ~ 1: rounding of size u per example


def test_a_deep_networks_floor_follows_its_signed_jacobian():
    """The floor of an MLP: sqrt(sum_b sum_c (J_bc cotangent_bc)^2) / B, from one sign probe per example.

    The probe's square has the exact sum as its mean; its cross terms have variance at most twice
    the square of that sum, so with B independent examples (worst case: every weight of one example
    moves together) the probed ||floor||^2 is off by at most sqrt(2 / B) relative, 1 sigma; its
    square root by half that. Four sigma at B = 512: 12.5 %.
    """
    from gradlanes.experiment.losses import loss_fn, term_magnitudes
    from gradlanes.experiment.models import forward, init_params

    exp = resolve("probe", small_lane(batch_size=512, train_images=1024), 0, MNIST)
    params = init_params(exp.model, 1)
    images, labels = batch(exp.batch_size)
    _, scale = per_example_scale(exp, params, images, labels)
    count = len(labels)

    def exact_variance(x, label):
        logits, pullback = jax.vjp(lambda q: forward(exp.model, q, x[None])[0], params)
        _, cotangent = term_magnitudes(exp.loss, logits, label)
        rows = jax.vmap(lambda c: pullback(c)[0])(jnp.diag(cotangent))
        return {k: jnp.square(v).sum(axis=0) for k, v in rows.items()}

    variance = jax.vmap(exact_variance)(images, labels)
    grads = jax.vmap(jax.grad(lambda q, x, y: loss_fn(exp.loss, forward(exp.model, q, x[None]), y[None])),
                     in_axes=(None, 0, 0))(params, images, labels)  # fmt: skip
    for name in params:
        mean = np.abs(np.asarray(grads[name], np.float64)).mean(axis=0)
        floor = np.sqrt(np.asarray(variance[name], np.float64).sum(axis=0)) / count
        probed = np.asarray(scale[name], np.float64) - mean
        four_sigma = 4 * math.sqrt(2 / count) / 2
        assert np.linalg.norm(probed) == pytest.approx(np.linalg.norm(floor), rel=four_sigma), name


# ---- kinks ----------------------------------------------------------------------------------


def mlp_case(batch_size=6, inputs=16, hidden=8, classes=3):
    params = {
        "w1": rng.standard_normal((inputs, hidden)).astype(np.float32) / 4,
        "b1": rng.standard_normal(hidden).astype(np.float32) / 4,
        "w2": rng.standard_normal((hidden, classes)).astype(np.float32) / 3,
        "b2": np.zeros(classes, np.float32),
    }
    images, labels = batch(batch_size, inputs, classes)
    # put example 2's unit 5 on the kink, as closely as float32 weights allow
    params["b1"][5] = np.float32(-(images[2].astype(np.float64) @ params["w1"][:, 5]))
    exp = resolve(
        "probe",
        small_lane(loss="mse", hidden=hidden, batch_size=batch_size, train_images=batch_size, test_images=8),
        0,
        DatasetDescription("probe", classes, (inputs,), 64, 64, {}),
    )
    return exp, params, images, labels


def mlp_grad64(params, images, labels, active):
    """The MSE MLP gradient in float64 NumPy with the ReLU decisions given, not computed."""
    x = images.astype(np.float64)
    p = {k: v.astype(np.float64) for k, v in params.items()}
    hidden = (x @ p["w1"] + p["b1"]) * active
    delta = loss_grad_numpy("mse", hidden @ p["w2"] + p["b2"], labels) / len(labels)
    dz = (delta @ p["w2"].T) * active
    return {"w1": x.T @ dz, "b1": dz.sum(0), "w2": hidden.T @ delta, "b2": delta.sum(0)}


def test_relu_decisions_within_float32_reach_are_undecidable():
    exp, params, images, _ = mlp_case()
    active, undecidable = undecidable_relus(params, images)
    assert undecidable[2, 5]
    assert undecidable.sum() == 1  # random others sit far from their kinks
    z = images.astype(np.float64) @ params["w1"] + params["b1"]
    assert np.array_equal(active, z > 0)


@pytest.mark.parametrize("flip", [(2, 5), (0, 1)], ids=["undecidable", "decidable"])
def test_only_an_undecidable_flip_is_granted(flip):
    exp, params, images, labels = mlp_case()
    program = capture(exp)
    _, *leaves = Interpreter(program.gradient, widen=True)(*program.flatten_params(params), images, labels)
    reference = program.unflatten_params(leaves)
    active, _ = undecidable_relus(params, images)
    flipped = active.copy()
    flipped[flip] = not flipped[flip]
    candidate = mlp_grad64(params, images, labels, flipped)  # an engine on the other side of one kink
    _, scale = per_example_scale(exp, params, images, labels)
    flat = program.flatten_params
    before = scaled_error(flat(candidate), flat(reference), flat(scale))
    assert before > probabilistic_bound(max(reduction_chain(program.gradient.jaxpr)[1:]))
    adjusted, undecidable, granted = grant_kink_decisions(exp, params, images, labels, candidate, reference)
    after = scaled_error(flat(candidate), flat(adjusted), flat(scale))
    assert undecidable == 1
    if flip == (2, 5):
        assert granted == 1 and after < 1.0
    else:  # a wrong engine cannot hide behind a kink it had no reason to cross
        assert granted == 0 and after == pytest.approx(before)


def test_a_lookalike_example_on_the_same_kink_is_not_granted_in_place_of_the_flipped_one():
    """Two undecidable examples on one unit, inputs alike: only the one that flipped is granted."""
    exp, params, images, labels = mlp_case()
    w = params["w1"][:, 5].astype(np.float64)
    noise = rng.standard_normal(images.shape[1])
    noise -= (noise @ w) / (w @ w) * w  # orthogonal to the unit's weights: the same preactivation
    images[1] = (images[2] + 0.5 * np.linalg.norm(images[2]) * noise / np.linalg.norm(noise)).astype(
        np.float32
    )
    labels[1] = labels[2]
    program = capture(exp)
    _, *leaves = Interpreter(program.gradient, widen=True)(*program.flatten_params(params), images, labels)
    reference = program.unflatten_params(leaves)
    active, undecidable = undecidable_relus(params, images)
    assert undecidable[1, 5] and undecidable[2, 5]
    flipped = active.copy()
    flipped[2, 5] = not flipped[2, 5]
    candidate = mlp_grad64(params, images, labels, flipped)
    _, scale = per_example_scale(exp, params, images, labels)
    adjusted, _, granted = grant_kink_decisions(exp, params, images, labels, candidate, reference)
    flat = program.flatten_params
    assert granted == 1 and scaled_error(flat(candidate), flat(adjusted), flat(scale)) < 1.0


def test_same_side_gets_nothing_granted():
    exp, params, images, labels = mlp_case()
    program = capture(exp)
    _, *leaves = Interpreter(program.gradient, widen=True)(*program.flatten_params(params), images, labels)
    reference = program.unflatten_params(leaves)
    active, _ = undecidable_relus(params, images)
    candidate = mlp_grad64(params, images, labels, active)
    adjusted, undecidable, granted = grant_kink_decisions(exp, params, images, labels, candidate, reference)
    assert (undecidable, granted) == (1, 0)  # example 2's unit 5 only
    for name in reference:
        np.testing.assert_array_equal(adjusted[name], reference[name])


# ---- correct, coarse and wrong engines against the bound -----------------------------------------


def tf32(x: np.ndarray) -> np.ndarray:
    """Round float32 values to TF32's 10 mantissa bits (round to nearest even), as a GPU product does."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0xFFF) + ((bits >> 13) & 1)) & np.uint32(0xFFFFE000)
    return rounded.view(np.float32)


def test_xla_within_the_float32_bound_tf32_only_within_its_own_and_bugs_far_outside():
    exp = resolve("probe", small_lane(loss="mse"), 0, MNIST)
    program = capture(exp)
    from gradlanes.experiment.models import init_params

    params = init_params(exp.model, 3)
    images, labels = batch(exp.batch_size)
    flat = program.flatten_params
    _, *reference = Interpreter(program.gradient, widen=True)(*flat(params), images, labels)
    _, scale = per_example_scale(exp, params, images, labels)
    bound = probabilistic_bound(max(reduction_chain(program.gradient.jaxpr)[1:]))
    gradient = jax.jit(jaxpr_as_fun(program.gradient))

    def error(p, x, y=labels, factor=1.0):
        _, *grads = gradient(*flat(p), x, y)
        return scaled_error([factor * np.asarray(g) for g in grads], reference, flat(scale))

    assert error(params, images) <= bound
    coarse = error({k: tf32(v) for k, v in params.items()}, tf32(images))  # TF32's input rounding
    assert bound < coarse <= bound * MATMUL_UNIT_ROUNDOFF["tf32"] / FLOAT32_U
    # two bugs an engine could have: an off-by-one batch index, a mean over B - 1
    shifted = np.concatenate([images[:1], images[:-1]]), np.concatenate([labels[:1], labels[:-1]])
    assert error(params, *shifted) > 100 * bound
    assert error(params, images, factor=len(labels) / (len(labels) - 1)) > 100 * bound
