"""Training losses (traced into the captured program) and their NumPy twins for test evaluation.

`mse` is Tlaloc's objective: mean squared error of the logits against one-hot targets. `xent` is
cross-entropy through a numerically stable log-softmax. One-hot targets are built inside the
program from integer labels, so labels are program inputs like images.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

LOSSES = ("mse", "xent")


def loss_fn(name: str, logits: jax.Array, labels: jax.Array) -> jax.Array:
    targets = jax.nn.one_hot(labels, logits.shape[-1], dtype=logits.dtype)
    if name == "mse":
        return jnp.mean((logits - targets) ** 2)
    if name == "xent":
        return -jnp.mean(jnp.sum(targets * jax.nn.log_softmax(logits), axis=-1))
    raise ValueError(f"unknown loss {name!r}; choose one of {', '.join(LOSSES)}")


def loss_numpy(name: str, logits: np.ndarray, labels: np.ndarray) -> float:
    """The same loss in float64 NumPy, for scoring test sets outside the training program."""
    logits = logits.astype(np.float64)
    targets = np.eye(logits.shape[-1])[labels]
    if name == "mse":
        return float(np.mean((logits - targets) ** 2))
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return float(-np.mean(np.sum(targets * log_probs, axis=-1)))


def loss_grad_numpy(name: str, logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per example b, d loss_b / d logits_b in float64 (not divided by the batch size).

    The batch loss is the mean over examples of loss_b, so the batch gradient is this over B.
    """
    logits = np.asarray(logits, np.float64)
    targets = np.eye(logits.shape[-1])[labels]
    if name == "mse":
        return 2.0 * (logits - targets) / logits.shape[-1]
    if name == "xent":
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return shifted / shifted.sum(axis=-1, keepdims=True) - targets
    raise ValueError(f"unknown loss {name!r}; choose one of {', '.join(LOSSES)}")
