"""Every hand-written kernel against JAX autodiff on fresh random inputs."""

from __future__ import annotations

import functools
import warnings
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special
from float_bounds import FLOAT32
from oracle import x64

from gradlanes.engines import handkernel as hk
from gradlanes.environment import cpu_model

RNG_SEED = 7  # reseeded for every test (conftest: _order_free_draws)
rng = np.random.default_rng(RNG_SEED)
B, D, C = 16, 784, 10


def batch():
    x = rng.random((B, D), dtype=np.float32)
    labels = rng.integers(0, C, B).astype(np.int32)
    w = rng.normal(0, 0.05, (D, C)).astype(np.float32)
    b = rng.normal(0, 0.1, C).astype(np.float32)
    return x, labels, w, b


def jax_xent(logits, labels):
    return -jnp.mean(jnp.sum(jax.nn.one_hot(labels, C) * jax.nn.log_softmax(logits), axis=-1))


# ---- how far the float32 kernels may lie from a float64 reference of the same inputs ------------
#: float_bounds.FLOAT32: float32's unit roundoff plus the float64 reference's per rounded step, and
#: NumPy's validated float32 exp (3 ulp) and log (4 ulp).
U, gamma, linear_bound = FLOAT32.u, FLOAT32.gamma, FLOAT32.linear_bound
#: The mean of a batch's rows is held to gamma(B) even where a test passes fewer rows.
xent_bounds = functools.partial(FLOAT32.xent_bounds, rows=B)


def assert_within(got, want, bound, what):
    error = np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))
    bound = np.broadcast_to(bound, error.shape)
    worst = np.unravel_index(np.argmax(error - bound), error.shape) if error.ndim else ()
    assert np.all(error <= bound), f"{what}: off by {error[worst]:.3g} at {worst}, bound {bound[worst]:.3g}"


def f64(*arrays):
    return [np.asarray(a, np.float64) for a in arrays]


def test_linear_forward_backward_match_autodiff():
    x, _, w, b = batch()
    upstream = rng.normal(size=(B, C)).astype(np.float32)
    x64_, w64, b64, up64 = f64(x, w, b, upstream)
    assert_within(hk.linear_forward(x, w, b), x64_ @ w64 + b64, linear_bound(x, w, b), "logits")
    dw, db = hk.linear_backward(x, upstream)
    with x64():
        jdw, jdb = jax.grad(lambda w_, b_: jnp.sum((x64_ @ w_ + b_) * up64), argnums=(0, 1))(w64, b64)
    # dw: a sum of B products per element; db: of B terms
    assert_within(dw, jdw, gamma(B) * (np.abs(x64_).T @ np.abs(up64)), "dw")
    assert_within(db, jdb, gamma(B) * np.abs(up64).sum(axis=0), "db")


def test_crossentropy_forward_backward_match_autodiff():
    x, labels, w, b = batch()
    logits = hk.linear_forward(x, w, b)
    loss, probs = hk.crossentropy_forward(logits, labels)
    (logits64,) = f64(logits)
    loss_error, probs_error, delta_error = xent_bounds(logits64, labels)
    with x64():
        jloss, jdelta = jax.value_and_grad(jax_xent)(logits64, labels)
        jprobs = jax.nn.softmax(logits64)
    assert_within(loss, jloss, loss_error, "loss")
    assert_within(probs, jprobs, probs_error, "probs")
    assert_within(hk.crossentropy_backward(probs, labels), jdelta, delta_error, "delta")


def test_softmax_is_stable_for_huge_logits():
    """Logits whose exp overflows float32 (e^90, e^10000) or underflows it, against SciPy's float64
    softmax and logsumexp (shifted by the max too): rows [1, 0, 0] and e^[-2, -1, 0] / sum."""
    logits = np.array([[1e4, 0.0, -1e4], [88.0, 89.0, 90.0]], np.float32)
    labels = np.array([1, 0])
    probs = hk.softmax_forward(logits)
    (logits64,) = f64(logits)
    want_probs = scipy.special.softmax(logits64, axis=1)
    want_loss = np.mean(scipy.special.logsumexp(logits64, axis=1) - logits64[[0, 1], labels])
    loss_error, probs_error, _ = xent_bounds(logits64, labels)
    assert_within(probs, want_probs, probs_error, "probs")
    loss, probs_again = hk.crossentropy_forward(logits, labels)
    assert_within(loss, want_loss, loss_error, "loss")
    np.testing.assert_array_equal(probs_again, probs)  # the same function on the same logits


def test_whole_gradient_and_sgd_step_match_autodiff():
    x, labels, w, b = batch()
    params = {"w": w, "b": b}
    loss, grads = hk.loss_and_grad(params, x, labels)
    x64_, w64, b64 = f64(x, w, b)
    with x64():
        jloss, jgrads = jax.value_and_grad(lambda p: jax_xent(x64_ @ p["w"] + p["b"], labels))(
            {"w": w64, "b": b64}
        )
        jdelta = jax.grad(jax_xent)(x64_ @ w64 + b64, labels)
    # the kernels' logits lie within linear_bound of the exact ones
    loss_error, _, delta_error = xent_bounds(x64_ @ w64 + b64, labels, linear_bound(x, w, b))
    assert_within(loss, jloss, loss_error, "loss")
    # dw = x.T @ delta: delta's error carried through the products, and the sums' own (B terms)
    grad_error = {
        "w": np.abs(x64_).T @ delta_error + gamma(B) * (np.abs(x64_).T @ np.abs(np.asarray(jdelta))),
        "b": delta_error.sum(axis=0) + gamma(B) * np.abs(np.asarray(jdelta)).sum(axis=0),
    }
    for name in params:
        assert_within(grads[name], jgrads[name], grad_error[name], name)
    stepped, step_loss = hk.sgd_step(params, x, labels, 0.1)
    assert step_loss == loss
    for name in params:
        # p - float32(0.1) g: g's error times 0.1, float32(0.1)'s U of it, the product's and the
        # difference's roundings
        g = np.abs(np.asarray(jgrads[name]))
        want = f64(params[name])[0] - 0.1 * np.asarray(jgrads[name])
        bound = 0.1 * grad_error[name] * (1 + 2 * U) + 2 * U * 0.1 * g + U * np.abs(want)
        assert_within(stepped[name], want, bound, f"stepped {name}")
        assert stepped[name].dtype == np.float32


def test_predict_and_reduce():
    x, labels, w, b = batch()
    probs, classes = hk.predict(x, w, b)
    # sum_j e_j / fl(sum e_j): the C - 1 additions' gamma(C - 1) and each quotient's U (summed here
    # in float64, whose roundings U covers)
    assert_within(probs.sum(axis=1, dtype=np.float64), 1.0, gamma(C - 1) + U, "sum of probs")
    np.testing.assert_array_equal(classes, np.argmax(x @ w + b, axis=1))
    mean_loss, correct = hk.reduce_loss_and_correct([1.0, 3.0], probs, labels)
    assert mean_loss == 2.0  # (1 + 3) / 2: exact in binary
    assert correct == int(np.sum(classes == labels))


def test_reduce_counts_the_rows_whose_most_probable_class_is_the_label():
    """A count that random weights cannot give (they get none of 16 right): 3 of 4 rows, with
    more rows than classes so that a count along the wrong axis cannot line up with the labels."""
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.6, 0.1], [0.2, 0.5, 0.3]], np.float32)
    assert hk.reduce_loss_and_correct([0.5], probs, np.array([0, 2, 0, 1])) == (0.5, 3)


def test_reduce_of_no_batches_is_nan_without_a_warning():
    """An epoch with no batches has no mean loss: NaN, and no 'mean of empty slice' warning."""
    x, labels, w, b = batch()
    probs, classes = hk.predict(x, w, b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mean_loss, correct = hk.reduce_loss_and_correct([], probs, labels)
    assert np.isnan(mean_loss)
    assert correct == int(np.sum(classes == labels))


def test_the_plugin_makes_an_engine_at_the_experiments_learning_rate():
    engine = hk.PLUGIN.create(SimpleNamespace(learning_rate=0.125), None)
    assert isinstance(engine, hk.HandKernelEngine) and engine.learning_rate == 0.125


def test_the_engine_trains_and_predicts_with_its_own_float32_copy():
    """The `Engine` face of the kernels: one step is `sgd_step` at the engine's learning rate, the
    logits are the stepped model's, and what goes in or comes out is a copy, in float32."""
    x, labels, w, b = batch()
    engine = hk.HandKernelEngine(learning_rate=0.25)
    assert engine.learning_rate == 0.25 and engine.dispatches == 0
    assert engine.device_kind == cpu_model()  # the machine's CPU, as the records name it
    assert engine.params() == {}  # nothing prepared yet: no parameters, not an error
    given = {"w": w.astype(np.float64), "b": b.astype(np.float64)}
    engine.prepare(given)
    given["w"][:] = 0  # the engine holds its own copy
    engine.compile_step()
    losses = engine.step(engine.stage(x, labels))
    want, want_loss = hk.sgd_step({"w": w, "b": b}, x, labels, 0.25)
    assert losses == [float(want_loss)]
    held = engine.params()
    for name in ("w", "b"):
        assert held[name].dtype == np.float32
        np.testing.assert_array_equal(held[name], want[name])
    held["w"] = None  # params() hands out a copy of the dict
    np.testing.assert_array_equal(engine.logits(x), hk.linear_forward(x, want["w"], want["b"]))
    loss, grads = engine.loss_and_grad(want, x, labels)
    want_loss2, want_grads = hk.loss_and_grad(want, x, labels)
    assert isinstance(loss, float) and loss == float(want_loss2)
    for name in ("w", "b"):
        np.testing.assert_array_equal(grads[name], want_grads[name])
