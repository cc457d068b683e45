"""Result records: typed, built in one place per outcome, validated against the schema, written atomically.

A lane writes three files under `results/runs/<lane>/seed-<seed>/`: `record.json` (a `Record`,
validated against `gradlanes/schemas/record.schema.json` before it is written), `curve.parquet`
(loss per step, test loss and accuracy per evaluation) and `digits.txt`. A record starts as
`Record.start` (what is known before training) and becomes `skipped`, `failed` or `completed`;
each returns a new record, so no field is patched in place.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pandas as pd

from gradlanes.atomic import atomic_path, write_json, write_text
from gradlanes.data.description import DatasetDescription
from gradlanes.environment import environment
from gradlanes.experiment.spec import Experiment
from gradlanes.run.numerics import MATMUL_UNIT_ROUNDOFF
from gradlanes.schemas import RECORD, schema_path

SCHEMA_VERSION = 2
RECORD_SCHEMA = schema_path(RECORD)
CURVE_COLUMNS = {
    "kind": "string",
    "step": "int64",
    "epoch": "float64",
    "loss": "float64",
    "step_ms": "float64",
    "test_accuracy": "float64",
    "test_correct": "Int64",
}


class RecordInvalid(ValueError):
    pass


@dataclass(frozen=True)
class ProgramRef:
    """Which captured program a lane ran: its folder under results/programs/ and its fingerprint."""

    id: str
    fingerprint: str


@dataclass(frozen=True)
class Compiles:
    train: int | None = None  # compilations in the window around step compilation and training
    total: int | None = None  # compilations in the whole lane process


@dataclass(frozen=True)
class Timing:
    compile_s: float | None = None
    train_s: float | None = None
    eval_s: float | None = None
    wall_s: float | None = None
    step_ms_median: float | None = None
    step_ms_p10: float | None = None
    step_ms_p90: float | None = None
    images_per_s: float | None = None
    threads: int | None = None


@dataclass(frozen=True)
class LossSummary:
    first: float | None = None
    final: float | None = None
    failed_step: int | None = None


@dataclass(frozen=True)
class Accuracy:
    correct: int | None = None
    total: int | None = None
    percent: float | None = None


@dataclass(frozen=True)
class DatasetRef:
    name: str
    sha256: dict[str, str]


@dataclass(frozen=True)
class Numerics:
    """The arithmetic the lane ran with: matmul precision and the kernel choices that set rounding."""

    matmul_precision: str
    matmul_unit_roundoff: float
    openblas_coretype: str | None
    xla_flags: str | None
    float: str = "float32"

    @classmethod
    def of(cls, exp: Experiment) -> Numerics:
        return cls(
            matmul_precision=exp.matmul_precision,
            matmul_unit_roundoff=MATMUL_UNIT_ROUNDOFF[exp.matmul_precision],
            openblas_coretype=os.environ.get("OPENBLAS_CORETYPE"),
            xla_flags=os.environ.get("XLA_FLAGS"),
        )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Record:
    """One lane trained (or skipped, or failed) with one seed; `as_dict` is the schema's JSON."""

    lane: str
    engine: str
    status: str  # ok, skipped or failed
    device_requested: str
    config: dict[str, Any]
    dataset: DatasetRef
    numerics: Numerics
    program: ProgramRef | None  # None for an engine that runs no captured program
    ir: dict[str, dict[str, int] | None]
    primitives: list[str]
    reason: str | None = None
    platform: str | None = None
    device_kind: str | None = None
    compiles: Compiles = Compiles()
    dispatches: int | None = None
    timing: Timing = Timing()
    loss: LossSummary = LossSummary()
    accuracy: Accuracy = Accuracy()
    environment: dict[str, Any] = field(default_factory=environment)
    created_utc: str = field(default_factory=_now)

    @classmethod
    def start(cls, exp: Experiment, dataset: DatasetDescription, program, program_ref: ProgramRef | None):
        """What is known before training: the experiment, the data, the program."""
        return cls(
            lane=exp.lane,
            engine=exp.engine,
            status="ok",
            device_requested=exp.device,
            config=exp.config_record(),
            dataset=DatasetRef(dataset.name, dataset.content_sha256),
            numerics=Numerics.of(exp),
            program=program_ref,
            ir=ir_sizes(program),
            primitives=program.primitives if program else [],
        )

    def skipped(self, reason: str) -> Record:
        return dataclasses.replace(self, status="skipped", reason=reason)

    def failed(self, reason: str, step: int) -> Record:
        return dataclasses.replace(self, status="failed", reason=reason, loss=LossSummary(failed_step=step))

    def completed(
        self, exp: Experiment, engine, result, wall_s: float, threads: int, test_labels: np.ndarray
    ) -> Record:
        """The record of a finished run: timings, compiles, loss and accuracy from `result`.

        The accuracy is recounted from the run's final predictions and the test labels, and must
        equal what the last evaluation counted; a record never states a count nothing can check.
        """
        step_ms = np.asarray(result.step_seconds) * 1e3
        correct = recount_correct(result.predictions, test_labels, result.evals[-1]["test_correct"])
        if len(test_labels) != exp.test_images:
            raise RecordInvalid(
                f"{len(test_labels)} test labels for a lane that tests {exp.test_images} images"
            )
        return dataclasses.replace(
            self,
            platform=engine.platform,
            device_kind=engine.device_kind,
            dispatches=engine.dispatches,
            compiles=Compiles(result.train_compiles, result.total_compiles),
            timing=Timing(
                compile_s=round(result.compile_s, 6),
                train_s=round(result.train_s, 6),
                eval_s=round(result.eval_s, 6),
                wall_s=round(wall_s, 3),
                step_ms_median=round(float(np.median(step_ms)), 6),
                step_ms_p10=round(float(np.percentile(step_ms, 10)), 6),
                step_ms_p90=round(float(np.percentile(step_ms, 90)), 6),
                images_per_s=round(exp.steps * exp.batch_size / result.train_s, 1),
                threads=threads,
            ),
            loss=LossSummary(result.losses[0], result.losses[-1]),
            accuracy=Accuracy(correct, exp.test_images, round(100 * correct / exp.test_images, 4)),
        )

    def as_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA_VERSION, **dataclasses.asdict(self)}


def recount_correct(predictions: np.ndarray, labels: np.ndarray, evaluated: int) -> int:
    """Correct predictions, counted again from the saved predictions; must equal the evaluation's."""
    if predictions.shape != labels.shape:
        raise RecordInvalid(f"{predictions.shape[0]} predictions for {labels.shape[0]} test labels")
    correct = int((predictions == labels).sum())
    if correct != evaluated:
        raise RecordInvalid(
            f"the predictions give {correct} correct, the last evaluation counted {evaluated}"
        )
    return correct


def consistency_errors(record: dict) -> list[str]:
    """What a schema cannot say: counts that must agree with each other."""
    accuracy, problems = record.get("accuracy") or {}, []
    correct, total, percent = accuracy.get("correct"), accuracy.get("total"), accuracy.get("percent")
    if correct is not None and total is not None:
        if correct > total:
            problems.append(f"accuracy.correct {correct} exceeds accuracy.total {total}")
        elif total and percent is not None and percent != round(100 * correct / total, 4):
            problems.append(f"accuracy.percent {percent} is not 100 * {correct} / {total}")
    if record.get("status") == "ok" and None in (correct, total, percent):
        problems.append("a record with status ok must state correct, total and percent")
    compiles = record.get("compiles") or {}
    if None not in (compiles.get("train"), compiles.get("total")) and compiles["train"] > compiles["total"]:
        problems.append(f"compiles.train {compiles['train']} exceeds compiles.total {compiles['total']}")
    return problems


def ir_sizes(program) -> dict[str, dict[str, int] | None]:
    """Equation counts of the captured programs (all None for an engine that runs none)."""
    names = ["forward", "gradient", "step"] + (["fused"] if program and "fused" in program.ir else [])
    return {name: program.ir[name] if program else None for name in names}


def validate_record(record: dict, schema_path: Path = RECORD_SCHEMA) -> None:
    schema = json.loads(Path(schema_path).read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(record), key=str)
    if errors:
        where = "; ".join(
            f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors[:5]
        )
        raise RecordInvalid(f"record for lane {record.get('lane')!r} does not match {schema_path}: {where}")
    problems = consistency_errors(record)
    if problems:
        raise RecordInvalid(f"record for lane {record.get('lane')!r} is inconsistent: {'; '.join(problems)}")


def curve_frame(result=None) -> pd.DataFrame:
    rows = []
    if result is not None:
        for step, (loss, seconds) in enumerate(zip(result.losses, result.step_seconds, strict=True), 1):
            rows.append({"kind": "train", "step": step, "loss": loss, "step_ms": seconds * 1e3})
        for entry in result.evals:
            rows.append(
                {
                    "kind": "test",
                    "step": entry["step"],
                    "epoch": entry["epoch"],
                    "loss": entry["test_loss"],
                    "test_accuracy": entry["test_accuracy"],
                    "test_correct": entry["test_correct"],
                }
            )
    frame = pd.DataFrame(rows, columns=list(CURVE_COLUMNS))
    return frame.astype(CURVE_COLUMNS)


def write_outputs(
    record: Record,
    curve: pd.DataFrame,
    digits: str,
    record_path,
    curve_path,
    digits_path,
    schema_path: Path = RECORD_SCHEMA,
) -> None:
    """Validate, then write the three files; the record goes last so it never outlives its peers."""
    payload = record.as_dict()
    validate_record(payload, schema_path)
    with atomic_path(curve_path) as tmp:
        curve.to_parquet(tmp, index=False)
    write_text(digits_path, digits + "\n")
    write_json(record_path, payload)
