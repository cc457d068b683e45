# Config validation and the path helpers every rule shares (no logic beyond naming things).
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from gradlanes.config import ConfigError, check_config
from gradlanes.schemas import CONFIG, schema_path

CONFIG_SCHEMA = schema_path(CONFIG)

try:
    check_config(config, CONFIG_SCHEMA)
except ConfigError as error:
    raise WorkflowError(str(error)) from None
validate(config, str(CONFIG_SCHEMA))

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


# ---- lanes -----------------------------------------------------------------------------------
from gradlanes.experiment.naming import model_key

LANES = list(config["lanes"])
SEEDS = [int(seed) for seed in config["seeds"]]


wildcard_constraints:
    seed=r"\d+",


def lane_threads():
    """Every core Snakemake may use here; on a cluster the profile's set-threads decides."""
    try:
        cores = workflow.cores
    except WorkflowError:  # remote executors leave --cores unset
        return 1
    return cores if isinstance(cores, int) and 0 < cores < 4096 else 1


def lane_model_key(lane):
    settings = config["lanes"][lane]
    return model_key(settings["model"], settings["hidden"], settings["init"])


def init_weights_path(lane):
    return f"resources/init/{lane_model_key(lane)}/seed-{{seed}}.npz"


def run_dir(lane, seed="{seed}"):
    return f"results/runs/{lane}/seed-{seed}"


def lane_outputs(lane, seed="{seed}"):
    return {
        "record": f"{run_dir(lane, seed)}/record.json",
        "curve": f"{run_dir(lane, seed)}/curve.parquet",
        "digits": f"{run_dir(lane, seed)}/digits.txt",
        "model": f"resources/models/{lane}/seed-{seed}.npz",
    }


def all_lane_records():
    return [lane_outputs(lane, seed)["record"] for lane in LANES for seed in SEEDS]


def agreement_lanes():
    """Every lane: each is checked against the float64 reference of its own program."""
    return sorted(LANES)


def agreement_inputs(wildcards):
    files = {"arrays": dataset_arrays(), "manifest": dataset_manifest()}
    for lane in agreement_lanes():
        for seed in SEEDS:
            for kind, path in lane_outputs(lane, seed).items():
                files[f"{lane}/{seed}/{kind}"] = path
            files[f"{lane}/{seed}/init"] = init_weights_path(lane).format(seed=seed)
    return files


# ---- results ---------------------------------------------------------------------------------
FIGURES = ["loss_curves", "accuracy_per_epoch", "digits", "cost_accuracy"]


def minibatch_lanes():
    return [lane for lane, s in config["lanes"].items() if s["batch_size"] != "full"]


def figure_inputs(wildcards):
    first_seed = SEEDS[0]
    files = {"arrays": dataset_arrays(), "summary": "results/summary.parquet"}
    for lane in LANES:
        for seed in SEEDS:
            outputs = lane_outputs(lane, seed)
            files[f"{lane}/{seed}/record"] = outputs["record"]
            files[f"{lane}/{seed}/curve"] = outputs["curve"]
        files[f"{lane}/model"] = lane_outputs(lane, first_seed)["model"]
    return files


# ---- benchmark -------------------------------------------------------------------------------
BENCH_WORKLOADS = ["tlaloc", "rusty_16x8_float64", "rusty_16x8_float32", "rusty_256x64_float64",
                   "rusty_256x64_float32", "softmax_b32", "softmax_b4096"]
