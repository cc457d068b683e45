"""Every hand-written kernel against JAX autodiff on fresh random inputs."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradlanes.engines import handkernel as hk

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


def test_linear_forward_backward_match_autodiff():
    x, _, w, b = batch()
    upstream = rng.normal(size=(B, C)).astype(np.float32)
    np.testing.assert_allclose(hk.linear_forward(x, w, b), x @ w + b, rtol=1e-6)
    dw, db = hk.linear_backward(x, upstream)
    jdw, jdb = jax.grad(lambda w_, b_: jnp.sum((x @ w_ + b_) * upstream), argnums=(0, 1))(w, b)
    np.testing.assert_allclose(dw, jdw, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(db, jdb, rtol=1e-5, atol=1e-6)


def test_crossentropy_forward_backward_match_autodiff():
    x, labels, w, b = batch()
    logits = hk.linear_forward(x, w, b)
    loss, probs = hk.crossentropy_forward(logits, labels)
    np.testing.assert_allclose(loss, jax_xent(logits, labels), rtol=1e-6)
    np.testing.assert_allclose(probs, jax.nn.softmax(logits), rtol=1e-6, atol=1e-7)
    delta = hk.crossentropy_backward(probs, labels)
    np.testing.assert_allclose(delta, jax.grad(jax_xent)(logits, labels), rtol=1e-5, atol=1e-8)


def test_softmax_is_stable_for_huge_logits():
    logits = np.array([[1e4, 0.0, -1e4], [88.0, 89.0, 90.0]], np.float32)
    probs = hk.softmax_forward(logits)
    assert np.all(np.isfinite(probs))
    np.testing.assert_allclose(probs.sum(axis=1), 1, rtol=1e-6)
    loss, _ = hk.crossentropy_forward(logits, np.array([1, 0]))
    assert np.isfinite(loss)


def test_whole_gradient_and_sgd_step_match_autodiff():
    x, labels, w, b = batch()
    params = {"w": w, "b": b}
    loss, grads = hk.loss_and_grad(params, x, labels)
    jloss, jgrads = jax.value_and_grad(lambda p: jax_xent(x @ p["w"] + p["b"], labels))(params)
    np.testing.assert_allclose(loss, jloss, rtol=1e-6)
    for name in params:
        np.testing.assert_allclose(grads[name], jgrads[name], rtol=1e-5, atol=1e-7)
    stepped, step_loss = hk.sgd_step(params, x, labels, 0.1)
    assert step_loss == loss
    for name in params:
        np.testing.assert_allclose(
            stepped[name], params[name] - 0.1 * np.asarray(jgrads[name]), rtol=1e-5, atol=1e-7
        )
        assert stepped[name].dtype == np.float32


def test_predict_and_reduce():
    x, labels, w, b = batch()
    probs, classes = hk.predict(x, w, b)
    np.testing.assert_allclose(probs.sum(axis=1), 1, rtol=1e-6)
    np.testing.assert_array_equal(classes, np.argmax(x @ w + b, axis=1))
    mean_loss, correct = hk.reduce_loss_and_correct([1.0, 3.0], probs, labels)
    assert mean_loss == pytest.approx(2.0)
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
    assert isinstance(engine.device_kind, str) and engine.device_kind
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
