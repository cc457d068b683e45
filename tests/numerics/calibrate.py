"""`make calibrate`: measure how far float32 runs drift apart, to set the calibrated agreement bounds.

Over hundreds of Adam steps float32 runs on different kernels drift apart chaotically, so the
end-of-run bounds (final loss, equal predictions, accuracy gap) and the early-trajectory bound
cannot be derived from one step's rounding. This runs a config's lanes and agreement rule on
held-out seeds (not the seeds whose results are committed) under several kernel cells, with
every calibrated bound opened wide, collects every measured value, and writes
`results/checks/calibration[-<name>].json` (the data) and `.md` (spread and the bounds it supports:
3 x the worst value measured; for equal predictions, 3 x the worst share of differing ones).
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
from matrix import PYTHON, REPO, SHARED_MNIST, SNAKEMAKE, agreement_report

CALIBRATED = ("early_loss", "final_loss_rel", "predictions_equal", "accuracy_points")
DEFAULT_CELLS = "Haswell-xla_default-2t,Sandybridge-AVX-1t,Nehalem-AVX2-2t"
SAFETY = 3.0


def wide_open(config: dict, seeds: list[int], mirror: str) -> dict:
    agreement = config["agreement"]
    return {
        "seeds": seeds,
        "dataset": {"mirrors": [mirror]},
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


def cell_by_name(name: str) -> Cell:
    coretype, isa, threads = name.split("-")
    return Cell(coretype, None if isa == "xla_default" else isa, int(threads.removesuffix("t")))


def suggest(kind: str, values: list[float]) -> float:
    """The calibrated bound: SAFETY x the worst measured, rounded up to two significant digits."""
    if kind == "predictions_equal":
        worst = max(1 - v for v in values)
        return max(0.0, 1 - _round_up(SAFETY * max(worst, 1e-4)))
    return _round_up(SAFETY * max(max(values), 1e-12))


def _round_up(value: float) -> float:
    digits = 1 - math.floor(math.log10(value))
    return math.ceil(value * 10**digits) / 10**digits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "config.yaml"))
    parser.add_argument("--seeds", default="10,11,12,13,14", help="held-out seeds (not the committed ones)")
    parser.add_argument("--cells", default=DEFAULT_CELLS)
    parser.add_argument("--name", default="", help="suffix of the output files, e.g. 'subset'")
    parser.add_argument("--workdir", default=str(REPO / ".numerics" / "calibrate"))
    parser.add_argument("--mirror", default=str(SHARED_MNIST))
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from gradlanes.atomic import write_json, write_text

    config = yaml.safe_load(Path(args.config).read_text())
    seeds = [int(s) for s in args.seeds.split(",")]
    runnable, skipped = split_runnable([cell_by_name(n) for n in args.cells.split(",")])
    values: dict[str, list[dict]] = defaultdict(list)
    for cell in runnable:
        folder = Path(args.workdir) / (args.name or "default") / cell.name
        folder.mkdir(parents=True, exist_ok=True)
        override = folder / "calibration.yaml"
        override.write_text(yaml.safe_dump(wide_open(config, seeds, args.mirror)))
        argv = [
            str(SNAKEMAKE),
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            str(folder),
            "--configfile",
            args.config,
            str(override),
            "--cores",
            str(cell.threads),
            "--forcerun",
            "agreement",
            "results/checks/agreement.json",
        ]
        with open(folder / "calibrate.log", "w") as log:
            rc = subprocess.run(
                cell.command(argv), cwd=folder, env=cell.env(), stdout=log, stderr=subprocess.STDOUT
            ).returncode
        report = agreement_report(folder)
        if rc or report is None:
            print(f"{cell.name}: the run failed (rc {rc}); see {folder / 'calibrate.log'}", file=sys.stderr)
            return 1
        for check in report["checks"]:
            kind = check["name"].rsplit("/", 1)[-1]
            if kind in CALIBRATED and check["measured"] is not None:
                values[kind].append(
                    {"cell": cell.name, "check": check["name"], "measured": check["measured"]}
                )
        print(f"{cell.name}: {sum(len(v) for v in values.values())} values so far", flush=True)
    suggested = {kind: suggest(kind, [v["measured"] for v in entries]) for kind, entries in values.items()}
    stem = REPO / "results" / "checks" / ("calibration" + (f"-{args.name}" if args.name else ""))
    write_json(
        stem.with_suffix(".json"),
        {
            "config": str(Path(args.config).resolve().relative_to(REPO)),
            "seeds": seeds,
            "cells": [c.name for c in runnable],
            "skipped_cells": {c.name: why for c, why in skipped.items()},
            "safety": SAFETY,
            "suggested_bounds": suggested,
            "values": values,
            "python": str(PYTHON),
        },
    )
    rows = []
    for kind, entries in values.items():
        measured = sorted(v["measured"] for v in entries)
        median = measured[len(measured) // 2]
        rows.append(
            f"| {kind} | {len(measured)} | {measured[0]:.4g} | {median:.4g} | "
            f"{measured[-1]:.4g} | {suggested[kind]:.4g} |"
        )
    write_text(
        stem.with_suffix(".md"),
        "\n".join(
            [
                f"# Calibration of the end-of-run agreement bounds ({Path(args.config).name})",
                "",
                f"Written by `tests/numerics/calibrate.py`: the lanes of `{Path(args.config).name}` on "
                f"held-out seeds {', '.join(map(str, seeds))} under the kernel cells "
                f"{', '.join(c.name for c in runnable)} (OpenBLAS core type - XLA ISA cap - cores), every "
                f"calibrated bound opened wide. The bound each spread supports is {SAFETY:g} x the worst "
                f"value measured (for equal predictions, {SAFETY:g} x the worst share of differing "
                "predictions), rounded up to two digits. Raw values: the `.json` beside this file.",
                "",
                "| check | values | min | median | max | bound it supports |",
                "| --- | --- | --- | --- | --- | --- |",
                *rows,
                "",
            ]
        ),
    )
    print(json.dumps(suggested, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
