# gradlanes: one captured JAX gradient, run on several engines. See README.md.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/program.smk"
include: "workflow/rules/lanes.smk"
include: "workflow/rules/checks.smk"
include: "workflow/rules/results.smk"
include: "workflow/rules/publish.smk"
include: "workflow/rules/bench.smk"


report: "workflow/report/workflow.rst"


# Copies and the target rule run where snakemake runs, not as cluster jobs.
localrules:
    all,
    publish,
    bench,


rule all:
    input:
        WORK.receipt,
    default_target: True
