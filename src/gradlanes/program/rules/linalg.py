"""Contractions: dot_general as one BLAS call where it can be."""

from __future__ import annotations

import numpy as np

from gradlanes.program.rules.registry import rule


@rule("dot_general")
def _dot_general(lhs, rhs, *, dimension_numbers, preferred_element_type=None, **_):
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    lhs_contract, rhs_contract = tuple(map(int, lhs_contract)), tuple(map(int, rhs_contract))
    lhs_batch, rhs_batch = tuple(map(int, lhs_batch)), tuple(map(int, rhs_batch))
    if not lhs_batch and lhs.ndim == 2 and rhs.ndim == 2 and len(lhs_contract) == 1:
        # The hot case: a plain matrix product. Transposed views go to BLAS without a copy.
        a = lhs if lhs_contract[0] == 1 else lhs.T
        b = rhs if rhs_contract[0] == 0 else rhs.T
        out = a @ b
    else:
        lhs_free = [d for d in range(lhs.ndim) if d not in lhs_contract and d not in lhs_batch]
        rhs_free = [d for d in range(rhs.ndim) if d not in rhs_contract and d not in rhs_batch]
        batch_shape = [lhs.shape[d] for d in lhs_batch]
        free_shape = [lhs.shape[d] for d in lhs_free] + [rhs.shape[d] for d in rhs_free]
        size = lambda arr, dims: int(np.prod([arr.shape[d] for d in dims], dtype=np.int64))  # noqa: E731
        batch, contract = size(lhs, lhs_batch), size(lhs, lhs_contract)
        a = np.transpose(lhs, lhs_batch + tuple(lhs_free) + lhs_contract).reshape(
            batch, size(lhs, lhs_free), contract
        )
        b = np.transpose(rhs, rhs_batch + rhs_contract + tuple(rhs_free)).reshape(
            batch, contract, size(rhs, rhs_free)
        )
        out = np.matmul(a, b).reshape(batch_shape + free_shape)
    if preferred_element_type is not None:
        out = out.astype(preferred_element_type, copy=False)
    return out
