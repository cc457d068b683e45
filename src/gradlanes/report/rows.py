"""From per-seed records to one machine-readable row per lane.

The frame `lane_rows` returns is what `results/summary.parquet` and `.csv` hold and what the
figures and the `gradlanes table` command read, so its column names and meanings are an interface:
the Markdown and terminal tables only format it (see `columns`).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from gradlanes.report.stats import mean_ci

#: The float64-reference measurements carried into the frame as `ref_<key>`.
REFERENCE_KEYS = ("loss_u", "loss_bound", "grad_u", "grad_bound", "early_u")


def load_records(paths: Iterable[str | Path]) -> list[dict]:
    return [json.loads(Path(p).read_text()) for p in paths]


def agreement_verdicts(report: dict) -> dict[str, str]:
    """Per lane: how its agreement checks ended, e.g. 'passed 21/21' or 'skipped'."""
    by_lane: dict[str, list[str]] = defaultdict(list)
    for check in report.get("checks", []):
        for lane in check.get("lanes", []):
            by_lane[lane].append(check["status"])
    verdicts = {}
    for lane, statuses in by_lane.items():
        ran = [s for s in statuses if s != "skipped"]
        if not ran:
            verdicts[lane] = "skipped"
        elif "failed" in ran:
            verdicts[lane] = f"FAILED {ran.count('failed')}/{len(ran)}"
        else:
            verdicts[lane] = f"passed {len(ran)}/{len(ran)}"
    return verdicts


def reference_errors(report: dict) -> dict[str, dict[str, float]]:
    """Per lane, the worst float64-reference errors over seeds and points, with their bounds.

    `loss_u`/`grad_u` are the largest of the step-0 and trained-weights checks, in float32 units;
    `early_u` the early-trajectory check. Skipped lanes have none.
    """
    worst: dict[str, dict[str, float]] = {}
    for lane, seeds in report.get("float64_reference", {}).items():
        row: dict[str, float] = {}
        for checks in seeds.values():
            for kind, check in checks.items():
                if check["measured"] is None:
                    continue
                key = kind.split("_", 1)[1] if kind != "early_loss" else "early"
                if check["measured"] >= row.get(f"{key}_u", -1.0):
                    row[f"{key}_u"], row[f"{key}_bound"] = check["measured"], check["bound"]
        if row:
            worst[lane] = row
    return worst


def lane_rows(
    records: list[dict], verdicts: dict[str, str], reference: dict[str, dict[str, float]] | None = None
) -> pd.DataFrame:
    """One row per lane, in the order its first record comes; seeds that did not run are left out
    of every measurement, and `seeds` counts those that did."""
    by_lane: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        by_lane[record["lane"]].append(record)
    return pd.DataFrame(
        [
            _lane_row(sorted(runs, key=lambda r: r["config"]["seed"]), verdicts, reference or {})
            for runs in by_lane.values()
        ]
    )


def _lane_row(runs: list[dict], verdicts: dict[str, str], reference: dict[str, dict[str, float]]) -> dict:
    first, ok = runs[0], [r for r in runs if r["status"] == "ok"]
    lane = first["lane"]
    return {
        **_identity(runs),
        **_setup(first["config"]),
        **_cost(ok),
        **_program(first),
        **_quality(ok),
        "matmul_precision": first.get("numerics", {}).get("matmul_precision"),
        **{f"ref_{key}": reference.get(lane, {}).get(key, math.nan) for key in REFERENCE_KEYS},
        "agreement": verdicts.get(lane, "not checked") if ok else "skipped",
        "git_commit": first["environment"]["git_commit"],
    }


def _identity(runs: list[dict]) -> dict:
    """Which lane, where it asked to run and where it ran; seeds that ended differently are 'mixed'."""
    first = runs[0]
    return {
        "lane": first["lane"],
        "engine": first["engine"],
        "status": first["status"] if len({r["status"] for r in runs}) == 1 else "mixed",
        "reason": next((r["reason"] for r in runs if r["reason"]), None),
        "device_requested": first["device_requested"],
        "platform": first["platform"],
        "device_kind": first["device_kind"],
    }


#: How the tables name each model beside its key (the MLP adds its widths).
MODEL_NAMES = {"softmax": "softmax", "cnn": "cnn (LeNet-5)"}


def _setup(cfg: dict) -> dict:
    return {
        "model": f"mlp 784-{cfg['hidden']}-10" if cfg["model"] == "mlp" else MODEL_NAMES[cfg["model"]],
        "loss": cfg["loss"],
        "optimizer": f"{cfg['optimizer']} {cfg['learning_rate']:g}"
        + (" cosine" if cfg["schedule"] == "cosine" else ""),
        "steps": cfg["steps"],
        "epochs": cfg["epochs"],
        "train_images": cfg["train_images"],
        "batch": cfg["batch_size"] if cfg["batch_size"] == "full" else str(cfg["batch_size"]),
    }


def _cost(ok: list[dict]) -> dict:
    """Time and work per lane over the seeds that ran; counts take the largest seed's."""
    ms_mean, ms_low, ms_high = mean_ci(r["timing"]["step_ms_median"] for r in ok)
    return {
        "seeds": len(ok),
        "train_s_mean": _mean(r["timing"]["train_s"] for r in ok),
        "step_ms_mean": ms_mean,
        "step_ms_ci_low": ms_low,
        "step_ms_ci_high": ms_high,
        "images_per_s_mean": _mean(r["timing"]["images_per_s"] for r in ok),
        "compile_s_mean": _mean(r["timing"]["compile_s"] for r in ok),
        "compiles_train": max((r["compiles"]["train"] for r in ok), default=None),
        "compiles_total": max((r["compiles"]["total"] for r in ok), default=None),
        "dispatches": max((r["dispatches"] for r in ok), default=None),
    }


def _program(first: dict) -> dict:
    """The captured program's size, and its fingerprint where the lane runs one (else None)."""
    ir = first["ir"]
    return {
        "ir_forward": (ir["forward"] or {}).get("total"),
        "ir_gradient": (ir["gradient"] or {}).get("total"),
        "ir_step_top": (ir["step"] or {}).get("top"),
        "ir_step_total": (ir["step"] or {}).get("total"),
        "program_fingerprint": (first.get("program") or {}).get("fingerprint"),
    }


def _quality(ok: list[dict]) -> dict:
    """Test accuracy pooled over seeds, its interval across seeds, and the final training loss."""
    acc_mean, acc_low, acc_high = mean_ci(100 * r["accuracy"]["correct"] / r["accuracy"]["total"] for r in ok)
    return {
        "correct": sum(r["accuracy"]["correct"] for r in ok),
        "tested": sum(r["accuracy"]["total"] for r in ok),
        "accuracy_mean": acc_mean,
        "accuracy_ci_low": acc_low,
        "accuracy_ci_high": acc_high,
        "final_loss_mean": _mean(r["loss"]["final"] for r in ok),
    }


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return float(np.mean(values)) if values else math.nan
