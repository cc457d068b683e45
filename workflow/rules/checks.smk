# Agreement: every lane against the float64 reference of its program, and configured pairs end to
# end. The proof that lanes run the same program; fails the DAG on a failed check.


rule agreement:
    input:
        unpack(agreement_inputs),
    output:
        WORK.agreement,
    params:
        agreement=config["agreement"],
        lanes={lane: config["lanes"][lane] for lane in agreement_lanes()},
        seeds=LANE_SEEDS,
    log:
        log_path("agreement.log"),
    script:
        "../scripts/agreement.py"
