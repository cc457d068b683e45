"""The whole DAG on the CI subset (.test/config.yaml) through the real `snakemake`, then its records.

One run per session (conftest's `subset_run`, shared by every xdist worker) feeds every test here:
statuses, compile counts, agreement, accuracy floors for the slice, rerunning a single lane, and a
failing agreement check failing the DAG. Tests that run snakemake again do so in a private copy.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pandas as pd
import pytest
import yaml

from gradlanes.engines.registry import get_engine
from gradlanes.layout import published, work
from gradlanes.run.records import validate_record
from workflow import REPO, output_of, run_snakemake, snakemake_command, start_snakemake

pytestmark = pytest.mark.slow
SUBSET = REPO / ".test" / "config.yaml"
CONFIG = yaml.safe_load(SUBSET.read_text())
# What the tests read: the published experiment (results/mnist/) and the work area behind it.
PUBLISHED, WORK = published("mnist"), work("mnist")
HAS_GPU = any(d.platform == "gpu" for d in jax.devices())
# Accuracy floors per experiment (model/loss), so that a new lane of an existing experiment needs
# no new floor: tests/numerics/floors.py derives each from seed 0 under every numerics-matrix cell
# less the accuracy gap the agreement checks allow, and records the seed spread beside it
# (results/checks/slice-floors.md); tests/test_slice_floors.py holds the file to that derivation.
SLICE_FLOORS = REPO / "results" / "checks" / "slice-floors.json"


def records(workdir):
    return {lane: json.loads((workdir / PUBLISHED.record(lane, 0)).read_text()) for lane in CONFIG["lanes"]}


def png_pixels(path) -> np.ndarray:
    """A PNG decoded whole (PIL checks its chunks while it reads), as RGB pixels (rows, columns, 3)."""
    from PIL import Image

    with Image.open(path) as image:
        assert image.format == "PNG", path
        return np.asarray(image.convert("RGB"), dtype=np.int32)


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
    floors = {
        name: entry["floor"] for name, entry in json.loads(SLICE_FLOORS.read_text())["experiments"].items()
    }
    for lane, record in records(workdir).items():
        if record["status"] == "ok":
            floor = floors[f"{record['config']['model']}/{record['config']['loss']}"]
            assert record["accuracy"]["percent"] >= floor, lane


def test_agreement_passes_with_measured_values(subset_run):
    workdir, _ = subset_run
    report = json.loads((workdir / PUBLISHED.agreement).read_text())
    assert report["passed"] and report["counts"]["failed"] == 0
    checks = {check["name"]: check for check in report["checks"]}
    ran = [lane for lane, record in records(workdir).items() if record["status"] == "ok"]
    assert len(ran) >= 5
    for lane in ran:
        for kind in ("step0_loss", "step0_grad", "trained_loss", "trained_grad", "early_loss"):
            check = checks[f"{lane}/seed-0/{kind}"]
            assert check["status"] == "ok" and 0 <= check["measured"] <= check["bound"], check
            # the report's one division, of floats JSON writes and reads back exactly
            assert check["fraction_of_bound"] == check["measured"] / check["bound"]
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
    report = json.loads((workdir / PUBLISHED.agreement).read_text())
    checks = {check["name"]: check for check in report["checks"]}
    for lane, record in runs.items():
        if record["program"] is None:
            continue
        folder = workdir / PUBLISHED.program_dir(record["program"]["id"])
        manifest = json.loads((folder / "program.json").read_text())
        assert manifest["fingerprint"] == record["program"]["fingerprint"], lane
        step = (folder / "step.jax_export").read_bytes()
        assert hashlib.sha256(step).hexdigest() == manifest["files"]["step.jax_export"]["sha256"]
        if record["status"] == "ok":
            assert checks[f"{lane}/seed-0/program"]["status"] == "ok", lane


def test_curves_and_digits(subset_run):
    workdir, _ = subset_run
    curve = pd.read_parquet(workdir / PUBLISHED.curve("host", 0))
    assert (curve["kind"] == "train").sum() == 40
    assert curve.loc[curve["kind"] == "test", "step"].tolist() == [0, 20, 40]
    digits = (workdir / PUBLISHED.digits("host", 0)).read_text()
    assert len(re.findall(r"predicted \d, label \d", digits)) == 6
    log = (workdir / "logs/mnist/train/host/seed-0.log").read_text()
    # A row every ceil(steps / log_rows) steps and at step 1 (run/train.py): the host lane's 40
    # steps with log_rows at its default of 12 log steps 1, 4, 8, ..., 40.
    logged = re.findall(r"^\S+ \S+ INFO gradlanes.run.train: +(\d+) +\d\.\d+ ", log, re.M)
    assert [int(step) for step in logged] == [1, *range(4, 41, 4)]


def test_rerunning_one_lane_reruns_only_that_lane_and_republishes(subset_copy):
    workdir, mirror = subset_copy
    before = {lane: (workdir / WORK.record(lane, 0)).stat().st_mtime_ns for lane in CONFIG["lanes"]}
    published_before = {lane: (workdir / PUBLISHED.record(lane, 0)).read_bytes() for lane in CONFIG["lanes"]}
    process = run_snakemake(workdir, "--forcerun", "train_host", configfile=SUBSET, overrides=mirror)
    assert process.returncode == 0, output_of(process)
    after = {lane: (workdir / WORK.record(lane, 0)).stat().st_mtime_ns for lane in CONFIG["lanes"]}
    assert [lane for lane in before if before[lane] != after[lane]] == ["host"]
    published_after = {lane: (workdir / PUBLISHED.record(lane, 0)).read_bytes() for lane in CONFIG["lanes"]}
    assert [lane for lane in before if published_before[lane] != published_after[lane]] == ["host"]
    assert published_after["host"] == (workdir / WORK.record("host", 0)).read_bytes()


def test_dry_run_with_everything_done_has_nothing_to_do(subset_copy):
    workdir, mirror = subset_copy
    process = run_snakemake(workdir, "-n", configfile=SUBSET, overrides=mirror)
    assert process.returncode == 0, output_of(process)
    assert "Nothing to be done" in output_of(process), output_of(process)


def test_planning_the_dag_imports_no_jax(subset_copy):
    """`snakemake -n`, and every cluster job step (each plans the DAG again), checks each lane's
    settings against its engine's plugin and sizes its model from the prepared dataset: none of
    that needs JAX, which costs most of a second to import."""
    workdir, mirror = subset_copy
    command = snakemake_command(workdir, "-n", configfile=SUBSET, overrides=mirror)
    process = subprocess.run(
        [sys.executable, "-X", "importtime", *command], cwd=workdir, capture_output=True, text=True
    )
    assert process.returncode == 0, output_of(process)
    assert "Nothing to be done" in output_of(process)
    imported = {line.rsplit("|", 1)[1].strip() for line in process.stderr.splitlines() if "|" in line}
    assert "gradlanes.engines.registry" in imported and "gradlanes.config" in imported
    heavy = {"jax", "jaxlib", "optax", "scipy"} & imported
    assert not heavy, f"planning imported {sorted(heavy)}"


def tree_digest(folder):
    """Every file under `folder` with its bytes' SHA-256: equal digests mean a byte-identical tree."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_a_failed_agreement_check_fails_the_dag_and_publishes_nothing(subset_copy):
    workdir, mirror = subset_copy
    published = tree_digest(workdir / "results")
    strict = {**mirror, "agreement": {"early_loss_u": 1e-3}}
    process = run_snakemake(workdir, configfile=SUBSET, overrides=strict)
    assert process.returncode != 0
    # Every failed check is named (sorted by name): `host`'s own, not only `cnn_host`'s.
    failed = re.search(r"agreement checks failed: (.*)", output_of(process))
    assert failed, output_of(process)
    assert re.search(r"(^|; )host/seed-0/early_loss measured", failed[1]), failed[1]
    assert tree_digest(workdir / "results") == published


def test_a_diverged_lane_and_bad_settings_leave_published_results_byte_identical(subset_copy):
    workdir, mirror = subset_copy
    published = tree_digest(workdir / "results")
    assert len(published) > 30
    # Diverges at run time: SGD at 100 (the schema's maximum) on MSE overflows by step 14. The
    # Tlaloc lanes change together, since the agreement pair needs equal experiments.
    exploding = {"optimizer": "sgd", "learning_rate": 100.0}
    tlaloc = ("xla_gpu", "xla_cpu", "host", "iree_cpu")
    diverging = {**mirror, "lanes": {lane: exploding for lane in tlaloc}}
    process = run_snakemake(workdir, configfile=SUBSET, overrides=diverging)
    assert process.returncode != 0
    assert re.search(r"lane '\w+' seed 0: the loss became", output_of(process)), output_of(process)
    assert tree_digest(workdir / "results") == published
    # Refused before any job: 40 steps are not a multiple of 7 (named with the key and the fix).
    fused = {**mirror, "lanes": {"xla_cpu": {"fuse_steps": 7}}}
    process = run_snakemake(workdir, configfile=SUBSET, overrides=fused)
    assert process.returncode != 0
    assert "'lanes.xla_cpu.fuse_steps' is 7, which does not divide its 40 steps" in output_of(process)
    assert "Finished job" not in output_of(process)
    # Needs the prepared dataset to see it: more test images than MNIST has.
    oversized = {**mirror, "lanes": {"mlp_stream": {"test_images": 10_001}}}
    process = run_snakemake(workdir, configfile=SUBSET, overrides=oversized)
    assert process.returncode != 0 and "lane 'mlp_stream' on dataset 'mnist'" in output_of(process)
    assert tree_digest(workdir / "results") == published
    # Another set of seeds under the default name would end by publishing over results/mnist:
    # refused while the DAG is parsed, with both ways out named.
    process = run_snakemake(workdir, configfile=SUBSET, overrides={**mirror, "seeds": [0, 1]})
    assert process.returncode != 0 and "Finished job" not in output_of(process)
    assert "results/mnist holds another experiment than this run (seeds: published [0], this run [0, 1])" in (
        output_of(process)
    )
    assert tree_digest(workdir / "results") == published


def test_a_killed_run_leaves_results_clean_and_resumes_as_the_readme_says(subset_copy):
    workdir, mirror = subset_copy
    published = tree_digest(workdir / "results")
    started = workdir / "logs/mnist/train/host/seed-0.log"
    started.unlink()
    process = start_snakemake(workdir, "--forcerun", "train_host", configfile=SUBSET, overrides=mirror)
    deadline = time.monotonic() + 300
    while not started.is_file() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert started.is_file(), "the host lane never started"
    os.killpg(process.pid, signal.SIGKILL)  # Snakemake and its job, as a lost session would
    process.wait()
    assert tree_digest(workdir / "results") == published
    locked = run_snakemake(workdir, configfile=SUBSET, overrides=mirror)
    assert locked.returncode != 0 and "cannot be locked" in output_of(locked)
    assert run_snakemake(workdir, "--unlock", configfile=SUBSET, overrides=mirror).returncode == 0
    again = ("--forcerun", "train_host", "--rerun-incomplete")  # the killed command, again
    resumed = run_snakemake(workdir, *again, configfile=SUBSET, overrides=mirror)
    assert resumed.returncode == 0, output_of(resumed)
    assert (workdir / PUBLISHED.record("host", 0)).read_bytes() == (
        workdir / WORK.record("host", 0)
    ).read_bytes()


def test_summary_figures_and_report(subset_copy):
    workdir, mirror = subset_copy
    summary = (workdir / PUBLISHED.summary("md")).read_text()
    assert "| `host` | interpreter |" in summary and "Published anchors" in summary
    assert re.search(r"\d[\d,]* / 1,000 = \d+\.\d\d %", summary)
    figures = ("loss_curves", "accuracy_per_epoch", "digits", "cost_accuracy")
    for figure in ("loss_curves", "accuracy_per_epoch", "cost_accuracy"):
        # Axes, grid and text are grey; only the lanes' lines and points are in the palette's
        # colours (chroma over 100), a 2-pixel line hundreds of pixels long at 130 dpi.
        pixels = png_pixels(workdir / PUBLISHED.figure(figure))
        assert (pixels.max(axis=2) - pixels.min(axis=2) > 100).sum() >= 100, figure
    # figures.digit_grid: a 1.2-inch row per lane with predictions at 130 dpi, beside 0.8 inch of
    # title and margins (all the tight crop may trim).
    ran = [lane for lane, record in records(workdir).items() if record["status"] == "ok"]
    assert png_pixels(workdir / PUBLISHED.figure("digits")).shape[0] >= 1.2 * 130 * len(ran)
    table = pd.read_csv(workdir / PUBLISHED.summary("csv")).set_index("lane")
    for lane, record in records(workdir).items():
        if record["status"] == "ok":
            assert table.loc[lane, "correct"] == record["accuracy"]["correct"], lane
            assert table.loc[lane, "accuracy_mean"] == record["accuracy"]["percent"], lane
    process = run_snakemake(workdir, "--report", "results/report.html", configfile=SUBSET, overrides=mirror)
    assert process.returncode == 0, output_of(process)
    # Snakemake embeds each report() output whole, base64-encoded: the run's own tables and figures.
    report = (workdir / "results/report.html").read_text()
    for path in (*(WORK.summary(suffix) for suffix in ("csv", "md")), *map(WORK.figure, figures)):
        assert base64.b64encode((workdir / path).read_bytes()).decode() in report, path


def test_predict_a_drawn_digit_with_a_trained_lane(subset_copy, tmp_path, capsys):
    from PIL import Image, ImageDraw

    from gradlanes.report.cli import main

    workdir, _ = subset_copy
    (workdir / "config.yaml").write_text(SUBSET.read_text())
    drawing = Image.new("RGB", (120, 200), "white")
    ImageDraw.Draw(drawing).line([(60, 20), (60, 180)], fill="black", width=14)  # a "1"
    drawing.save(tmp_path / "one.png")
    assert (
        main(["--project", str(workdir), "predict", str(tmp_path / "one.png"), "--lane", "mlp_stream"]) == 0
    )
    out = capsys.readouterr().out
    scores = [float(line.split()[1]) for line in out.splitlines() if re.match(r"  \d: ", line)]
    assert len(scores) == 10 and scores[1] == max(scores)  # the printed scores put the 1 on top
    # Normalised: each printed to 4 decimals (within 5e-5 of its value), the ten sum to within 5e-4
    # of 1 (1e-12 more for adding the ten floats). Unnormalised, the shifted softmax numerators sum
    # to 1 / p_top (the top one is e^0 = 1): outside that unless the model is 99.95 % sure.
    assert abs(sum(scores) - 1) <= 10 * 0.5e-4 + 1e-12
    assert "1:" in next(line for line in out.splitlines() if "<- predicted" in line)


def test_another_dataset_is_its_own_experiment_and_never_touches_the_default(shared_mnist, subset_copy):
    """Transposed MNIST (other pixels on every input) named only in the config: it passes agreement,
    publishes to results/<its name>/, and leaves the published MNIST experiment byte-identical."""
    from derived import NAME, write_transposed_mnist

    workdir, _ = subset_copy
    default = tree_digest(workdir / PUBLISHED.root)
    overlay = yaml.safe_load(write_transposed_mnist(workdir / "transposed", shared_mnist).read_text())
    process = run_snakemake(workdir, configfile=SUBSET, overrides=overlay)
    assert process.returncode == 0, output_of(process)
    other = published(NAME)
    report = json.loads((workdir / other.agreement).read_text())
    assert report["passed"] and report["counts"]["ok"] >= 25, report["counts"]
    manifest = json.loads((workdir / f"resources/{NAME}/manifest.json").read_text())
    assert manifest["dataset"] == NAME
    record = json.loads((workdir / other.record("host", 0)).read_text())
    assert record["dataset"]["name"] == NAME
    pinned = overlay["dataset"]["files"]["train_images"]["sha256"]
    assert record["dataset"]["sha256"]["train_images"] == pinned
    receipt = json.loads((workdir / other.receipt).read_text())
    assert receipt["identity"]["dataset"] == NAME and receipt["identity"]["experiment"] == NAME
    assert tree_digest(workdir / PUBLISHED.root) == default


def test_only_lanes_trains_checks_and_publishes_those_lanes_as_their_own_experiment(subset_copy):
    """`only_lanes` (the one-shot GPU run's way to publish its lanes alone): those lanes, the pairs
    between them, under their own experiment name; the default experiment stays byte-identical."""
    workdir, mirror = subset_copy
    default = tree_digest(workdir / PUBLISHED.root)
    chosen = ["xla_gpu", "xla_cpu", "host"]
    overrides = {**mirror, "only_lanes": chosen, "experiment": "mnist-three"}
    process = run_snakemake(workdir, configfile=SUBSET, overrides=overrides)
    assert process.returncode == 0, output_of(process)
    three = published("mnist-three")
    assert sorted(p.name for p in (workdir / three.root / "runs").iterdir()) == sorted(chosen)
    report = json.loads((workdir / three.agreement).read_text())
    ran = set(chosen) - (set() if HAS_GPU else {"xla_gpu"})
    checked = {
        lane
        for lane, by_seed in report["float64_reference"].items()
        if all(check["status"] == "ok" for seed in by_seed.values() for check in seed.values())
    }
    assert report["passed"] and checked == ran and set(report["float64_reference"]) == set(chosen)
    pairs = {c["name"].split("/")[0] for c in report["checks"] if len(c["lanes"]) == 2}
    assert pairs == {"host_vs_xla_cpu"}
    assert tree_digest(workdir / PUBLISHED.root) == default


@pytest.mark.skipif(HAS_GPU, reason="JAX sees a GPU here: the gpu lane runs instead of being skipped")
def test_an_experiment_whose_every_lane_is_skipped_still_publishes_saying_so(subset_copy):
    """The one-shot GPU script rehearsed on a CPU: every lane skipped, the tables and figures say so."""
    workdir, mirror = subset_copy
    overrides = {**mirror, "only_lanes": ["xla_gpu"], "experiment": "mnist-no-gpu"}
    process = run_snakemake(workdir, configfile=SUBSET, overrides=overrides)
    assert process.returncode == 0, output_of(process)
    folder = workdir / published("mnist-no-gpu").root
    record = json.loads((folder / "runs" / "xla_gpu" / "seed-0" / "record.json").read_text())
    assert record["status"] == "skipped" and "JAX sees no GPU here" in record["reason"]
    assert "skipped" in (folder / "summary.md").read_text()
    # figures.digit_grid's placeholder: one line of text on 6 x 1.5 inches at 130 dpi, which the
    # tight crop only trims (a grid of even one lane is 14.2 inches wide).
    pixels = png_pixels(folder / "figures" / "digits.png")
    assert pixels.shape[0] <= 1.5 * 130 and pixels.shape[1] <= 6 * 130 and (pixels.max(axis=2) < 128).any()
