"""Snakemake glue for rule prepare_dataset; the logic lives in gradlanes.data.prepare."""

from pathlib import Path

from gradlanes.data.idx import IdxFormatError
from gradlanes.data.prepare import prepare_dataset
from gradlanes.joblog import job_logging

smk = snakemake  # noqa: F821 - injected by Snakemake

with job_logging(smk.log[0], expected=(IdxFormatError,)) as log:
    manifest = prepare_dataset(
        smk.params.name,
        smk.params.files,
        smk.params.classes,
        Path(smk.input.provenance).parent,
        smk.input.provenance,
        smk.output.arrays,
        smk.output.manifest,
    )
    log.info("prepared %s: %s in %.3f s", smk.params.name, manifest["counts"], manifest["prepare_s"])
