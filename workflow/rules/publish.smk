# Publish: copy the experiment's records, checks, tables and figures into results/<experiment>/,
# and only here. It runs after agreement passed (agreement.json is an input, and the agreement
# rule fails without writing it), builds a complete copy beside the published folder and swaps it
# in at once, so a failed, diverged or killed run leaves the committed results as they were.
# Its output is a receipt in the work area: Snakemake deletes a failed job's outputs, so nothing
# under results/ may be one.


rule publish:
    input:
        unpack(publish_inputs),
        dataset_manifest=dataset_manifest(),
    output:
        WORK.receipt,
    params:
        experiment=EXPERIMENT,
        target=PUBLISHED.root,
        lanes=LANES,
        seeds=SEEDS,
        lane_seeds=LANE_SEEDS,
        replace=config["replace_published"],
    log:
        log_path("publish.log"),
    script:
        "../scripts/publish.py"
