"""How the benchmark times things: warm-up apart, engines interleaved, medians with min/max, RSS.

Each engine is a `Runner`: `prepare()` does every one-off cost (compilation) and is timed apart;
`reset()` restores the identical starting weights; `run(steps)` trains `steps` steps and returns
the final loss (it waits for the result, so asynchronous dispatch cannot hide time). One warm-up
repetition per runner is excluded; then repetitions go round-robin over the runners (A B C A B C
...), so drift on the shared machine hits every engine alike.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class Runner(Protocol):
    name: str

    def prepare(self) -> None: ...

    def reset(self) -> None: ...

    def run(self, steps: int) -> float: ...


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * PAGE


class PeakRss:
    """Sample this process's resident memory every millisecond while the block runs."""

    def __init__(self, interval_s: float = 0.001):
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakRss:
        self.peak = rss_bytes()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


@dataclass
class Row:
    engine: str
    compile_s: float = 0.0
    times_s: list[float] = field(default_factory=list)
    final_loss: float | None = None
    peak_rss_mb: float = 0.0
    cpu_s: float = 0.0  # process CPU time (user + system) over the timed repetitions
    error: str | None = None

    def summary(self, steps: int) -> dict:
        if self.error:
            return {"engine": self.engine, "status": "unavailable", "reason": self.error}
        per_step = np.asarray(self.times_s) / steps
        return {
            "engine": self.engine,
            "status": "ok",
            "compile_s": round(self.compile_s, 6),
            "reps": len(self.times_s),
            "step_us_median": float(np.median(per_step) * 1e6),
            "step_us_min": float(per_step.min() * 1e6),
            "step_us_max": float(per_step.max() * 1e6),
            "final_loss": self.final_loss,
            "peak_rss_mb": round(self.peak_rss_mb, 1),
            # CPU seconds per wall second: proves how many cores the row really kept busy.
            "cores_busy": round(self.cpu_s / sum(self.times_s), 2),
        }


def interleaved(runners: list, steps: int, reps: int) -> list[Row]:
    """Time every runner `reps` times, round-robin, after one excluded warm-up each."""
    rows = {}
    live = []
    for runner in runners:
        row = rows[runner.name] = Row(runner.name)
        unavailable = getattr(runner, "unavailable", None)
        if unavailable:
            row.error = unavailable
            continue
        started = time.perf_counter()
        runner.prepare()
        row.compile_s = time.perf_counter() - started
        runner.reset()
        runner.run(steps)  # warm-up: caches, lazy initialisation, first-touch page faults
        live.append(runner)
    for _ in range(reps):
        for runner in live:
            row = rows[runner.name]
            runner.reset()
            with PeakRss() as memory:
                cpu_started = _cpu_seconds()
                started = time.perf_counter()
                row.final_loss = float(runner.run(steps))
                row.times_s.append(time.perf_counter() - started)
                row.cpu_s += _cpu_seconds() - cpu_started
            row.peak_rss_mb = max(row.peak_rss_mb, memory.peak / 2**20)
    return [rows[runner.name] for runner in runners]


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def pin_to_cores(threads: int) -> list[int]:
    """Restrict this process (and every thread it will start) to `threads` cores.

    Environment variables alone do not hold XLA:CPU to one thread: measured here, its
    "1-thread" flags still kept 1.96 cores busy. CPU affinity does, for every library at once.
    """
    cores = sorted(os.sched_getaffinity(0))[:threads]
    os.sched_setaffinity(0, cores)
    return cores


def matmul_limit(
    dtype: str, size: int = 2048, reps: int = 5, shape: tuple[int, int, int] | None = None
) -> dict:
    """The machine's dense matmul rate in NumPy (best of `reps`), the yardstick for every row.

    `shape` (m, k, n) measures a specific product instead of the large square one.
    """
    m, k, n = shape or (size, size, size)
    rng = np.random.default_rng(0)
    a = rng.random((m, k)).astype(dtype)
    b = rng.random((k, n)).astype(dtype)
    a @ b  # warm-up
    best = min(_timed(lambda: a @ b) for _ in range(reps))
    return {"dtype": dtype, "shape": [m, k, n], "seconds": best, "gflops": 2 * m * k * n / best / 1e9}


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started
