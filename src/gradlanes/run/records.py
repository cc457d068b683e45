"""Result records: assembled from a training run, validated against the schema, written atomically.

A lane writes three files under `results/runs/<lane>/seed-<seed>/`: `record.json` (validated
against `gradlanes/schemas/record.schema.json` before it is written), `curve.parquet` (loss per step,
test loss and accuracy per evaluation) and `digits.txt`.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd

from gradlanes.atomic import atomic_path, write_json, write_text
from gradlanes.environment import environment
from gradlanes.experiment.spec import Experiment
from gradlanes.run.numerics import MATMUL_UNIT_ROUNDOFF
from gradlanes.schemas import RECORD, schema_path

SCHEMA_VERSION = 1
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


def validate_record(record: dict, schema_path: Path = RECORD_SCHEMA) -> None:
    schema = json.loads(Path(schema_path).read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(record), key=str)
    if errors:
        where = "; ".join(
            f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors[:5]
        )
        raise RecordInvalid(f"record for lane {record.get('lane')!r} does not match {schema_path}: {where}")


def base_record(exp: Experiment, dataset_sha256: dict, status: str, reason: str | None) -> dict:
    """Every field a record has, measured ones null; a run fills them in."""
    return {
        "schema": SCHEMA_VERSION,
        "lane": exp.lane,
        "engine": exp.engine,
        "status": status,
        "reason": reason,
        "device_requested": exp.device,
        "platform": None,
        "device_kind": None,
        "config": exp.config_record(),
        "ir": {"forward": None, "gradient": None, "step": None},
        "primitives": [],
        "compiles": {"train": None, "total": None},
        "dispatches": None,
        "timing": {
            "compile_s": None,
            "train_s": None,
            "eval_s": None,
            "wall_s": None,
            "step_ms_median": None,
            "step_ms_p10": None,
            "step_ms_p90": None,
            "images_per_s": None,
            "threads": None,
        },
        "loss": {"first": None, "final": None, "failed_step": None},
        "accuracy": {"correct": None, "total": None, "percent": None},
        "dataset": {"name": None, "sha256": dataset_sha256},
        "numerics": numerics_record(exp),
        "environment": environment(),
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def numerics_record(exp: Experiment) -> dict:
    """The arithmetic the lane ran with: matmul precision and the kernel choices that set rounding."""
    return {
        "float": "float32",
        "matmul_precision": exp.matmul_precision,
        "matmul_unit_roundoff": MATMUL_UNIT_ROUNDOFF[exp.matmul_precision],
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
        "xla_flags": os.environ.get("XLA_FLAGS"),
    }


def ir_sizes(program) -> dict:
    sizes = {name: program.ir[name] for name in ("forward", "gradient", "step")}
    if "fused" in program.ir:
        sizes["fused"] = program.ir["fused"]
    return sizes


def fill_from_run(
    record: dict, exp: Experiment, engine, program, result, wall_s: float, threads: int
) -> dict:
    step_ms = np.asarray(result.step_seconds) * 1e3
    final = result.evals[-1]
    record.update(
        platform=engine.platform,
        device_kind=engine.device_kind,
        primitives=program.primitives if program else [],
        dispatches=engine.dispatches,
        compiles={"train": result.train_compiles, "total": result.total_compiles},
    )
    if program:
        record["ir"] = ir_sizes(program)
    record["timing"] = {
        "compile_s": round(result.compile_s, 6),
        "train_s": round(result.train_s, 6),
        "eval_s": round(result.eval_s, 6),
        "wall_s": round(wall_s, 3),
        "step_ms_median": round(float(np.median(step_ms)), 6),
        "step_ms_p10": round(float(np.percentile(step_ms, 10)), 6),
        "step_ms_p90": round(float(np.percentile(step_ms, 90)), 6),
        "images_per_s": round(exp.steps * exp.batch_size / result.train_s, 1),
        "threads": threads,
    }
    record["loss"] = {"first": result.losses[0], "final": result.losses[-1], "failed_step": None}
    record["accuracy"] = {
        "correct": final["test_correct"],
        "total": exp.test_images,
        "percent": round(100 * final["test_correct"] / exp.test_images, 4),
    }
    return record


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
    record: dict,
    curve: pd.DataFrame,
    digits: str,
    record_path,
    curve_path,
    digits_path,
    schema_path: Path = RECORD_SCHEMA,
) -> None:
    """Validate, then write the three files; the record goes last so it never outlives its peers."""
    validate_record(record, schema_path)
    with atomic_path(curve_path) as tmp:
        curve.to_parquet(tmp, index=False)
    write_text(digits_path, digits + "\n")
    write_json(record_path, record)
