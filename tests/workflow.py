"""Run the real `snakemake` on the real Snakefile in a scratch working directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"


def run_snakemake(
    workdir: Path,
    *args: str,
    overrides: dict | None = None,
    configfile: Path = REPO / "config.yaml",
    timeout: float = 600,
    env: dict | None = None,
) -> subprocess.CompletedProcess:
    """Run snakemake with `configfile` and `overrides` merged over it; return the finished process."""
    workdir.mkdir(parents=True, exist_ok=True)
    configfiles = [str(configfile)]
    if overrides:
        override = workdir / "override.yaml"
        override.write_text(yaml.safe_dump(overrides))
        configfiles.append(str(override))
    command = [
        str(SNAKEMAKE),
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        *configfiles,
        "--cores",
        "2",
        *args,
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=timeout, env=env)


def output_of(process: subprocess.CompletedProcess) -> str:
    return process.stdout + process.stderr
