"""Snakemake glue for rule summarize; the logic lives in gradlanes.report.summary."""

import json
from pathlib import Path

from gradlanes.atomic import atomic_path, write_text
from gradlanes.joblog import job_logging
from gradlanes.report.paired import paired_comparisons, paired_section
from gradlanes.report.summary import agreement_verdicts, lane_rows, load_records, markdown, reference_errors

smk = snakemake  # noqa: F821 - injected by Snakemake

with job_logging(smk.log[0]) as log:
    records = load_records(smk.input.records)
    report = json.loads(Path(smk.input.agreement).read_text())
    frame = lane_rows(records, agreement_verdicts(report), reference_errors(report))
    with atomic_path(smk.output.parquet) as tmp:
        frame.to_parquet(tmp, index=False)
    with atomic_path(smk.output.csv) as tmp:
        frame.to_csv(tmp, index=False)
    pairs = paired_comparisons(records, smk.params.lanes)
    write_text(smk.output.markdown, markdown(frame, paired_section(pairs)))
    for pair in pairs:
        log.info(
            "paired %s vs %s: %s; %s",
            pair.candidate,
            pair.reference,
            pair.accuracy_verdict,
            pair.speed_verdict,
        )
    log.info("summarized %d records of %d lanes", len(records), len(frame))
