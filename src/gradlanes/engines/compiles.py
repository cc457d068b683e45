"""Count compilations, in windows around the work being measured, whichever engine compiles.

XLA's are counted by a jax.monitoring listener registered when this module is imported (import it
before anything compiles); an engine with its own compiler calls `count_compile()` for each of its
compilations. `compile_window()` then counts every compilation that happens inside a block.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import jax.monitoring

from gradlanes.program.jaxcompat import BACKEND_COMPILE_EVENT

_lock = threading.Lock()
_total = 0


def _on_duration(event: str, duration_secs: float, **_kwargs) -> None:
    global _total
    if event == BACKEND_COMPILE_EVENT:
        with _lock:
            _total += 1


jax.monitoring.register_event_duration_secs_listener(_on_duration)


def count_compile() -> None:
    """Count one compilation made outside XLA (an engine's own compiler)."""
    global _total
    with _lock:
        _total += 1


def total_compiles() -> int:
    """Compilations in this process since gradlanes.engines.compiles was imported."""
    return _total


@dataclass
class Window:
    count: int = 0


@contextlib.contextmanager
def compile_window() -> Iterator[Window]:
    """Yield a `Window` whose `count` is the compilations that happened inside the block."""
    window = Window()
    start = _total
    try:
        yield window
    finally:
        window.count = _total - start
