"""Snakemake glue for rule init_weights; the logic lives in gradlanes.models."""

from gradlanes.data.description import DatasetDescription
from gradlanes.experiment.models import ModelSpec, save_initial_params
from gradlanes.experiment.naming import parse_model_key
from gradlanes.joblog import job_logging

smk = snakemake  # noqa: F821 - injected by Snakemake

with job_logging(smk.log[0]) as log:
    dataset = DatasetDescription.read(smk.input.manifest)
    name, hidden, init = parse_model_key(smk.wildcards.model_key)
    spec = ModelSpec.for_dataset(name, dataset, hidden=hidden, init=init)
    save_initial_params(spec, int(smk.wildcards.seed), smk.output[0])
    log.info("initial weights for %s, seed %s: %s", spec.key, smk.wildcards.seed, spec.shapes())
