"""Control flow: scan, while and cond, each running nested plans built once when the program is planned."""

from __future__ import annotations
