"""The host interpreter engine as a plugin: what it runs, and a factory that imports it only when a
lane runs (the interpreter's rules bring JAX and SciPy with them; planning a DAG needs neither).
The engine itself is `gradlanes.engines.interpreter_engine`.
"""

from __future__ import annotations

from gradlanes.engines.base import EnginePlugin


def _create(exp, program):
    from gradlanes.engines.interpreter_engine import InterpreterEngine

    return InterpreterEngine(program)


PLUGIN = EnginePlugin(
    name="interpreter",
    summary="the jaxpr evaluated equation by equation in NumPy on the host (no compiler)",
    create=_create,
    fuses_steps=True,
)
