"""Special functions (erf and friends, lgamma, digamma) with XLA's float32 accuracy."""

from __future__ import annotations
