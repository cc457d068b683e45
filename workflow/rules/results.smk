# Tables and figures from every record; each output is part of `snakemake --report`.


rule summarize:
    input:
        records=all_lane_records(),
        agreement=WORK.agreement,
    output:
        parquet=report(WORK.summary("parquet"), caption="../report/summary_parquet.rst", category="Tables"),
        csv=report(WORK.summary("csv"), caption="../report/summary_csv.rst", category="Tables"),
        markdown=report(WORK.summary("md"), caption="../report/summary_md.rst", category="Tables"),
    params:
        lanes=LANES,
    log:
        log_path("summarize.log"),
    script:
        "../scripts/summarize.py"


rule figures:
    input:
        unpack(figure_inputs),
    output:
        **{
            figure: report(WORK.figure(figure), caption=f"../report/{figure}.rst", category="Figures")
            for figure in FIGURES
        },
    params:
        lanes=LANES,
        seeds=LANE_SEEDS,
        minibatch=minibatch_lanes(),
    log:
        log_path("figures.log"),
    script:
        "../scripts/figures.py"
