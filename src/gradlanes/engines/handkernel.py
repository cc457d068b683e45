"""Softmax regression with explicit NumPy kernels and no autodiff: the no-framework baseline.

After TypeShade's six compute entries and llm.c's forward/backward pairs. Shapes:
B = batch, D = inputs (784), C = classes (10). Every backward is checked against `jax.grad` in the
tests; the gradient of the whole objective is also compared with the captured softmax gradient in
the agreement checks.
"""

from __future__ import annotations

import numpy as np

from gradlanes.engines.base import EnginePlugin
from gradlanes.environment import cpu_model


def linear_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """logits[B, C] = x[B, D] @ w[D, C] + b[C]."""
    return x @ w + b


def linear_backward(x: np.ndarray, dlogits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """From dlogits[B, C]: dw[D, C] = x.T @ dlogits and db[C] = sum over B of dlogits.

    No dx: the inputs are images, never trained, so their gradient would be wasted work.
    """
    return x.T @ dlogits, dlogits.sum(axis=0)


def softmax_forward(logits: np.ndarray) -> np.ndarray:
    """probs[B, C], shifted by the row max so exp never overflows."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    exps = np.exp(shifted)
    return exps / exps.sum(axis=1, keepdims=True)


def crossentropy_forward(logits: np.ndarray, labels: np.ndarray) -> tuple[np.float32, np.ndarray]:
    """Mean stable cross-entropy over the batch, and the probabilities it was computed from.

    loss = mean_B( logsumexp(logits[b]) - logits[b, labels[b]] ), with the max subtracted first.
    """
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(shifted).sum(axis=1))
    picked = shifted[np.arange(len(labels)), labels]
    return np.mean(log_norm - picked, dtype=logits.dtype), softmax_forward(logits)


def crossentropy_backward(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """delta[B, C] = (probs - onehot(labels)) / B: the gradient of the mean loss wrt the logits."""
    delta = probs.copy()
    delta[np.arange(len(labels)), labels] -= 1
    return delta / probs.dtype.type(len(labels))


def sgd_update(param: np.ndarray, grad: np.ndarray, learning_rate: float) -> np.ndarray:
    """param - learning_rate * grad, in the parameter's dtype."""
    return param - param.dtype.type(learning_rate) * grad


def reduce_loss_and_correct(losses: list[float], probs: np.ndarray, labels: np.ndarray) -> tuple[float, int]:
    """The mean of per-batch losses and the count of correct predictions in `probs`."""
    return float(np.mean(losses)) if losses else float("nan"), int((probs.argmax(1) == labels).sum())


def predict(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """probabilities[B, C] and predicted class[B]."""
    probs = softmax_forward(linear_forward(x, w, b))
    return probs, probs.argmax(axis=1)


def loss_and_grad(params: dict, x: np.ndarray, labels: np.ndarray) -> tuple[np.float32, dict]:
    """The objective and its gradient wrt {w, b}: forward, objective, backward."""
    logits = linear_forward(x, params["w"], params["b"])
    loss, probs = crossentropy_forward(logits, labels)
    dw, db = linear_backward(x, crossentropy_backward(probs, labels))
    return loss, {"w": dw, "b": db}


def sgd_step(
    params: dict, x: np.ndarray, labels: np.ndarray, learning_rate: float
) -> tuple[dict, np.float32]:
    """One training step: the gradient of the batch objective, then the SGD update."""
    loss, grads = loss_and_grad(params, x, labels)
    return {k: sgd_update(params[k], grads[k], learning_rate) for k in params}, loss


class HandKernelEngine:
    """The kernels above behind the `Engine` interface: SGD on softmax regression, no program."""

    platform = "numpy"

    def __init__(self, learning_rate: float):
        self.learning_rate = learning_rate
        self.device_kind = cpu_model()
        self.dispatches = 0
        self._params: dict[str, np.ndarray] = {}

    def prepare(self, params: dict) -> None:
        self._params = {k: np.array(v, dtype=np.float32) for k, v in params.items()}

    def compile_step(self) -> None:
        """Nothing to compile."""

    def stage(self, images: np.ndarray, labels: np.ndarray):
        return images, labels

    def step(self, batch) -> list[float]:
        self._params, loss = sgd_step(self._params, *batch, self.learning_rate)
        return [float(loss)]

    def logits(self, images) -> np.ndarray:
        return linear_forward(images, self._params["w"], self._params["b"])

    def params(self) -> dict[str, np.ndarray]:
        return dict(self._params)

    def loss_and_grad(self, params: dict, images: np.ndarray, labels: np.ndarray):
        loss, grads = loss_and_grad(params, images, labels)
        return float(loss), grads


def _create(exp, program) -> HandKernelEngine:
    return HandKernelEngine(exp.learning_rate)


PLUGIN = EnginePlugin(
    name="handkernel",
    summary="softmax regression with explicit NumPy forward/backward kernels, no autodiff",
    create=_create,
    runs_program=False,
    implements_only={"model": "softmax", "loss": "xent", "optimizer": "sgd", "schedule": "constant"},
)
