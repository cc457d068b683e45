"""Find engines by name through the `gradlanes.engines` entry-point group.

Built-in engines register exactly as third-party ones do (`[project.entry-points."gradlanes.engines"]`
in pyproject.toml), the convention of Snakemake's executor and storage plugins, so an engine can
ship as its own pip package and gradlanes never asks which engine it is talking to. Only the engines
a config names are imported.
"""

from __future__ import annotations

import functools
from importlib.metadata import EntryPoint, entry_points

from gradlanes.engines.base import EnginePlugin

GROUP = "gradlanes.engines"


class UnknownEngine(ValueError):
    """No installed engine has this name, or its entry point does not give an `EnginePlugin`."""


def _entry_points() -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for point in entry_points(group=GROUP):
        if point.name in found and found[point.name].value != point.value:
            raise UnknownEngine(
                f"two installed packages register engine {point.name!r} ({found[point.name].value} and "
                f"{point.value}); uninstall one"
            )
        found[point.name] = point
    return found


def engine_names() -> list[str]:
    """Every installed engine's name, without importing any of them."""
    return sorted(_entry_points())


@functools.cache
def get_engine(name: str) -> EnginePlugin:
    """The plugin registered as `name`; the error lists what is installed and how to add one."""
    points = _entry_points()
    if name not in points:
        installed = ", ".join(sorted(points)) or "none (is gradlanes installed? make install)"
        raise UnknownEngine(
            f"no engine {name!r} is installed (engines: {installed}); an engine is a package that "
            f"registers an EnginePlugin under the {GROUP!r} entry-point group (README: Add an engine)"
        )
    plugin = points[name].load()
    if not isinstance(plugin, EnginePlugin):
        raise UnknownEngine(
            f"entry point {name!r} = {points[name].value} gives {type(plugin).__name__}, not an "
            "gradlanes.engines.base.EnginePlugin"
        )
    if plugin.name != name:
        raise UnknownEngine(
            f"entry point {name!r} gives a plugin named {plugin.name!r}; the names must match"
        )
    return plugin


def create_engine(exp, program):
    """The engine of a lane's experiment, built by its plugin (may raise `EngineUnavailable`)."""
    plugin = get_engine(exp.engine)
    return plugin.create(exp, program if plugin.runs_program else None)
