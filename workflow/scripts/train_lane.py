"""Snakemake glue for the train_<lane> rules; the logic lives in gradlanes.run.lane."""

from pathlib import Path

from gradlanes.data.description import DatasetDescription
from gradlanes.experiment.spec import resolve
from gradlanes.joblog import job_logging
from gradlanes.run.lane import LanePaths, run_lane

smk = snakemake  # noqa: F821 - injected by Snakemake

with job_logging(smk.log[0]) as log:
    dataset = DatasetDescription.read(smk.input.manifest)
    exp = resolve(smk.params.lane, smk.params.settings, int(smk.wildcards.seed), dataset)
    paths = LanePaths(
        arrays=Path(smk.input.arrays),
        manifest=Path(smk.input.manifest),
        init=Path(smk.input.init),
        record=Path(smk.output.record),
        curve=Path(smk.output.curve),
        digits=Path(smk.output.digits),
        model=Path(smk.output.model),
        program=Path(smk.input.program) if "program" in smk.input.keys() else None,
        failure=Path(smk.params.failure),
    )
    run_lane(exp, paths)
