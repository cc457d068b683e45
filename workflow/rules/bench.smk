# The engine benchmark, not part of `all`: snakemake --cores 1 bench


rule bench:
    input:
        arrays=dataset_arrays(),
    output:
        records=expand("results/bench/{workload}.json", workload=BENCH_WORKLOADS),
        snakemake="results/bench/snakemake.json",
        markdown="results/bench.md",
    params:
        reps=5,
        engines=bench_engines(),
    log:
        "logs/bench.log",
    script:
        "../scripts/bench.py"
