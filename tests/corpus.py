"""A corpus of real training programs nobody here wrote: optax's optimizers, jax.random, lax control flow.

Each entry is one train step (loss, `value_and_grad`, optimizer update) traced with
`jax.make_jaxpr`, with its inputs. `tests/test_corpus.py` runs every entry on XLA, on the host
interpreter and on the float64 reference, and reports how many the interpreter runs.

Why the inputs are built the way they are: the agreement measure compares float32 engines with the
float64 reference through rounding-error bounds, which hold only where the program is smooth. A
decision (ReLU's `x > 0`, a max-pool's winner, `sign` in Lion) taken on a value within rounding of
its threshold may legitimately go either way, and then the step jumps. So every decision in the
corpus is made on exactly computed values, by construction and checked (`exact_affine`):
- inputs and weights are small multiples of a power of two, so each pre-activation is a sum of
  terms on one grid whose absolute sum stays below 2^24 grid steps: float32 computes it exactly,
  in any summation order, and every ReLU and max-pool decision is the float64 one;
- the optimizer corpus uses an MLP whose second layer is positive and whose logits exceed their
  one-hot targets (MSE), so every gradient component is a sum of non-negative terms: no
  cancellation, a relative error of at most gamma_n, and the sign-taking optimizers (Lion, signSGD,
  Rprop, ...) see the float64 signs;
- smooth models (the transformer block, softmax regression, tanh MLPs) need none of this.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from gradlanes.data.description import MNIST
from gradlanes.experiment.spec import resolve
from gradlanes.program.jaxcompat import jaxpr_as_fun


@dataclass(frozen=True)
class CorpusProgram:
    name: str
    kind: str  # optimizer, model or control
    build: Callable[[], tuple[Callable, tuple]]  # () -> (train step, its example arguments)


#: Optimizers that need more than update(grads, state, params) and are out of the corpus' scope.
NEEDS_VALUE_FUNCTION = {
    "lbfgs": "its line search calls update(..., value=, grad=, value_fn=)",
    "polyak_sgd": "its step size needs update(..., value=) (the loss at params)",
}

#: Keyword arguments an alias needs beyond learning_rate (noisy_sgd draws from its own key).
EXTRA_ARGUMENTS = {"noisy_sgd": {"key": 0}}

#: Variants the issue names that are options of an alias, not aliases of their own.
VARIANTS = {
    "sgd_momentum": lambda: optax.sgd(1e-2, momentum=0.9),
    "sgd_nesterov": lambda: optax.sgd(1e-2, momentum=0.9, nesterov=True),
    "rmsprop_centered": lambda: optax.rmsprop(1e-2, centered=True, momentum=0.9),
    "adam_nesterov": lambda: optax.adam(1e-2, nesterov=True),
}


def optax_aliases() -> list[str]:
    """Every optimizer optax exports at top level from its alias module, in the pinned optax."""
    names = []
    for name in dir(optax):
        value = getattr(optax, name)
        target = value.func if isinstance(value, functools.partial) else value  # nadam = partial(adam)
        module = getattr(target, "__module__", "")
        if module == "optax._src.alias" and callable(value) and not inspect.isclass(value):
            names.append(name)
    return sorted(names)


def make_alias(name: str):
    return getattr(optax, name)(learning_rate=1e-2, **EXTRA_ARGUMENTS.get(name, {}))


# ---- exactly computed decisions ------------------------------------------------------------------
def grid(rng: np.random.Generator, shape, low: int, high: int, step: float) -> np.ndarray:
    """float32 multiples of `step` (a power of two) between low*step and high*step."""
    return (rng.integers(low, high + 1, size=shape) * step).astype(np.float32)


def exact_affine(inputs: np.ndarray, weights: np.ndarray, bias: np.ndarray, contract: Callable) -> bool:
    """float32 computes contract(inputs, weights) + bias exactly, whatever the summation order.

    True when every term lies on one power-of-two grid and the sum of |terms| stays below 2^24 grid
    steps: each partial sum is then a grid multiple no larger than that, which float32 holds.
    """
    step = min(_grid_step(inputs) * _grid_step(weights), _grid_step(bias))
    total = np.asarray(contract(np.abs(inputs).astype(np.float64), np.abs(weights).astype(np.float64)))
    return bool(np.all(total + np.abs(bias) < 2.0**24 * step))


def _grid_step(values: np.ndarray) -> float:
    """The coarsest power of two that every value is a multiple of (1 for all-zero arrays)."""
    values = np.asarray(values, np.float64)
    for exponent in range(0, -40, -1):
        if np.all(np.mod(values, 2.0**exponent) == 0):
            continue
        return 2.0 ** (exponent + 1)
    return 2.0**-40


# ---- the optimizer corpus: a positive MLP -----------------------------------------------------
BATCH, INPUTS, HIDDEN, CLASSES = 8, 64, 16, 10


def positive_mlp(seed: int = 0):
    """Params and a batch for which the MLP's forward is exact and its gradient has no cancellation."""
    rng = np.random.default_rng(seed)
    params = {
        "w1": grid(rng, (INPUTS, HIDDEN), -4, 4, 2.0**-4),
        "b1": grid(rng, (HIDDEN,), -4, 4, 2.0**-4),
        "w2": grid(rng, (HIDDEN, CLASSES), 1, 4, 2.0**-4),  # positive: dlogits . w2^T > 0
        "b2": np.full((CLASSES,), 2.0, np.float32),  # logits >= 2 > every one-hot target
    }
    images = grid(rng, (BATCH, INPUTS), 0, 3, 2.0**-2)
    labels = rng.integers(0, CLASSES, BATCH).astype(np.int32)
    return params, images, labels


def mlp_logits(params, images, activation=jax.nn.relu):
    return activation(images @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


def mse(logits, labels):
    return jnp.mean((logits - jax.nn.one_hot(labels, logits.shape[-1])) ** 2)


def train_step(loss_of: Callable, optimizer) -> Callable:
    """The gradlanes train step: value_and_grad of the loss, then the optimizer's update."""

    def step(params, state, *batch):
        loss, grads = jax.value_and_grad(loss_of)(params, *batch)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    return step


def optimizer_program(make_optimizer: Callable) -> Callable[[], tuple[Callable, tuple]]:
    def build():
        optimizer = make_optimizer()
        params, images, labels = positive_mlp()
        step = train_step(lambda p, x, y: mse(mlp_logits(p, x), y), optimizer)
        return step, (params, optimizer.init(params), images, labels)

    return build


# ---- models -------------------------------------------------------------------------------------
def dropout_mlp():
    """An MLP whose hidden units are dropped with a mask drawn from jax.random inside the step."""
    params, images, labels = positive_mlp(1)
    optimizer = optax.adam(1e-3)

    def loss_of(p, x, y, key):
        hidden = jax.nn.relu(x @ p["w1"] + p["b1"])
        keep = jax.random.bernoulli(key, 0.9, hidden.shape)
        logits = jnp.where(keep, hidden / 0.9, 0.0) @ p["w2"] + p["b2"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    key = jax.random.key(3)
    return train_step(loss_of, optimizer), (params, optimizer.init(params), images, labels, key)


LENET_SHAPES = {"c1": (5, 5, 1, 6), "c2": (5, 5, 6, 16), "d1": (256, 32), "d2": (32, 10)}
DIMENSIONS = ("NHWC", "HWIO", "NHWC")


def lenet_layers(p, x):
    """LeNet-5's layers on [B, 28, 28] images: each pre-activation (for the exactness check) and logits."""
    x = x.reshape(-1, 28, 28, 1)
    z1 = lax.conv_general_dilated(x, p["c1"], (1, 1), "VALID", dimension_numbers=DIMENSIONS) + p["b1"]
    pooled = lax.reduce_window(jax.nn.relu(z1), -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    z2 = lax.conv_general_dilated(pooled, p["c2"], (1, 1), "VALID", dimension_numbers=DIMENSIONS) + p["b2"]
    averaged = lax.reduce_window(jax.nn.relu(z2), 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4
    flat = averaged.reshape(averaged.shape[0], -1)
    z3 = flat @ p["d1"] + p["e1"]
    return (x, pooled, flat), (z1, z2, z3), jax.nn.relu(z3) @ p["d2"] + p["e2"]


def lenet_inputs():
    rng = np.random.default_rng(5)
    params = {name: grid(rng, shape, -1, 1, 2.0**-3) for name, shape in LENET_SHAPES.items()}
    params |= {"b1": grid(rng, (6,), -1, 1, 2.0**-3), "b2": grid(rng, (16,), -1, 1, 2.0**-3)}
    params |= {"e1": grid(rng, (32,), -1, 1, 2.0**-3), "e2": np.zeros(10, np.float32)}
    images = grid(rng, (4, 28 * 28), 0, 2, 2.0**-1)
    labels = rng.integers(0, 10, 4).astype(np.int32)
    return params, images, labels


def lenet():
    """LeNet-5 style: conv 6@5x5, ReLU, max-pool 2, conv 16@5x5, ReLU, average-pool 2, dense."""
    params, images, labels = lenet_inputs()
    optimizer = optax.adam(1e-3)

    def loss_of(p, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(lenet_layers(p, x)[2], y).mean()

    return train_step(loss_of, optimizer), (params, optimizer.init(params), images, labels)


def transformer_block():
    """Pre-norm transformer block: layer norm, 2-head causal self-attention, exact-GELU MLP, mean-pool."""
    rng = np.random.default_rng(7)
    width, length, heads = 16, 8, 2
    params = {k: (rng.normal(size=(width, width)) / 4).astype(np.float32) for k in ("q", "k", "v", "o")}
    params |= {"up": (rng.normal(size=(width, 4 * width)) / 4).astype(np.float32)}
    params |= {"down": (rng.normal(size=(4 * width, width)) / 8).astype(np.float32)}
    params |= {"head": (rng.normal(size=(width, CLASSES)) / 4).astype(np.float32)}
    params |= {name: np.ones(width, np.float32) for name in ("g1", "g2")}
    params |= {name: np.zeros(width, np.float32) for name in ("n1", "n2")}
    tokens = rng.normal(size=(4, length, width)).astype(np.float32)
    labels = rng.integers(0, CLASSES, 4).astype(np.int32)

    def layer_norm(z, gain, shift):
        mean = z.mean(-1, keepdims=True)
        return (z - mean) * lax.rsqrt(z.var(-1, keepdims=True) + 1e-5) * gain + shift

    def logits_of(p, x):
        h = layer_norm(x, p["g1"], p["n1"])
        split = lambda t: t.reshape(*t.shape[:2], heads, width // heads)  # noqa: E731
        q, k, v = split(h @ p["q"]), split(h @ p["k"]), split(h @ p["v"])
        scores = jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(width // heads)
        causal = jnp.tril(jnp.ones((length, length), bool))
        attention = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1)
        x = x + jnp.einsum("bhts,bshd->bthd", attention, v).reshape(x.shape) @ p["o"]
        x = x + jax.nn.gelu(layer_norm(x, p["g2"], p["n2"]) @ p["up"], approximate=False) @ p["down"]
        return x.mean(1) @ p["head"]

    optimizer = optax.adamw(1e-3)

    def loss_of(p, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(logits_of(p, x), y).mean()

    return train_step(loss_of, optimizer), (params, optimizer.init(params), tokens, labels)


def smooth_mlp(seed: int):
    rng = np.random.default_rng(seed)
    params = {
        "w1": (rng.normal(size=(INPUTS, HIDDEN)) / 8).astype(np.float32),
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": (rng.normal(size=(HIDDEN, CLASSES)) / 4).astype(np.float32),
        "b2": np.zeros(CLASSES, np.float32),
    }
    return params, rng.random((BATCH, INPUTS), np.float32), rng.integers(0, CLASSES, BATCH).astype(np.int32)


def xent_of(p, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(mlp_logits(p, x, jnp.tanh), y).mean()


# ---- control flow ------------------------------------------------------------------------------
def fused_gradlanes_step():
    """gradlanes' own `fuse_steps: 4` program: lax.scan of 4 softmax-regression steps on 4 batches."""
    from gradlanes.program.capture import capture

    settings = {
        "engine": "interpreter", "model": "softmax", "init": "zeros", "loss": "xent", "optimizer": "sgd",
        "learning_rate": 0.1, "batch_size": 16, "steps": 8, "train_images": 64, "test_images": 16,
        "fuse_steps": 4,
    }  # fmt: skip
    exp = resolve("corpus", settings, 0, MNIST)
    program = capture(exp)
    rng = np.random.default_rng(11)
    carried = program.fused.jaxpr.invars[: program.n_params + program.n_state]
    carry = [(rng.normal(size=var.aval.shape) / 8).astype(var.aval.dtype) for var in carried]
    images = rng.random((4, 16, MNIST.inputs), np.float32)
    labels = rng.integers(0, 10, (4, 16)).astype(np.int32)
    return jaxpr_as_fun(program.fused), (*carry, images, labels)


def clipped_by_cond():
    """A step that rescales the gradient with lax.cond when its norm passes a threshold.

    The threshold is half the gradient's norm at these inputs, so the predicate is decided far
    from its threshold (a factor 2, against float32 rounding of 1e-7 relative).
    """
    params, images, labels = smooth_mlp(2)
    norm = float(optax.global_norm(jax.grad(xent_of)(params, images, labels)))
    optimizer = optax.adam(1e-3)

    def step(p, state, x, y):
        loss, grads = jax.value_and_grad(xent_of)(p, x, y)
        total = optax.global_norm(grads)
        grads = lax.cond(
            total > norm / 2,
            lambda g: jax.tree_util.tree_map(lambda t: t * (norm / 2) / total, g),
            lambda g: g,
            grads,
        )
        updates, state = optimizer.update(grads, state, p)
        return optax.apply_updates(p, updates), state, loss

    return step, (params, optimizer.init(params), images, labels)


def inner_steps_by_while():
    """A step that takes `n` inner SGD steps on one batch, `n` a program input (lax.fori_loop -> while)."""
    params, images, labels = smooth_mlp(3)

    def step(p, n, x, y):
        def inner(_, carry):
            p, _ = carry
            loss, grads = jax.value_and_grad(xent_of)(p, x, y)
            return jax.tree_util.tree_map(lambda a, g: a - 0.1 * g, p, grads), loss

        return lax.fori_loop(0, n, inner, (p, jnp.float32(0)))

    return step, (params, np.int32(3), images, labels)


def rematerialised():
    """The MLP's hidden layer under jax.checkpoint: the gradient recomputes it (remat2)."""
    params, images, labels = smooth_mlp(4)
    optimizer = optax.adam(1e-3)

    def loss_of(p, x, y):
        hidden = jax.checkpoint(lambda w, b, x: jnp.tanh(x @ w + b))(p["w1"], p["b1"], x)
        logits = hidden @ p["w2"] + p["b2"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    return train_step(loss_of, optimizer), (params, optimizer.init(params), images, labels)


def corpus() -> list[CorpusProgram]:
    programs = [
        CorpusProgram(f"optax.{name}", "optimizer", optimizer_program(lambda name=name: make_alias(name)))
        for name in optax_aliases()
        if name not in NEEDS_VALUE_FUNCTION
    ]
    programs += [CorpusProgram(f"optax.{n}", "optimizer", optimizer_program(f)) for n, f in VARIANTS.items()]
    programs += [
        CorpusProgram("mlp_dropout", "model", dropout_mlp),
        CorpusProgram("lenet5", "model", lenet),
        CorpusProgram("transformer_block", "model", transformer_block),
        CorpusProgram("fuse_steps_4", "control", fused_gradlanes_step),
        CorpusProgram("clip_by_cond", "control", clipped_by_cond),
        CorpusProgram("inner_while", "control", inner_steps_by_while),
        CorpusProgram("checkpoint", "control", rematerialised),
    ]
    return programs


def leaves(tree: Any) -> list:
    return jax.tree_util.tree_leaves(tree)


#: What happened to each corpus program in this test run (supported / ran / why not); conftest
#: prints the coverage at the end of the run. Written through `note`.
RESULTS: dict[str, str] = {}


def note(name: str, result: str) -> None:
    """Keep what the program's furthest test found: a "ran" (it trained) is never overwritten by the
    "supported" of the test that only checks its primitives, whichever order the two ran in."""
    if result == "supported" and RESULTS.get(name, "").startswith("ran"):
        return
    RESULTS[name] = result


@functools.cache
def traced(entry: CorpusProgram) -> tuple[Callable, tuple, Any]:
    """The program's step, its arguments and its jaxpr, built and traced once for every test."""
    step, args = entry.build()
    return step, args, jax.make_jaxpr(step)(*args)
