"""`make calibrate`: measure how far float32 runs drift apart, to set the calibrated agreement bounds.

Adam divides by sqrt(v) + eps, so rounding-sized differences become update-sized ones, and over
hundreds of steps float32 runs on different kernels drift apart chaotically: the early-loss bound
and the end-of-run pair bounds cannot be derived from one step's rounding. This runs a config's
lanes and agreement rule on held-out seeds (not the seeds whose results are committed) under several
kernel cells and datasets, with every calibrated bound opened wide, and writes
`results/checks/calibration[-<name>].json` (every value) and `.md` (the spread and the bounds it
supports). `--lanes` calibrates only some lanes (and the pairs among them) and merges their values
into the existing files, so a new lane pair does not re-run every other lane. A bound is 3 x the
worst value measured, never below 3 x the quantity's resolution
(one test image for accuracy and predictions, one float32 ulp for a relative loss, one unit for the
early losses), so a check whose every calibration value was 0 still allows one differing image.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import yaml
from cells import Cell, split_runnable
from matrix import REPO, SHARED_MNIST, SNAKEMAKE, agreement_report

from gradlanes.layout import work
from gradlanes.run.agreement import PAIR_BOUNDS

# Calibration runs are an experiment of their own, so they never share files with a published one.
EXPERIMENT = work("calibration")

#: check name -> the config key of its bound
PAIR_KINDS = {check: key for key, check in PAIR_BOUNDS.items()}
DEFAULT_CELLS = "Haswell-xla_default-2t,Sandybridge-AVX-1t,Nehalem-AVX2-2t"
SAFETY = 3.0


def wide_open(config: dict, seeds: list[int], mirror: str | None) -> dict:
    agreement = config["agreement"]
    override = {
        "experiment": "calibration",
        "seeds": seeds,
        "agreement": {
            "early_steps": agreement.get("early_steps", 10),
            "early_loss_u": 1e12,
            "pairs": {
                name: {
                    **pair,
                    "final_loss_rel": 1e12,
                    "predictions_equal_min": 0.0,
                    "accuracy_points_max": 100,
                }
                for name, pair in agreement["pairs"].items()
            },
        },
    }
    # A lane that runs fewer of the experiment's seeds runs every held-out one here.
    override["lanes"] = {lane: {"seeds": seeds} for lane, s in config["lanes"].items() if "seeds" in s}
    if mirror:
        override["dataset"] = {"mirrors": [mirror]}
    return override


def only_lanes(config: dict, lanes: list[str]) -> dict:
    """`config` with only `lanes` and the agreement pairs between them (a new config, not an overlay:
    an overlay cannot remove the other lanes)."""
    unknown = sorted(set(lanes) - set(config["lanes"]))
    if unknown:
        raise SystemExit(f"--lanes names {unknown}, not lanes of the config: {sorted(config['lanes'])}")
    pairs = {
        name: pair
        for name, pair in config["agreement"]["pairs"].items()
        if pair["reference"] in lanes and pair["candidate"] in lanes
    }
    return {
        **config,
        "lanes": {lane: settings for lane, settings in config["lanes"].items() if lane in lanes},
        "agreement": {**config["agreement"], "pairs": pairs},
    }


def merged(previous: dict, fresh: dict[str, list[dict]], lanes: list[str]) -> dict[str, list[dict]]:
    """`previous` values with those of `lanes` (their early losses, their pairs) replaced by `fresh`."""

    def lane_of(entry: dict) -> str:
        return entry["check"].split("/", 1)[0]

    values = {
        key: [e for e in entries if not (key == "early_loss" and lane_of(e) in lanes)]
        for key, entries in previous.items()
        if key not in fresh or key == "early_loss"
    }
    for key, entries in fresh.items():
        values[key] = values.get(key, []) + entries
    return values


def cell_by_name(name: str) -> Cell:
    coretype, isa, threads = name.split("-")
    return Cell(coretype, None if isa == "xla_default" else isa, int(threads.removesuffix("t")))


def resolution(kind: str, test_images: int) -> float:
    """The smallest non-zero value the quantity can take: what a calibrated bound never goes below."""
    return {
        "early_loss": 1.0,
        "final_loss_rel": 2.0**-23,
        "predictions_equal": 1.0 / test_images,
        "accuracy_points": 100.0 / test_images,
    }[kind]


def _round_up(value: float) -> float:
    digits = 1 - math.floor(math.log10(value))
    return math.ceil(round(value * 10**digits, 9)) / 10**digits  # round(): 0.3 * 100 is 30.000000000000004


def bound_for(kind: str, entries: list[dict]) -> float:
    """SAFETY x the worst value (or x the resolution, if larger), rounded up to two digits."""
    floor = max(resolution(kind, e["test_images"]) for e in entries)
    if kind == "predictions_equal":
        worst = max(1.0 - e["measured"] for e in entries)
        return max(0.0, 1.0 - _round_up(SAFETY * max(worst, floor)))
    return _round_up(SAFETY * max(max(e["measured"] for e in entries), floor))


def collect(folder: Path, run: str, cell: Cell, report: dict, values: dict) -> None:
    for check in report["checks"]:
        kind = check["name"].rsplit("/", 1)[-1]
        if check["measured"] is None or (kind != "early_loss" and kind not in PAIR_KINDS):
            continue
        lane, seed = check["lanes"][0], check["seed"]
        record = json.loads((folder / EXPERIMENT.record(lane, seed)).read_text())
        key = "early_loss" if kind == "early_loss" else f"{check['check']}/{kind}"
        values[key].append(
            {
                "run": run,
                "cell": cell.name,
                "check": check["name"],
                "measured": check["measured"],
                "test_images": record["accuracy"]["total"],
            }
        )


def _whole(previous: dict) -> dict:
    """The one part a file written before `--lanes` existed describes: every lane of its config."""
    lanes = sorted({e["check"].split("/", 1)[0] for e in previous["values"].get("early_loss", [])})
    return {key: previous[key] for key in ("runs", "seeds", "cells")} | {"lanes": lanes}


def markdown(config_name: str, parts: list[dict], values, bounds) -> str:
    rows = []
    for key, entries in values.items():
        measured = sorted(e["measured"] for e in entries)
        rows.append(
            f"| `{key}` | {len(measured)} | {measured[0]:.4g} | {measured[len(measured) // 2]:.4g} | "
            f"{measured[-1]:.4g} | {bounds[key]:.6g} |"
        )
    return "\n".join(
        [
            f"# Calibration of the agreement bounds that cannot be derived ({config_name})",
            "",
            f"Written by `tests/numerics/calibrate.py` from the lanes of `{config_name}`, every calibrated "
            "bound opened wide, under kernel cells named OpenBLAS core type - XLA ISA cap - cores:",
            "",
            *(
                f"- {', '.join(f'`{lane}`' for lane in p['lanes'])}: held-out seeds "
                f"{', '.join(map(str, p['seeds']))} ({', '.join(p['runs'])}) under {', '.join(p['cells'])}"
                for p in parts
            ),
            "",
            "Each bound "
            f"is {SAFETY:g} x the worst value measured (for equal predictions, {SAFETY:g} x the worst "
            "share of differing predictions), never below 3 x the quantity's resolution (one test image, "
            "one float32 ulp, one float32 unit), rounded up to two digits. `early_loss` is in float32 "
            "units of the loss against the float64 trajectory, pooled over every lane. Raw values: the "
            "`.json` beside this file.",
            "",
            "| check | values | min | median | max | bound it supports |",
            "| --- | --- | --- | --- | --- | --- |",
            *rows,
            "",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "config.yaml"))
    parser.add_argument("--overlay", action="append", default=[], help="another dataset's config overlay")
    parser.add_argument("--seeds", default="10,11,12,13,14", help="held-out seeds (not the committed ones)")
    parser.add_argument("--cells", default=DEFAULT_CELLS)
    parser.add_argument("--name", default="", help="suffix of the output files, e.g. 'subset'")
    parser.add_argument("--workdir", default=str(REPO / ".numerics" / "calibrate"))
    parser.add_argument("--mirror", default=str(SHARED_MNIST), help="MNIST folder or URL for the base config")
    parser.add_argument("--overlay-cells", help="cells for the overlay datasets (default: --cells)")
    parser.add_argument("--reuse", action="store_true", help="reuse runs in --workdir that have a report")
    parser.add_argument("--lanes", help="only these lanes (comma-separated) and their pairs, merged in")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from gradlanes.atomic import write_json, write_text

    args.config = str(Path(args.config).resolve())  # snakemake runs in each cell's folder
    config = yaml.safe_load(Path(args.config).read_text())
    lanes = args.lanes.split(",") if args.lanes else None
    if lanes:
        config = only_lanes(config, lanes)
    seeds = [int(s) for s in args.seeds.split(",")]
    runnable, skipped = split_runnable([cell_by_name(n) for n in args.cells.split(",")])
    runs = {"mnist": None, **{Path(o).stem: Path(o).resolve() for o in args.overlay}}
    overlay_cells, _ = split_runnable(
        [cell_by_name(n) for n in (args.overlay_cells or args.cells).split(",")]
    )
    values: dict[str, list[dict]] = defaultdict(list)
    for run, overlay in runs.items():
        for cell in overlay_cells if overlay else runnable:
            folder = (
                Path(args.workdir)
                / ((args.name or "default") + ("-" + "-".join(lanes) if lanes else ""))
                / (cell.name if run == "mnist" else f"{run}-{cell.name}")
            )
            if not (args.reuse and agreement_report(folder, "calibration") is not None):
                folder.mkdir(parents=True, exist_ok=True)
                wide = folder / "calibration.yaml"
                wide.write_text(yaml.safe_dump(wide_open(config, seeds, None if overlay else args.mirror)))
                base = args.config
                if lanes:
                    base = str(folder / "lanes.yaml")
                    Path(base).write_text(yaml.safe_dump(config, sort_keys=False))
                configfiles = [base, *([str(overlay)] if overlay else []), str(wide)]
                argv = [str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "--directory", str(folder),
                        "--configfile", *configfiles, "--cores", str(cell.threads),
                        "--forcerun", "agreement", EXPERIMENT.agreement]  # fmt: skip
                with open(folder / "calibrate.log", "w") as log:
                    rc = subprocess.run(
                        cell.command(argv), cwd=folder, env=cell.env(), stdout=log, stderr=subprocess.STDOUT
                    ).returncode
                if rc:
                    print(f"{run} {cell.name}: the run failed (rc {rc}); see {folder / 'calibrate.log'}")
                    return 1
            report = agreement_report(folder, "calibration")
            if report is None:
                print(f"{run} {cell.name}: no agreement report in {folder}")
                return 1
            collect(folder, run, cell, report, values)
            print(f"{run} {cell.name}: {sum(len(v) for v in values.values())} values so far", flush=True)
    stem = REPO / "results" / "checks" / ("calibration" + (f"-{args.name}" if args.name else ""))
    cells = sorted({c.name for c in runnable} | ({c.name for c in overlay_cells} if args.overlay else set()))
    part = {"lanes": lanes or sorted(config["lanes"]), "runs": list(runs), "seeds": seeds, "cells": cells}
    parts = [part]
    if lanes and stem.with_suffix(".json").is_file():
        previous = json.loads(stem.with_suffix(".json").read_text())
        values = merged(previous["values"], values, lanes)
        parts = [p for p in previous.get("parts", [_whole(previous)]) if p["lanes"] != part["lanes"]]
        parts.append(part)
    bounds = {key: bound_for(key.rsplit("/", 1)[-1], entries) for key, entries in values.items()}
    suggested = {"early_loss_u": bounds.get("early_loss"), "pairs": defaultdict(dict)}
    for key, bound in bounds.items():
        if key != "early_loss":
            pair, kind = key.rsplit("/", 1)
            suggested["pairs"][pair][PAIR_KINDS[kind]] = bound
    write_json(
        stem.with_suffix(".json"),
        {
            "config": str(Path(args.config).resolve().relative_to(REPO)),
            "runs": list(runs),
            "seeds": seeds,
            "cells": cells,
            "skipped_cells": {c.name: why for c, why in skipped.items()},
            "parts": parts,
            "safety": SAFETY,
            "suggested_bounds": suggested,
            "values": values,
        },
    )
    config_name = str(Path(args.config).relative_to(REPO))
    write_text(stem.with_suffix(".md"), markdown(config_name, parts, values, bounds))
    print(json.dumps(suggested, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
