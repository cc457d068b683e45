"""The CI subset's accuracy floors, derived from what was measured rather than picked.

CI runs the subset (`.test/config.yaml`) on seed 0 only, on whatever CPU it lands on. What can
move seed 0's accuracy there is the CPU's kernels: they round differently, and the few steps of
the slice carry that drift into the trained weights. So a floor comes from seed 0 under every
kernel cell of the numerics matrix (`results/checks/numerics.json`, which records each lane's
accuracy per cell), less the accuracy gap the agreement checks allow two lanes of one program
that round differently (the subset's calibrated `accuracy_points_max`, the most any pair of the
slice may differ): a CPU not in the matrix rounds differently again, by as much as two lanes do.

Seeds 1-4 are measured too, at the default kernels, and written beside the floors. They are not
what CI runs; they show how far a floor sits below what another draw of the initial weights and
batch order gives, so a reader can see that the floor would catch a regression of a point or two
(a floor below the seed spread would pass a change that costs more than a reseed does).

Writes results/checks/slice-floors.json (read by tests/test_pipeline.py) and slice-floors.md.
`--reuse-seeds` rederives from the committed seed sweep (after a new numerics matrix).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "src"), str(Path(__file__).parent)]  # also when imported by a test
from matrix import lane_accuracies  # noqa: E402 - the matrix's reader of a run's lane records

from gradlanes.layout import work  # noqa: E402

SUBSET = REPO / ".test" / "config.yaml"
NUMERICS = REPO / "results" / "checks" / "numerics.json"
FLOORS = REPO / "results" / "checks" / "slice-floors.json"
SHARED_MNIST = REPO.parent / "shared" / "datasets" / "mnist"
SWEEP_SEEDS = [0, 1, 2, 3, 4]


def experiment_of(settings: dict) -> str:
    """A floor per experiment (model and loss), so a new lane of an existing one needs no new floor."""
    return f"{settings['model']}/{settings['loss']}"


def subset_lanes() -> dict[str, dict]:
    return yaml.safe_load(SUBSET.read_text())["lanes"]


def margin_points() -> float:
    """The largest accuracy gap (points) the subset's agreement checks allow any pair of lanes."""
    pairs = yaml.safe_load(SUBSET.read_text())["agreement"]["pairs"]
    return max(float(pair["accuracy_points_max"]) for pair in pairs.values())


def floor_of(seed0_values: list[float], margin: float) -> float:
    """The lowest seed-0 accuracy over the cells, less the margin, rounded down to 0.1 point."""
    return math.floor(round((min(seed0_values) - margin) * 10, 6)) / 10


def derive(cells: dict[str, dict[str, float | None]], seeds: dict[str, dict[str, float]], margin: float):
    """Per experiment: the seed-0 values per cell, the seed sweep, the spread and the floor."""
    lanes = subset_lanes()
    experiments: dict[str, dict] = {}
    for lane, settings in lanes.items():
        seed0 = [per_lane[lane] for per_lane in cells.values() if per_lane.get(lane) is not None]
        if not seed0:
            continue  # a lane no cell ran (the GPU lane on a CPU machine)
        entry = experiments.setdefault(experiment_of(settings), {"lanes": [], "seed0": [], "seeds": []})
        entry["lanes"].append(lane)
        entry["seed0"] += seed0
        entry["seeds"] += [value for value in seeds.get(lane, {}).values() if value is not None]
    derived = {}
    for name, entry in experiments.items():
        seed0, swept = entry["seed0"], entry["seeds"]
        derived[name] = {
            "lanes": entry["lanes"],
            "floor": floor_of(seed0, margin),
            "seed0_min": min(seed0),
            "seed0_max": max(seed0),
            "seed0_values": len(seed0),
            "seeds_min": min(swept) if swept else None,
            "seeds_max": max(swept) if swept else None,
            "seeds_stdev": round(statistics.stdev(swept), 3) if len(swept) > 1 else None,
        }
    return derived


def cell_accuracies() -> dict[str, dict[str, float | None]]:
    cells = json.loads(NUMERICS.read_text())["cells"]
    missing = [cell["cell"] for cell in cells if "accuracy" not in cell]
    if missing:
        raise SystemExit(
            f"{NUMERICS} has no accuracies for {', '.join(missing)}: rerun `make test-numerics` first"
        )
    return {cell["cell"]: cell["accuracy"] for cell in cells}


def sweep_seeds(workdir: Path, mirror: str) -> dict[str, dict[str, float]]:
    """Each lane's accuracy on seeds 0-4 at this machine's default kernels."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    python = Path(sys.executable)
    seeds_file = workdir / "seeds.yaml"  # --config would pass the seeds as strings
    seeds_file.write_text(yaml.safe_dump({"seeds": SWEEP_SEEDS}))
    argv = [
        str(python.parent / "snakemake"),
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(SUBSET),
        str(seeds_file),
        "--config",
        f'dataset={{"mirrors": ["{mirror}"]}}',
        "--cores",
        "all",
        work("mnist").agreement,
    ]
    log = workdir / "sweep.log"
    with open(log, "w") as handle:
        if subprocess.run(argv, cwd=workdir, stdout=handle, stderr=subprocess.STDOUT).returncode:
            raise SystemExit(f"the seed sweep failed; see {log}")
    found: dict[str, dict[str, float]] = {}
    for seed in SWEEP_SEEDS:
        for lane, percent in lane_accuracies(workdir, seed=seed).items():
            if percent is not None:
                found.setdefault(lane, {})[str(seed)] = percent
    return found


def markdown(report: dict) -> str:
    lines = [
        "# CI-subset accuracy floors",
        "",
        "Written by `tests/numerics/floors.py`. CI runs the subset (`.test/config.yaml`) on seed 0; "
        "each floor is the lowest seed-0 accuracy measured under the numerics matrix's kernel cells "
        f"({report['cells']} cells, `numerics.json`) less {report['margin_points']} points, the "
        "largest accuracy gap the subset's agreement checks allow two lanes that round differently "
        "(a CPU not in the matrix rounds differently again), rounded down to 0.1 point. Seeds 0-4 at "
        f"the default kernels ({report['seeds_machine']}) show the spread of another draw of weights "
        "and batch order; CI does not run them. 1,000 test images: one image is 0.1 point.",
        "",
        "| experiment | lanes | seed 0 over the cells (values) | floor | below seed 0 | "
        "seeds 0-4 (min – max, stdev) |",
        "| --- | --- | --- | ---: | ---: | --- |",
    ]
    for name, entry in report["experiments"].items():
        seeds = (
            f"{entry['seeds_min']:.1f} – {entry['seeds_max']:.1f} %, {entry['seeds_stdev']:.2f}"
            if entry["seeds_min"] is not None
            else "—"
        )
        lines.append(
            f"| {name} | {', '.join(f'`{lane}`' for lane in entry['lanes'])} | "
            f"{entry['seed0_min']:.1f} – {entry['seed0_max']:.1f} % ({entry['seed0_values']}) | "
            f"{entry['floor']:.1f} % | {entry['seed0_min'] - entry['floor']:.1f} | {seeds} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=str(REPO / ".numerics" / "seed-sweep"))
    parser.add_argument("--mirror", default=str(SHARED_MNIST))
    parser.add_argument("--reuse-seeds", action="store_true", help="keep the committed seed sweep")
    args = parser.parse_args()
    from gradlanes.atomic import write_json, write_text
    from gradlanes.environment import cpu_model

    cells = cell_accuracies()
    if args.reuse_seeds:
        previous = json.loads(FLOORS.read_text())
        seeds, machine = previous["seeds"], previous["seeds_machine"]
    else:
        seeds, machine = sweep_seeds(Path(args.workdir), args.mirror), cpu_model()
    margin = margin_points()
    report = {
        "margin_points": margin,
        "cells": len(cells),
        "cell_accuracy": cells,
        "seeds": seeds,
        "seeds_machine": machine,
        "experiments": derive(cells, seeds, margin),
    }
    write_json(FLOORS, report)
    write_text(FLOORS.with_suffix(".md"), markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
