"""The IREE engine as a plugin: what it runs, and a factory that imports it only when a lane runs
(reading the exported program brings JAX with it; planning a DAG needs none). The engine itself is
`gradlanes.engines.iree_engine`.
"""

from __future__ import annotations

from gradlanes.engines.base import EnginePlugin


def _create(exp, program):
    from gradlanes.engines.iree_engine import IreeEngine

    return IreeEngine(program)


PLUGIN = EnginePlugin(
    name="iree",
    summary="IREE: the exported StableHLO compiled for the host CPU (llvm-cpu) and run by IREE's runtime",
    create=_create,
    compiles=True,
    fuses_steps=True,
)
