"""Facts about the machine and code that produced a record, so a number can be traced and rerun."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@functools.cache
def environment() -> dict:
    # Imported here: planning a DAG asks for cpu_model() (through the engines' plugins) and needs no JAX.
    import jax
    import jaxlib

    commit = _git("rev-parse", "HEAD")
    # results/ is rewritten by the run itself and Markdown is prose: only changes to code and
    # config make a run "dirty".
    status = _git(
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":(exclude)results",
        ":(exclude)work",
        ":(exclude)*.md",
    )
    return {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "numpy": np.__version__,
        "cpu": cpu_model(),
        "cores": usable_cores(),
        "node": platform.node(),
        "platform": f"{sys.platform}-{platform.machine()}",
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
    }
