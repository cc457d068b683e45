# Cross-lane agreement: the proof that lanes run the same program. Fails the DAG on a failed check.


rule agreement:
    input:
        unpack(agreement_inputs),
    output:
        "results/checks/agreement.json",
    params:
        checks=config["agreement"],
        lanes={lane: config["lanes"][lane] for lane in agreement_lanes()},
        seeds=SEEDS,
    log:
        "logs/agreement.log",
    script:
        "../scripts/agreement.py"
