"""Snakemake glue for rule bench; the method lives in gradlanes.bench."""

import contextlib
from pathlib import Path

from gradlanes.bench.__main__ import main

smk = snakemake  # noqa: F821 - injected by Snakemake

with open(smk.log[0], "w") as log, contextlib.redirect_stderr(log), contextlib.redirect_stdout(log):
    main(
        [
            "--arrays",
            smk.input.arrays,
            "--out-dir",
            str(Path(smk.output.snakemake).parent),
            "--markdown",
            smk.output.markdown,
            "--reps",
            str(smk.params.reps),
            "--snakemake-dir",
            ".",
            *[arg for engine in smk.params.engines for arg in ("--engine", engine)],
        ]
    )
