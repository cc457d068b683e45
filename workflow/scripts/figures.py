"""Snakemake glue for rule figures; the drawing lives in gradlanes.report.figures."""

import json
from pathlib import Path

import numpy as np
import pandas as pd

from gradlanes.joblog import job_logging
from gradlanes.report import figures
from gradlanes.report.paired import paired_comparisons, paired_differences
from gradlanes.run.modelfile import load_model

smk = snakemake  # noqa: F821 - injected by Snakemake

with job_logging(smk.log[0]) as log:
    lanes, seeds = smk.params.lanes, smk.params.seeds  # seeds: lane -> the seeds it ran
    records = {
        lane: json.loads(Path(smk.input[f"{lane}/{seeds[lane][0]}/record"]).read_text()) for lane in lanes
    }
    ok = [lane for lane in lanes if records[lane]["status"] == "ok"]
    # Every lane of the config, run or not, so that a lane keeps its colour in every figure; lanes
    # repeating an earlier lane's experiment (its config block but the seed) are dashed.
    experiments = {
        lane: json.dumps({k: v for k, v in records[lane]["config"].items() if k != "seed"}, sort_keys=True)
        for lane in lanes
    }
    styles = figures.lane_styles(lanes, experiments)
    curves = {
        lane: [pd.read_parquet(smk.input[f"{lane}/{seed}/curve"]) for seed in seeds[lane]] for lane in ok
    }
    figures.loss_curves(
        {lane: curves[lane][0] for lane in ok},
        {lane: records[lane]["config"]["steps_per_epoch"] for lane in ok},
        smk.output.loss_curves,
        styles,
    )
    figures.accuracy_per_epoch(
        {lane: curves[lane] for lane in ok if lane in smk.params.minibatch},
        smk.output.accuracy_per_epoch,
        styles,
    )
    predictions = {lane: load_model(smk.input[f"{lane}/model"]).predictions for lane in ok}
    tested = min((len(p) for p in predictions.values()), default=0)
    with np.load(smk.input.arrays) as arrays:
        pixels, labels = arrays["test_images"][:tested], arrays["test_labels"][:tested]
    figures.digit_grid(
        pixels, labels, {lane: p[:tested] for lane, p in predictions.items()}, smk.output.digits
    )
    figures.cost_and_accuracy(pd.read_parquet(smk.input.summary), smk.output.cost_accuracy, styles)
    every_seed = [
        json.loads(Path(smk.input[f"{lane}/{seed}/record"]).read_text())
        for lane in lanes
        for seed in seeds[lane]
    ]
    paired_differences(paired_comparisons(every_seed, lanes), smk.output.paired_differences, styles)
    log.info("drew %d figures for lanes %s", 5, ", ".join(ok))
