"""Snakemake glue for rule bench: publish a finished benchmark (gradlanes.publish)."""

from pathlib import Path

from gradlanes.atomic import write_json, write_text
from gradlanes.joblog import job_logging
from gradlanes.publish import publish_folder

smk = snakemake  # noqa: F821 - injected by Snakemake

with job_logging(smk.log[0]) as log:
    records = [Path(path) for path in [*smk.input.records, smk.input.snakemake]]
    receipt = publish_folder({path.name: path for path in records}, Path(smk.params.folder))
    # The tables sit beside the folder (README links results/bench.md): replaced after it, each
    # step atomic, both only once every workload has finished.
    write_text(smk.params.markdown, Path(smk.input.markdown).read_text())
    write_json(smk.output[0], receipt)
    log.info(
        "published %d benchmark records to %s and %s", len(records), smk.params.folder, smk.params.markdown
    )
