"""Agreement checks: the evidence that every lane ran the same program, in units that mean something.

Per lane and seed, against the float64 reference of the lane's own captured program
(`Interpreter(program, widen=True)`), on the seed's first batch:
- `step0_loss`, `step0_grad`: the engine's loss and gradient at the initial weights;
- `trained_loss`, `trained_grad`: the same at the lane's own trained weights, where no weight is
  zero and every path is live;
each in float32 units of that quantity (`gradlanes.run.numerics`) with a bound derived from the
program's reduction lengths, and ReLU decisions that float32 cannot make granted
(`gradlanes.run.kinks`);
- `early_loss`: the lane's first training losses (from its curve) against the float64 reference
  trained for the same steps on the same batches, in float32 units of the loss; Adam's division by
  sqrt(v) + eps amplifies rounding along a trajectory, so this bound is calibrated, not derived.

Per configured pair of lanes running one experiment, at the end of a long run where float32 runs
have drifted apart chaotically: final-loss relative difference, share of equal test predictions
and accuracy gap, with bounds calibrated from the spread measured across kernels and seeds
(`results/checks/calibration.md`).

Every check reports its measured value, bound and the fraction of the bound used; a lane that was
skipped makes its checks `skipped`, never `passed`.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from gradlanes.data.dataset import Dataset
from gradlanes.engines.registry import create_engine
from gradlanes.experiment.batching import batch_order, first_batch
from gradlanes.experiment.spec import Experiment
from gradlanes.program.artifact import capture_with_artifact
from gradlanes.program.capture import CapturedProgram
from gradlanes.program.interpreter import Interpreter
from gradlanes.run.kinks import grant_kink_decisions, kink_decisions
from gradlanes.run.modelfile import load_model
from gradlanes.run.numerics import (
    FLOAT32_U,
    MATMUL_UNIT_ROUNDOFF,
    per_example_scale,
    probabilistic_bound,
    reduction_chain,
    scalar_error,
    scaled_error,
)

log = logging.getLogger(__name__)


@dataclass
class Check:
    """One measured quantity beside its bound."""

    name: str
    check: str  # the lane (reference checks) or the pair's name
    seed: int
    lanes: list[str]
    measured: float | None
    bound: float | None  # None only when skipped before the bound could be derived
    relation: str = "<="
    unit: str = "float32 units"
    status: str = "ok"  # ok, failed or skipped
    reason: str | None = None
    details: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status == "skipped":
            return
        within = self.measured <= self.bound if self.relation == "<=" else self.measured >= self.bound
        self.status = "ok" if within and math.isfinite(self.measured) else "failed"

    # The properties hand over to module functions: mutmut mutates no decorated function, and
    # these two numbers are in every agreement record.
    @property
    def passed(self) -> bool | None:
        return check_passed(self)

    @property
    def fraction_of_bound(self) -> float | None:
        """How much of its bound the check used: 1 is the edge (for >=, of the allowed shortfall)."""
        return fraction_of_bound(self)

    def as_dict(self) -> dict:
        entry = asdict(self)
        entry.update(passed=self.passed, fraction_of_bound=self.fraction_of_bound)
        if self.measured is not None and self.relation == "<=":
            entry["margin"] = self.bound - self.measured
        elif self.measured is not None:
            entry["margin"] = self.measured - self.bound
        else:
            entry["margin"] = None
        return entry


def check_passed(check: Check) -> bool | None:
    return None if check.status == "skipped" else check.status == "ok"


def fraction_of_bound(check: Check) -> float | None:
    """How much of its bound `check` used: 1 is the edge (for >=, of the allowed shortfall)."""
    if check.measured is None:
        return None
    if check.relation == "<=":
        if check.bound:
            return check.measured / check.bound
        return 0.0 if check.measured == 0 else math.inf
    allowed = 1.0 - check.bound
    if allowed:
        return (1.0 - check.measured) / allowed
    return 0.0 if check.measured >= 1 else math.inf


def skipped(name: str, check: str, seed: int, lanes: list[str], bound: float | None, reason: str) -> Check:
    return Check(name, check, seed, lanes, None, bound, status="skipped", reason=reason)


@dataclass(frozen=True)
class LaneFiles:
    record: Path
    curve: Path
    model: Path


def lane_batch(exp: Experiment, data: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """The seed's first training batch: what every lane's first step saw."""
    return data.train_batch(first_batch(exp.seed, exp.train_images, exp.batch_size))


def unit_ratio(exp: Experiment) -> float:
    """The lane's matmul unit roundoff over float32's: 1 at `highest`, 8,192 at TF32."""
    return MATMUL_UNIT_ROUNDOFF[exp.matmul_precision] / FLOAT32_U


@dataclass(frozen=True)
class ReferencePoint:
    """The float64 reference's loss and gradient at some weights and batch, and their error scales.

    What the checks compare every lane against; it depends on the program, weights and batch alone,
    so lanes that share them (Tlaloc's four lanes at their common initial weights) share one.
    """

    loss: float
    leaves: list[np.ndarray]
    loss_scale: float
    grad_scale: dict
    kinks: tuple[np.ndarray, np.ndarray] | None  # the ReLU decisions, and which float32 cannot make


#: Reference points already computed in this process, keyed by what determines them.
_reference_points: dict[tuple, ReferencePoint] = {}


def reference_point(
    exp: Experiment, program: CapturedProgram, reference: Interpreter, params: dict, batch, key: tuple | None
) -> ReferencePoint:
    """The reference at `params` on `batch`; computed once per `key` (None: not shared)."""
    if key is not None and key in _reference_points:
        return _reference_points[key]
    images, labels = batch
    loss, *leaves = reference(*program.flatten_params(params), images, labels)
    loss_scale, grad_scale = per_example_scale(exp, params, images, labels)
    point = ReferencePoint(float(loss), leaves, loss_scale, grad_scale, kink_decisions(exp, params, images))
    if key is not None:
        _reference_points[key] = point
    return point


def point_checks(
    exp: Experiment,
    program: CapturedProgram,
    engine,
    reference: Interpreter,
    label: str,
    params: dict,
    data: Dataset,
    shared_key: tuple | None = None,
) -> list[Check]:
    """Loss and gradient of the lane's engine at `params` against the float64 reference."""
    images, labels = lane_batch(exp, data)
    point = reference_point(exp, program, reference, params, (images, labels), shared_key)
    loss, grads = engine.loss_and_grad(params, images, labels)
    ref_grads, undecidable, granted = grant_kink_decisions(
        exp, params, images, labels, grads, program.unflatten_params(point.leaves), point.kinks
    )
    chains = reduction_chain(program.gradient.jaxpr)
    flat = program.flatten_params
    prefix, lanes = f"{exp.lane}/seed-{exp.seed}", [exp.lane]
    return [
        Check(
            f"{prefix}/{label}_loss",
            exp.lane,
            exp.seed,
            lanes,
            scalar_error(loss, point.loss, point.loss_scale),
            probabilistic_bound(chains[0], unit_ratio(exp)),
            details={"reduction_chain": chains[0], "scale": point.loss_scale},
        ),
        Check(
            f"{prefix}/{label}_grad",
            exp.lane,
            exp.seed,
            lanes,
            scaled_error(flat(grads), flat(ref_grads), flat(point.grad_scale)),
            probabilistic_bound(max(chains[1:]), unit_ratio(exp)),
            details={
                "reduction_chain": max(chains[1:]),
                "kinks_undecidable": undecidable,
                "kinks_granted": granted,
                "error_without_granting": scaled_error(flat(grads), point.leaves, flat(point.grad_scale)),
            },
        ),
    ]


_trajectories: dict[tuple, list[float]] = {}


def reference_trajectory(exp: Experiment, program: CapturedProgram, params: dict, data: Dataset, steps: int):
    """The float64 reference's first `steps` training losses, on the lane's own batches.

    Lanes of one program, initial weights and seed share one (it depends on nothing else).
    """
    key = (exp.program_id, exp.model.key, exp.seed, steps)
    if key not in _trajectories:
        _trajectories[key] = _trajectory(exp, program, params, data, steps)
    return _trajectories[key]


def _trajectory(exp: Experiment, program: CapturedProgram, params: dict, data: Dataset, steps: int):
    step = Interpreter(program.step, "step program (float64 reference)", widen=True)
    init = Interpreter(program.init_state, "optimizer-init program (float64 reference)", widen=True)
    leaves = program.flatten_params(params)
    carry = [*leaves, *init(*leaves)]
    losses = []
    for indices in batch_order(exp.seed, exp.train_images, exp.batch_size, steps):
        *carry, loss = step(*carry, *data.train_batch(indices))
        losses.append(float(loss))
    return losses


#: Programs traced in this process: every seed, and every lane of one experiment, runs the same
#: program, so each is traced and exported once. Keyed by the program id (the lane settings that
#: shape the program) and the data's input and class counts, which the id, made before the data
#: is read, cannot include.
_programs: dict[tuple[str, int, int], CapturedProgram] = {}


def shared_program(exp: Experiment) -> CapturedProgram:
    """The lane's captured program with its artifact, traced once per program in this process."""
    key = (exp.program_id, exp.model.inputs, exp.model.classes)
    if key not in _programs:
        _programs[key] = capture_with_artifact(exp)
    return _programs[key]


_engines: dict[tuple[str, str], object] = {}
_references: dict[str, Interpreter] = {}


def shared_engine(exp: Experiment, program: CapturedProgram):
    """The lane's engine, built (and compiled) once for all its seeds: they run one program."""
    key = (exp.lane, exp.program_id)
    if key not in _engines:
        _engines[key] = create_engine(exp, program)
    return _engines[key]


def shared_reference(exp: Experiment, program: CapturedProgram) -> Interpreter:
    """The float64 reference of the program's gradient, planned once per program."""
    if exp.program_id not in _references:
        _references[exp.program_id] = Interpreter(
            program.gradient, "gradient program (float64 reference)", widen=True
        )
    return _references[exp.program_id]


def reference_checks(
    exp: Experiment,
    files: LaneFiles,
    initial: dict,
    data: Dataset,
    early_steps: int,
    early_bound: float | None,
) -> list[Check]:
    """Every float64-reference check of one lane and seed."""
    record = json.loads(Path(files.record).read_text())
    names = ["step0_loss", "step0_grad", "trained_loss", "trained_grad"]
    if early_bound is not None:
        names.append("early_loss")
    prefix = f"{exp.lane}/seed-{exp.seed}"
    if record["status"] != "ok":
        reason = f"lane {exp.lane} was {record['status']}: {record['reason']}"
        return [skipped(f"{prefix}/{n}", exp.lane, exp.seed, [exp.lane], None, reason) for n in names]
    program = shared_program(exp)
    engine = shared_engine(exp, program)
    reference = shared_reference(exp, program)
    trained = load_model(files.model).params
    checks = []
    if record["program"] is not None:  # the lane ran the very program the reference evaluates
        ran = record["program"]["fingerprint"]
        checks.append(
            same_program(
                f"{prefix}/program", exp.lane, exp.seed, [exp.lane], ran, program.artifact.fingerprint
            )
        )
    # Every lane of a program starts from its seed's weights of the model: one reference for all.
    initial_key = (exp.program_id, exp.model.key, exp.seed)
    checks += point_checks(exp, program, engine, reference, "step0", initial, data, initial_key)
    checks += point_checks(exp, program, engine, reference, "trained", trained, data)
    if early_bound is not None:
        count = min(early_steps, exp.steps)
        lane_losses = train_losses(files.curve)[:count]
        ref_losses = reference_trajectory(exp, program, initial, data, count)
        errors = [scalar_error(c, r, r) for c, r in zip(lane_losses, ref_losses, strict=True)]
        worst = int(np.argmax(errors))
        checks.append(
            Check(
                f"{prefix}/early_loss",
                exp.lane,
                exp.seed,
                [exp.lane],
                errors[worst],
                early_bound,
                details={"steps": count, "worst_step": worst + 1, "per_step": errors},
            )
        )
    return checks


def same_program(name: str, check: str, seed: int, lanes: list[str], *fingerprints: str) -> Check:
    """1 when every fingerprint is equal (one program ran), else 0; the bound asks for 1."""
    equal = float(len(set(fingerprints)) == 1)
    return Check(
        name, check, seed, lanes, equal, 1.0, ">=", "equal", details={"fingerprints": list(fingerprints)}
    )


def relative(candidate: float, reference: float) -> float:
    return abs(candidate - reference) / max(abs(reference), np.finfo(np.float64).tiny)


@dataclass(frozen=True)
class PairMeasure:
    """One end-of-run comparison of a pair: its check name, relation to its bound, unit, and how."""

    check: str
    relation: str
    unit: str
    measure: Callable[[list[dict], list[LaneFiles]], float]  # (reference, candidate) records, files


def _equal_predictions(records: list[dict], files: list[LaneFiles]) -> float:
    reference, candidate = (load_model(f.model).predictions for f in files)
    return float(np.mean(reference == candidate))


def _final_loss_relative(records: list[dict], files: list[LaneFiles]) -> float:
    reference, candidate = records
    return relative(candidate["loss"]["final"], reference["loss"]["final"])


def _accuracy_points(records: list[dict], files: list[LaneFiles]) -> float:
    reference, candidate = records
    return abs(candidate["accuracy"]["percent"] - reference["accuracy"]["percent"])


#: The pair bounds a config may set (all calibrated), each with what it bounds.
PAIR_MEASURES = {
    "final_loss_rel": PairMeasure(
        "final_loss_rel",
        "<=",
        "relative",
        _final_loss_relative,
    ),
    "predictions_equal_min": PairMeasure("predictions_equal", ">=", "share", _equal_predictions),
    "accuracy_points_max": PairMeasure(
        "accuracy_points",
        "<=",
        "points",
        _accuracy_points,
    ),
}
PAIR_BOUNDS = {key: measure.check for key, measure in PAIR_MEASURES.items()}


def pair_program_check(prefix: str, name: str, seed: int, lanes: list[str], records: list[dict]) -> Check:
    """Both lanes ran one captured program (skipped where a lane runs none, like the hand kernels)."""
    programs = [r["program"] for r in records]
    if None in programs:
        reason = f"lane {lanes[programs.index(None)]} runs no captured program"
        return skipped(f"{prefix}/same_program", name, seed, lanes, 1.0, reason)
    return same_program(f"{prefix}/same_program", name, seed, lanes, *(p["fingerprint"] for p in programs))


def pair_checks(
    name: str, bounds: dict, reference: Experiment, candidate: Experiment, outputs: Callable[[str], LaneFiles]
) -> list[Check]:
    """The end-of-run checks of one configured pair for one seed: same program, calibrated bounds."""
    prefix, seed = f"{name}/seed-{reference.seed}", reference.seed
    lanes = [reference.lane, candidate.lane]
    files = [outputs(lane) for lane in lanes]
    records = [json.loads(Path(f.record).read_text()) for f in files]
    wanted = [key for key in PAIR_MEASURES if bounds.get(key) is not None]
    not_ok = [r for r in records if r["status"] != "ok"]
    if not_ok:
        reason = f"lane {not_ok[0]['lane']} was {not_ok[0]['status']}: {not_ok[0]['reason']}"
        return [
            skipped(f"{prefix}/{PAIR_BOUNDS[key]}", name, seed, lanes, bounds[key], reason) for key in wanted
        ]
    checks = [pair_program_check(prefix, name, seed, lanes, records)]
    for key in wanted:
        pair = PAIR_MEASURES[key]
        measured = pair.measure(records, files)
        checks.append(
            Check(
                f"{prefix}/{pair.check}", name, seed, lanes, measured, bounds[key], pair.relation, pair.unit
            )
        )
    return checks


def train_losses(curve_path) -> np.ndarray:
    curve = pd.read_parquet(curve_path)
    return curve.loc[curve["kind"] == "train"].sort_values("step")["loss"].to_numpy()


#: The float64-reference checks shown per lane in the summary: the loss and the gradient.
REFERENCE_KINDS = ("step0_loss", "step0_grad", "trained_loss", "trained_grad", "early_loss")


def summarize(checks: list[Check]) -> dict:
    """The agreement report: verdict, counts, every check, and each lane's float64-reference errors."""
    failed = [c for c in checks if c.status == "failed"]
    reference: dict[str, dict[str, dict]] = {}
    for c in checks:
        kind = c.name.rsplit("/", 1)[-1]
        if kind in REFERENCE_KINDS and c.check in c.lanes and len(c.lanes) == 1:
            entry = reference.setdefault(c.check, {}).setdefault(f"seed-{c.seed}", {})
            entry[kind] = {"measured": c.measured, "bound": c.bound, "status": c.status}
    return {
        "passed": not failed,
        "unit": "float64-reference checks: float32 units, u = 2^-24 times the quantity's error scale",
        "counts": {s: sum(c.status == s for c in checks) for s in ("ok", "failed", "skipped")},
        "worst_fraction_of_bound": max(
            (c.fraction_of_bound for c in checks if c.measured is not None), default=None
        ),
        "float64_reference": reference,
        "checks": [c.as_dict() for c in checks],
    }
