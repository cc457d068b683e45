"""File-name identities shared by the Snakefile and the lanes, importable without JAX.

The Snakefile is parsed on every `snakemake` call, including dry runs and up-to-date checks; keeping
what it imports free of JAX keeps planning fast.
"""

from __future__ import annotations


def model_key(name: str, hidden: int, init: str) -> str:
    """Lanes with equal keys and seeds share one initial-weights file."""
    return f"{name}-h{hidden}-{init}" if name == "mlp" else f"{name}-{init}"


def parse_model_key(key: str) -> tuple[str, int, str]:
    name, _, rest = key.partition("-")
    if name == "mlp":
        width, _, init = rest.partition("-")
        return name, int(width[1:]), init
    return name, 128, rest
