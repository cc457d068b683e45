"""Rules over sliding windows: convolutions and pooling, forward and backward, as whole-array NumPy."""

from __future__ import annotations
