"""Snakemake glue for the train_<lane> rules; the logic lives in gradlanes.lane."""

import json
from pathlib import Path

from gradlanes.experiment.spec import resolve_from_manifest
from gradlanes.joblog import job_logging
from gradlanes.run.lane import LanePaths, run_lane

smk = snakemake  # noqa: F821 - injected by Snakemake

with job_logging(smk.log[0]) as log:
    manifest = json.loads(Path(smk.input.manifest).read_text())
    exp = resolve_from_manifest(smk.params.lane, smk.params.settings, int(smk.wildcards.seed), manifest)
    paths = LanePaths(
        arrays=Path(smk.input.arrays),
        manifest=Path(smk.input.manifest),
        init=Path(smk.input.init),
        record=Path(smk.output.record),
        curve=Path(smk.output.curve),
        digits=Path(smk.output.digits),
        model=Path(smk.output.model),
        failure=Path(smk.params.failure),
    )
    run_lane(exp, paths)
