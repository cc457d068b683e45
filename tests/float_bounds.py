"""Worst-case rounding bounds of a linear layer and a softmax cross-entropy, for any unit roundoff.

Shared by tests/test_handkernel.py (float32 kernels against a float64 reference) and
tests/test_numerics.py (float64 programs against the exact value, and XLA's float32 error scale).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

#: How many ulps of the correctly rounded value each exp and log may miss by, so an ulp more, by
#: half, of the exact one. NumPy validates float32 exp to 3 ulp and log to 4, float64 exp and log to
#: 1 (numpy/_core/tests/data/umath-validation-set-{exp,log}.csv, on its SIMD and C-library paths
#: alike); XLA's CPU intrinsics are documented to float32 exp 6 ulp, log 1
#: (xla/codegen/intrinsic/accuracy/accuracy_budget.h, as tests/special_budgets.py cites).
NUMPY_ULPS = {np.dtype(np.float32): (3, 4), np.dtype(np.float64): (1, 1)}
XLA_ULPS = {np.dtype(np.float32): (6, 1)}


@dataclass(frozen=True)
class FloatBounds:
    #: Unit roundoff per rounded step: the computation's plus, where it has one, the reference's,
    #: which rounds at the same steps.
    u: float
    #: exp's and log's relative error: their ulps (an ulp is at most twice the unit roundoff of the
    #: value it lands in), plus a reference's own exp and log, below `u`.
    exp_rel: float
    log_rel: float
    #: exp below the smallest normal underflows: its result is then off by at most that, absolutely.
    tiny: float

    @classmethod
    def of(cls, dtype, reference=None, ulps=NUMPY_ULPS) -> FloatBounds:
        """Bounds of a `dtype` computation against a `reference` dtype's (None: the exact value)."""
        dtype = np.dtype(dtype)
        unit = float(np.finfo(dtype).eps) / 2
        u = unit + (float(np.finfo(reference).eps) / 2 if reference is not None else 0.0)
        exp_ulps, log_ulps = ulps[dtype]
        reference_rel = u if reference is not None else 0.0
        return cls(
            u=u,
            exp_rel=(exp_ulps + 0.5) * 2 * unit + reference_rel,
            log_rel=(log_ulps + 0.5) * 2 * unit + reference_rel,
            tiny=float(np.finfo(dtype).tiny),
        )

    def gamma(self, n: int) -> float:
        """A sum of n terms in any order (BLAS blocking, FMA or not) lies within gamma(n) times the
        sum of the terms' magnitudes from the exact sum (Higham, Accuracy and Stability, 3.1)."""
        return n * self.u / (1 - n * self.u)

    def linear_bound(self, x, w, b):
        """|x @ w + b - exact|: one sum of D products and b, D + 1 terms."""
        return self.gamma(x.shape[1] + 1) * (
            np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)) + np.abs(b)
        )

    def log_sum_exp(self, logits, logit_error=0.0):
        """The shifted logits, their exps and row sums, and log of those sums, each with its bound.

        The shift by the row max moves each s_j = l_j - max by its rounding u |s_j| and by the
        logits' error, twice its row's largest (l_j's and the max's). exp(s_j) then has the relative
        error expm1 of that plus its own; the sum of the C positive exps adds gamma(C - 1) of itself;
        log of the sum moves by the sum's relative error and log's own.
        """
        shifted = logits - logits.max(axis=1, keepdims=True)
        moved = self.u * np.abs(shifted) + 2 * np.max(
            np.broadcast_to(logit_error, logits.shape), axis=1, keepdims=True
        )
        exps = np.exp(shifted)
        exps_error = exps * (np.expm1(moved) + self.exp_rel) + self.tiny
        total = exps.sum(axis=1)
        total_rel = (exps_error.sum(axis=1) + self.gamma(logits.shape[1] - 1) * total) / total
        log_norm = np.log(total)
        log_norm_error = total_rel + self.log_rel * np.abs(log_norm)
        return SimpleNamespace(
            shifted=shifted, moved=moved, exps=exps, exps_error=exps_error, total=total,
            total_rel=total_rel, log_norm=log_norm, log_norm_error=log_norm_error,
        )  # fmt: skip

    def xent_bounds(self, logits, labels, logit_error=0.0, *, rows=None, quotient_roundings=1):
        """Bounds on |computed - exact| for the loss, the probabilities and delta = dloss/dlogits,
        when the computation gets logits within `logit_error` of `logits` (float64), to first order
        in u (what that leaves out is some u of the bound itself).

        Past `log_sum_exp`: the loss of a row subtracts the shifted label logit (its error, and a
        rounding) and the mean of the rows sums them (gamma(rows), with the division; `rows`
        defaults to the batch's). probs = exp / sum: both errors and the quotient's
        `quotient_roundings` (2 where it is exp times a rounded 1 / sum). delta = (probs - onehot) /
        B: the subtraction's rounding and the division's.
        """
        rows = len(labels) if rows is None else rows
        u, index = self.u, np.arange(len(labels))
        s = self.log_sum_exp(logits, logit_error)
        row_loss = s.log_norm - s.shifted[index, labels]
        row_error = s.log_norm_error + s.moved[index, labels] + u * np.abs(row_loss)
        loss_error = row_error.mean() + self.gamma(rows) * np.abs(row_loss).mean()
        probs = s.exps / s.total[:, None]
        probs_error = s.exps_error / s.total[:, None] + probs * (
            s.total_rel[:, None] + quotient_roundings * u
        )
        onehot = np.eye(logits.shape[1])[labels]
        delta = (probs - onehot) / len(labels)
        delta_error = (probs_error + u * np.abs(probs - onehot)) / len(labels) + u * np.abs(delta)
        return loss_error, probs_error, delta_error


#: float32 kernels against a float64 reference of the same inputs.
FLOAT32 = FloatBounds.of(np.float32, reference=np.float64)
#: float64 computations against the exact value.
FLOAT64 = FloatBounds.of(np.float64)
