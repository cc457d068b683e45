"""File-name identities shared by the Snakefile and the lanes, importable without JAX.

The Snakefile is parsed on every `snakemake` call, including dry runs and up-to-date checks; keeping
what it imports free of JAX keeps planning fast.
"""

from __future__ import annotations

import functools
import hashlib
import json

import yaml

from gradlanes.schemas import CONFIG, schema_path


def model_key(name: str, hidden: int, init: str) -> str:
    """Lanes with equal keys and seeds share one initial-weights file."""
    return f"{name}-h{hidden}-{init}" if name == "mlp" else f"{name}-{init}"


def parse_model_key(key: str) -> tuple[str, int, str]:
    name, _, rest = key.partition("-")
    if name == "mlp":
        width, _, init = rest.partition("-")
        return name, int(width[1:]), init
    return name, 128, rest


#: The lane settings that say what is trained; two lanes equal in these run one experiment, and
#: only such lanes may be compared in an agreement pair.
EXPERIMENT_SETTINGS = (
    "model",
    "hidden",
    "init",
    "loss",
    "optimizer",
    "learning_rate",
    "schedule",
    "batch_size",
    "steps",
    "epochs",
    "train_images",
    "test_images",
    "matmul_precision",
)
#: The lane settings that define the captured program: the experiment's, without the initial
#: weights (they are program inputs), with how many steps run per dispatch. Engine, device, eval
#: cadence and logging play no part; lanes equal in these run one program.
PROGRAM_SETTINGS = (*(key for key in EXPERIMENT_SETTINGS if key != "init"), "fuse_steps")


@functools.cache
def lane_defaults() -> dict:
    """The config schema's default for each lane setting that has one."""
    schema = yaml.safe_load(schema_path(CONFIG).read_text())
    properties = schema["$defs"]["lane"]["properties"]
    return {key: spec["default"] for key, spec in properties.items() if "default" in spec}


def program_id(dataset: str, settings: dict) -> str:
    """A readable, stable name for the program a lane's settings capture.

    The readable part says what the program trains; the hash covers every program setting (schema
    defaults filled in), so two lanes share a program folder exactly when they trace one program.
    """
    defaults = lane_defaults()
    defining = {key: settings.get(key, defaults.get(key)) for key in PROGRAM_SETTINGS}
    digest = hashlib.sha256(json.dumps([dataset, defining], sort_keys=True).encode()).hexdigest()[:10]
    model = f"mlp{defining['hidden']}" if settings["model"] == "mlp" else settings["model"]
    return f"{model}-{settings['loss']}-{settings['optimizer']}-{digest}"
