"""Snakemake glue for rule publish; the logic lives in gradlanes.publish."""

from pathlib import Path

from gradlanes.atomic import write_json
from gradlanes.data.description import DatasetDescription
from gradlanes.joblog import job_logging
from gradlanes.publish import Identity, publish

smk = snakemake  # noqa: F821 - injected by Snakemake

with job_logging(smk.log[0]) as log:
    dataset = DatasetDescription.read(smk.input.dataset_manifest)
    identity = Identity(
        experiment=smk.params.experiment,
        dataset=dataset.name,
        dataset_sha256=dataset.content_sha256,
        lanes=tuple(smk.params.lanes),
        seeds=tuple(int(seed) for seed in smk.params.seeds),
        lane_seeds={lane: tuple(seeds) for lane, seeds in smk.params.lane_seeds.items()},
    )
    files = {name: Path(path) for name, path in smk.input.items() if name != "dataset_manifest"}
    receipt = publish(files, Path(smk.params.target), identity, replace=bool(smk.params.replace))
    write_json(smk.output[0], receipt)
    log.info("published %d files of experiment %s to %s", len(receipt["files"]), identity.experiment,
             smk.params.target)  # fmt: skip
