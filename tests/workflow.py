"""Run the real `snakemake` on the real Snakefile in a scratch working directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"


def snakemake_command(
    workdir: Path, *args: str, overrides: dict | None = None, configfile: Path = REPO / "config.yaml"
) -> list[str]:
    """The snakemake command line for `workdir`, with `overrides` written there as a config file."""
    workdir.mkdir(parents=True, exist_ok=True)
    configfiles = [str(configfile)]
    if overrides:
        override = workdir / "override.yaml"
        override.write_text(yaml.safe_dump(overrides))
        configfiles.append(str(override))
    return [str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
            "--configfile", *configfiles, "--cores", "2", *args]  # fmt: skip


def _env(env: dict | None) -> dict:
    return {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}


def run_snakemake(
    workdir: Path,
    *args: str,
    overrides: dict | None = None,
    configfile: Path = REPO / "config.yaml",
    timeout: float = 600,
    env: dict | None = None,
) -> subprocess.CompletedProcess:
    """Run snakemake with `configfile` and `overrides` merged over it; return the finished process."""
    command = snakemake_command(workdir, *args, overrides=overrides, configfile=configfile)
    return subprocess.run(
        command, cwd=workdir, capture_output=True, text=True, timeout=timeout, env=_env(env)
    )


def start_snakemake(workdir: Path, *args: str, **kwargs) -> subprocess.Popen:
    """Start snakemake in a process group of its own (so a test can kill it with its jobs)."""
    command = snakemake_command(workdir, *args, **kwargs)
    return subprocess.Popen(
        command, cwd=workdir, env=_env(None), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip


def output_of(process: subprocess.CompletedProcess) -> str:
    return process.stdout + process.stderr
