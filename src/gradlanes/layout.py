"""Where an experiment's files live: a work area the DAG writes, and the published folder.

Every job of the DAG writes under the untracked work area `work/<experiment>/`. Only the `publish`
rule writes `results/<experiment>/`, after the agreement checks passed, by swapping in a complete
copy (`gradlanes.publish`). So a failed, diverged or killed run never touches committed results,
and two experiments (another dataset, another set of lanes) never share a file.

Both trees have the same shape, so one `ExperimentLayout` names the files of either:

    <root>/programs/<program>/{program.json, *.jaxpr.txt, *.jax_export}
    <root>/runs/<lane>/seed-<seed>/{record.json, curve.parquet, digits.txt}
    <root>/checks/agreement.json
    <root>/summary.{md,csv,parquet}
    <root>/figures/<figure>.png
    <root>/published.json          (published folder only: what was published, with SHA-256s)

Trained weights and initial weights stay in the work area (`models/`, `init/`): they are large,
rebuilt by the DAG, and never committed. Machine-wide files (the benchmark, the numerics matrix,
the calibration) are not part of an experiment and stay at `results/bench*` and `results/checks/`.
This module imports nothing heavy, so Snakefiles and the CLI can use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

RESULTS = "results"
WORK = "work"
#: Names under results/ that belong to the machine, not to an experiment.
RESERVED_NAMES = frozenset({"bench", "checks", "programs", "runs", "figures"})
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
PUBLISHED_RECEIPT = "published.json"


def default_experiment(config: dict) -> str:
    """The config's `experiment`, or its dataset's name when it names none."""
    return str(config.get("experiment") or config["dataset"]["name"])


@dataclass(frozen=True)
class ExperimentLayout:
    """The files of one experiment under `root` (a work area or a published folder)."""

    root: str

    def _join(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    def program_dir(self, program: str) -> str:
        return self._join("programs", program)

    def program_manifest(self, program: str) -> str:
        return self._join("programs", program, "program.json")

    def run_dir(self, lane: str, seed: int | str = "{seed}") -> str:
        return self._join("runs", lane, f"seed-{seed}")

    def record(self, lane: str, seed: int | str = "{seed}") -> str:
        return f"{self.run_dir(lane, seed)}/record.json"

    def curve(self, lane: str, seed: int | str = "{seed}") -> str:
        return f"{self.run_dir(lane, seed)}/curve.parquet"

    def digits(self, lane: str, seed: int | str = "{seed}") -> str:
        return f"{self.run_dir(lane, seed)}/digits.txt"

    def model(self, lane: str, seed: int | str = "{seed}") -> str:
        return self._join("models", lane, f"seed-{seed}.npz")

    def init_weights(self, model_key: str, seed: int | str = "{seed}") -> str:
        return self._join("init", model_key, f"seed-{seed}.npz")

    @property
    def agreement(self) -> str:
        return self._join("checks", "agreement.json")

    def summary(self, suffix: str) -> str:
        return self._join(f"summary.{suffix}")

    def figure(self, name: str) -> str:
        return self._join("figures", f"{name}.png")

    @property
    def receipt(self) -> str:
        return self._join(PUBLISHED_RECEIPT)

    def path(self, base: Path | str = ".") -> Path:
        return Path(base) / self.root


def work(experiment: str) -> ExperimentLayout:
    """The untracked area the DAG's jobs write for `experiment`."""
    return ExperimentLayout(f"{WORK}/{experiment}")


def published(experiment: str) -> ExperimentLayout:
    """The committed folder `publish` writes for `experiment`."""
    return ExperimentLayout(f"{RESULTS}/{experiment}")


def name_errors(name: str) -> list[str]:
    if not NAME_PATTERN.match(name):
        return [f"'experiment' is {name!r}; use lower-case letters, digits, '_' or '-'"]
    if name in RESERVED_NAMES:
        return [f"'experiment' may not be {name!r}: results/{name} holds machine-wide files"]
    return []
