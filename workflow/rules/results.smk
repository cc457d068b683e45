# Tables and figures from every record; each output is part of `snakemake --report`.


rule summarize:
    input:
        records=all_lane_records(),
        agreement="results/checks/agreement.json",
    output:
        parquet=report("results/summary.parquet", caption="../report/summary_parquet.rst", category="Tables"),
        csv=report("results/summary.csv", caption="../report/summary_csv.rst", category="Tables"),
        markdown=report("results/summary.md", caption="../report/summary_md.rst", category="Tables"),
    log:
        "logs/summarize.log",
    script:
        "../scripts/summarize.py"


rule figures:
    input:
        unpack(figure_inputs),
    output:
        loss_curves=report("results/figures/loss_curves.png", caption="../report/loss_curves.rst", category="Figures"),
        accuracy_per_epoch=report(
            "results/figures/accuracy_per_epoch.png", caption="../report/accuracy_per_epoch.rst", category="Figures"
        ),
        digits=report("results/figures/digits.png", caption="../report/digits.rst", category="Figures"),
        cost_accuracy=report("results/figures/cost_accuracy.png", caption="../report/cost_accuracy.rst", category="Figures"),
    params:
        lanes=LANES,
        seeds=SEEDS,
        minibatch=minibatch_lanes(),
    log:
        "logs/figures.log",
    script:
        "../scripts/figures.py"
