"""Records without training: every field `Record` states is computed from what it was given.

The lane tests (test_lane.py) write records from real runs, where a wrong count or a rounded time
is hard to see; here each field is checked against the value it must have, from a hand-made run
result, so a changed operator or constant in `gradlanes.run.records` changes a compared value.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from lanes import small_lane

from gradlanes.data.description import DatasetDescription
from gradlanes.experiment.spec import resolve
from gradlanes.run.records import (
    CURVE_COLUMNS,
    RECORD_SCHEMA,
    SCHEMA_VERSION,
    Numerics,
    ProgramRef,
    Record,
    RecordInvalid,
    consistency_errors,
    curve_frame,
    ir_sizes,
    recount_correct,
    validate_record,
    write_outputs,
)

SHA = "ab" * 32
# 7 / 9 and 1 / 3 have no short decimal form, so the rounding to 4 (percent) and 6 (ms) places shows
DATASET = DatasetDescription("tiny", 10, (28, 28), 600, 9, {"train_images": SHA, "test_labels": "cd" * 32})
LABELS = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8])
PREDICTIONS = np.array([0, 1, 2, 3, 4, 5, 6, 0, 0])  # 7 of 9 right


def experiment(**overrides):
    settings = small_lane(train_images=512, test_images=9, batch_size=64, steps=4, **overrides)
    return resolve("probe", settings, 2, DATASET)


def program(fused: bool = False):
    ir = {
        "forward": {"top": 3, "total": 4},
        "gradient": {"top": 5, "total": 9},
        "step": {"top": 7, "total": 20},
    }
    if fused:
        ir["fused"] = {"top": 2, "total": 41}
    return SimpleNamespace(ir=ir, primitives=["add", "dot_general"])


def result(predictions=PREDICTIONS, evaluated=7):
    return SimpleNamespace(
        # ms: 2, 4.3210987, 1/3, 2.1234567: the median (2.06172835) and percentiles need the 6 places
        step_seconds=[0.002, 0.0043210987, 0.001 / 3, 0.0021234567],
        predictions=predictions,
        evals=[  # the count the record must check is the last evaluation's, not the second one's
            {"step": 0, "epoch": 0.0, "test_loss": 2.3, "test_accuracy": 0.1, "test_correct": 1},
            {"step": 2, "epoch": 0.25, "test_loss": 1.9, "test_accuracy": 4 / 9, "test_correct": 4},
            {"step": 4, "epoch": 0.5, "test_loss": 1.5, "test_accuracy": 7 / 9, "test_correct": evaluated},
        ],
        losses=[2.5, 2.0, 1.25, 1.125],
        train_compiles=1,
        total_compiles=3,
        compile_s=0.123456789,
        train_s=0.0063333333,
        eval_s=1.0 / 3,
    )


ENGINE = SimpleNamespace(platform="cpu", device_kind="cpu", dispatches=5)


def started(exp=None, fused=False):
    exp = exp or experiment()
    return Record.start(exp, DATASET, program(fused), ProgramRef(exp.program_id, SHA))


def completed(exp=None, **kwargs):
    exp = exp or experiment()
    return started(exp).completed(exp, ENGINE, result(**kwargs), 12.34567, 2, LABELS)


def test_a_started_record_states_the_experiment_the_data_and_the_program():
    exp = experiment()
    record = started(exp)
    assert (record.lane, record.engine, record.status, record.device_requested) == (
        "probe",
        "xla",
        "ok",
        "cpu",
    )
    assert record.config == exp.config_record() and record.config["seed"] == 2
    assert record.dataset.name == "tiny" and record.dataset.sha256 == DATASET.content_sha256
    assert record.program == ProgramRef(exp.program_id, SHA)
    assert record.ir == {key: program().ir[key] for key in ("forward", "gradient", "step")}
    assert record.primitives == ["add", "dot_general"]
    assert record.reason is None and record.accuracy.correct is None and record.timing.train_s is None
    created = datetime.fromisoformat(record.created_utc)
    assert created.utcoffset() == timedelta(0) and record.created_utc.endswith("+00:00")


def test_the_fused_program_size_is_recorded_only_where_there_is_one():
    assert ir_sizes(program(fused=True))["fused"] == {"top": 2, "total": 41}
    assert "fused" not in ir_sizes(program())
    assert ir_sizes(None) == {"forward": None, "gradient": None, "step": None}


def test_an_engine_without_a_program_records_none_for_it():
    exp = experiment(engine="handkernel", model="softmax")
    record = Record.start(exp, DATASET, None, None)
    assert record.program is None and record.primitives == []
    assert record.ir == {"forward": None, "gradient": None, "step": None}


def test_numerics_state_the_precision_its_roundoff_and_the_kernel_environment(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=AVX2")
    numerics = Numerics.of(experiment())
    assert numerics == Numerics("highest", 2.0**-24, "Haswell", "--xla_cpu_max_isa=AVX2", "float32")
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    monkeypatch.delenv("XLA_FLAGS")
    tf32 = Numerics.of(experiment(matmul_precision="tf32"))
    assert (tf32.matmul_unit_roundoff, tf32.openblas_coretype, tf32.xla_flags) == (2.0**-11, None, None)


def test_skipped_and_failed_are_new_records_and_leave_the_start_as_it_was():
    record = started()
    skipped = record.skipped("no GPU here")
    failed = record.failed("the loss became nan at step 3", 3)
    assert (skipped.status, skipped.reason) == ("skipped", "no GPU here")
    assert (failed.status, failed.reason, failed.loss.failed_step) == (
        "failed",
        "the loss became nan at step 3",
        3,
    )
    assert failed.loss.first is None and failed.loss.final is None
    assert (record.status, record.reason, record.loss.failed_step) == ("ok", None, None)


def test_a_completed_record_states_each_measurement_at_its_rounding():
    record = completed()
    assert (record.platform, record.device_kind, record.dispatches) == ("cpu", "cpu", 5)
    assert (record.compiles.train, record.compiles.total) == (1, 3)
    timing = record.timing
    assert (timing.compile_s, timing.train_s, timing.eval_s) == (0.123457, 0.006333, 0.333333)
    assert timing.wall_s == 12.346 and timing.threads == 2
    # numpy's linear interpolation between order statistics 1/3, 2, 2.1234567, 4.3210987
    assert timing.step_ms_median == 2.061728
    assert timing.step_ms_p10 == round(1 / 3 + 0.3 * (2 - 1 / 3), 6) == 0.833333
    assert timing.step_ms_p90 == round(2.1234567 + 0.7 * (4.3210987 - 2.1234567), 6) == 3.661806
    assert timing.images_per_s == round(4 * 64 / 0.0063333333, 1)
    assert (record.loss.first, record.loss.final) == (2.5, 1.125)


def test_a_completed_record_counts_accuracy_over_the_test_images_from_the_predictions():
    accuracy = completed().accuracy
    # 7 of the 9 test images, not of the 512 training images: percent has the test denominator
    assert (accuracy.correct, accuracy.total, accuracy.percent) == (7, 9, 77.7778)


def test_a_completed_record_refuses_counts_the_predictions_do_not_give():
    with pytest.raises(RecordInvalid, match="the predictions give 7 correct, the last evaluation counted 6"):
        completed(evaluated=6)
    with pytest.raises(RecordInvalid, match="8 predictions for 9 test labels"):
        completed(predictions=PREDICTIONS[:8])


def test_a_completed_record_refuses_labels_for_another_test_set():
    exp = experiment()
    with pytest.raises(RecordInvalid, match="8 test labels for a lane that tests 9 images"):
        started(exp).completed(exp, ENGINE, result(PREDICTIONS[:8], 7), 1.0, 1, LABELS[:8])


def test_recount_correct_counts_equal_positions():
    assert recount_correct(np.array([3, 3, 1]), np.array([3, 1, 1]), 2) == 2
    assert recount_correct(np.array([], dtype=int), np.array([], dtype=int), 0) == 0
    with pytest.raises(RecordInvalid, match="3 predictions for 2 test labels"):
        recount_correct(np.array([3, 3, 1]), np.array([3, 1]), 2)


def test_the_dict_form_carries_the_schema_version_and_validates():
    payload = completed().as_dict()
    assert payload["schema"] == SCHEMA_VERSION == 2
    assert payload["accuracy"] == {"correct": 7, "total": 9, "percent": 77.7778}
    validate_record(payload)
    json.dumps(payload)  # every value is JSON


def with_accuracy(**accuracy):
    payload = completed().as_dict()
    return {**payload, "accuracy": {**payload["accuracy"], **accuracy}}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"correct": 10}, "accuracy.correct 10 exceeds accuracy.total 9"),
        ({"percent": 77.7777}, "accuracy.percent 77.7777 is not 100 * 7 / 9"),
        ({"percent": round(100 * 7 / 512, 4)}, "is not 100 * 7 / 9"),  # the training images' denominator
        ({"percent": None}, "a record with status ok must state correct, total and percent"),
        ({"correct": None}, "a record with status ok must state correct, total and percent"),
        ({"total": None}, "a record with status ok must state correct, total and percent"),
    ],
)
def test_inconsistent_accuracy_is_named(change, problem):
    record = with_accuracy(**change)
    problems = consistency_errors(record)
    assert len(problems) == 1 and problem in problems[0], problems
    if problem.startswith("a record"):
        assert problems == [problem]
    with pytest.raises(RecordInvalid, match="is inconsistent"):
        validate_record(record)


def test_consistent_counts_have_no_problems_at_the_edges():
    assert consistency_errors(with_accuracy(correct=9, percent=100.0)) == []
    assert consistency_errors(with_accuracy(correct=0, percent=0.0)) == []
    skipped = started().skipped("no GPU").as_dict()
    assert consistency_errors(skipped) == [] and consistency_errors({}) == []
    # an empty test set states no percent to check
    assert consistency_errors({"status": "ok", "accuracy": {"correct": 0, "total": 0, "percent": 0.0}}) == []


def test_more_training_compiles_than_compiles_in_all_is_named():
    payload = completed().as_dict()
    equal = {**payload, "compiles": {"train": 3, "total": 3}}
    assert consistency_errors(equal) == []
    more = {**payload, "compiles": {"train": 4, "total": 3}}
    assert consistency_errors(more) == ["compiles.train 4 exceeds compiles.total 3"]
    assert consistency_errors({**payload, "compiles": {"train": 4, "total": None}}) == []


def test_a_record_that_breaks_the_schema_names_the_first_five_problems_in_order():
    payload = completed().as_dict()
    broken = {k: v for k, v in payload.items() if k not in ("timing", "loss", "dataset", "numerics")}
    broken.update(status="great", lane="Probe")
    with pytest.raises(RecordInvalid) as caught:
        validate_record(broken)
    message = str(caught.value)
    prefix = f"record for lane 'Probe' does not match {RECORD_SCHEMA}: "
    assert message.startswith(prefix)
    problems = message.removeprefix(prefix).split("; ")
    assert len(problems) == 5, problems  # six problems, the first five in a fixed order
    assert problems == sorted(problems, key=lambda p: p.split(": ", 1)[1])
    assert problems[0] == "lane: 'Probe' does not match '^[a-z][a-z0-9_]*$'"
    assert "(top): 'dataset' is a required property" in problems


def test_an_inconsistent_record_names_its_lane_and_every_problem():
    payload = with_accuracy(correct=10)
    payload["compiles"] = {"train": 4, "total": 3}
    with pytest.raises(RecordInvalid) as caught:
        validate_record(payload)
    assert str(caught.value) == (
        "record for lane 'probe' is inconsistent: accuracy.correct 10 exceeds accuracy.total 9; "
        "compiles.train 4 exceeds compiles.total 3"
    )


def test_outputs_are_validated_against_the_schema_they_are_given(tmp_path):
    strict = tmp_path / "strict.schema.json"
    strict.write_text(json.dumps({"type": "object", "required": ["no_such_field"]}))
    paths = [tmp_path / name for name in ("record.json", "curve.parquet", "digits.txt")]
    with pytest.raises(RecordInvalid, match=f"does not match {strict}"):
        write_outputs(completed(), curve_frame(result()), "", *paths, schema_path=strict)
    assert not any(p.exists() for p in paths)


def test_the_schema_bounds_what_it_can():
    payload = completed().as_dict()
    for accuracy, field_name in (({"percent": 100.5}, "percent"), ({"correct": -1}, "correct")):
        with pytest.raises(RecordInvalid, match=f"accuracy.{field_name}"):
            validate_record({**payload, "accuracy": {**payload["accuracy"], **accuracy}})
    with pytest.raises(RecordInvalid, match=r"record for lane 'probe' does not match .*timing"):
        validate_record({k: v for k, v in payload.items() if k != "timing"})


def test_curve_rows_follow_the_steps_then_the_evaluations():
    frame = curve_frame(result())
    assert list(frame.columns) == list(CURVE_COLUMNS)
    assert {column: str(dtype) for column, dtype in frame.dtypes.items()} == CURVE_COLUMNS
    train, test = frame[frame["kind"] == "train"], frame[frame["kind"] == "test"]
    assert train["step"].tolist() == [1, 2, 3, 4] and train["loss"].tolist() == [2.5, 2.0, 1.25, 1.125]
    # one float64 product per row, seconds * 1e3, correctly rounded (IEEE 754): the same product here
    # is the same bits
    assert train["step_ms"].tolist() == [seconds * 1e3 for seconds in result().step_seconds]
    assert test["step"].tolist() == [0, 2, 4] and test["test_correct"].tolist() == [1, 4, 7]
    assert test["epoch"].tolist() == [0.0, 0.25, 0.5] and test["loss"].tolist() == [2.3, 1.9, 1.5]
    assert test["test_accuracy"].tolist() == [0.1, 4 / 9, 7 / 9]
    assert train["test_correct"].isna().all() and test["step_ms"].isna().all()
    assert curve_frame().empty and list(curve_frame().columns) == list(CURVE_COLUMNS)


def test_curve_lengths_must_match():
    run = result()
    run.step_seconds = run.step_seconds[:2]
    with pytest.raises(ValueError, match="shorter"):
        curve_frame(run)


def test_outputs_are_written_together_and_an_invalid_record_writes_nothing(tmp_path):
    paths = [tmp_path / name for name in ("record.json", "curve.parquet", "digits.txt")]
    write_outputs(completed(), curve_frame(result()), "7 predicted 7", *paths)
    assert json.loads(paths[0].read_text())["accuracy"]["correct"] == 7
    assert pd.read_parquet(paths[1])["kind"].tolist() == ["train"] * 4 + ["test"] * 3
    # the file holds exactly the curve's columns (no index column beside them)
    assert pq.read_schema(paths[1]).names == list(CURVE_COLUMNS)
    assert paths[2].read_text() == "7 predicted 7\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)

    again = tmp_path / "again"
    again_paths = [again / p.name for p in paths]
    broken = dataclasses.replace(completed(), status="great")
    with pytest.raises(RecordInvalid, match="status"):
        write_outputs(broken, curve_frame(result()), "", *again_paths)
    assert not again.exists() or list(again.iterdir()) == []
