# gradlanes: one captured JAX gradient, run on several engines. See README.md.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"


rule all:
    input:
        dataset_arrays(),
        dataset_manifest(),
    default_target: True
