# The engine benchmark, not part of `all`: snakemake --cores 1 bench
# It measures into work/bench/ and publishes to results/bench/ and results/bench.md only when
# every workload finished, so a failed or killed benchmark leaves the committed tables as they were.


rule measure_bench:
    input:
        arrays=dataset_arrays(),
    output:
        records=expand("work/bench/{workload}.json", workload=BENCH_WORKLOADS),
        snakemake="work/bench/snakemake.json",
        markdown="work/bench/bench.md",
    params:
        reps=5,
        engines=bench_engines(),
    log:
        "logs/bench.log",
    script:
        "../scripts/bench.py"


rule bench:
    input:
        records=rules.measure_bench.output.records,
        snakemake=rules.measure_bench.output.snakemake,
        markdown=rules.measure_bench.output.markdown,
    output:
        "work/bench/published.json",
    params:
        folder="results/bench",
        markdown="results/bench.md",
    log:
        "logs/bench_publish.log",
    script:
        "../scripts/publish_bench.py"
