# Download the dataset's archives from the configured mirrors, verify them, parse them into arrays.


rule download_dataset:
    output:
        archives=dataset_archives(),
        provenance=dataset_provenance(),
    # Only the pinned files are params (a change re-downloads); mirrors and timeouts are read from
    # the config by the script, so pointing at another mirror does not invalidate verified files.
    params:
        name=DATASET,
        files=config["dataset"]["files"],
    log:
        "logs/download_dataset.log",
    message:
        "Downloading and verifying {DATASET} into resources/"
    script:
        "../scripts/download_dataset.py"


rule prepare_dataset:
    input:
        archives=dataset_archives(),
        provenance=dataset_provenance(),
    output:
        arrays=dataset_arrays(),
        manifest=dataset_manifest(),
    params:
        name=DATASET,
        files=config["dataset"]["files"],
        classes=config["dataset"]["classes"],
    log:
        "logs/prepare_dataset.log",
    script:
        "../scripts/prepare_dataset.py"
