"""Snakemake glue for rule capture_program; the logic lives in gradlanes.program.artifact."""

from pathlib import Path

from gradlanes.data.description import DatasetDescription
from gradlanes.experiment.spec import resolve
from gradlanes.joblog import job_logging
from gradlanes.program.artifact import capture_with_artifact

smk = snakemake  # noqa: F821 - injected by Snakemake

with job_logging(smk.log[0]) as log:
    dataset = DatasetDescription.read(smk.input.manifest)
    exp = resolve(smk.params.capture["lane"], smk.params.capture["settings"], 0, dataset)
    if exp.program_id != smk.wildcards.program:
        raise RuntimeError(
            f"lane {exp.lane} resolves to program {exp.program_id}, not {smk.wildcards.program}"
        )
    program = capture_with_artifact(exp)
    artifact = program.artifact
    manifest = artifact.write(Path(smk.output.manifest).parent, program)
    sizes = ", ".join(f"{name} {entry['bytes']:,} B" for name, entry in manifest["files"].items())
    log.info("captured program %s, fingerprint %s: %s", exp.program_id, artifact.fingerprint, sizes)
