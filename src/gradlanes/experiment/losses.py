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


def term_magnitudes(name: str, logits: jax.Array, label: jax.Array) -> tuple[jax.Array, jax.Array]:
    """For one example: the magnitude of the terms its loss is computed from, and of its cotangent's.

    Rounding works on these terms, not on their difference: a confident softmax computes 1 - p from
    p ~ 1 and a loss log(1 + tiny) from sums near 1, so the loss and its gradient can be far smaller
    than their rounding errors. Returns (loss term magnitude, d loss / d logits term magnitudes [C]).
    """
    target = jax.nn.one_hot(label, logits.shape[-1], dtype=logits.dtype)
    if name == "mse":
        diff = jnp.abs(logits - target)
        terms = jnp.abs(logits) + target
        return jnp.mean(2 * diff * terms + diff**2), 2 * terms / logits.shape[-1]
    if name == "xent":
        top = jnp.max(logits)
        log_norm = jnp.log(jnp.sum(jnp.exp(logits - top)))
        picked = jnp.sum(target * logits)
        return jnp.abs(picked) + jnp.abs(top) + log_norm + 1.0, jax.nn.softmax(logits) + target
    raise ValueError(f"unknown loss {name!r}; choose one of {', '.join(LOSSES)}")
