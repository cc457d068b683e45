"""Summary statistics and formatting, and the reader's command line on the committed results."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml
from PIL import Image, ImageDraw

from gradlanes.config import lane_seeds
from gradlanes.layout import default_experiment, published
from gradlanes.report.cli import main
from gradlanes.report.drawn import ImageUnreadable, mnist_style
from gradlanes.report.paired import paired_comparisons, paired_section
from gradlanes.report.summary import (
    accuracy_text,
    agreement_verdicts,
    lane_rows,
    load_records,
    markdown,
    mean_ci,
    reference_errors,
)
from workflow import REPO


def test_mean_ci_is_student_t():
    mean, low, high = mean_ci([93.0, 94.0, 95.0])
    assert mean == 94.0
    # sd = 1, n = 3; t(0.975, 2) = 4.302653 to 7 digits, so within 5e-7, 5e-7 / sqrt(3) once
    # divided; 94 + half rounds once in [64, 128) (half an ulp, 2**-47) and taking 94 off is exact
    # (Sterbenz).
    assert high - mean == pytest.approx(4.302653 / math.sqrt(3), abs=5e-7 / math.sqrt(3) + 2**-47)
    # Exact: 94 -+ half round onto the one grid of [64, 128), symmetric about 94 (an even point of
    # it, so ties to even mirror too), and both subtractions are exact (Sterbenz).
    assert mean - low == high - mean
    assert math.isnan(mean_ci([1.0])[1])
    assert math.isnan(mean_ci([])[0])


def test_accuracy_text_format():
    assert accuracy_text(9373, 10000) == "9,373 / 10,000 = 93.73 %"


def test_the_intro_says_how_many_seeds_each_lane_pooled():
    import pandas as pd

    from gradlanes.report.tables import seed_counts

    def frame(*rows):
        return pd.DataFrame(rows, columns=["lane", "status", "seeds"])

    assert seed_counts(frame(("a", "ok", 5), ("b", "ok", 5), ("gpu", "skipped", 0))) == "5 seeds"
    mixed = frame(("a", "ok", 5), ("b", "ok", 5), ("cnn_xla", "ok", 3), ("cnn_host", "ok", 3))
    assert seed_counts(mixed) == "5 seeds (3 for `cnn_xla`, `cnn_host`)"
    assert seed_counts(frame(("a", "ok", 1))) == "1 seed"
    assert seed_counts(frame(("gpu", "skipped", 0))) == "no seeds"


def test_agreement_verdicts():
    checks = [
        {"lanes": ["a", "b"], "status": "ok"},
        {"lanes": ["a", "b"], "status": "failed"},
        {"lanes": ["c", "d"], "status": "skipped"},
        {"lanes": ["e", "f"], "status": "ok"},
    ]
    verdicts = agreement_verdicts({"checks": checks})
    assert verdicts["a"] == "FAILED 1/2" and verdicts["c"] == "skipped" and verdicts["f"] == "passed 1/1"


def test_committed_table_and_digits_print(capsys):
    assert main(["--project", str(REPO), "table"]) == 0
    table = capsys.readouterr().out
    for lane in ("xla_cpu", "host", "softmax_kernel", "mlp_stream"):
        assert lane in table
    assert main(["--project", str(REPO), "digits", "host"]) == 0
    assert capsys.readouterr().out.count("predicted") == 6


def test_cli_errors_are_clear(capsys, tmp_path):
    assert main(["--project", str(REPO), "digits", "nope"]) == 2
    assert "no lane 'nope' in " in capsys.readouterr().err
    assert main(["--project", str(REPO), "table", "--experiment", "absent"]) == 2
    assert "no published experiment 'absent'" in capsys.readouterr().err
    project = tmp_path / "project"
    project.mkdir()
    (project / "config.yaml").write_text((REPO / "config.yaml").read_text())
    assert main(["--project", str(project), "predict", "x.png", "--lane", "host"]) == 2
    assert "run `snakemake --cores all --until train_host` first" in capsys.readouterr().err
    assert main(["--project", str(project), "table"]) == 2
    assert "no published experiment 'mnist'" in capsys.readouterr().err


def test_drawn_digit_is_centred_like_mnist():
    image = Image.new("L", (300, 500), 255)  # dark ink on a light page, off-centre
    ImageDraw.Draw(image).line([(40, 60), (60, 300)], fill=0, width=18)
    pixels = mnist_style(np.asarray(image, np.float32))
    assert pixels.shape == (28, 28) and pixels.dtype == np.uint8
    # The stroke's ink is a 243 x 38 crop: scaled into the 20-pixel box it is 20 x round(38 * 20 /
    # 243) = 20 x 3 pixels, the long side filling the box exactly.
    rows, cols = (np.flatnonzero(pixels.max(axis=axis) > 0) for axis in (1, 0))
    assert (rows[-1] - rows[0] + 1, cols[-1] - cols[0] + 1) == (20, 3)
    # Every one of the 20 rows is ink, not a faint fringe: measured, the faintest peaks at 204.
    assert len(np.flatnonzero(pixels.max(axis=1) > 25)) == 20
    ys, xs = np.indices(pixels.shape)
    total = int(pixels.sum(dtype=np.int64))
    footprint = (slice(rows[0], rows[-1] + 1), slice(cols[0], cols[-1] + 1))
    for index in (ys, xs):
        # A shift by the rounded distance to 13.5 leaves the scaled canvas's centre of mass within
        # 0.5 of it; the uint8 cast then drops f < 1 from each footprint pixel, moving the centre c
        # by |sum (i - c) f| / total <= sum (|i - 13.5| + 0.5) / total over the footprint.
        truncation = float((np.abs(index[footprint] - 13.5) + 0.5).sum()) / total
        assert abs(float((index * pixels).sum()) / total - 13.5) <= 0.5 + truncation
    assert pixels[0].max() == 0  # background is black, like MNIST


def test_blank_drawing_is_refused():
    with pytest.raises(ImageUnreadable, match="no visible strokes"):
        mnist_style(np.full((50, 50), 255, np.float32))


def test_readme_shows_the_current_summary():
    from gradlanes.report.cli import readme_block

    experiment = default_experiment(yaml.safe_load((REPO / "config.yaml").read_text()))
    assert readme_block(REPO, experiment) in (REPO / "README.md").read_text(), (
        "run `gradlanes readme` after the pipeline"
    )


def _without_column(page: str, header: str) -> str:
    """The page with one column of its lane table removed, if it has that column."""
    lines = page.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| lane |"))
    headers = [cell.strip() for cell in lines[start].split("|")]
    if header not in headers:
        return page
    for i in range(start, len(lines)):
        if not lines[i].startswith("|"):
            break
        cells = lines[i].split("|")
        del cells[headers.index(header)]
        lines[i] = "|".join(cells)
    return "\n".join(lines) + "\n"


def test_committed_records_render_the_committed_summary():
    """The column specifications reproduce results/summary.md from its records, cell for cell."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    committed = published(default_experiment(config))
    paths = [
        REPO / committed.record(lane, seed) for lane in config["lanes"] for seed in lane_seeds(config, lane)
    ]
    report = json.loads((REPO / committed.agreement).read_text())
    records = load_records(paths)
    pairs = paired_section(paired_comparisons(records, list(config["lanes"])))
    page = markdown(lane_rows(records, agreement_verdicts(report), reference_errors(report)), pairs)
    committed = (REPO / committed.summary("md")).read_text()
    # Summaries written before records carried a program fingerprint lack its column.
    assert _without_column(page, "program (SHA-256)") == _without_column(committed, "program (SHA-256)")
