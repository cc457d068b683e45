"""The CI subset DAG through Snakemake's SLURM executor on a real single-node SLURM.

Runs only under `make test-cluster` (GRADLANES_SLURM_CONF set by tests/cluster/slurm-up.sh);
elsewhere it is skipped with that reason. Checks that every record is ok (the GPU lane skipped,
on a node whose one GPU is a counted GRES), that the jobs really went through SLURM (job ids in the
Snakemake log and in scontrol's history), that records name the node that ran them, and that a
lane failing on the cluster fails the DAG with its log path shown.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gradlanes.layout import published

PUBLISHED = published("mnist")  # the CI subset's experiment (its dataset's name)

REPO = Path(__file__).resolve().parents[2]
SUBSET = REPO / ".test" / "config.yaml"
SLURM_CONF = os.environ.get("GRADLANES_SLURM_CONF")
pytestmark = pytest.mark.skipif(not SLURM_CONF, reason="needs a SLURM: run `make test-cluster` (as root)")


def snakemake(workdir: Path, *args: str, overrides: dict | None = None) -> subprocess.CompletedProcess:
    files = [str(SUBSET)]
    if overrides:
        (workdir / "override.yaml").write_text(yaml.safe_dump(overrides))
        files.append(str(workdir / "override.yaml"))
    command = [
        str(Path(sys.executable).parent / "snakemake"),
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--profile",
        str(REPO / "workflow/profiles/slurm"),
        # The executor notices a finished job only at its next status check, 5 s after the last
        # finish (the profile's, sized for real clusters) and 10 s more after each check that
        # found none: on this node's 10-second jobs most of the run was waiting. A check one
        # second after a finish costs nothing on a test node of one user.
        "--slurm-init-seconds-before-status-checks",
        "1",
        "--configfile",
        *files,
        *args,
    ]
    env = {**os.environ, "SLURM_CONF": SLURM_CONF}
    return subprocess.run(command, cwd=workdir, capture_output=True, text=True, env=env, timeout=1800)


@pytest.fixture(scope="module")
def cluster_run(mirror_server, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("cluster")
    mirror = {"dataset": {"mirrors": [mirror_server.mirror("good")]}}
    process = snakemake(workdir, overrides=mirror)
    assert process.returncode == 0, process.stdout + process.stderr
    return workdir, process.stdout + process.stderr, mirror


def test_every_record_ok_and_from_the_cluster_node(cluster_run):
    workdir, _, _ = cluster_run
    lanes = yaml.safe_load(SUBSET.read_text())["lanes"]
    for lane in lanes:
        record = json.loads((workdir / PUBLISHED.record(lane, 0)).read_text())
        assert record["status"] == ("skipped" if lane == "xla_gpu" else "ok"), (lane, record["reason"])
        assert record["environment"]["node"] == socket.gethostname()
    assert json.loads((workdir / PUBLISHED.agreement).read_text())["passed"]


def test_jobs_went_through_slurm(cluster_run):
    workdir, log, _ = cluster_run
    job_ids = re.findall(r"submitted with SLURM jobid (\d+)", log)
    assert len(job_ids) >= 8, log  # download, prepare, inits, six lanes, agreement, summary, figures
    history = subprocess.run(
        ["scontrol", "show", "job", job_ids[-1]],
        capture_output=True,
        text=True,
        env={**os.environ, "SLURM_CONF": SLURM_CONF},
    )
    assert "JobState=COMPLETED" in history.stdout, history.stdout + history.stderr


def test_a_failing_lane_fails_the_dag_with_its_log(cluster_run):
    workdir, _, mirror = cluster_run
    # SGD at 100 (the schema's maximum) on MSE overflows by step 14: the lane raises TrainingDiverged.
    # All three Tlaloc lanes change together, since agreement checks need equal experiments.
    exploding = {"optimizer": "sgd", "learning_rate": 100.0}
    diverging = {**mirror, "lanes": {lane: exploding for lane in ("xla_gpu", "xla_cpu", "host")}}
    process = snakemake(workdir, "--forcerun", "train_host", overrides=diverging)
    text = process.stdout + process.stderr
    assert process.returncode != 0
    assert "Error in rule train_host" in text
    assert "logs/mnist/train/host/seed-0.log" in text
    assert re.search(r"SLURM-job '\d+' failed, SLURM status is: '(FAILED|COMPLETED)'|SLURM status", text), (
        text
    )
