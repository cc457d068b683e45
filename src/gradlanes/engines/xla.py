"""The XLA engine as a plugin: what it runs, and a factory that imports JAX only when a lane runs.

Planning a DAG (`snakemake -n`, every cluster job step) checks each lane's settings against its
engine's plugin; keeping this module free of JAX keeps that check to a fraction of a second. The
engine itself is `gradlanes.engines.xla_engine`.
"""

from __future__ import annotations

from gradlanes.engines.base import EnginePlugin


def _create(exp, program):
    from gradlanes.engines.xla_engine import XlaEngine, find_device

    return XlaEngine(program, find_device(exp.device))


PLUGIN = EnginePlugin(
    name="xla",
    summary="XLA, compiled ahead of time once per lane through jax.jit (CPU or GPU)",
    create=_create,
    compiles=True,
    devices=("cpu", "gpu"),
    matmul_precisions=("highest", "tf32"),
    fuses_steps=True,
)
