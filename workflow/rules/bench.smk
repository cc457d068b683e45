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
    log:
        "logs/bench.log",
    shell:
        "python -m gradlanes.bench --arrays {input.arrays} --out-dir results/bench"
        " --markdown {output.markdown} --reps {params.reps} --snakemake-dir . > {log} 2>&1"
