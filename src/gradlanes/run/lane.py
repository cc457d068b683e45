"""Run one lane for one seed, end to end: program, engine, training, records, trained weights.

This is what a `train_<lane>` rule runs. The lane re-traces its program and proves it identical to
the captured artifact before anything runs (`gradlanes.program.artifact`). An engine that cannot
run here (a GPU lane without a GPU) writes a record with status `skipped` and the reason: it
neither fails the DAG nor silently runs elsewhere. A run whose loss stops being finite raises
`TrainingDiverged` after leaving a `failed` record beside its log, so no file claims success.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from gradlanes.atomic import write_json
from gradlanes.data.dataset import load
from gradlanes.data.description import DatasetDescription
from gradlanes.engines import compiles  # noqa: F401 - registers the compile listener before anything compiles
from gradlanes.engines.base import EngineUnavailable
from gradlanes.engines.gpu import prepare_gpu_lane
from gradlanes.engines.registry import get_engine
from gradlanes.environment import usable_cores
from gradlanes.experiment.spec import Experiment
from gradlanes.program.artifact import capture_with_artifact
from gradlanes.program.capture import CapturedProgram
from gradlanes.report.digits import render
from gradlanes.run.modelfile import load_initial_params, save_model
from gradlanes.run.records import ProgramRef, Record, curve_frame, write_outputs
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
    program: Path | None = None  # the captured program's program.json; None for engines that run none
    failure: Path | None = None  # where a failed run leaves its record (beside its log)


def lane_program(exp: Experiment, manifest: Path | None) -> tuple[CapturedProgram, ProgramRef]:
    """The lane's captured program, proven equal to the artifact at `manifest` when one is given."""
    program = capture_with_artifact(exp)
    if manifest is not None:
        program.artifact.verify(manifest)
    return program, ProgramRef(program.artifact.program_id, program.artifact.fingerprint)


def run_lane(exp: Experiment, paths: LanePaths) -> Record:
    if exp.device == "gpu":  # before anything starts XLA, which reads XLA_FLAGS once; the record keeps them
        prepare_gpu_lane()
    started = time.perf_counter()
    dataset = DatasetDescription.read(paths.manifest)
    plugin = get_engine(exp.engine)
    log.info("lane %s seed %d on engine %s: %s", exp.lane, exp.seed, plugin.name, plugin.summary)
    program: CapturedProgram | None = None
    program_ref = None
    if plugin.runs_program:
        program, program_ref = lane_program(exp, paths.program)
    record = Record.start(exp, dataset, program, program_ref)
    try:
        engine = plugin.create(exp, program)
    except EngineUnavailable as unavailable:
        log.warning("lane %s skipped: %s", exp.lane, unavailable)
        record = record.skipped(str(unavailable))
        message = f"lane {exp.lane} skipped: {unavailable}"
        write_outputs(record, curve_frame(), message, paths.record, paths.curve, paths.digits)
        save_model(paths.model, {}, None, "skipped")
        return record

    data = load(paths.arrays, exp.train_images, exp.test_images)
    try:
        result = train(exp, engine, load_initial_params(paths.init), data)
    except TrainingDiverged as diverged:
        if paths.failure:
            write_json(paths.failure, record.failed(str(diverged), diverged.step).as_dict())
            log.error("failed record written to %s", paths.failure)
        raise
    wall_s = time.perf_counter() - started
    record = record.completed(exp, engine, result, wall_s, usable_cores(), data.test_labels)
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
        record.accuracy.correct,
        exp.test_images,
        record.accuracy.percent,
        record.timing.step_ms_median,
        record.compiles.train,
    )
    return record
