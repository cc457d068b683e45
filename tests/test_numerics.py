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
from float_bounds import FLOAT64, XLA_ULPS, FloatBounds
from jax import lax
from lanes import small_lane

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
    # XLA turns a division by a constant into a product with its reciprocal, and so does the rule
    # (rules.elementwise), so the float64 program is x * 3 * fl(1 / 7): the same roundings in the
    # same order, bit for bit.
    exact = x.astype(np.float64) * 3.0 * (1.0 / 7.0)
    assert (total.dtype, y.dtype, index.dtype, iota.dtype) == (np.float64, np.float64, np.int32, np.int32)
    np.testing.assert_array_equal(y, exact, strict=True)
    # Any order of 64 float64 additions errs by at most 63 * 2**-53 * sum |y| from the exact sum
    # (recursive summation's worst case, Higham 4.2; pairwise lies within it); fsum is that sum
    # correctly rounded, half an ulp more, under 2**-53 * sum |y|.
    np.testing.assert_allclose(total, math.fsum(exact), rtol=0, atol=64 * 2**-53 * np.abs(exact).sum())
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
    x = images.astype(np.float64)
    loss64, grads64 = handkernel.loss_and_grad(params64, x, labels)
    # Each side lies within FLOAT64's bounds of the exact value, so the two within their sum. Both
    # take logits x @ w + b (D + 1 terms), shift, exp, sum and log them and average the rows; the
    # kernels' probs are one quotient, the program's 1 / sum rounded and multiplied by exp. dw and
    # db sum B products or terms: delta's error carried through, and gamma(B) of their own.
    logits = x @ params64["w"] + params64["b"]
    delta = loss_grad_numpy("xent", logits, labels) / len(labels)
    logit_error = FLOAT64.linear_bound(x, params64["w"], params64["b"])
    loss_bound, grad_bound = 0.0, {"w": 0.0, "b": 0.0}
    for roundings in (1, 2):
        loss_error, _, delta_error = FLOAT64.xent_bounds(
            logits, labels, logit_error, quotient_roundings=roundings
        )
        loss_bound += loss_error
        grad_bound["w"] = (
            grad_bound["w"]
            + np.abs(x).T @ delta_error
            + FLOAT64.gamma(len(labels)) * (np.abs(x).T @ np.abs(delta))
        )
        grad_bound["b"] = (
            grad_bound["b"] + delta_error.sum(axis=0) + FLOAT64.gamma(len(labels)) * np.abs(delta).sum(axis=0)
        )
    assert abs(float(loss) - float(loss64)) <= loss_bound
    for name, grad in program.unflatten_params(grads).items():
        assert np.all(np.abs(grad - grads64[name]) <= grad_bound[name]), name


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
    # r + 2.5 u s rounds by at most 2**-53 |r + 2.5 u s|: relative to the 2.5 u s it adds, at most
    # 2**-53 max|candidate| / (2.5 u min s); twice that for the norms' own float64 roundings.
    drift = 2**-53 * max(np.abs(c).max() for c in candidate) / (2.5 * FLOAT32_U * min(s.min() for s in scale))
    assert scaled_error(candidate, reference, scale) == pytest.approx(2.5, rel=2 * drift)
    assert scalar_error(1.0 + 3 * FLOAT32_U * 2.0, 1.0, 2.0) == 3.0  # 1 + 3 * 2**-23: exact throughout
    assert scalar_error(1.0, 1.0, 0.0) == 0.0 and scalar_error(1.0, 2.0, 0.0) == math.inf
    assert probabilistic_bound(400) == pytest.approx(CONFIDENCE * 20)
    tf32 = MATMUL_UNIT_ROUNDOFF["tf32"] / FLOAT32_U
    assert tf32 == 8192 and probabilistic_bound(400, tf32) == pytest.approx(CONFIDENCE * 20 * 8192)


#: per_example_scale's sums: XLA's float32 (its own exp and log) against the float64 NumPy here.
XLA32 = FloatBounds.of(np.float32, reference=np.float64, ulps=XLA_ULPS)


def summed_mean(terms, terms_error):
    """A batch mean as `per_example_scale` sums it, and a bound on its error: float32 sums of each
    chunk and a float64 sum of the chunks take at most B - 1 additions from any term to the total,
    gamma(B) of the sum of the (nonnegative) terms, and the division by B rounds once."""
    count = len(terms)
    mean = terms.sum(axis=0) / count
    return mean, (terms_error.sum(axis=0) + XLA32.gamma(count) * terms.sum(axis=0)) / count + XLA32.u * mean


def summed_floor(squares, squares_error):
    """The floor sqrt(sum of `squares`) / B, and a bound on its error: each square's error is twice
    its root's relatively, and its rounding; the sum as in `summed_mean`; the square root halves the
    sum's relative error and, like the division by B, rounds once."""
    u, count, total = XLA32.u, len(squares), squares.sum(axis=0)
    total_error = (2 * np.sqrt(squares) * squares_error + u * squares).sum(axis=0) + XLA32.gamma(
        count
    ) * total
    floor = np.sqrt(total) / count
    return floor, (total_error / (2 * total) + 2 * u) * floor


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
    count, rows = len(labels), np.arange(len(labels))
    # Each example's float32 logits (D + 1 terms) and softmax; the probabilities are exp times a
    # rounded 1 / sum (jax.nn.softmax and log_softmax's gradient alike, or one quotient).
    logit_error = XLA32.linear_bound(images, params["w"], params["b"])
    loss_error, probs_error, _ = XLA32.xent_bounds(logits, labels, logit_error, quotient_roundings=2)
    delta_error = probs_error + XLA32.u * np.abs(delta)  # p - onehot: one rounding
    magnitude_error = probs_error + XLA32.u * magnitude  # p + onehot: one rounding
    # The mean magnitude of each example's gradient, plus the random walk of each example's
    # rounding floor: |x| (x) (p + onehot) for a softmax, whose 1 - p cancels when p ~ 1. Each
    # weight's term is one float32 product of x and delta (or the probe's +-(p + onehot)).
    # The scale is mean + floor, one more float64 rounding.
    inputs = {"w": x[:, :, None], "b": np.ones((count, 1, 1))}
    for name, size in inputs.items():
        grads, probes = size * delta[:, None, :], size * magnitude[:, None, :]
        grads_error = size * delta_error[:, None, :] + XLA32.u * np.abs(grads)
        probes_error = size * magnitude_error[:, None, :] + XLA32.u * probes
        (mean, mean_error), (floor, floor_error) = (
            summed_mean(np.abs(grads), grads_error),
            summed_floor(probes**2, probes_error),
        )
        bound = mean_error + floor_error + XLA32.u * (mean + floor)
        error = np.abs(grad_scale[name].reshape(mean.shape) - (mean + floor))
        assert np.all(error <= bound), name
    # The loss's terms |picked| + |top| + log_norm + 1: the picked and top logits' errors, log_norm's
    # and the float32 sum of four nonnegative terms; the mean of the losses is xent_bounds's.
    top = logits.max(axis=1)
    parts = XLA32.log_sum_exp(logits, logit_error)
    losses = parts.log_norm + top - logits[rows, labels]
    terms = np.abs(logits[rows, labels]) + np.abs(top) + parts.log_norm + 1
    terms_error = (
        logit_error[rows, labels] + logit_error.max(axis=1) + parts.log_norm_error + XLA32.gamma(3) * terms
    )
    floor, floor_error = summed_floor(terms**2, terms_error)
    want = losses.mean() + floor
    assert abs(loss_scale - want) <= loss_error + floor_error + XLA32.u * want


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
        # After the grant the two sides differ by float64 rounding (a chain of 48 steps: 48 * 2**-29
        # float32 units of the terms) and by the flipped unit's value, z on the candidate's side
        # where the grant takes 0: |z| <= 2**-24 |b1[5]| (b1[5] is the float32 rounding of -x . w),
        # first order in z, so a few 2**-24 |b1[5]| ~ 1e-3 units (8.4e-4 measured). A grant that
        # took the wrong term, or none, leaves a whole example's term: `before`, above the bound.
        # One float32 unit lies between: the resolution of the measure, no engine rounds finer.
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
    # As in test_only_an_undecidable_flip_is_granted: what the right grant leaves is far below one
    # float32 unit, the lookalike's term (its own example's) far above.
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
        # in float64: a float32 product with the factor would round once more than the slack allows
        return scaled_error([factor * np.asarray(g, np.float64) for g in grads], reference, flat(scale))

    assert error(params, images) <= bound
    coarse = error({k: tf32(v) for k, v in params.items()}, tf32(images))  # TF32's input rounding
    assert bound < coarse <= bound * MATMUL_UNIT_ROUNDOFF["tf32"] / FLOAT32_U
    # Two bugs an engine could have: an off-by-one batch index, a mean over B - 1. Each moves the
    # exact gradient by a known amount, the float64 difference of the buggy and the right gradient
    # (for the index, the shifted batch's reference minus this one's: (g_0 - g_last) / B); the
    # engine's own rounding adds at most the bound (factor times it for the mean), so each error
    # lies within that of the move, and the move is more than twice the bound: never within it.
    shifted = np.concatenate([images[:1], images[:-1]]), np.concatenate([labels[:1], labels[:-1]])
    _, *moved = Interpreter(program.gradient, widen=True)(*flat(params), *shifted)
    factor = len(labels) / (len(labels) - 1)
    for bug, move, slack in (
        ((params, *shifted), scaled_error(moved, reference, flat(scale)), bound),
        (
            (params, images, labels, factor),
            scaled_error([factor * r for r in reference], reference, flat(scale)),
            factor * bound,
        ),
    ):
        assert move > bound + slack and abs(error(*bug) - move) <= slack
