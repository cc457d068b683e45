"""Work one test session does once for all its pytest-xdist workers: built under a lock, then read.

Why: the costliest things the suite makes (the CI-subset DAG run, about a minute of snakemake;
MNIST prepared into arrays) are read by tests that pytest-xdist spreads over several processes.
Each process building its own copy would pay for it once per worker. Instead the first process
to need a piece builds it into a folder that every worker of the session sees (the parent of
each worker's `basetemp`), holding an exclusive lock on it meanwhile; the others wait on the lock
and read the finished folder. A build that fails leaves its message beside the folder, so every
test that needs it fails with that message at once instead of trying the same build again.

A piece may also be started in the background (`start_in_background`) as soon as the tests are
collected, so that the DAG runs while the unit tests do and is usually finished when the first
test that reads it starts.
"""

from __future__ import annotations

import fcntl
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest


def session_root(config: pytest.Config) -> Path:
    """The folder every process of this test session shares.

    Under xdist each worker's basetemp is `<session basetemp>/popen-gw<N>`, so the shared folder is
    its parent; without xdist it is the basetemp itself.
    """
    basetemp = config._tmp_path_factory.getbasetemp()  # the object behind the tmp_path_factory fixture
    shared = basetemp.parent if hasattr(config, "workerinput") else basetemp
    folder = shared / "shared-work"
    folder.mkdir(exist_ok=True)
    return folder


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock between processes (and between threads: each open() is its own lock)."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class SharedWorkFailed(Exception):
    """The build of a shared piece failed; its message is kept for every test that needs it."""


@dataclass(frozen=True)
class SharedWork:
    """One piece of shared work: `build(folder)` fills a fresh folder, or raises SharedWorkFailed."""

    root: Path
    name: str
    build: Callable[[Path], None]

    @property
    def folder(self) -> Path:
        return self.root / self.name

    @property
    def _failure(self) -> Path:
        return self.root / f"{self.name}.failed"

    def get(self) -> Path:
        """The finished folder, building it here if no process has; fails as the build failed."""
        with _locked(self.root / f"{self.name}.lock"):
            if not self.folder.is_dir() and not self._failure.is_file():
                self._build()
        if self._failure.is_file():
            pytest.fail(f"shared {self.name} failed:\n{self._failure.read_text()}", pytrace=False)
        return self.folder

    def _build(self) -> None:
        partial = self.root / f"{self.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        try:
            self.build(partial)
        except SharedWorkFailed as failure:
            self._failure.write_text(str(failure))
            return
        except BaseException as error:  # a bug in the build: say so, and let it propagate
            self._failure.write_text(f"{type(error).__name__}: {error}")
            raise
        partial.rename(self.folder)

    def start_in_background(self) -> None:
        """Build in a daemon thread of this process; `get` (here or elsewhere) waits for it."""
        threading.Thread(target=self._get_quietly, name=f"shared-{self.name}", daemon=True).start()

    def _get_quietly(self) -> None:
        with _locked(self.root / f"{self.name}.lock"):
            if not self.folder.is_dir() and not self._failure.is_file():
                try:
                    self._build()
                except BaseException:  # recorded in the failure file; `get` reports it to the tests
                    pass


def private_copy(folder: Path, destination: Path) -> Path:
    """A copy of a shared folder that a test may change (rerun, fail or kill parts of) freely."""
    shutil.copytree(folder, destination, symlinks=True, ignore=shutil.ignore_patterns("locks", "incomplete"))
    return destination
