# Config validation and the path helpers every rule shares (no logic beyond naming things).
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from gradlanes.config import ConfigError, check_config

CONFIG_SCHEMA = Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"

try:
    check_config(config, CONFIG_SCHEMA)
except ConfigError as error:
    raise WorkflowError(str(error)) from None
validate(config, "../schemas/config.schema.yaml")

DATASET = config["dataset"]["name"]


def dataset_dir():
    return f"resources/{DATASET}"


def dataset_archives():
    return [f"{dataset_dir()}/{spec['name']}" for spec in config["dataset"]["files"].values()]


def dataset_provenance():
    return f"{dataset_dir()}/download.json"


def dataset_arrays():
    return f"{dataset_dir()}/{DATASET}.npz"


def dataset_manifest():
    return f"{dataset_dir()}/manifest.json"
