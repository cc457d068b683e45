"""The agreement report's arithmetic: verdicts, fractions of bounds, margins, skips, the summary."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from lanes import small_lane

from gradlanes.data.dataset import Dataset
from gradlanes.data.description import DatasetDescription
from gradlanes.experiment.batching import first_batch
from gradlanes.experiment.models import init_params
from gradlanes.experiment.spec import resolve
from gradlanes.report.summary import reference_errors
from gradlanes.run import agreement
from gradlanes.run.agreement import (
    Check,
    LaneFiles,
    pair_checks,
    reference_checks,
    relative,
    same_program,
    skipped,
    summarize,
    train_losses,
    unit_ratio,
)
from gradlanes.run.modelfile import load_model, save_model
from gradlanes.run.numerics import (
    FLOAT32_U,
    per_example_scale,
    probabilistic_bound,
    reduction_chain,
    scalar_error,
)
from gradlanes.run.records import curve_frame

# Tolerance for the report's arithmetic on decimal test values (0.998, 90.6), which float64 holds
# only to 2^-53 relative: a difference of two within a factor 2 of each other is exact (Sterbenz),
# so it carries their errors amplified by their size over the difference's, and a division adds
# 2^-53. The largest amplification below, (1 - 0.998) / (1 - 0.99), is 0.998 / 0.002 + 0.99 / 0.01
# < 600; 1,000 * 2^-53 (1.1e-13) bounds each site. Results of dyadic values are compared exactly.
DECIMAL = 1000 * 2.0**-53


def decimal(value: float):
    """`value` to DECIMAL relative, with no absolute floor (pytest.approx's default is 1e-12)."""
    return pytest.approx(value, rel=DECIMAL, abs=0)


def test_a_check_passes_inside_its_bound_and_fails_outside_or_on_nan():
    inside = Check("l/seed-0/step0_grad", "l", 0, ["l"], 3.0, 12.0)
    assert inside.status == "ok" and inside.passed is True
    assert inside.fraction_of_bound == 0.25 and inside.as_dict()["margin"] == 9.0  # dyadic: exact
    assert Check("x", "l", 0, ["l"], 12.5, 12.0).status == "failed"
    assert Check("x", "l", 0, ["l"], math.nan, 12.0).status == "failed"
    assert Check("x", "l", 0, ["l"], math.inf, 12.0).status == "failed"


def test_an_at_least_check_measures_its_shortfall():
    equal = Check("p/seed-0/predictions_equal", "p", 0, ["a", "b"], 0.998, 0.99, ">=", "share")
    assert equal.status == "ok"
    assert equal.fraction_of_bound == decimal(0.2)  # 0.2 % differ of the 1 % allowed
    assert equal.as_dict()["margin"] == decimal(0.008)
    assert Check("x", "p", 0, ["a", "b"], 0.98, 0.99, ">=").status == "failed"


def test_skipped_checks_never_pass_and_do_not_fail_the_report():
    gone = skipped("g/seed-0/step0_grad", "g", 0, ["g"], None, "lane g was skipped: no GPU")
    assert gone.status == "skipped" and gone.passed is None and gone.fraction_of_bound is None
    report = summarize([gone, Check("l/seed-0/step0_grad", "l", 0, ["l"], 1.0, 4.0)])
    assert report["passed"] and report["counts"] == {"ok": 1, "failed": 0, "skipped": 1}
    assert report["worst_fraction_of_bound"] == 0.25  # 1 / 4: exact


def test_the_report_lists_each_lane_s_float64_reference_errors_and_the_summary_takes_the_worst():
    checks = [
        Check("l/seed-0/step0_grad", "l", 0, ["l"], 1.0, 100.0),
        Check("l/seed-0/trained_grad", "l", 0, ["l"], 3.0, 100.0),
        Check("l/seed-1/trained_grad", "l", 1, ["l"], 2.0, 100.0),
        Check("l/seed-0/step0_loss", "l", 0, ["l"], 0.5, 300.0),
        Check("l/seed-0/early_loss", "l", 0, ["l"], 40.0, 330.0),
        Check("pair/seed-0/final_loss_rel", "pair", 0, ["l", "m"], 0.001, 0.007, unit="relative"),
    ]
    report = summarize(checks)
    assert set(report["float64_reference"]) == {"l"}  # pairs are not a lane's reference error
    assert report["float64_reference"]["l"]["seed-1"]["trained_grad"]["measured"] == 2.0
    worst = reference_errors(report)["l"]
    assert worst == {
        "grad_u": 3.0,
        "grad_bound": 100.0,
        "loss_u": 0.5,
        "loss_bound": 300.0,
        "early_u": 40.0,
        "early_bound": 330.0,
    }
    failing = summarize([*checks, Check("l/seed-2/step0_grad", "l", 2, ["l"], 101.0, 100.0)])
    assert not failing["passed"] and failing["counts"]["failed"] == 1


# ---- the checks themselves: pairs, skips and the float64 reference, on files made here ----------


def test_bounds_of_zero_and_a_shortfall_of_zero_allow_only_exact():
    assert Check("x", "l", 0, ["l"], 0.0, 0.0).fraction_of_bound == 0.0
    assert Check("x", "l", 0, ["l"], 1e-9, 0.0).fraction_of_bound == math.inf
    assert Check("x", "l", 0, ["l"], 1.0, 1.0, ">=").fraction_of_bound == 0.0
    assert Check("x", "l", 0, ["l"], 0.5, 1.0, ">=").fraction_of_bound == math.inf
    assert Check("x", "l", 0, ["l"], 0.5, 1.0, ">=").status == "failed"
    at_edge = Check("x", "l", 0, ["l"], 4.0, 4.0)
    assert at_edge.status == "ok" and at_edge.fraction_of_bound == 1.0 and at_edge.as_dict()["margin"] == 0.0
    assert Check("x", "p", 0, ["a", "b"], 0.99, 0.99, ">=").status == "ok"
    gone = skipped("x", "l", 0, ["l"], 3.0, "why").as_dict()
    assert gone["margin"] is None and gone["passed"] is None and gone["reason"] == "why"
    assert gone["bound"] == 3.0 and gone["measured"] is None


def test_same_program_is_one_when_every_fingerprint_is_equal():
    one = same_program("p/seed-0/same_program", "p", 0, ["a", "b"], "f" * 64, "f" * 64)
    assert (one.name, one.check, one.seed, one.lanes) == ("p/seed-0/same_program", "p", 0, ["a", "b"])
    assert (one.measured, one.bound, one.relation, one.unit, one.status) == (1.0, 1.0, ">=", "equal", "ok")
    assert one.details == {"fingerprints": ["f" * 64, "f" * 64]}
    two = same_program("p/seed-0/same_program", "p", 0, ["a", "b"], "f" * 64, "e" * 64)
    assert (two.measured, two.status) == (0.0, "failed")


def test_relative_difference_is_against_the_reference_and_survives_a_zero_one():
    assert relative(1.1, 1.0) == decimal(0.1)
    assert relative(0.9, -1.0) == decimal(1.9)
    assert relative(0.0, 0.0) == 0.0
    assert relative(1e-300, 0.0) == 1e-300 / np.finfo(np.float64).tiny  # the same one division


def test_unit_ratio_widens_bounds_by_the_product_roundoff():
    assert unit_ratio(experiment()) == 1.0
    assert unit_ratio(experiment(matmul_precision="tf32")) == 2.0**13


def lane_record(lane, status="ok", *, final=0.25, percent=90.0, fingerprint="f" * 64, reason=None):
    program = None if fingerprint is None else {"id": "p", "fingerprint": fingerprint}
    return {
        "lane": lane,
        "status": status,
        "reason": reason,
        "program": program,
        "loss": {"first": 2.3, "final": final},
        "accuracy": {"correct": None, "total": None, "percent": percent},
    }


def write_lane(folder: Path, record: dict, predictions=None, params=None, losses=()) -> LaneFiles:
    folder.mkdir(parents=True, exist_ok=True)
    files = LaneFiles(folder / "record.json", folder / "curve.parquet", folder / "model.npz")
    files.record.write_text(json.dumps(record))
    save_model(files.model, params or {}, predictions, record["status"])
    frame = curve_frame(
        SimpleNamespace(losses=list(losses), step_seconds=[0.001] * len(losses), evals=[]) if losses else None
    )
    frame.to_parquet(files.curve, index=False)
    return files


PAIR = {"final_loss_rel": 0.01, "predictions_equal_min": 0.9, "accuracy_points_max": 0.5}


def run_pair(tmp_path, reference: dict, candidate: dict, bounds=PAIR, predictions=None):
    predictions = predictions or (np.arange(10) % 10, np.arange(10) % 10)
    files = {
        record["lane"]: write_lane(tmp_path / record["lane"], record, pred)
        for record, pred in zip((reference, candidate), predictions, strict=True)
    }
    ref_exp, cand_exp = experiment(lane=reference["lane"]), experiment(lane=candidate["lane"])
    return {c.name.split("/", 2)[2]: c for c in pair_checks("pair", bounds, ref_exp, cand_exp, files.get)}


def test_a_pair_within_its_bounds_passes_each_measure(tmp_path):
    one_wrong = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 0])
    checks = run_pair(
        tmp_path,
        lane_record("a", final=0.2, percent=91.0),
        lane_record("b", final=0.201, percent=90.6),
        predictions=(np.arange(10), one_wrong),
    )
    assert set(checks) == {"same_program", "final_loss_rel", "predictions_equal", "accuracy_points"}
    assert checks["final_loss_rel"].measured == decimal(0.005)
    assert checks["predictions_equal"].measured == 0.9  # 9 / 10, correctly rounded: float 0.9
    assert checks["accuracy_points"].measured == decimal(0.4)
    assert all(c.status == "ok" for c in checks.values())
    assert [c.lanes for c in checks.values()] == [["a", "b"]] * 4
    assert {c.name for c in checks.values()} >= {"pair/seed-2/final_loss_rel"}
    units = {name: (c.relation, c.unit) for name, c in checks.items()}
    assert units == {
        "same_program": (">=", "equal"),
        "final_loss_rel": ("<=", "relative"),
        "predictions_equal": (">=", "share"),
        "accuracy_points": ("<=", "points"),
    }


def test_a_pair_outside_any_bound_fails_that_measure_only(tmp_path):
    checks = run_pair(
        tmp_path,
        lane_record("a", final=0.2, percent=91.0),
        lane_record("b", final=0.21, percent=90.0, fingerprint="e" * 64),
        predictions=(np.arange(10), np.zeros(10, int)),
    )
    status = {name: c.status for name, c in checks.items()}
    assert status == {
        "same_program": "failed",
        "final_loss_rel": "failed",
        "predictions_equal": "failed",
        "accuracy_points": "failed",
    }
    assert checks["predictions_equal"].measured == 0.1  # 1 / 10, correctly rounded: float 0.1
    assert checks["accuracy_points"].measured == 1.0  # 91 - 90: exact


def test_a_pair_checks_only_the_bounds_its_config_sets(tmp_path):
    checks = run_pair(
        tmp_path,
        lane_record("a"),
        lane_record("b"),
        bounds={"final_loss_rel": 0.01, "accuracy_points_max": None},
    )
    assert set(checks) == {"same_program", "final_loss_rel"}


def test_a_pair_with_a_lane_that_did_not_run_is_skipped_naming_it(tmp_path):
    checks = run_pair(tmp_path, lane_record("a"), lane_record("b", "skipped", reason="JAX sees no GPU"))
    assert set(checks) == {"final_loss_rel", "predictions_equal", "accuracy_points"}
    for check in checks.values():
        assert check.status == "skipped" and check.passed is None
        assert check.reason == "lane b was skipped: JAX sees no GPU"
    assert checks["final_loss_rel"].bound == 0.01


def test_a_pair_with_a_lane_that_runs_no_program_skips_only_the_program_check(tmp_path):
    checks = run_pair(tmp_path, lane_record("a"), lane_record("b", fingerprint=None))
    assert checks["same_program"].status == "skipped"
    assert checks["same_program"].reason == "lane b runs no captured program"
    assert checks["final_loss_rel"].status == "ok"


def test_the_training_losses_come_from_the_curve_in_step_order(tmp_path):
    files = write_lane(tmp_path / "l", lane_record("l"), losses=[3.0, 2.0, 1.0])
    shuffled = pd.read_parquet(files.curve).iloc[::-1]
    shuffled.to_parquet(files.curve, index=False)
    np.testing.assert_array_equal(train_losses(files.curve), [3.0, 2.0, 1.0])


def test_a_lane_that_did_not_run_has_every_reference_check_skipped(tmp_path):
    record = lane_record("l", "failed", reason="the loss became nan at step 3")
    files = write_lane(tmp_path / "l", record)
    exp = experiment()
    checks = reference_checks(exp, files, {}, None, 5, 300.0)
    names = [c.name.rsplit("/", 1)[1] for c in checks]
    assert names == ["step0_loss", "step0_grad", "trained_loss", "trained_grad", "early_loss"]
    assert {c.status for c in checks} == {"skipped"}
    assert {c.reason for c in checks} == {"lane probe was failed: the loss became nan at step 3"}
    without_early = reference_checks(exp, files, {}, None, 5, None)
    assert [c.name.rsplit("/", 1)[1] for c in without_early] == names[:4]


# ---- the float64-reference checks on a real captured program (tiny: 8 hidden units, 64 images) --

TINY = DatasetDescription("tiny", 10, (28, 28), 64, 16, {})


def experiment(**overrides):
    settings = small_lane(hidden=8, train_images=64, test_images=16, batch_size=32, steps=4, **overrides)
    lane = settings.pop("lane", "probe")
    return resolve(lane, settings, 2, TINY)


@pytest.fixture(scope="module")
def tiny():
    """A captured program, its data and weights, and the reference's own first losses."""
    rng = np.random.default_rng(5)
    data = Dataset(
        train_images=rng.random((64, 784), dtype=np.float32),
        train_labels=rng.integers(0, 10, 64).astype(np.int32),
        test_images=rng.random((16, 784), dtype=np.float32),
        test_labels=rng.integers(0, 10, 16).astype(np.int32),
        test_pixels=np.zeros((16, 28, 28), np.uint8),
    )
    exp = experiment(engine="interpreter")
    initial = init_params(exp.model, exp.seed)
    program = agreement.shared_program(exp)
    losses = agreement.reference_trajectory(exp, program, initial, data, 4)
    return SimpleNamespace(exp=exp, data=data, initial=initial, program=program, losses=losses)


class ScaledGradient:
    """An engine whose gradient is the true one times `factor`: a lane that computes it wrongly."""

    def __init__(self, engine, factor):
        self.engine, self.factor = engine, factor

    def loss_and_grad(self, params, images, labels):
        loss, grads = self.engine.loss_and_grad(params, images, labels)
        return loss, {name: value * np.float32(self.factor) for name, value in grads.items()}


def lane_files(tmp_path, tiny, *, fingerprint=None, losses=None):
    trained = {name: value * np.float32(0.9) for name, value in tiny.initial.items()}
    record = lane_record("probe", fingerprint=fingerprint or tiny.program.artifact.fingerprint)
    return write_lane(tmp_path / "probe", record, np.zeros(16, int), trained, losses or tiny.losses)


def by_kind(checks):
    return {c.name.rsplit("/", 1)[1]: c for c in checks}


def test_a_lane_that_runs_the_program_agrees_with_its_float64_reference(tmp_path, tiny):
    checks = by_kind(
        reference_checks(tiny.exp, lane_files(tmp_path, tiny), tiny.initial, tiny.data, 4, 300.0)
    )
    assert list(checks) == [
        "program",
        "step0_loss",
        "step0_grad",
        "trained_loss",
        "trained_grad",
        "early_loss",
    ]
    assert all(c.status == "ok" for c in checks.values()), [c.as_dict() for c in checks.values()]
    assert checks["program"].measured == 1.0
    for kind in ("step0_loss", "step0_grad", "trained_loss", "trained_grad"):
        check = checks[kind]
        chain = check.details["reduction_chain"]
        assert check.bound == probabilistic_bound(chain) and chain > 1  # times a unit ratio of 1: exact
        assert check.name == f"probe/seed-2/{kind}" and check.lanes == ["probe"]
    assert checks["early_loss"].measured == 0.0  # the curve holds the reference's own losses
    assert checks["early_loss"].details["steps"] == 4 and checks["early_loss"].bound == 300.0


def test_a_gradient_one_percent_off_fails_the_gradient_checks_only(tmp_path, tiny, monkeypatch):
    files = lane_files(tmp_path, tiny)
    plain = by_kind(reference_checks(tiny.exp, files, tiny.initial, tiny.data, 4, None))
    engine = agreement.shared_engine(tiny.exp, tiny.program)
    monkeypatch.setattr(agreement, "shared_engine", lambda exp, program: ScaledGradient(engine, 1.01))
    checks = by_kind(reference_checks(tiny.exp, files, tiny.initial, tiny.data, 4, None))
    assert checks["step0_grad"].status == checks["trained_grad"].status == "failed"
    assert checks["step0_loss"].status == checks["trained_loss"].status == "ok"
    # The lane's gradient is fl(f g), f = float32(1.01) = 1 + 167,772 u exactly, so against the
    # reference r it is off by (f - 1) g + (g - r) + a rounding of at most u f |g|. In units of
    # u ||s|| (s the error scale), with rho = ||r|| / ||s|| and E the unscaled lane's error, the
    # triangle inequality puts the measure within f rho + (1 + (167,772 + f) u) E of 167,772 rho.
    # (The float64 norms add ~1e-12 relative, 1e-7 units.) No ReLU decision is granted on either
    # side, so both compare with the same r.
    f = float(np.float32(1.01))
    assert (f - 1) / FLOAT32_U == 167_772
    batch = agreement.lane_batch(tiny.exp, tiny.data)
    reference = agreement.shared_reference(tiny.exp, tiny.program)
    trained = load_model(files.model).params
    for kind, params in (("step0_grad", tiny.initial), ("trained_grad", trained)):
        assert plain[kind].details["kinks_granted"] == checks[kind].details["kinks_granted"] == 0
        point = agreement.reference_point(tiny.exp, tiny.program, reference, params, batch, None)
        scale = tiny.program.flatten_params(point.grad_scale)
        rho = math.sqrt(
            sum(float(np.sum(np.square(r))) for r in point.leaves)
            / sum(float(np.sum(np.square(np.asarray(v, np.float64)))) for v in scale)
        )
        error = plain[kind].measured
        slack = f * rho + (1 + (167_772 + f) * FLOAT32_U) * error
        assert abs(checks[kind].measured - 167_772 * rho) <= slack, (kind, rho, error)


def test_a_curve_that_leaves_the_reference_fails_at_its_worst_step(tmp_path, tiny):
    losses = list(tiny.losses)
    losses[2] *= 1 + 1e-4  # 1e-4 relative is ~1,700 float32 units of the loss
    files = lane_files(tmp_path, tiny, losses=losses)
    early = by_kind(reference_checks(tiny.exp, files, tiny.initial, tiny.data, 4, 300.0))["early_loss"]
    assert early.status == "failed" and early.details["worst_step"] == 3
    # The curve keeps float64, so the lane's loss is c = r fl(1 + 1e-4) rounded: two roundings of
    # 2^-53 r, which c - r (exact: Sterbenz) carries amplified by 1 / 1e-4; 1e-4 and the division
    # by u r (a power of two times r) round once each.
    assert early.measured == pytest.approx(1e-4 / FLOAT32_U, rel=(2 * 1.0001 / 1e-4 + 2) * 2.0**-53, abs=0)
    assert early.details["per_step"][:2] == [0.0, 0.0]


def test_only_as_many_early_steps_as_the_lane_ran_are_compared(tmp_path, tiny):
    files = lane_files(tmp_path, tiny)
    early = by_kind(reference_checks(tiny.exp, files, tiny.initial, tiny.data, 50, 300.0))["early_loss"]
    assert early.details["steps"] == 4 and len(early.details["per_step"]) == 4


def test_a_lane_that_ran_another_program_fails_its_program_check(tmp_path, tiny):
    files = lane_files(tmp_path, tiny, fingerprint="0" * 64)
    program = by_kind(reference_checks(tiny.exp, files, tiny.initial, tiny.data, 4, None))["program"]
    assert program.status == "failed"
    assert program.details["fingerprints"] == ["0" * 64, tiny.program.artifact.fingerprint]


def test_the_reference_trajectory_trains_the_float64_program_on_the_lane_s_batches(tiny):
    assert len(tiny.losses) == 4 and tiny.losses[0] != tiny.losses[1]
    engine = agreement.shared_engine(tiny.exp, tiny.program)
    images, labels = agreement.lane_batch(tiny.exp, tiny.data)
    loss, _ = engine.loss_and_grad(tiny.initial, images, labels)
    # The float32 engine's loss within the step0_loss check's own bound of the float64 first loss
    # (numerics: 4 sqrt(chain) units of the loss's error scale); another batch is off by ~1e5 units.
    scale, _ = per_example_scale(tiny.exp, tiny.initial, images, labels)
    chain = reduction_chain(tiny.program.gradient.jaxpr)[0]
    assert scalar_error(loss, tiny.losses[0], scale) <= probabilistic_bound(chain)
    expected = tiny.data.train_batch(first_batch(tiny.exp.seed, 64, 32))
    np.testing.assert_array_equal(images, expected[0])
    np.testing.assert_array_equal(labels, expected[1])


def test_a_check_in_the_report_carries_every_field():
    check = Check(
        "p/seed-1/final_loss_rel", "p", 1, ["a", "b"], 0.002, 0.008, unit="relative", details={"k": 1}
    )
    assert check.as_dict() == {
        "name": "p/seed-1/final_loss_rel",
        "check": "p",
        "seed": 1,
        "lanes": ["a", "b"],
        "measured": 0.002,
        "bound": 0.008,
        "relation": "<=",
        "unit": "relative",
        "status": "ok",
        "reason": None,
        "details": {"k": 1},
        "passed": True,
        "fraction_of_bound": 0.25,
        "margin": 0.006,
    }
    shortfall = Check("p/seed-1/predictions_equal", "p", 1, ["a", "b"], 0.995, 0.99, ">=", "share").as_dict()
    assert (shortfall["passed"], shortfall["margin"]) == (True, decimal(0.005))
    assert shortfall["fraction_of_bound"] == decimal(0.5)
    failing = Check("x", "p", 1, ["a"], 2.0, 1.0).as_dict()
    assert (failing["status"], failing["passed"], failing["margin"]) == ("failed", False, -1.0)


def test_a_skipped_check_states_what_it_would_have_checked():
    gone = skipped("g/seed-3/step0_grad", "g", 3, ["g"], 12.0, "lane g was skipped: no GPU")
    assert (gone.name, gone.check, gone.seed, gone.lanes) == ("g/seed-3/step0_grad", "g", 3, ["g"])
    assert (gone.measured, gone.bound, gone.status, gone.reason) == (
        None,
        12.0,
        "skipped",
        "lane g was skipped: no GPU",
    )


def test_the_report_in_full():
    checks = [
        Check("l/seed-0/step0_grad", "l", 0, ["l"], 1.0, 4.0),
        skipped("g/seed-0/step0_grad", "g", 0, ["g"], 3.0, "no GPU"),
        Check("l/seed-0/program", "l", 0, ["l"], 1.0, 1.0, ">=", "equal"),
        Check("p/seed-0/accuracy_points", "p", 0, ["l", "m"], 0.1, 0.3, unit="points"),
        Check("m/seed-1/trained_loss", "m", 1, ["m"], 9.0, 3.0),
    ]
    report = summarize(checks)
    assert report == {
        "passed": False,
        "unit": "float64-reference checks: float32 units, u = 2^-24 times the quantity's error scale",
        "counts": {"ok": 3, "failed": 1, "skipped": 1},
        "worst_fraction_of_bound": 3.0,
        "float64_reference": {
            "l": {"seed-0": {"step0_grad": {"measured": 1.0, "bound": 4.0, "status": "ok"}}},
            "g": {"seed-0": {"step0_grad": {"measured": None, "bound": 3.0, "status": "skipped"}}},
            "m": {"seed-1": {"trained_loss": {"measured": 9.0, "bound": 3.0, "status": "failed"}}},
        },
        "checks": [c.as_dict() for c in checks],
    }
    assert summarize([])["worst_fraction_of_bound"] is None and summarize([])["passed"] is True
    assert summarize(checks[:2])["passed"] is True


def test_a_pair_check_names_its_pair_seed_lanes_and_bound(tmp_path):
    checks = run_pair(tmp_path, lane_record("a"), lane_record("b"))
    for kind, check in checks.items():
        assert (check.name, check.check, check.seed, check.lanes) == (
            f"pair/seed-2/{kind}",
            "pair",
            2,
            ["a", "b"],
        )
    assert {kind: c.bound for kind, c in checks.items()} == {
        "same_program": 1.0,
        "final_loss_rel": 0.01,
        "predictions_equal": 0.9,
        "accuracy_points": 0.5,
    }
    assert checks["same_program"].details == {"fingerprints": ["f" * 64, "f" * 64]}


def test_a_pair_whose_reference_did_not_run_is_skipped_naming_the_reference(tmp_path):
    checks = run_pair(
        tmp_path, lane_record("a", "failed", reason="diverged"), lane_record("b", "skipped", reason="x")
    )
    for kind, check in checks.items():
        assert check.reason == "lane a was failed: diverged"
        assert (check.name, check.check, check.seed, check.lanes) == (
            f"pair/seed-2/{kind}",
            "pair",
            2,
            ["a", "b"],
        )


def test_a_pair_whose_reference_runs_no_program_names_the_reference(tmp_path):
    same = run_pair(tmp_path, lane_record("a", fingerprint=None), lane_record("b"))["same_program"]
    assert (same.status, same.reason, same.bound) == ("skipped", "lane a runs no captured program", 1.0)
    assert (same.name, same.check, same.seed, same.lanes) == (
        "pair/seed-2/same_program",
        "pair",
        2,
        ["a", "b"],
    )


@pytest.fixture
def fresh_caches(monkeypatch):
    """Engines, references, points and trajectories computed anew (the captured program is kept)."""
    for cache in ("_engines", "_references", "_reference_points", "_trajectories"):
        monkeypatch.setattr(agreement, cache, {})


def test_reference_checks_name_the_lane_and_seed_they_check(tmp_path, tiny, fresh_caches):
    checks = reference_checks(tiny.exp, lane_files(tmp_path, tiny), tiny.initial, tiny.data, 4, 300.0)
    for check in checks:
        kind = check.name.rsplit("/", 1)[1]
        assert (check.name, check.check, check.seed, check.lanes) == (
            f"probe/seed-2/{kind}",
            "probe",
            2,
            ["probe"],
        )
    details = {c.name.rsplit("/", 1)[1]: set(c.details) for c in checks}
    assert details["step0_loss"] == {"reduction_chain", "scale"}
    assert details["trained_grad"] == {
        "reduction_chain",
        "kinks_undecidable",
        "kinks_granted",
        "error_without_granting",
    }
    grad = by_kind(checks)["trained_grad"]
    assert grad.details["error_without_granting"] == grad.measured  # nothing granted here
    assert by_kind(checks)["step0_loss"].details["scale"] > 0


def test_skipped_reference_checks_name_the_lane_and_seed(tmp_path):
    files = write_lane(tmp_path / "l", lane_record("l", "skipped", reason="JAX sees no GPU"))
    for check in reference_checks(experiment(), files, {}, None, 5, None):
        kind = check.name.rsplit("/", 1)[1]
        assert (check.name, check.check, check.seed, check.lanes) == (
            f"probe/seed-2/{kind}",
            "probe",
            2,
            ["probe"],
        )
        assert check.bound is None


def test_the_reference_trajectory_is_float64_on_the_lane_s_first_batch(tiny, fresh_caches):
    """Its first loss is the float64 gradient program's loss on the seed's first batch, within
    numerics' bound for two evaluations of the loss in float64 (u = 2^-53 in place of float32's
    2^-24: 2 * 4 sqrt(chain) 2^-53 of the loss's error scale, ~1e-13 here; a float32 step would be
    ~1e-7 off). Computed here, not taken from the module's fixture, so that mutation testing, which
    runs the tests that call a function, runs this one."""
    losses = agreement.reference_trajectory(tiny.exp, tiny.program, tiny.initial, tiny.data, 4)
    reference = agreement.shared_reference(tiny.exp, tiny.program)
    batch = agreement.lane_batch(tiny.exp, tiny.data)
    point = agreement.reference_point(tiny.exp, tiny.program, reference, tiny.initial, batch, None)
    chain = reduction_chain(tiny.program.gradient.jaxpr)[0]
    assert abs(losses[0] - point.loss) <= 2 * probabilistic_bound(chain) * 2.0**-53 * point.loss_scale
    loss, *leaves = reference(*tiny.program.flatten_params(tiny.initial), *batch)
    assert loss.dtype == np.float64 and {leaf.dtype for leaf in leaves} == {np.dtype(np.float64)}


def test_each_program_engine_and_trajectory_is_its_own(tiny, fresh_caches):
    mse = experiment(engine="interpreter", loss="mse")
    assert agreement.shared_program(mse) is agreement.shared_program(mse)
    assert agreement.shared_program(mse).artifact.fingerprint != tiny.program.artifact.fingerprint
    xla = experiment(engine="xla", lane="other")
    host, compiled = (
        agreement.shared_engine(tiny.exp, tiny.program),
        agreement.shared_engine(xla, tiny.program),
    )
    assert host is agreement.shared_engine(tiny.exp, tiny.program) and compiled is not host
    assert type(host).__name__ != type(compiled).__name__
    other_seed = resolve(
        "probe",
        small_lane(engine="interpreter", hidden=8, train_images=64, test_images=16, batch_size=32, steps=4),
        3,
        TINY,
    )
    again = agreement.reference_trajectory(other_seed, tiny.program, tiny.initial, tiny.data, 4)
    assert again != tiny.losses  # seed 3 draws other batches
    assert agreement.reference_trajectory(tiny.exp, tiny.program, tiny.initial, tiny.data, 4) == tiny.losses


def test_a_reference_point_is_computed_once_per_key(tiny, fresh_caches, monkeypatch):
    calls = []
    real = agreement.per_example_scale
    monkeypatch.setattr(agreement, "per_example_scale", lambda *a, **k: calls.append(1) or real(*a, **k))
    reference = agreement.shared_reference(tiny.exp, tiny.program)
    batch = agreement.lane_batch(tiny.exp, tiny.data)
    first = agreement.reference_point(tiny.exp, tiny.program, reference, tiny.initial, batch, ("k",))
    assert agreement.reference_point(tiny.exp, tiny.program, reference, tiny.initial, batch, ("k",)) is first
    assert len(calls) == 1
    agreement.reference_point(tiny.exp, tiny.program, reference, tiny.initial, batch, None)
    agreement.reference_point(tiny.exp, tiny.program, reference, tiny.initial, batch, None)
    assert len(calls) == 3 and None not in agreement._reference_points
    assert first.kinks is not None and first.kinks[0].shape == (32, 8)  # the MLP's ReLU decisions


def test_lanes_of_one_program_and_seed_share_the_reference_at_the_initial_weights(
    tmp_path, tiny, fresh_caches, monkeypatch
):
    calls = []
    real = agreement.per_example_scale
    monkeypatch.setattr(agreement, "per_example_scale", lambda *a, **k: calls.append(1) or real(*a, **k))
    for lane in ("a", "b"):
        reference_checks(tiny.exp, lane_files(tmp_path / lane, tiny), tiny.initial, tiny.data, 4, None)
    assert len(calls) == 3  # the initial point once, each lane's trained point once


def test_a_tf32_lane_is_held_to_bounds_wider_by_its_product_roundoff(tmp_path, tiny, fresh_caches):
    tf32 = experiment(engine="interpreter", matmul_precision="tf32")
    program = agreement.shared_program(tf32)
    losses = agreement.reference_trajectory(tf32, program, tiny.initial, tiny.data, 4)
    record = lane_record("probe", fingerprint=program.artifact.fingerprint)
    files = write_lane(tmp_path / "tf32", record, np.zeros(16, int), tiny.initial, losses)
    for check in reference_checks(tf32, files, tiny.initial, tiny.data, 4, None)[1:]:
        chain = check.details["reduction_chain"]
        # times 2^-11 / 2^-24 = 2^13, a power of two: exact
        assert check.bound == probabilistic_bound(chain) * 2.0**13, check.name


def test_an_unsupported_primitive_names_the_reference_program_it_is_in(tiny, fresh_caches, monkeypatch):
    from gradlanes.program import interpreter

    monkeypatch.setattr(interpreter, "find_unsupported", lambda jaxpr: {"made_up"})
    with pytest.raises(
        interpreter.UnsupportedPrimitive, match=r"captured gradient program \(float64 reference\);"
    ):
        agreement.shared_reference(tiny.exp, tiny.program)
    with pytest.raises(
        interpreter.UnsupportedPrimitive, match=r"captured step program \(float64 reference\);"
    ):
        agreement.reference_trajectory(tiny.exp, tiny.program, tiny.initial, tiny.data, 4)
    init = tiny.program.init_state.jaxpr
    monkeypatch.setattr(
        interpreter, "find_unsupported", lambda jaxpr: {"made_up"} if jaxpr is init else set()
    )
    with pytest.raises(
        interpreter.UnsupportedPrimitive, match=r"captured optimizer-init program \(float64 reference\);"
    ):
        agreement.reference_trajectory(tiny.exp, tiny.program, tiny.initial, tiny.data, 4)


def test_a_relu_decision_float32_cannot_make_is_granted_and_counted(tmp_path, tiny, fresh_caches):
    """Trained weights with unit 0's preactivation exactly 0 in float64 for the batch's first example:
    float32 may take either side there, and the check accepts the engine's side."""
    images, _ = agreement.lane_batch(tiny.exp, tiny.data)
    trained = {name: value * np.float32(0.9) for name, value in tiny.initial.items()}
    x, w1 = images[0].astype(np.float64), trained["w1"].astype(np.float64)
    trained["b1"] = trained["b1"].copy()
    trained["b1"][0] = np.float32(-(x @ w1[:, 0]))
    record = lane_record("probe", fingerprint=tiny.program.artifact.fingerprint)
    files = write_lane(tmp_path / "kink", record, np.zeros(16, int), trained, tiny.losses)
    grad = by_kind(reference_checks(tiny.exp, files, tiny.initial, tiny.data, 4, None))["trained_grad"]
    assert grad.details["kinks_undecidable"] >= 1 and grad.status == "ok"
    assert grad.details["kinks_granted"] <= grad.details["kinks_undecidable"]


def test_a_curve_with_fewer_steps_than_the_lane_ran_is_refused(tmp_path, tiny, fresh_caches):
    files = lane_files(tmp_path, tiny, losses=tiny.losses[:2])  # the lane ran 4 steps
    with pytest.raises(ValueError, match="zip"):
        reference_checks(tiny.exp, files, tiny.initial, tiny.data, 4, 300.0)
