# Download the dataset's archives from the configured mirrors, verify them, parse them into arrays.


rule download_dataset:
    output:
        archives=dataset_archives(),
        provenance=dataset_provenance(),
    params:
        dataset=config["dataset"],
        download=config["download"],
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
        dataset=config["dataset"],
    log:
        "logs/prepare_dataset.log",
    script:
        "../scripts/prepare_dataset.py"
