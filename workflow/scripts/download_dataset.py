"""Snakemake glue for rule download_dataset; the logic lives in gradlanes.data.fetch."""

from pathlib import Path

from gradlanes.atomic import write_json
from gradlanes.data.fetch import DownloadError, FetchPolicy, FileSpec, fetch_dataset
from gradlanes.joblog import job_logging

smk = snakemake  # noqa: F821 - injected by Snakemake

with job_logging(smk.log[0], expected=(DownloadError,)) as log:
    specs = [FileSpec(role, f["name"], f["sha256"], f["bytes"]) for role, f in smk.params.files.items()]
    fetched = fetch_dataset(
        smk.params.name,
        specs,
        smk.config["dataset"]["mirrors"],
        Path(smk.output.provenance).parent,
        FetchPolicy(**smk.config["download"]),
    )
    write_json(
        smk.output.provenance, {"dataset": smk.params.name, "files": [item.as_dict() for item in fetched]}
    )
    log.info("downloaded and verified %d files", len(fetched))
