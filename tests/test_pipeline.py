"""The whole DAG on the CI subset (.test/config.yaml) through the real `snakemake`, then its records.

One run per session feeds every test here: statuses, compile counts, agreement, accuracy floors
for the slice, rerunning a single lane, and a failing agreement check failing the DAG.
"""

from __future__ import annotations

import hashlib
import json
import re

import jax
import pandas as pd
import pytest
import yaml

from gradlanes.engines.registry import get_engine
from gradlanes.run.records import validate_record
from workflow import REPO, output_of, run_snakemake

pytestmark = pytest.mark.slow
SUBSET = REPO / ".test" / "config.yaml"
CONFIG = yaml.safe_load(SUBSET.read_text())
HAS_GPU = any(d.platform == "gpu" for d in jax.devices())
# Sane floors for the slice (1,024 training images, tens of steps), far above chance (10 %), per
# experiment (model, loss), so that a new lane of an existing experiment needs no new floor.
SLICE_FLOORS = {("mlp", "mse"): 70.0, ("softmax", "xent"): 65.0, ("mlp", "xent"): 55.0}


@pytest.fixture(scope="module")
def subset_run(mirror_server, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("subset")
    mirror = {"dataset": {"mirrors": [mirror_server.mirror("good")]}}
    process = run_snakemake(workdir, configfile=SUBSET, overrides=mirror)
    assert process.returncode == 0, output_of(process)
    return workdir, mirror


def records(workdir):
    return {
        lane: json.loads((workdir / f"results/runs/{lane}/seed-0/record.json").read_text())
        for lane in CONFIG["lanes"]
    }


def test_every_record_is_valid_and_ok(subset_run):
    workdir, _ = subset_run
    for lane, record in records(workdir).items():
        validate_record(record)
        expected = "skipped" if lane == "xla_gpu" and not HAS_GPU else "ok"
        assert record["status"] == expected, (lane, record["reason"])
        assert record["environment"]["git_commit"]


def test_compile_counts(subset_run):
    workdir, _ = subset_run
    for lane, record in records(workdir).items():
        if record["status"] != "ok":
            continue
        if get_engine(record["engine"]).compiles:
            assert record["compiles"]["train"] == 1, lane
            assert record["dispatches"] >= record["config"]["steps"], lane
        else:
            assert record["compiles"] == {"train": 0, "total": 0}, lane
            assert record["dispatches"] == 0, lane


def test_accuracy_above_slice_floors(subset_run):
    workdir, _ = subset_run
    for lane, record in records(workdir).items():
        if record["status"] == "ok":
            floor = SLICE_FLOORS[record["config"]["model"], record["config"]["loss"]]
            assert record["accuracy"]["percent"] >= floor, lane


def test_agreement_passes_with_measured_values(subset_run):
    workdir, _ = subset_run
    report = json.loads((workdir / "results/checks/agreement.json").read_text())
    assert report["passed"] and report["counts"]["failed"] == 0
    checks = {check["name"]: check for check in report["checks"]}
    ran = [lane for lane, record in records(workdir).items() if record["status"] == "ok"]
    assert len(ran) >= 5
    for lane in ran:
        for kind in ("step0_loss", "step0_grad", "trained_loss", "trained_grad", "early_loss"):
            check = checks[f"{lane}/seed-0/{kind}"]
            assert check["status"] == "ok" and 0 <= check["measured"] <= check["bound"], check
            assert check["fraction_of_bound"] == pytest.approx(check["measured"] / check["bound"])
        errors = report["float64_reference"][lane]["seed-0"]
        assert errors["trained_grad"]["measured"] == checks[f"{lane}/seed-0/trained_grad"]["measured"]
    gpu = checks["xla_gpu/seed-0/step0_grad"]
    assert gpu["status"] == ("ok" if HAS_GPU else "skipped") and gpu["passed"] is (True if HAS_GPU else None)
    assert "softmax_kernel_vs_xla/seed-0/accuracy_points" in checks
    assert checks["host_vs_xla_cpu/seed-0/predictions_equal"]["relation"] == ">="
    assert checks["host_vs_xla_cpu/seed-0/same_program"]["status"] == "ok"
    assert checks["softmax_kernel_vs_xla/seed-0/same_program"]["status"] == "skipped"  # hand kernels


def test_lanes_of_one_experiment_ran_one_committed_program(subset_run):
    workdir, _ = subset_run
    runs = records(workdir)
    tlaloc = {runs[lane]["program"]["fingerprint"] for lane in ("xla_gpu", "xla_cpu", "host")}
    assert len(tlaloc) == 1, "lanes of one experiment must record one program"
    assert runs["softmax_kernel"]["program"] is None  # the hand kernels run no captured program
    report = json.loads((workdir / "results/checks/agreement.json").read_text())
    checks = {check["name"]: check for check in report["checks"]}
    for lane, record in runs.items():
        if record["program"] is None:
            continue
        folder = workdir / "results/programs" / record["program"]["id"]
        manifest = json.loads((folder / "program.json").read_text())
        assert manifest["fingerprint"] == record["program"]["fingerprint"], lane
        step = (folder / "step.jax_export").read_bytes()
        assert hashlib.sha256(step).hexdigest() == manifest["files"]["step.jax_export"]["sha256"]
        if record["status"] == "ok":
            assert checks[f"{lane}/seed-0/program"]["status"] == "ok", lane


def test_curves_and_digits(subset_run):
    workdir, _ = subset_run
    curve = pd.read_parquet(workdir / "results/runs/host/seed-0/curve.parquet")
    assert (curve["kind"] == "train").sum() == 40
    assert curve.loc[curve["kind"] == "test", "step"].tolist() == [0, 20, 40]
    digits = (workdir / "results/runs/host/seed-0/digits.txt").read_text()
    assert len(re.findall(r"predicted \d, label \d", digits)) == 6
    log = (workdir / "logs/train/host/seed-0.log").read_text()
    assert 8 <= len(re.findall(r"^\S+ \S+ INFO gradlanes.run.train: +\d+ +\d\.\d+ ", log, re.M)) <= 20


def test_rerunning_one_lane_reruns_only_that_lane(subset_run):
    workdir, mirror = subset_run
    before = {
        lane: (workdir / f"results/runs/{lane}/seed-0/record.json").stat().st_mtime_ns
        for lane in CONFIG["lanes"]
    }
    process = run_snakemake(workdir, "--forcerun", "train_host", configfile=SUBSET, overrides=mirror)
    assert process.returncode == 0, output_of(process)
    after = {
        lane: (workdir / f"results/runs/{lane}/seed-0/record.json").stat().st_mtime_ns
        for lane in CONFIG["lanes"]
    }
    assert [lane for lane in before if before[lane] != after[lane]] == ["host"]


def test_dry_run_with_everything_done_has_nothing_to_do(subset_run):
    workdir, mirror = subset_run
    process = run_snakemake(workdir, "-n", configfile=SUBSET, overrides=mirror)
    assert process.returncode == 0, output_of(process)
    assert "Nothing to be done" in output_of(process), output_of(process)


def test_a_failed_agreement_check_fails_the_dag(subset_run):
    workdir, mirror = subset_run
    strict = {**mirror, "agreement": {"early_loss_u": 1e-3}}
    process = run_snakemake(workdir, configfile=SUBSET, overrides=strict)
    assert process.returncode != 0
    assert "agreement checks failed: host/seed-0/early_loss measured" in output_of(process)


def test_summary_figures_and_report(subset_run):
    workdir, mirror = subset_run
    summary = (workdir / "results/summary.md").read_text()
    assert "| `host` | interpreter |" in summary and "Published anchors" in summary
    assert re.search(r"\d[\d,]* / 1,000 = \d+\.\d\d %", summary)
    for figure in ("loss_curves", "accuracy_per_epoch", "digits", "cost_accuracy"):
        assert (workdir / f"results/figures/{figure}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    process = run_snakemake(workdir, "--report", "results/report.html", configfile=SUBSET, overrides=mirror)
    assert process.returncode == 0, output_of(process)
    assert (workdir / "results/report.html").stat().st_size > 10_000


def test_predict_a_drawn_digit_with_a_trained_lane(subset_run, tmp_path, capsys):
    from PIL import Image, ImageDraw

    from gradlanes.report.cli import main

    workdir, _ = subset_run
    (workdir / "config.yaml").write_text(SUBSET.read_text())
    drawing = Image.new("RGB", (120, 200), "white")
    ImageDraw.Draw(drawing).line([(60, 20), (60, 180)], fill="black", width=14)  # a "1"
    drawing.save(tmp_path / "one.png")
    assert (
        main(["--project", str(workdir), "predict", str(tmp_path / "one.png"), "--lane", "mlp_stream"]) == 0
    )
    out = capsys.readouterr().out
    scores = [float(line.split()[1]) for line in out.splitlines() if re.match(r"  \d: ", line)]
    assert len(scores) == 10 and sum(scores) == pytest.approx(1, abs=1e-3)
    assert "1:" in next(line for line in out.splitlines() if "<- predicted" in line)


def test_another_idx_dataset_through_config_alone_passes_agreement(shared_mnist, tmp_path):
    """Transposed MNIST (other pixels on every input) named only in the config."""
    from derived import NAME, write_transposed_mnist

    overlay = yaml.safe_load(write_transposed_mnist(tmp_path / "transposed", shared_mnist).read_text())
    workdir = tmp_path / "run"
    process = run_snakemake(workdir, "results/checks/agreement.json", configfile=SUBSET, overrides=overlay)
    assert process.returncode == 0, output_of(process)
    report = json.loads((workdir / "results/checks/agreement.json").read_text())
    assert report["passed"] and report["counts"]["ok"] >= 25, report["counts"]
    manifest = json.loads((workdir / f"resources/{NAME}/manifest.json").read_text())
    assert manifest["dataset"] == NAME
    record = json.loads((workdir / "results/runs/host/seed-0/record.json").read_text())
    assert record["dataset"]["name"] == NAME
    pinned = overlay["dataset"]["files"]["train_images"]["sha256"]
    assert record["dataset"]["sha256"]["train_images"] == pinned
