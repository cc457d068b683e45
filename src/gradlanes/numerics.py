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
with probability below 2 exp(-lambda^2 (1-u)^2 / 2). README "Why these bounds" has the derivation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gradlanes.jaxcompat import Jaxpr, Literal, called_jaxpr, sub_jaxprs

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


def per_example_scale(exp, params: dict, images: np.ndarray, labels: np.ndarray, chunk: int = 512):
    """Mean |loss_b| and, per parameter, mean |grad loss_b| over the batch's examples.

    The batch loss is the mean of per-example losses (both of gradlanes' losses are), so these are
    the magnitudes its reductions sum. Computed with `jax.vmap` in float32: a scale needs no more.
    """
    import jax
    import jax.numpy as jnp

    from gradlanes.losses import loss_fn
    from gradlanes.models import forward

    def example(p, x, label):
        return loss_fn(exp.loss, forward(exp.model, p, x[None]), label[None])

    @jax.jit
    def magnitudes(p, xs, ls):
        losses, grads = jax.vmap(jax.value_and_grad(example), in_axes=(None, 0, 0))(p, xs, ls)
        return jnp.abs(losses).sum(), jax.tree_util.tree_map(lambda g: jnp.abs(g).sum(axis=0), grads)

    loss_total, grad_total = 0.0, None
    for start in range(0, len(labels), chunk):
        part_loss, part_grads = magnitudes(
            params, images[start : start + chunk], labels[start : start + chunk]
        )
        loss_total += float(part_loss)
        part = {k: np.asarray(v, np.float64) for k, v in part_grads.items()}
        grad_total = part if grad_total is None else {k: grad_total[k] + part[k] for k in part}
    count = len(labels)
    return loss_total / count, {k: v / count for k, v in grad_total.items()}
