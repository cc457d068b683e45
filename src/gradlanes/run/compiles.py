"""Count XLA compilations with jax.monitoring, in windows around the work being measured.

One listener is registered when this module is imported (import it before anything compiles);
`CompileCounter.window()` then counts the backend compilations that happen inside a block.
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


def total_compiles() -> int:
    """Backend compilations in this process since gradlanes.run.compiles was imported."""
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
