"""Every hand-written kernel against JAX autodiff on fresh random inputs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradlanes.engines import handkernel as hk

rng = np.random.default_rng(7)
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
