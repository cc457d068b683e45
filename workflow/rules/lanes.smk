# One rule per lane, `train_<lane>`, so one lane can be rerun alone:
#   snakemake --cores all --forcerun train_host


rule init_weights:
    input:
        manifest=dataset_manifest(),
    output:
        WORK.init_weights("{model_key}"),
    log:
        log_path("init_weights/{model_key}/seed-{seed}.log"),
    script:
        "../scripts/init_weights.py"


for lane in LANES:

    rule:
        name:
            f"train_{lane}"
        input:
            arrays=dataset_arrays(),
            manifest=dataset_manifest(),
            init=init_weights_path(lane),
            **lane_program_input(lane),
        output:
            **lane_outputs(lane),
        params:
            lane=lane,
            settings=config["lanes"][lane],
            failure=log_path(f"train/{lane}/seed-{{seed}}.failed.json"),
        log:
            log_path(f"train/{lane}/seed-{{seed}}.log"),
        # Max RSS and wall time per job: what the cluster profile's resources are sized from.
        benchmark:
            log_path(f"benchmarks/train/{lane}/seed-{{seed}}.tsv")
        # Each lane gets the whole machine, so lanes never share cores while they are timed.
        threads: lane_threads()
        # A GPU lane asks for one GPU (the SLURM executor turns it into --gpus=1); others for none.
        resources:
            gpu=lane_gpus(lane),
        script:
            "../scripts/train_lane.py"
