"""Where the model's gradient jumps: ReLU decisions float32 cannot make, granted to the engine.

ReLU's derivative switches from 0 to 1 where its preactivation z crosses zero. A float32 engine
computes z = x . w + b with a rounding error of at most gamma_{n+1} * (|x| . |w| + |b|)
(n = the inputs summed; Higham, Accuracy and Stability of Numerical Algorithms, Thm 3.1, for any
summation order, blocked or fused), so where the float64 reference's |z| is inside that bound the
engine may take either side, legitimately. One such flip moves a whole column of the first
layer's gradient by that example's term, hundreds of float32 units of the gradient's error scale,
while nothing is wrong. Such decisions are "undecidable"; per unit, best first, the check accepts
the engine's side of one when that side explains its result better (the reference is moved by
exactly that example's term), and counts how many it granted. Decidable units are never granted,
so a wrong engine cannot hide behind this.
"""

from __future__ import annotations

import numpy as np

from gradlanes.experiment.losses import loss_grad_numpy
from gradlanes.run.numerics import FLOAT32_U


def _gamma(n: int) -> float:
    """Higham's gamma_n = n u / (1 - n u): the worst-case relative error of an n-term sum."""
    return n * FLOAT32_U / (1 - n * FLOAT32_U)


def undecidable_relus(params: dict, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the MLP's hidden layer: the float64 ReLU decisions [B, H] and which float32 cannot make."""
    x = np.asarray(images, np.float64)
    w1, b1 = np.asarray(params["w1"], np.float64), np.asarray(params["b1"], np.float64)
    z = x @ w1 + b1
    reach = _gamma(x.shape[1] + 1) * (np.abs(x) @ np.abs(w1) + np.abs(b1))
    return z > 0, np.abs(z) <= reach


def kink_decisions(exp, params: dict, images: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The model's kink decisions at `params` ([B, H] float64 sides, undecidable), None if it has none.

    Only the MLP has kinks: softmax regression and the LeNet-5 (GELU, average pooling) are smooth.
    """
    return undecidable_relus(params, images) if exp.model.name == "mlp" else None


def grant_kink_decisions(
    exp,
    params: dict,
    images: np.ndarray,
    labels: np.ndarray,
    candidate: dict,
    reference: dict,
    decisions: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[dict, int, int]:
    """The reference moved to the candidate's side of undecidable kinks, and (undecidable, granted).

    Any model without kinks returns the reference unchanged. A flip of hidden unit j for example b
    adds or removes d_bj * x_b / B in column j of dw1 and d_bj / B in db1[j], where d_bj is the loss
    gradient reaching that unit; h_bj itself is zero on both sides, so nothing else moves.
    `decisions` are `kink_decisions` of the same weights and images, when already computed.
    """
    decisions = decisions if decisions is not None else kink_decisions(exp, params, images)
    if decisions is None:
        return reference, 0, 0
    active, undecidable = decisions
    where = np.argwhere(undecidable)
    if where.size == 0:
        return reference, 0, 0
    x = np.asarray(images, np.float64)
    w2, b2 = np.asarray(params["w2"], np.float64), np.asarray(params["b2"], np.float64)
    hidden = np.maximum(x @ np.asarray(params["w1"], np.float64) + np.asarray(params["b1"], np.float64), 0)
    upstream = loss_grad_numpy(exp.loss, hidden @ w2 + b2, labels) @ w2.T  # [B, H], per example
    batch = len(labels)
    adjusted = {k: np.array(v, np.float64) for k, v in reference.items()}
    granted = 0
    for unit in np.unique(where[:, 1]):
        # The flips of one unit all move the same column; inputs are alike (pixels >= 0), so a wrong
        # example's term can shrink the residual a little too. Best first: take the flip that
        # explains most, recompute, stop when no flip explains anything more.
        examples = list(where[where[:, 1] == unit, 0])
        terms = []
        for example in examples:
            sign = -1.0 if active[example, unit] else 1.0  # the candidate dropped, or added, the term
            scale = sign * upstream[example, unit] / batch
            terms.append((example, scale * x[example], scale))
        residual_w = np.asarray(candidate["w1"][:, unit], np.float64) - adjusted["w1"][:, unit]
        residual_b = float(candidate["b1"][unit]) - adjusted["b1"][unit]
        while terms:
            current = residual_w @ residual_w + residual_b**2
            gains = [
                current - ((residual_w - w) @ (residual_w - w) + (residual_b - b) ** 2) for _, w, b in terms
            ]
            best = int(np.argmax(gains))
            if gains[best] <= 0:
                break
            _, term_w, term_b = terms.pop(best)
            adjusted["w1"][:, unit] += term_w
            adjusted["b1"][unit] += term_b
            residual_w, residual_b = residual_w - term_w, residual_b - term_b
            granted += 1
    return adjusted, len(where), granted
