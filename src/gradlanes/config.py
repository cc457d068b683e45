"""Validate the experiment config and say exactly which key is wrong and what is allowed.

Two passes: the JSON schema (`gradlanes/schemas/config.schema.yaml`), whose errors are rewritten
into one line per problem naming the dotted key and the allowed values or range; then the rules a
schema cannot express (a lane needs exactly one of steps/epochs, its engine must be installed and
able to run its settings, agreement checks must compare lanes that run the same experiment). What
an engine can run is asked of its plugin (`gradlanes.engines.registry`), never of its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from gradlanes.engines.registry import UnknownEngine, get_engine
from gradlanes.experiment.naming import EXPERIMENT_SETTINGS
from gradlanes.layout import name_errors


class ConfigError(ValueError):
    """The configuration cannot be run; the message lists every problem found."""


def load_schema(path: str | Path) -> dict:
    return yaml.safe_load(Path(path).read_text())


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def _resolve(schema: Mapping, root: Mapping) -> Mapping:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        return {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def describe(schema: Mapping, root: Mapping) -> str:
    """A short human description of what a (sub)schema allows."""
    schema = _resolve(schema, root)
    for combinator in ("oneOf", "anyOf"):
        if combinator in schema:
            return " or ".join(describe(option, root) for option in schema[combinator])
    if "const" in schema:
        return repr(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    kind = schema.get("type", "value")
    kind = {
        "integer": "an integer",
        "number": "a number",
        "string": "a string",
        "array": "a list",
        "object": "a mapping",
        "boolean": "true/false",
    }.get(kind, kind)
    bounds = []
    if "exclusiveMinimum" in schema:
        bounds.append(f"> {schema['exclusiveMinimum']}")
    if "minimum" in schema:
        bounds.append(f">= {schema['minimum']}")
    if "maximum" in schema:
        bounds.append(f"<= {schema['maximum']}")
    if "minItems" in schema:
        bounds.append(f"with at least {schema['minItems']} item(s)")
    if "pattern" in schema:
        bounds.append(f"matching {schema['pattern']}")
    return " ".join([kind, *bounds])


def _explain(error: jsonschema.ValidationError, root: Mapping) -> str:
    key = _key(error.absolute_path)
    if error.validator == "additionalProperties" and error.validator_value is False:
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        return "; ".join(
            f"unknown key '{_key([*error.absolute_path, name])}' "
            f"(allowed under '{key}': {', '.join(allowed)})"
            for name in unknown
        )
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        what = _resolve(error.schema, root).get("properties", {}).get(missing, {}).get("description")
        meaning = f": {' '.join(what.split())}" if what else ""
        return f"missing key '{_key([*error.absolute_path, missing])}'{meaning}"
    if error.validator == "propertyNames":
        return f"name {error.instance!r} under '{key}' must match {error.validator_value['pattern']}"
    if error.validator == "uniqueItems":
        return f"'{key}' must not repeat an item; got {error.instance!r}"
    return f"'{key}' must be {describe(error.schema, root)}; got {error.instance!r}"


def schema_errors(config: Mapping, schema: Mapping) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    # A failing oneOf also reports its branches; the oneOf line alone says it better.
    return list(dict.fromkeys(_explain(e, schema) for e in errors))


#: Settings two lanes must share for their results to be comparable in an agreement check.
SHARED_EXPERIMENT = EXPERIMENT_SETTINGS


def uninstalled(key: str, engine: str) -> list[str]:
    """The problem with config key `key` naming `engine`, if no such engine is installed."""
    try:
        get_engine(engine)
    except UnknownEngine as unknown:
        return [f"'{key}': {unknown}"]
    return []


def engine_errors(lane: str, settings: Mapping) -> list[str]:
    """Whether the lane's engine is installed and can run the lane's settings."""
    missing = uninstalled(f"lanes.{lane}.engine", settings["engine"])
    return missing or get_engine(settings["engine"]).settings_errors(lane, settings)


def known_steps(lane: Mapping) -> int | None:
    """The lane's step count when the config alone fixes it (no dataset needed), else None."""
    if "steps" in lane:
        return int(lane["steps"])
    if "epochs" in lane and lane.get("batch_size") == "full":  # one step per epoch
        return int(lane["epochs"])
    batch, train = lane.get("batch_size"), lane.get("train_images", "all")
    if "epochs" in lane and isinstance(batch, int) and isinstance(train, int) and batch <= train:
        return int(lane["epochs"]) * (train // batch)
    return None


def size_errors(name: str, lane: Mapping) -> list[str]:
    """Sizes that cannot work whatever the dataset: they would otherwise fail inside the job."""
    problems = []
    batch, train = lane.get("batch_size"), lane.get("train_images", "all")
    if isinstance(batch, int) and isinstance(train, int) and batch > train:
        problems.append(f"'lanes.{name}.batch_size' is {batch}, larger than train_images {train}")
    steps, fuse = known_steps(lane), int(lane.get("fuse_steps", 1))
    if steps is not None and steps % fuse:
        problems.append(
            f"'lanes.{name}.fuse_steps' is {fuse}, which does not divide its {steps} steps; "
            f"pick a divisor of {steps} (one compiled program must cover every dispatch)"
        )
    return problems


def dataset_errors(config: Mapping, dataset) -> list[str]:
    """Resolve every lane against a prepared dataset's description (sizes, step counts).

    Run before any job when the dataset is already prepared, so that a size the dataset cannot
    satisfy (more images than it has, a fuse_steps that does not divide an epoch-derived step
    count) is refused up front instead of after download and initialisation.
    """
    from gradlanes.experiment.spec import resolve

    problems = []
    for name, lane in config.get("lanes", {}).items():
        try:
            resolve(name, lane, 0, dataset)
        except ValueError as error:
            problems.append(f"lane '{name}' on dataset {dataset.name!r}: {error}")
    return problems


def lane_seeds(config: Mapping, lane: str) -> list[int]:
    """The seeds a lane runs: its own `seeds`, else every seed of the experiment, in config order."""
    return [int(seed) for seed in config["lanes"][lane].get("seeds", config["seeds"])]


def seed_errors(config: Mapping, name: str) -> list[str]:
    extra = [seed for seed in lane_seeds(config, name) if seed not in config.get("seeds", [])]
    if not extra:
        return []
    return [
        f"'lanes.{name}.seeds' names seed(s) {', '.join(map(str, extra))} that the experiment's "
        f"'seeds' ({', '.join(map(str, config.get('seeds', [])))}) does not list; a lane runs some of "
        "the experiment's seeds"
    ]


def semantic_errors(config: Mapping) -> list[str]:
    problems = name_errors(config["experiment"]) if "experiment" in config else []
    lanes = config.get("lanes", {})
    for name, lane in lanes.items():
        if ("steps" in lane) == ("epochs" in lane):
            problems.append(f"lane '{name}' needs exactly one of 'steps' or 'epochs'")
        problems += engine_errors(name, lane)
        problems += size_errors(name, lane)
        problems += seed_errors(config, name)
    for engine in config.get("bench", {}).get("engines", []):
        problems += uninstalled("bench.engines", engine)
    for name, check in config.get("agreement", {}).get("pairs", {}).items():
        pair = [check.get("reference"), check.get("candidate")]
        missing = [lane for lane in pair if lane not in lanes]
        if missing:
            problems.append(
                f"'agreement.pairs.{name}' names lane(s) {', '.join(map(repr, missing))} not under "
                f"'lanes' (lanes: {', '.join(lanes)})"
            )
            continue
        reference, candidate = (lanes[lane] for lane in pair)
        differing = [k for k in SHARED_EXPERIMENT if reference.get(k) != candidate.get(k)]
        if differing:
            problems.append(
                f"'agreement.pairs.{name}' compares lanes that differ in {', '.join(differing)}; "
                "an agreement check needs the same experiment on both lanes"
            )
        elif not set(lane_seeds(config, pair[0])) & set(lane_seeds(config, pair[1])):
            problems.append(
                f"'agreement.pairs.{name}' compares lanes {pair[0]!r} and {pair[1]!r} that share no seed; "
                "a pair is compared seed by seed"
            )
    return problems


#: Agreement keys of the layout before the float64 reference, and what replaced them.
RETIRED_PAIR_KEYS = ("step0_loss_rel", "step0_grad_rel", "trained_grad_rel", "early_loss_rel", "early_steps")


def retired_agreement_errors(config: Mapping) -> list[str]:
    """An agreement section in the old layout gets one line saying how to move it, not a key dump."""
    problems = []
    for name, value in (config.get("agreement") or {}).items():
        if isinstance(value, Mapping) and "reference" in value:
            retired = [k for k in RETIRED_PAIR_KEYS if k in value]
            problems.append(
                f"'agreement.{name}' is a pair in the old layout: move it under 'agreement.pairs'"
                + (
                    f" and drop {', '.join(retired)} (every lane is now checked against the float64 "
                    "reference with derived bounds; 'agreement.early_loss_u' bounds the early losses)"
                    if retired
                    else ""
                )
            )
    return problems


#: Top-level switches users set on the command line, where `--config KEY=true` arrives as a string.
COMMAND_LINE_SWITCHES = ("replace_published",)
TRUE_WORDS, FALSE_WORDS = ("true", "yes"), ("false", "no")


def coerce_switches(config: dict) -> None:
    """Turn `--config replace_published=true` (Snakemake passes the string 'true') into a boolean;
    anything else is left for the schema to name."""
    for key in COMMAND_LINE_SWITCHES:
        value = config.get(key)
        if isinstance(value, str) and value.lower() in TRUE_WORDS + FALSE_WORDS:
            config[key] = value.lower() in TRUE_WORDS
    if isinstance(config.get("experiment"), int):  # --config experiment=2024 arrives as a number
        config["experiment"] = str(config["experiment"])


def select_lanes(config: dict) -> None:
    """Keep the lanes `only_lanes` names, and the agreement pairs between them; drop the rest.

    Run before validation, so a pair with a lane left out is dropped rather than refused: a run of
    some lanes (the GPU lanes on a GPU machine, one engine on a cluster node) then trains, checks
    and publishes those alone, under its own `experiment` name. A name that is not a lane is
    refused here; anything but a list of names is left for the schema to name.
    """
    chosen = config.get("only_lanes")
    if not isinstance(chosen, list) or not all(isinstance(lane, str) for lane in chosen):
        return
    lanes = config.get("lanes") or {}
    unknown = [lane for lane in chosen if lane not in lanes]
    if unknown:
        raise ConfigError(
            f"'only_lanes' names lane(s) {', '.join(map(repr, unknown))} not under 'lanes' "
            f"(lanes: {', '.join(lanes)})"
        )
    config["lanes"] = {name: settings for name, settings in lanes.items() if name in chosen}
    pairs = (config.get("agreement") or {}).get("pairs")
    if isinstance(pairs, dict):
        config["agreement"]["pairs"] = {
            name: pair
            for name, pair in pairs.items()
            if not isinstance(pair, Mapping) or {pair.get("reference"), pair.get("candidate")} <= set(chosen)
        }


def check_config(config: Mapping, schema_path: str | Path, dataset=None) -> None:
    """Raise `ConfigError` listing every problem in `config`, one line each.

    `dataset` (a `DatasetDescription`), when the data is already prepared, adds the checks that
    need its sizes.
    """
    schema = load_schema(schema_path)
    problems = retired_agreement_errors(config) or schema_errors(config, schema)
    if not problems:
        problems = semantic_errors(config)
    _raise_if_any(problems, schema_path)
    if dataset is not None:
        check_dataset(config, schema_path, dataset)


def check_dataset(config: Mapping, schema_path: str | Path, dataset) -> None:
    """Raise `ConfigError` for what a config already checked asks of a prepared `dataset`."""
    _raise_if_any(dataset_errors(config, dataset), schema_path)


def _raise_if_any(problems: list[str], schema_path: str | Path) -> None:
    if problems:
        raise ConfigError(
            "config.yaml (with any --config/--configfile overrides) has "
            f"{len(problems)} problem(s):\n"
            + "\n".join(f"  - {p}" for p in problems)
            + f"\nSee {schema_path} for every key, its meaning and its allowed values."
        )
