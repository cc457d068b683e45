"""Rules that pick or place elements by computed index: gather, scatter, dynamic slices."""

from __future__ import annotations
