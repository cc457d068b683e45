"""Agreement checks: the evidence that different lanes ran the same program.

For a (reference, candidate) pair of lanes that share an experiment, per seed:
- step 0, on the same weights and batch, recomputed here with both engines: loss relative
  difference and gradient relative difference ||g_c - g_r|| / ||g_r||; the gradient is compared
  again at the reference lane's trained weights, where no weight is zero and every path is live;
- the first N training losses (from the lanes' curves): the largest relative difference;
- end of run: final loss relative difference, share of equal test predictions, accuracy gap in points.
Each check reports its measured value beside its bound; a lane that was skipped makes its checks
`skipped`, never `passed`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from gradlanes.batching import first_batch
from gradlanes.capture import capture
from gradlanes.dataset import Dataset
from gradlanes.engines import make_engine
from gradlanes.experiment import Experiment
from gradlanes.lane import load_model

log = logging.getLogger(__name__)
BOUNDS = (
    "step0_loss_rel",
    "step0_grad_rel",
    "trained_grad_rel",
    "early_loss_rel",
    "final_loss_rel",
    "predictions_equal_min",
    "accuracy_points_max",
)


def relative(candidate: float, reference: float) -> float:
    return abs(candidate - reference) / max(abs(reference), np.finfo(np.float64).tiny)


def gradient_relative(candidate: dict, reference: dict) -> float:
    diff = np.sqrt(sum(np.sum((np.float64(candidate[k]) - reference[k]) ** 2) for k in reference))
    norm = np.sqrt(sum(np.sum(np.float64(reference[k]) ** 2) for k in reference))
    return float(diff / norm)


def gradients_at(exp: Experiment, weights: list[dict], data: Dataset) -> list[tuple[float, dict]]:
    """Loss and gradient of `exp`'s engine at each set of weights, on the seed's first batch."""
    indices = first_batch(exp.seed, exp.train_images, exp.batch_size)
    images = data.train_images if indices is None else data.train_images[indices]
    labels = data.train_labels if indices is None else data.train_labels[indices]
    program = None if exp.engine == "handkernel" else capture(exp)
    engine = make_engine(exp.engine, exp.device, program, exp.learning_rate)
    return [engine.loss_and_grad(params, images, labels) for params in weights]


def _entry(
    name: str, measured: float | None, bound: float, at_most: bool = True, skipped: str | None = None
) -> dict:
    if skipped:
        return {
            "name": name,
            "measured": None,
            "bound": bound,
            "passed": None,
            "status": "skipped",
            "reason": skipped,
        }
    passed = measured <= bound if at_most else measured >= bound
    return {
        "name": name,
        "measured": measured,
        "bound": bound,
        "passed": bool(passed),
        "status": "ok" if passed else "failed",
        "relation": "<=" if at_most else ">=",
    }


def check_pair(
    name: str,
    bounds: dict,
    reference: Experiment,
    candidate: Experiment,
    outputs: Callable[[str], dict],
    params: dict,
    data: Dataset,
) -> list[dict]:
    """All configured checks of one pair for one seed; `outputs(lane)` gives a lane's files."""
    prefix = f"{name}/seed-{reference.seed}"
    ref_out, cand_out = outputs(reference.lane), outputs(candidate.lane)
    entries = _check_pair(prefix, bounds, reference, candidate, ref_out, cand_out, params, data)
    for entry in entries:
        entry.update(check=name, seed=reference.seed, lanes=[reference.lane, candidate.lane])
    return entries


def _check_pair(
    prefix: str,
    bounds: dict,
    reference: Experiment,
    candidate: Experiment,
    ref_out: dict,
    cand_out: dict,
    params: dict,
    data: Dataset,
) -> list[dict]:
    ref_rec = json.loads(Path(ref_out["record"]).read_text())
    cand_rec = json.loads(Path(cand_out["record"]).read_text())
    skipped = next(
        (
            f"lane {r['lane']} was {r['status']}: {r['reason']}"
            for r in (ref_rec, cand_rec)
            if r["status"] != "ok"
        ),
        None,
    )
    entries: list[dict] = []
    wanted = [b for b in BOUNDS if bounds.get(b) is not None]
    if skipped:
        return [_entry(f"{prefix}/{b}", None, bounds[b], skipped=skipped) for b in wanted]

    if {"step0_loss_rel", "step0_grad_rel", "trained_grad_rel"} & set(wanted):
        weights = [params, load_model(ref_out["model"]).params]
        (ref_loss, ref_grad), (_, ref_trained) = gradients_at(reference, weights, data)
        (cand_loss, cand_grad), (_, cand_trained) = gradients_at(candidate, weights, data)
        if "step0_loss_rel" in wanted:
            entries.append(
                _entry(f"{prefix}/step0_loss_rel", relative(cand_loss, ref_loss), bounds["step0_loss_rel"])
            )
        if "step0_grad_rel" in wanted:
            entries.append(
                _entry(
                    f"{prefix}/step0_grad_rel",
                    gradient_relative(cand_grad, ref_grad),
                    bounds["step0_grad_rel"],
                )
            )
        if "trained_grad_rel" in wanted:
            entries.append(
                _entry(
                    f"{prefix}/trained_grad_rel",
                    gradient_relative(cand_trained, ref_trained),
                    bounds["trained_grad_rel"],
                )
            )
    if "early_loss_rel" in wanted:
        count = bounds.get("early_steps", 10)
        ref_losses = _train_losses(ref_out["curve"])[:count]
        cand_losses = _train_losses(cand_out["curve"])[:count]
        worst = max(relative(c, r) for c, r in zip(cand_losses, ref_losses, strict=True))
        entries.append(_entry(f"{prefix}/early_loss_rel", worst, bounds["early_loss_rel"]))
    if "final_loss_rel" in wanted:
        entries.append(
            _entry(
                f"{prefix}/final_loss_rel",
                relative(cand_rec["loss"]["final"], ref_rec["loss"]["final"]),
                bounds["final_loss_rel"],
            )
        )
    if "predictions_equal_min" in wanted:
        ref_pred, cand_pred = (load_model(out["model"]).predictions for out in (ref_out, cand_out))
        equal = float(np.mean(ref_pred == cand_pred))
        entries.append(
            _entry(f"{prefix}/predictions_equal", equal, bounds["predictions_equal_min"], at_most=False)
        )
    if "accuracy_points_max" in wanted:
        gap = abs(cand_rec["accuracy"]["percent"] - ref_rec["accuracy"]["percent"])
        entries.append(_entry(f"{prefix}/accuracy_points", gap, bounds["accuracy_points_max"]))
    return entries


def _train_losses(curve_path) -> np.ndarray:
    curve = pd.read_parquet(curve_path)
    return curve.loc[curve["kind"] == "train"].sort_values("step")["loss"].to_numpy()


def summarize(checks: list[dict]) -> dict:
    failed = [c for c in checks if c["status"] == "failed"]
    return {
        "passed": not failed,
        "counts": {
            status: sum(c["status"] == status for c in checks) for status in ("ok", "failed", "skipped")
        },
        "checks": checks,
    }
