"""Paired comparisons: which lanes pair, the interval arithmetic, the words, the table and the figure."""

from __future__ import annotations

import json
import math

import matplotlib.colors
import matplotlib.image
import numpy as np
import pytest
import yaml
from scipy import stats

from gradlanes.layout import default_experiment, published
from gradlanes.report import paired
from gradlanes.report.paired import (
    PairedComparison,
    as_rows,
    paired_comparisons,
    paired_differences,
    paired_figure,
    paired_groups,
    paired_section,
)
from gradlanes.report.rows import load_records
from workflow import REPO

CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())
LANES = list(CONFIG["lanes"])
T95 = {n: stats.t.ppf(0.975, n - 1) for n in range(2, 8)}  # (1 + 0.95) / 2 is 0.975 exactly


def record(lane: str, seed: int, correct: int | None = 9300, step_ms: float | None = 10.0, **config) -> dict:
    """The fields a paired comparison reads, for a full-batch MLP lane unless `config` says else."""
    cfg = {
        "model": "mlp",
        "hidden": 128,
        "init": "lecun_normal",
        "seed": seed,
        "batch_size": "full",
        "batch_images": 4096,
        "steps": 600,
        "epochs": 600.0,
        "steps_per_epoch": 1,
        "train_images": 4096,
        "test_images": 10000,
    } | config
    ran = correct is not None
    return {
        "lane": lane,
        "status": "ok" if ran else "skipped",
        "config": cfg,
        "accuracy": {"correct": correct, "total": 10000 if ran else None},
        "timing": {"step_ms_median": step_ms if ran else None},
    }


def pair_of(reference_correct, candidate_correct, reference_ms=None, candidate_ms=None) -> PairedComparison:
    """The one comparison of lanes `ref` and `cand`, seed i holding the i-th values."""
    n = len(reference_correct)
    reference_ms = reference_ms or [10.0] * n
    candidate_ms = candidate_ms or [10.0] * n
    records = [
        record("ref", s, c, m) for s, (c, m) in enumerate(zip(reference_correct, reference_ms, strict=True))
    ]
    records += [
        record("cand", s, c, m) for s, (c, m) in enumerate(zip(candidate_correct, candidate_ms, strict=True))
    ]
    (pair,) = paired_comparisons(records, ["ref", "cand"])
    return pair


@pytest.fixture(scope="module")
def committed() -> list[dict]:
    """The published records of the config's experiment (results/<experiment>/runs/)."""
    folder = REPO / published(default_experiment(CONFIG)).root
    paths = sorted(folder.glob("runs/*/seed-*/record.json"))
    assert paths, f"no committed records under {folder}: run `snakemake --cores all` and commit results/"
    return load_records(paths)


# --- grouping -----------------------------------------------------------------------------------


def test_committed_lanes_group_by_initial_weights_and_batch_order(committed):
    groups = list(paired_groups(committed, LANES).values())
    lanes = {record["lane"] for record in committed}
    expected = [
        tuple(lane for lane in LANES if lane in lanes and lane in group)
        for group in (
            {"xla_gpu", "xla_cpu", "host", "iree_cpu"},
            {"softmax_kernel", "softmax_xla"},
            {"mlp_stream", "mlp_stream_gpu"},
            {"cnn_xla", "cnn_host", "cnn_gpu"},
        )
    ]
    assert groups == expected
    # mlp_stream loads the same initial weights as the full-batch MLP lanes; the batches part them.
    keys = {group[0]: key for key, group in paired_groups(committed, LANES).items()}
    assert keys["mlp_stream"].weights == keys["xla_gpu"].weights
    assert keys["mlp_stream"].batch_images != keys["xla_gpu"].batch_images


def test_committed_pairs_leave_out_the_lane_skipped_on_every_seed(committed):
    pairs = paired_comparisons(committed, LANES)
    # Without a GPU the GPU lane's records are skipped, and it pairs with no lane.
    skipped = {r["lane"] for r in committed} - {r["lane"] for r in committed if r["status"] == "ok"}
    assert not skipped & {name for p in pairs for name in (p.reference, p.candidate)}
    names = [(p.reference, p.candidate) for p in pairs]
    assert ("xla_cpu", "host") in names and ("softmax_kernel", "softmax_xla") in names
    assert all(LANES.index(ref) < LANES.index(cand) for ref, cand in names)  # reference: earlier lane
    assert all(p.n == len(p.seeds) >= 2 for p in pairs)


def test_lanes_differing_in_what_fixes_the_batches_or_weights_do_not_pair():
    base = [record("a", 0), record("b", 0)]
    for change in ({"steps": 300}, {"batch_images": 128, "batch_size": 128}, {"init": "he_normal"}):
        groups = paired_groups([*base, record("c", 0, **change)], ["a", "b", "c"])
        assert list(groups.values()) == [("a", "b"), ("c",)], change
    # The loss and learning rate do not change the seed's randomness: such lanes still pair.
    groups = paired_groups([*base, record("c", 0, loss="xent", learning_rate=0.1)], ["a", "b", "c"])
    assert list(groups.values()) == [("a", "b", "c")]


def test_softmax_hidden_width_does_not_split_lanes():
    softmax = {"model": "softmax", "init": "zeros"}
    groups = paired_groups([record("a", 0, hidden=None, **softmax), record("b", 0, hidden=128, **softmax)])
    assert list(groups.values()) == [("a", "b")]


def test_pairs_span_only_seeds_both_lanes_completed():
    records = [record("a", s) for s in range(3)] + [
        record("b", 0, 9310),
        record("b", 1, None),  # skipped on seed 1
        record("b", 2, 9320),
    ]
    records += [record("c", s, None) for s in range(3)]  # skipped everywhere: no pair at all
    pairs = paired_comparisons(records, ["a", "b", "c"])
    assert [(p.reference, p.candidate, p.seeds) for p in pairs] == [("a", "b", (0, 2))]
    # Exact: 10 and 20 images of 10000 are the fractions 1/10 and 1/5, each rounded once to a float.
    assert pairs[0].accuracy_differences == (0.1, 0.2)


def test_a_failed_record_counts_as_not_completed():
    failed = record("b", 1, 9999) | {"status": "failed"}
    pairs = paired_comparisons([record("a", 0), record("a", 1), record("b", 0), failed], ["a", "b"])
    assert pairs[0].seeds == (0,)


def test_one_shared_seed_gives_the_difference_without_an_interval():
    pair = pair_of([9300], [9303], [10.0], [12.0])
    assert pair.n == 1
    assert pair.accuracy.value == 0.03  # exact: 3/100 rounded once, and a mean of one value is it
    assert math.isnan(pair.accuracy.low) and math.isnan(pair.step_ms_ratio.high)
    assert pair.accuracy_verdict == (
        "cand is higher than ref by 0.03 points on the one shared seed; one seed gives no interval"
    )
    assert (
        pair.speed_verdict
        == "cand is 1.20× slower than ref on the one shared seed; one seed gives no interval"
    )
    assert pair.as_row()["accuracy_diff_ci_low"] is None


def test_lane_order_decides_the_reference_not_record_order():
    records = [record("late", 0, 9310), record("early", 0, 9300)]
    (pair,) = paired_comparisons(records, ["early", "late"])
    assert (pair.reference, pair.candidate) == ("early", "late")
    (unordered,) = paired_comparisons(records)  # no order given: the first record's lane comes first
    assert (unordered.reference, unordered.candidate) == ("late", "early")


# --- arithmetic ---------------------------------------------------------------------------------


def test_accuracy_interval_is_the_student_t_interval_of_the_per_seed_differences():
    # Differences 0.1, 0.2, 0.0, 0.1, 0.1 points.
    pair = pair_of([9300] * 5, [9310, 9320, 9300, 9310, 9310])
    # t(0.975, 4) = 2.7764451 to 7 decimals (within 5e-8) and the exact sd is sqrt(0.005); the
    # float64 roundings of the mean, sd and bounds (values below 0.25, ulps of 2**-55) stay under
    # 2**-50.
    t_half = 2.7764451 * math.sqrt(0.005) / math.sqrt(5)
    assert pair.accuracy.high - pair.accuracy.value == pytest.approx(
        t_half, abs=5e-8 * math.sqrt(0.005) / math.sqrt(5) + 2**-50
    )
    # Exact: each difference is the float of its fraction, so these are the project's values, and
    # the mean and interval below are its float64 operations in its order.
    differences = np.array([0.1, 0.2, 0.0, 0.1, 0.1])
    assert pair.accuracy_differences == tuple(differences)
    mean, half = float(differences.mean()), float(T95[5] * differences.std(ddof=1) / math.sqrt(5))
    assert (pair.accuracy.value, pair.accuracy.low, pair.accuracy.high) == (mean, mean - half, mean + half)


def test_ratio_interval_is_computed_on_logs():
    # Ratios 1, 2, 4: arithmetic mean 7/3, geometric mean 2.
    pair = pair_of([9300] * 3, [9300] * 3, [10.0, 10.0, 10.0], [10.0, 20.0, 40.0])
    assert pair.step_ms_ratios == (1.0, 2.0, 4.0)  # exact: 20 / 10 and 40 / 10
    # Exact: the logs' mean and the sd of (0, ln 2, 2 ln 2), ln 2 in exact arithmetic, in the
    # project's float64 operations and order.
    logs = np.array([math.log(r) for r in pair.step_ms_ratios])
    centre, half = float(logs.mean()), float(T95[3] * logs.std(ddof=1) / math.sqrt(3))
    estimate = pair.step_ms_ratio
    assert (estimate.value, estimate.low, estimate.high) == tuple(
        math.exp(v) for v in (centre, centre - half, centre + half)
    )
    # Symmetric about the geometric mean 2 on a log scale, which an arithmetic interval is not:
    # low * high = exp(2 centre) = 4 up to the roundings of the logs and their mean (2**-52 once
    # doubled), of centre -+ half (2**-52 + 2**-53), of the two exps (1 ulp each, glibc) and of
    # the product (2**-53): under 2**-49 relative.
    assert estimate.low * estimate.high == pytest.approx(4.0, rel=2**-49, abs=0)


def test_swapping_reference_and_candidate_negates_differences_and_inverts_ratios():
    rng = np.random.default_rng(7)
    for _ in range(25):
        n = int(rng.integers(1, 7))
        records = [
            record(lane, seed, int(rng.integers(9200, 9400)), float(rng.uniform(1, 30)))
            for lane in ("a", "b")
            for seed in range(n)
        ]
        (forward,) = paired_comparisons(records, ["a", "b"])
        (backward,) = paired_comparisons(records, ["b", "a"])
        assert (backward.reference, backward.candidate) == (forward.candidate, forward.reference)
        # Exact: each difference negates exactly (a fraction, rounded once), rounding to nearest
        # is symmetric, so the mean negates and the sd (of negated deviations) is the same.
        assert backward.accuracy.value == -forward.accuracy.value
        # a / b and b / a are two roundings (2**-53 each); the logs (1 ulp of < 3.5, glibc), the
        # sum of <= 6 of them (1/2 ulp of < 21 each) and the mean part the two mean logs by under
        # 2**-47; the exps (1 ulp) and 1 / x (1/2 ulp) keep the value's gap under 2**-46.
        inverse = 1 / forward.step_ms_ratio.value
        assert backward.step_ms_ratio.value == pytest.approx(inverse, rel=2**-46, abs=0)
        if n > 1:
            assert backward.accuracy.low == -forward.accuracy.high
            # The ends add t / sqrt(n) (<= 12.71 / sqrt 2 = 9) times the sds' gap: the sd moves at
            # most sqrt(n / (n - 1)) times the logs' gap, plus its own roundings (2**-50 of an sd
            # below 3.5): under 2**-45 each side; 2 * 9 * 2**-45 + 2**-46 < 2**-40.
            ends = (1 / forward.step_ms_ratio.high, 1 / forward.step_ms_ratio.low)
            got = (backward.step_ms_ratio.low, backward.step_ms_ratio.high)
            assert got == pytest.approx(ends, rel=2**-40, abs=0)


# --- words --------------------------------------------------------------------------------------


def test_verdict_for_an_interval_including_zero():
    pair = pair_of([9300] * 3, [9310, 9290, 9300])  # +0.1, -0.1, 0: mean 0, sd 0.1
    half = T95[3] * 0.1 / math.sqrt(3)
    assert (
        pair.accuracy_verdict == f"not distinguishable from zero (interval −{half:.2f} … +{half:.2f} points)"
    )


def test_verdicts_for_positive_and_negative_intervals():
    higher = pair_of([9300] * 5, [9310, 9320, 9300, 9310, 9310])
    assert higher.accuracy_verdict == "cand is higher than ref by 0.10 points (0.01 … 0.19)"
    lower = pair_of([9310, 9320, 9300, 9310, 9310], [9300] * 5)
    assert lower.accuracy_verdict == "cand is lower than ref by 0.10 points (0.01 … 0.19)"


def test_verdict_for_identical_accuracy_on_every_seed():
    pair = pair_of([9300, 9250, 9371], [9300, 9250, 9371])
    assert pair.accuracy_verdict == "identical on every seed"
    assert pair.accuracy_differences == (0.0, 0.0, 0.0)


def test_verdict_for_the_same_accuracy_difference_on_every_seed():
    # Each seed one-tenth of a point apart (10 images of 10000) at different accuracies: in floats
    # 93.10 − 93.00 and 93.81 − 93.71 differ in the last bits, which must not hide the zero spread.
    higher = pair_of([9300, 9250, 9371], [9310, 9260, 9381])
    assert len(set(higher.accuracy_differences)) == 1
    assert higher.accuracy_verdict == "cand is higher than ref by 0.10 points on every seed (no spread)"
    lower = pair_of([9310, 9260, 9381], [9300, 9250, 9371])
    assert lower.accuracy_verdict == "cand is lower than ref by 0.10 points on every seed (no spread)"
    assert "…" not in higher.accuracy_verdict + lower.accuracy_verdict


def test_speed_verdict_for_the_same_ratio_on_every_seed():
    slower = pair_of([9300] * 3, [9300] * 3, [10.0, 20.0, 40.0], [12.0, 24.0, 48.0])
    assert slower.speed_verdict == "cand is 1.20× slower than ref on every seed (no spread)"
    faster = pair_of([9300] * 3, [9300] * 3, [12.0, 24.0, 48.0], [10.0, 20.0, 40.0])
    assert faster.speed_verdict == "cand is 1.20× faster than ref on every seed (no spread)"
    assert pair_of([9300] * 2, [9300] * 2).speed_verdict == "equal ms/step on every seed"


def test_speed_verdicts():
    slower = pair_of([9300] * 3, [9300] * 3, [10.0, 10.0, 10.0], [10.5, 10.4, 10.6])
    assert slower.speed_verdict.startswith("cand is 1.05× slower than ref (1.0")
    faster = pair_of([9300] * 3, [9300] * 3, [10.5, 10.4, 10.6], [10.0, 10.0, 10.0])
    assert faster.speed_verdict.startswith("cand is 1.05× faster than ref (1.0")
    low, high = (float(v) for v in faster.speed_verdict.split("(")[1].rstrip(")").split(" … "))
    assert 1 < low < 1.05 < high  # told as a speed-up factor, so both ends above 1
    even = pair_of([9300] * 3, [9300] * 3, [10.0, 10.0, 10.0], [9.0, 11.0, 10.0])
    assert even.speed_verdict.startswith("not distinguishable from 1× (interval 0.")


# --- table and section --------------------------------------------------------------------------


def test_rows_follow_the_column_specs_and_serialise():
    pairs = [pair_of([9300] * 3, [9310, 9290, 9300]), pair_of([9300], [9303])]
    rows = as_rows(pairs)
    assert [list(row) for row in rows] == [[column.name for column in paired.ROW_COLUMNS]] * 2
    assert rows[0]["seeds"] == "0 1 2" and rows[0]["n"] == 3
    assert rows[0]["accuracy_diffs"] == "0.1000 -0.1000 0.0000"
    assert json.loads(json.dumps(rows, allow_nan=False))[1]["step_ms_ratio_ci_high"] is None


def test_markdown_section_has_one_row_per_pair(committed):
    pairs = paired_comparisons(committed, LANES)
    text = paired_section(pairs)
    assert text.startswith("## Paired comparisons\n")
    assert "same initial weights" in text and "Student-t" in text and "n − 1 degrees of freedom" in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == len(pairs) >= 4  # full-batch MLP pairs (3 without the GPU lane), one softmax
    seeds = ", ".join(str(seed) for seed in CONFIG["seeds"])
    assert f"| `host` vs `xla_cpu` | {seeds} |" in text
    assert "identical on every seed" in text  # the softmax lanes agree on every prediction count
    assert "No two lanes" in paired_section([])


def test_explanation_says_what_pairing_does_for_each_column():
    text = " ".join(paired_section([]).split())
    # Pairing cancels the seed's randomness, which accuracy has and step time has not.
    assert "removes the seed-to-seed variation of accuracy" in text
    assert "removes the seed-to-seed variation that" not in text
    assert "back to back on the same machine" in text
    assert "95 % interval on its own" in text and "no correction for making several comparisons" in text


# --- figure -------------------------------------------------------------------------------------


def test_figure_has_two_panels_per_pair_and_is_written_as_png(tmp_path):
    one = [pair_of([9300] * 3, [9310, 9290, 9300], [10.0] * 3, [10.5, 10.4, 10.6])]
    three = [*one, pair_of([9300] * 3, [9300] * 3), pair_of([9300], [9305], [10.0], [5.0])]
    for pairs in (one, three):
        figure = paired_figure(pairs)
        assert len(figure.axes) == 2 * len(pairs)
        assert [ax.get_xscale() for ax in figure.axes] == ["linear", "log"] * len(pairs)
    dpi, spans = 130, {}  # paired_differences saves at 130 dots per inch
    for name, pairs in (("one", one), ("three", three)):
        path = tmp_path / f"{name}.png"
        paired_differences(pairs, path)
        image = matplotlib.image.imread(path)  # decodes the PNG, or raises
        assert image.ndim == 3 and image.shape[2] in (3, 4)
        # Drawn, not blank: each pair's candidate colour appears in the figure, exact (the dots' centres
        # carry it unblended; the mean bar may too, so this checks a drawn pair, not each dot).
        drawn = {tuple(c) for c in np.round(image[..., :3] * 255).astype(int).reshape(-1, 3)}
        for index, pair in enumerate(pairs):
            colour = matplotlib.colors.to_rgb(paired.style(pair.candidate, index, None)[0])
            assert tuple(round(255 * c) for c in colour) in drawn, (name, pair.candidate)
        if name == "one":
            assert image.shape[1] > image.shape[0]  # two panels side by side
        # A row of panels per pair: the tight crop keeps every panel and trims only blank
        # margins, so the PNG spans the panels' rows and at most the whole figure (+1 pixel for
        # the rounding up).
        figure = paired_figure(pairs)
        tall = figure.get_size_inches()[1] * dpi
        boxes = [ax.get_position() for ax in figure.axes]
        panels = max(box.y1 for box in boxes) - min(box.y0 for box in boxes)
        assert panels * tall <= image.shape[0] <= tall + 1, name
        spans[name] = (panels * tall, tall + 1)
    # ...and three pairs' panels alone stand taller than the whole one-pair figure.
    assert spans["three"][0] > spans["one"][1]
    assert not list(tmp_path.glob(".*.part"))  # written atomically, no temporary left behind


def test_figure_marks_zero_and_one():
    figure = paired_figure([pair_of([9300] * 3, [9310, 9290, 9300], [10.0] * 3, [10.5, 10.4, 10.6])])
    left, right = figure.axes
    # axvline draws a two-point line at one x; a mean marker is one point, so is not counted.
    vertical = [
        ax_line.get_xdata()[0]
        for ax in (left, right)
        for ax_line in ax.get_lines()
        if len(ax_line.get_xdata()) == 2 and len(set(ax_line.get_xdata())) == 1
    ]
    assert 0.0 in vertical and 1.0 in vertical
    assert right.get_xlim()[0] < 1 < right.get_xlim()[1]
