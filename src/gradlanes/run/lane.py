"""Run one lane for one seed, end to end: capture, engine, training, records, trained weights.

This is what a `train_<lane>` rule runs. A GPU lane on a machine without a GPU writes a record
with status `skipped` and the reason (it neither fails the DAG nor silently runs on the CPU); a run
whose loss stops being finite raises `TrainingDiverged` after leaving a `failed` record beside
its log, so no file claims success.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gradlanes.atomic import atomic_path, write_json
from gradlanes.data.dataset import load
from gradlanes.engines import DeviceUnavailable, make_engine
from gradlanes.environment import usable_cores
from gradlanes.experiment.spec import Experiment
from gradlanes.program.capture import capture
from gradlanes.report.digits import render
from gradlanes.run import compiles  # noqa: F401 - registers the compile listener before anything compiles
from gradlanes.run.records import base_record, curve_frame, fill_from_run, ir_sizes, write_outputs
from gradlanes.run.train import TrainingDiverged, train

log = logging.getLogger(__name__)
DIGITS_SHOWN = 6


@dataclass(frozen=True)
class LanePaths:
    arrays: Path
    manifest: Path
    init: Path
    record: Path
    curve: Path
    digits: Path
    model: Path
    failure: Path | None = None  # where a failed run leaves its record (beside its log)


def load_initial_params(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as stored:
        return {name: stored[name] for name in stored.files}


def save_model(path: Path, params: dict, predictions: np.ndarray | None, status: str) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            arrays = {f"param/{k}": v for k, v in (params or {}).items()}
            if predictions is not None:
                arrays["predictions"] = predictions.astype(np.int16)
            np.savez(handle, status=np.array(status), **arrays)


@dataclass(frozen=True)
class TrainedModel:
    status: str  # "ok" or "skipped"
    params: dict[str, np.ndarray]
    predictions: np.ndarray | None  # test-set classes, in test order


def load_model(path: Path) -> TrainedModel:
    """What `save_model` wrote: the one reader of the model files (agreement, figures, CLI)."""
    with np.load(path) as stored:
        params = {k.removeprefix("param/"): stored[k] for k in stored.files if k.startswith("param/")}
        predictions = stored["predictions"] if "predictions" in stored.files else None
        return TrainedModel(str(stored["status"]), params, predictions)


def run_lane(exp: Experiment, paths: LanePaths) -> dict:
    started = time.perf_counter()
    manifest = json.loads(Path(paths.manifest).read_text())
    sha256 = {role: entry["content_sha256"] for role, entry in manifest["files"].items()}
    record = base_record(exp, sha256, "ok", None)
    record["dataset"]["name"] = manifest["dataset"]
    program = None if exp.engine == "handkernel" else capture(exp)
    try:
        engine = make_engine(exp.engine, exp.device, program, exp.learning_rate)
    except DeviceUnavailable as unavailable:
        log.warning("lane %s skipped: %s", exp.lane, unavailable)
        record.update(status="skipped", reason=str(unavailable))
        if program:
            record["ir"] = ir_sizes(program)
            record["primitives"] = program.primitives
        write_outputs(
            record,
            curve_frame(),
            f"lane {exp.lane} skipped: {unavailable}",
            paths.record,
            paths.curve,
            paths.digits,
        )
        save_model(paths.model, {}, None, "skipped")
        return record

    data = load(paths.arrays, exp.train_images, exp.test_images)
    try:
        result = train(exp, engine, load_initial_params(paths.init), data)
    except TrainingDiverged as diverged:
        record.update(status="failed", reason=str(diverged))
        record["loss"]["failed_step"] = diverged.step
        if paths.failure:
            write_json(paths.failure, record)
            log.error("failed record written to %s", paths.failure)
        raise
    fill_from_run(record, exp, engine, program, result, time.perf_counter() - started, usable_cores())
    shown = slice(0, DIGITS_SHOWN)
    digits = render(
        data.test_pixels[shown],
        result.predictions[shown],
        data.test_labels[shown],
        f"lane {exp.lane}, seed {exp.seed}: the first {DIGITS_SHOWN} test digits",
    )
    save_model(paths.model, result.params, result.predictions, "ok")
    write_outputs(record, curve_frame(result), digits, paths.record, paths.curve, paths.digits)
    log.info(
        "lane %s seed %d: %d / %d correct (%.2f %%), %.3f ms/step median, %d train compile(s)",
        exp.lane,
        exp.seed,
        record["accuracy"]["correct"],
        exp.test_images,
        record["accuracy"]["percent"],
        record["timing"]["step_ms_median"],
        record["compiles"]["train"],
    )
    return record
