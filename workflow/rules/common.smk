# Config validation and the path helpers every rule shares (no logic beyond naming things).
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from gradlanes.atomic import recover_folder
from gradlanes.config import (
    ConfigError,
    check_config,
    check_dataset,
    coerce_switches,
    lane_seeds,
    select_lanes,
)
from gradlanes.data.description import DatasetDescription
from gradlanes.layout import default_experiment, published, work
from gradlanes.publish import Identity, PublishRefused, check_replaceable
from gradlanes.schemas import CONFIG, schema_path

CONFIG_SCHEMA = schema_path(CONFIG)


def pinned_content():
    return {role: spec["sha256"] for role, spec in config["dataset"]["files"].items()}


# Every check that can run before a job runs here, so bad settings fail in seconds, not after the
# download: the schema and the semantic rules here, the sizes the prepared data implies below.
coerce_switches(config)
try:
    select_lanes(config)
    check_config(config, CONFIG_SCHEMA)
except ConfigError as error:
    raise WorkflowError(str(error)) from None
validate(config, str(CONFIG_SCHEMA))

DATASET = config["dataset"]["name"]
LANES = list(config["lanes"])
SEEDS = [int(seed) for seed in config["seeds"]]

# Jobs write the work area; only rule publish writes results/<experiment>/ (gradlanes.layout).
EXPERIMENT = default_experiment(config)
WORK = work(EXPERIMENT)
PUBLISHED = published(EXPERIMENT)
# The seeds each lane runs: the experiment's, or the fewer a lane's own `seeds` names.
LANE_SEEDS = {lane: lane_seeds(config, lane) for lane in LANES}
IDENTITY = Identity(EXPERIMENT, DATASET, pinned_content(), tuple(LANES), tuple(SEEDS), LANE_SEEDS)

# Before any job: put back a published folder a killed publish left aside, and refuse at once a
# run that would end by publishing over another experiment (publish checks again at the end).
recover_folder(PUBLISHED.root)
try:
    check_replaceable(Path(PUBLISHED.root), IDENTITY, config["replace_published"])
except PublishRefused as refused:
    raise WorkflowError(str(refused)) from None


def log_path(*parts):
    """Logs of this experiment's jobs, apart from another experiment's with the same lane names."""
    return Path("logs", EXPERIMENT, *parts).as_posix()


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


def prepared_dataset():
    """The prepared dataset's description when it is there and matches the pins, else None."""
    path = Path(dataset_manifest())
    if not path.is_file():
        return None
    description = DatasetDescription.read(path)
    return description if description.content_sha256 == pinned_content() else None


if (prepared := prepared_dataset()) is not None:
    try:
        check_dataset(config, CONFIG_SCHEMA, prepared)
    except ConfigError as error:
        raise WorkflowError(str(error)) from None


# ---- programs and lanes ----------------------------------------------------------------------
from gradlanes.engines.registry import get_engine
from gradlanes.experiment.naming import model_key, program_id

wildcard_constraints:
    seed=r"\d+",


def lane_threads():
    """Every core Snakemake may use here; on a cluster the profile's set-threads decides."""
    try:
        cores = workflow.cores
    except WorkflowError:  # remote executors leave --cores unset
        return 1
    return cores if isinstance(cores, int) and 0 < cores < 4096 else 1


def lane_program_id(lane):
    return program_id(DATASET, config["lanes"][lane])


def program_lanes():
    """Lanes whose engine runs the captured program (the hand kernels run none)."""
    return [lane for lane in LANES if get_engine(config["lanes"][lane]["engine"]).runs_program]


def program_manifest(program):
    return WORK.program_manifest(program)


def all_program_manifests():
    return sorted({program_manifest(lane_program_id(lane)) for lane in program_lanes()})


def capture_settings(wildcards):
    """The settings of the first lane that runs this program (every such lane traces the same one)."""
    lane = next(lane for lane in program_lanes() if lane_program_id(lane) == wildcards.program)
    return {"lane": lane, "settings": config["lanes"][lane]}


def lane_program_input(lane):
    return {"program": program_manifest(lane_program_id(lane))} if lane in program_lanes() else {}


def lane_gpus(lane):
    return 1 if config["lanes"][lane].get("device", "cpu") == "gpu" else 0


def lane_model_key(lane):
    settings = config["lanes"][lane]
    return model_key(settings["model"], settings["hidden"], settings["init"])


def init_weights_path(lane):
    return WORK.init_weights(lane_model_key(lane))


def lane_outputs(lane, seed="{seed}"):
    return {
        "record": WORK.record(lane, seed),
        "curve": WORK.curve(lane, seed),
        "digits": WORK.digits(lane, seed),
        "model": WORK.model(lane, seed),
    }


def all_lane_records():
    return [lane_outputs(lane, seed)["record"] for lane in LANES for seed in LANE_SEEDS[lane]]


def agreement_lanes():
    """Every lane: each is checked against the float64 reference of its own program."""
    return sorted(LANES)


def agreement_inputs(wildcards):
    files = {"arrays": dataset_arrays(), "manifest": dataset_manifest()}
    for lane in agreement_lanes():
        for seed in LANE_SEEDS[lane]:
            for kind, path in lane_outputs(lane, seed).items():
                files[f"{lane}/{seed}/{kind}"] = path
            files[f"{lane}/{seed}/init"] = init_weights_path(lane).format(seed=seed)
    return files


# ---- results ---------------------------------------------------------------------------------
FIGURES = ["loss_curves", "accuracy_per_epoch", "digits", "cost_accuracy", "paired_differences"]
SUMMARY_FORMATS = ["parquet", "csv", "md"]


def minibatch_lanes():
    return [lane for lane, s in config["lanes"].items() if s["batch_size"] != "full"]


def figure_inputs(wildcards):
    files = {"arrays": dataset_arrays(), "summary": WORK.summary("parquet")}
    for lane in LANES:
        for seed in LANE_SEEDS[lane]:
            outputs = lane_outputs(lane, seed)
            files[f"{lane}/{seed}/record"] = outputs["record"]
            files[f"{lane}/{seed}/curve"] = outputs["curve"]
        files[f"{lane}/model"] = lane_outputs(lane, LANE_SEEDS[lane][0])["model"]
    return files


def publish_inputs(wildcards):
    """Every file of the experiment that is published, keyed by its path inside the folder."""
    files = {}
    for program in sorted({lane_program_id(lane) for lane in program_lanes()}):
        files[f"programs/{program}/program.json"] = program_manifest(program)
    for lane in LANES:
        for seed in LANE_SEEDS[lane]:
            for kind in ("record", "curve", "digits"):
                path = lane_outputs(lane, seed)[kind]
                files[path.removeprefix(f"{WORK.root}/")] = path
    files["checks/agreement.json"] = WORK.agreement
    for suffix in SUMMARY_FORMATS:
        files[f"summary.{suffix}"] = WORK.summary(suffix)
    for figure in FIGURES:
        files[f"figures/{figure}.png"] = WORK.figure(figure)
    return files


# ---- benchmark -------------------------------------------------------------------------------
def bench_engines():
    """Installed engines the benchmark adds rows for, beside its built-in ones (config bench.engines)."""
    return config["bench"]["engines"]


BENCH_WORKLOADS = ["tlaloc", "rusty_16x8_float64", "rusty_16x8_float32", "rusty_256x64_float64",
                   "rusty_256x64_float32", "softmax_b32", "softmax_b4096", "lenet_b128",
                   "tlaloc_gpu"]  # the GPU rows: status skipped, with the reason, without a GPU
