"""Hand-written NumPy forward/backward of the benchmark models: the no-framework baseline.

`*_forward`/`*_backward` pairs with shapes in the docstrings, after llm.c; each is checked against
JAX autodiff in the tests. B = batch, D = inputs, H = hidden, C = outputs.
"""

from __future__ import annotations

import numpy as np


def linear_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """out[B, C] = x[B, D] @ w[D, C] + b[C]."""
    return x @ w + b


def linear_backward(
    x: np.ndarray, w: np.ndarray, dout: np.ndarray, need_dx: bool
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """dx[B, D] (only if needed), dw[D, C] = x.T @ dout, db[C] = sum over B of dout."""
    return (dout @ w.T if need_dx else None), x.T @ dout, dout.sum(axis=0)


def relu_forward(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0)


def relu_backward(out: np.ndarray, dout: np.ndarray) -> np.ndarray:
    """Gradient flows where the ReLU output was positive."""
    return np.where(out > 0, dout, 0).astype(dout.dtype)


def mse_forward(pred: np.ndarray, target: np.ndarray) -> np.ndarray:
    """mean over every element of (pred - target)^2."""
    diff = pred - target
    return np.mean(diff * diff, dtype=pred.dtype)


def mse_backward(pred: np.ndarray, target: np.ndarray) -> np.ndarray:
    """d mean((pred - t)^2) / d pred = 2 (pred - t) / pred.size."""
    return (pred - target) * pred.dtype.type(2 / pred.size)


def onehot(labels: np.ndarray, classes: int, dtype) -> np.ndarray:
    out = np.zeros((len(labels), classes), dtype)
    out[np.arange(len(labels)), labels] = 1
    return out


class Adam:
    """Adam as optax applies it: bias-corrected moments, eps added outside the square root."""

    def __init__(self, params: dict, lr: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
        self.lr, self.b1, self.b2, self.eps = lr, b1, b2, eps
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.count = 0

    def update(self, params: dict, grads: dict) -> dict:
        self.count += 1
        out = {}
        for k, g in grads.items():
            t = g.dtype.type
            self.m[k] = t(self.b1) * self.m[k] + t(1 - self.b1) * g
            self.v[k] = t(self.b2) * self.v[k] + t(1 - self.b2) * (g * g)
            m_hat = self.m[k] / t(1 - self.b1**self.count)
            v_hat = self.v[k] / t(1 - self.b2**self.count)
            out[k] = params[k] - t(self.lr) * m_hat / (np.sqrt(v_hat) + t(self.eps))
        return out


def mlp_mse_step(params: dict, adam: Adam, x: np.ndarray, targets: np.ndarray) -> tuple[dict, np.ndarray]:
    """Tlaloc's step: relu MLP, MSE against one-hot targets, Adam. Returns (new params, loss)."""
    hidden = relu_forward(linear_forward(x, params["w1"], params["b1"]))
    out = linear_forward(hidden, params["w2"], params["b2"])
    loss = mse_forward(out, targets)
    dout = mse_backward(out, targets)
    dhidden, dw2, db2 = linear_backward(hidden, params["w2"], dout, need_dx=True)
    _, dw1, db1 = linear_backward(x, params["w1"], relu_backward(hidden, dhidden), need_dx=False)
    grads = {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}
    return adam.update(params, grads), loss


def relu_mse_sgd_step(
    w: np.ndarray, b: np.ndarray, x: np.ndarray, t: np.ndarray, lr: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rusty's step: loss = mean((relu(x w + b) - t)^2), plain SGD. Returns (w, b, loss)."""
    out = relu_forward(linear_forward(x, w, b))
    loss = mse_forward(out, t)
    _, dw, db = linear_backward(x, w, relu_backward(out, mse_backward(out, t)), need_dx=False)
    step = w.dtype.type(lr)
    return w - step * dw, b - step * db, loss
