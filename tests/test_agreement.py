"""The agreement report's arithmetic: verdicts, fractions of bounds, margins, skips, the summary."""

from __future__ import annotations

import math

import pytest

from gradlanes.report.summary import reference_errors
from gradlanes.run.agreement import Check, skipped, summarize


def test_a_check_passes_inside_its_bound_and_fails_outside_or_on_nan():
    inside = Check("l/seed-0/step0_grad", "l", 0, ["l"], 3.0, 12.0)
    assert inside.status == "ok" and inside.passed is True
    assert inside.fraction_of_bound == pytest.approx(0.25)
    assert inside.as_dict()["margin"] == pytest.approx(9.0)
    assert Check("x", "l", 0, ["l"], 12.5, 12.0).status == "failed"
    assert Check("x", "l", 0, ["l"], math.nan, 12.0).status == "failed"
    assert Check("x", "l", 0, ["l"], math.inf, 12.0).status == "failed"


def test_an_at_least_check_measures_its_shortfall():
    equal = Check("p/seed-0/predictions_equal", "p", 0, ["a", "b"], 0.998, 0.99, ">=", "share")
    assert equal.status == "ok"
    assert equal.fraction_of_bound == pytest.approx(0.2)  # 0.2 % differ of the 1 % allowed
    assert equal.as_dict()["margin"] == pytest.approx(0.008)
    assert Check("x", "p", 0, ["a", "b"], 0.98, 0.99, ">=").status == "failed"


def test_skipped_checks_never_pass_and_do_not_fail_the_report():
    gone = skipped("g/seed-0/step0_grad", "g", 0, ["g"], None, "lane g was skipped: no GPU")
    assert gone.status == "skipped" and gone.passed is None and gone.fraction_of_bound is None
    report = summarize([gone, Check("l/seed-0/step0_grad", "l", 0, ["l"], 1.0, 4.0)])
    assert report["passed"] and report["counts"] == {"ok": 1, "failed": 0, "skipped": 1}
    assert report["worst_fraction_of_bound"] == pytest.approx(0.25)


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
