"""Float32 error units: how far an engine may sit from the float64 reference, and why.

Every engine's loss and gradient are compared with the float64 reference of the same captured
program (`Interpreter(program, widen=True)`). A deviation means something only beside the size of
float32's rounding in that quantity, so it is divided by u = 2^-24 (float32 unit roundoff) times a
scale that does not vanish under cancellation: for a batch-mean loss or gradient, the mean
magnitude of the per-example contributions (`per_example_scale`, computed with `jax.vmap` here,
outside the captured program). A batch-mean gradient near a minimum is a small difference of large
per-example terms; its own norm would make any rounding look huge, this scale does not.

Bounds come from the program itself: `reduction_chain` is the longest chain of rounded
accumulations from any input to an output (a dot product of length n counts n, an elementwise op
1), and the bound is `CONFIDENCE * sqrt(chain)` units, the probabilistic rounding-error bound of
Higham & Mary (SIAM J. Sci. Comput. 41(5), 2019): with rounding errors independent and of mean zero,
an accumulation of n terms in any order is off by at most lambda * sqrt(n) * u * sum|terms| except
with probability below 2 exp(-lambda^2 (1-u)^2 / 2). docs/agreement.md, "Why these bounds", has the
derivation.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from gradlanes.program.jaxcompat import Jaxpr, Literal, called_jaxpr, sub_jaxprs

#: float32 unit roundoff (round to nearest): half the gap between 1 and the next float32.
FLOAT32_U = 2.0**-24
#: The unit roundoff of a matrix product at each precision a lane may pin (TF32 keeps 10 mantissa bits).
MATMUL_UNIT_ROUNDOFF = {"highest": FLOAT32_U, "tf32": 2.0**-11}
#: lambda of the probabilistic bound: lambda = 4 fails with probability < 2 exp(-8) = 6.7e-4 for a
#: single scalar, far less for a norm over thousands of components.
CONFIDENCE = 4.0


def _reduction_length(eqn) -> int:
    """How many rounded terms one output element of `eqn` accumulates (1 for elementwise ops)."""
    name = eqn.primitive.name
    if name == "dot_general":
        (contract, _), _ = eqn.params["dimension_numbers"]
        shape = eqn.invars[0].aval.shape
        return max(1, math.prod(shape[d] for d in contract))
    if name in ("reduce_sum", "reduce_prod", "cumsum", "cumprod", "cumlogsumexp"):
        shape = eqn.invars[0].aval.shape
        axes = eqn.params.get("axes", (eqn.params.get("axis", 0),))
        return max(1, math.prod(shape[d] for d in axes))
    if name == "conv_general_dilated":
        # Each output sums one kernel's worth of products: every kernel element but the output
        # feature (in the weight gradient's convolution, that is batch x positions).
        kernel = eqn.invars[1].aval.shape
        return max(1, math.prod(kernel) // kernel[eqn.params["dimension_numbers"].rhs_spec[0]])
    if name in ("reduce_window_sum", "reduce_window"):
        return max(1, math.prod(eqn.params["window_dimensions"]))
    if name == "select_and_scatter_add":  # sums the cotangents of every window that picked it
        windows, strides = eqn.params["window_dimensions"], eqn.params["window_strides"]
        return max(1, math.prod(-(-w // s) for w, s in zip(windows, strides, strict=True)))
    return 1


def _chain_lengths(jaxpr: Jaxpr, input_depths: Sequence[int]) -> list[int]:
    depth: dict = dict(zip(jaxpr.invars, input_depths, strict=True))

    def read(var) -> int:
        return 0 if isinstance(var, Literal) else depth.get(var, 0)

    for eqn in jaxpr.eqns:
        start = max((read(v) for v in eqn.invars), default=0)
        call = called_jaxpr(eqn)
        if call is not None:
            outs = _chain_lengths(call[0], [read(v) for v in eqn.invars])
        else:
            nested = sum(
                max(_chain_lengths(sub, [0] * len(sub.invars)), default=0) for sub in sub_jaxprs(eqn)
            )
            cost = _reduction_length(eqn) + nested * int(eqn.params.get("length", 1))
            outs = [start + cost] * len(eqn.outvars)
        for var, value in zip(eqn.outvars, outs, strict=True):
            depth[var] = value
    return [read(v) for v in jaxpr.outvars]


def reduction_chain(jaxpr: Jaxpr) -> list[int]:
    """Per output of `jaxpr`: the longest chain of rounded accumulations leading to it.

    For Tlaloc's gradient program the gradient of w1 accumulates over the batch (4,096) after a
    forward pass through 784- and 128-long products and a 10-long backward product.
    """
    return _chain_lengths(jaxpr, [0] * len(jaxpr.invars))


def probabilistic_bound(chain: int, unit_ratio: float = 1.0) -> float:
    """The bound in float32 units for a quantity `chain` rounded accumulations deep.

    `unit_ratio` is the lane's matmul unit roundoff over float32's (8,192 for TF32): a lane that
    rounds its products more coarsely is held to a proportionally wider bound.
    """
    return CONFIDENCE * math.sqrt(max(1, chain)) * unit_ratio


def scaled_error(
    candidate: Sequence[np.ndarray], reference: Sequence[np.ndarray], scale: Sequence[np.ndarray]
) -> float:
    """||candidate - reference||_2 / (u * ||scale||_2) over all leaves together, in float32 units."""
    diff = math.sqrt(
        sum(
            float(np.sum((np.asarray(c, np.float64) - r) ** 2))
            for c, r in zip(candidate, reference, strict=True)
        )
    )
    size = math.sqrt(sum(float(np.sum(np.asarray(s, np.float64) ** 2)) for s in scale))
    if size == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / (FLOAT32_U * size)


def scalar_error(candidate: float, reference: float, scale: float) -> float:
    """|candidate - reference| / (u * scale), in float32 units."""
    diff = abs(float(candidate) - float(reference))
    if scale == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / (FLOAT32_U * abs(scale))


@functools.cache
def _magnitude_sums(loss: str, model):
    """The jitted per-chunk sums of `per_example_scale`, one per loss and model: compiled once, not
    on every call (a function made anew each call would be traced and compiled anew)."""
    import jax
    import jax.numpy as jnp

    from gradlanes.experiment.losses import loss_fn, term_magnitudes
    from gradlanes.experiment.models import forward

    def example(p, x, label):
        return loss_fn(loss, forward(model, p, x[None]), label[None])

    def terms(p, x, label, signs):
        value, grads = jax.value_and_grad(example)(p, x, label)
        logits, pullback = jax.vjp(lambda q: forward(model, q, x[None])[0], p)
        loss_terms, cotangent = term_magnitudes(loss, logits, label)
        # Output c's rounding error, of size u * cotangent[c], reaches the weights along the
        # network's own signed Jacobian row J_c; the outputs' errors are independent, so their
        # variances add: sum_c (J_c cotangent_c)^2 per weight. One pullback of random signs gives
        # it without the C pullbacks: E[(sum_c s_c J_c cotangent_c)^2] = sum_c (J_c cotangent_c)^2.
        (probe,) = pullback(signs * cotangent)
        return jnp.abs(value), grads, loss_terms, probe

    @jax.jit
    def sums(p, xs, ls, signs):
        value, grads, loss_terms, probe = jax.vmap(terms, in_axes=(None, 0, 0, 0))(p, xs, ls, signs)
        total = jax.tree_util.tree_map(lambda g: jnp.abs(g).sum(axis=0), grads)
        variance = jax.tree_util.tree_map(lambda v: jnp.square(v).sum(axis=0), probe)
        return value.sum(), jnp.square(loss_terms).sum(), total, variance

    return sums


#: The seed of the probe signs: fixed, so that a scale is a function of weights and batch alone.
PROBE_SEED = 0


def probe_signs(examples: int, classes: int) -> np.ndarray:
    """Rademacher signs (+1 or -1, float32) per example and output: the floor's variance probe."""
    rng = np.random.Generator(np.random.PCG64(PROBE_SEED))
    return (2.0 * rng.integers(0, 2, size=(examples, classes)) - 1.0).astype(np.float32)


def per_example_scale(exp, params: dict, images: np.ndarray, labels: np.ndarray, chunk: int = 256):
    """The error scale of the batch loss and of each gradient component: mean + floor.

    mean: the mean magnitude of the per-example contributions, |loss_b| and |grad loss_b|, which
    the batch mean sums; it does not vanish when examples cancel each other near a minimum.
    floor: what `mean` misses when an example's own terms cancel (a confidently classified example
    computes 1 - p from p ~ 1): each example's rounding acts on its term magnitudes a_c
    (`losses.term_magnitudes`), each reaches the weights along the signed Jacobian row J_c, and
    those independent errors add as variances over outputs and examples:
    sqrt(sum_b sum_c (J_bc a_bc)^2) / B, the sum over c taken by one random-sign pullback per
    example (`probe_signs`). Computed with `jax.vmap` in float32, outside the captured program.
    """
    sums = _magnitude_sums(exp.loss, exp.model)
    signs = probe_signs(len(labels), exp.model.classes)
    parts = [
        sums(params, images[s : s + chunk], labels[s : s + chunk], signs[s : s + chunk])
        for s in range(0, len(labels), chunk)
    ]
    count = len(labels)

    def combine(index):
        first = parts[0][index]
        if isinstance(first, dict):
            return {k: sum(np.asarray(part[index][k], np.float64) for part in parts) for k in first}
        return float(sum(float(part[index]) for part in parts))

    loss_total, loss_squares, grad_total, grad_squares = (combine(i) for i in range(4))
    loss_scale = loss_total / count + np.sqrt(loss_squares) / count
    grad_scale = {k: grad_total[k] / count + np.sqrt(grad_squares[k]) / count for k in grad_total}
    return loss_scale, grad_scale
