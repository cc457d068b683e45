"""Summary tables from every record: one row per lane, replicates as mean and 95 % interval.

`summarize` reads the per-seed records and the agreement report and returns a machine-readable
frame (written as Parquet and CSV) and a Markdown page with the lane table and the table of
published anchors (their figures on their hardware, set beside our comparable lane).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

#: Published figures of the prior art, quoted as published (their hardware, not ours).
ANCHORS = [
    {
        "source": "Tlaloc, XLA GPU lane (GB10)",
        "experiment": "MLP 784-128-10, MSE, Adam, full batch",
        "steps": 600,
        "train_images": 4096,
        "test_images": 10000,
        "wall_s": 8.28,
        "accuracy": 93.66,
        "ours": "xla_gpu",
    },
    {
        "source": "Tlaloc, interpreter lane",
        "experiment": "MLP 784-128-10, MSE, Adam, full batch",
        "steps": 40,
        "train_images": 512,
        "test_images": 1000,
        "wall_s": 19.85,
        "accuracy": 82.50,
        "ours": "host",
    },
    {
        "source": "TypeShade, softmax kernels (browser)",
        "experiment": "softmax regression, SGD, batch 32",
        "steps": None,
        "epochs": 5,
        "train_images": 60000,
        "test_images": 10000,
        "wall_s": None,
        "accuracy": 91.67,
        "ours": "softmax_kernel",
    },
]


def mean_ci(values: Iterable[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t confidence interval; a single value has no interval (nan)."""
    data = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if data.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(data.mean())
    if data.size < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf((1 + level) / 2, data.size - 1) * data.std(ddof=1) / math.sqrt(data.size))
    return mean, mean - half, mean + half


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
    by_lane: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        by_lane[record["lane"]].append(record)
    rows = []
    for lane, runs in by_lane.items():
        runs.sort(key=lambda r: r["config"]["seed"])
        first, ok = runs[0], [r for r in runs if r["status"] == "ok"]
        cfg = first["config"]
        acc = [100 * r["accuracy"]["correct"] / r["accuracy"]["total"] for r in ok]
        step_ms = [r["timing"]["step_ms_median"] for r in ok]
        acc_mean, acc_low, acc_high = mean_ci(acc)
        ms_mean, ms_low, ms_high = mean_ci(step_ms)
        mean = lambda values: float(np.mean(values)) if values else math.nan  # noqa: E731
        rows.append(
            {
                "lane": lane,
                "engine": first["engine"],
                "status": first["status"] if len({r["status"] for r in runs}) == 1 else "mixed",
                "reason": next((r["reason"] for r in runs if r["reason"]), None),
                "device_requested": first["device_requested"],
                "platform": first["platform"],
                "device_kind": first["device_kind"],
                "model": cfg["model"] + (f" 784-{cfg['hidden']}-10" if cfg["model"] == "mlp" else ""),
                "loss": cfg["loss"],
                "optimizer": f"{cfg['optimizer']} {cfg['learning_rate']:g}"
                + (" cosine" if cfg["schedule"] == "cosine" else ""),
                "steps": cfg["steps"],
                "epochs": cfg["epochs"],
                "train_images": cfg["train_images"],
                "batch": cfg["batch_size"] if cfg["batch_size"] == "full" else str(cfg["batch_size"]),
                "seeds": len(ok),
                "train_s_mean": mean([r["timing"]["train_s"] for r in ok]),
                "step_ms_mean": ms_mean,
                "step_ms_ci_low": ms_low,
                "step_ms_ci_high": ms_high,
                "images_per_s_mean": mean([r["timing"]["images_per_s"] for r in ok]),
                "compile_s_mean": mean([r["timing"]["compile_s"] for r in ok]),
                "compiles_train": max((r["compiles"]["train"] for r in ok), default=None),
                "compiles_total": max((r["compiles"]["total"] for r in ok), default=None),
                "dispatches": max((r["dispatches"] for r in ok), default=None),
                "ir_forward": (first["ir"]["forward"] or {}).get("total"),
                "ir_gradient": (first["ir"]["gradient"] or {}).get("total"),
                "ir_step_top": (first["ir"]["step"] or {}).get("top"),
                "ir_step_total": (first["ir"]["step"] or {}).get("total"),
                "correct": sum(r["accuracy"]["correct"] for r in ok),
                "tested": sum(r["accuracy"]["total"] for r in ok),
                "accuracy_mean": acc_mean,
                "accuracy_ci_low": acc_low,
                "accuracy_ci_high": acc_high,
                "final_loss_mean": mean([r["loss"]["final"] for r in ok]),
                "matmul_precision": first.get("numerics", {}).get("matmul_precision"),
                **{
                    f"ref_{key}": (reference or {}).get(lane, {}).get(key, math.nan)
                    for key in ("loss_u", "loss_bound", "grad_u", "grad_bound", "early_u")
                },
                "agreement": verdicts.get(lane, "not checked") if ok else "skipped",
                "git_commit": first["environment"]["git_commit"],
            }
        )
    return pd.DataFrame(rows)


def _num(value: float, digits: int = 2) -> str:
    return (
        "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.{digits}f}"
    )


def _ci(low: float, high: float, digits: int = 2) -> str:
    return "—" if math.isnan(low) else f"[{low:,.{digits}f}, {high:,.{digits}f}]"


def accuracy_text(correct: int, tested: int) -> str:
    return f"{correct:,} / {tested:,} = {100 * correct / tested:.2f} %" if tested else "—"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown(frame: pd.DataFrame) -> str:
    lanes = []
    for row in frame.itertuples():
        if row.status != "ok":
            lanes.append(
                [
                    f"`{row.lane}`",
                    row.engine,
                    f"{row.device_requested}: **{row.status}**",
                    row.model,
                    row.loss,
                    row.optimizer,
                    row.steps,
                    f"{row.train_images:,}",
                    row.batch,
                    "—",
                    "—",
                    "—",
                    "—",
                    "—",
                    _ir(row),
                    "—",
                    "—",
                    "—",
                    "—",
                    row.agreement,
                ]
            )
            continue
        lanes.append(
            [
                f"`{row.lane}`",
                row.engine,
                f"{row.platform} ({row.device_kind})",
                row.model,
                row.loss,
                row.optimizer,
                f"{row.steps:,}",
                f"{row.train_images:,}",
                row.batch,
                _num(row.train_s_mean, 1),
                f"{_num(row.step_ms_mean, 3)} {_ci(row.step_ms_ci_low, row.step_ms_ci_high, 3)}",
                _num(row.images_per_s_mean, 0),
                f"{int(row.compiles_train)} / {int(row.compiles_total)}",
                f"{int(row.dispatches):,}",
                _ir(row),
                accuracy_text(row.correct, row.tested),
                _ci(row.accuracy_ci_low, row.accuracy_ci_high),
                _num(row.final_loss_mean, 5),
                reference_text(row),
                row.agreement,
            ]
        )
    header = [
        "lane",
        "engine",
        "ran on",
        "model",
        "loss",
        "optimizer",
        "steps",
        "train images",
        "batch",
        "train s",
        "ms/step [95 % CI]",
        "images/s",
        "compiles train / total",
        "dispatches",
        "IR eqns fwd / grad / step",
        "test accuracy (all seeds)",
        "accuracy 95 % CI",
        "final loss",
        "float64-ref error, u: loss / grad (bound)",
        "agreement",
    ]
    skipped = [
        f"- `{row.lane}` was **{row.status}**: {row.reason}"
        for row in frame.itertuples()
        if row.status != "ok"
    ]
    seeds = sorted(set(frame.loc[frame["status"] == "ok", "seeds"]))
    parts = [
        "# gradlanes results",
        "",
        f"One row per lane; each number is over {', '.join(map(str, seeds))} seed(s) (mean, with a Student-t "
        "95 % interval across seeds). Accuracy pools every seed's test predictions. Times are this "
        "machine's, on the day the records were made; see `results/runs/` for each seed's record. "
        "The float64-reference error is the worst over seeds, at the initial and the trained weights, "
        "of the lane's loss and gradient against the float64 evaluation of its own captured program, in "
        "float32 units (u = 2^-24 times the quantity's error scale; README: Why these bounds).",
        "",
        markdown_table(header, lanes),
        "",
        *skipped,
        "",
        "## Published anchors (their figures, on their hardware, not ours)",
        "",
        markdown_table(
            [
                "source",
                "experiment",
                "steps",
                "train images",
                "wall s",
                "accuracy (published)",
                "our lane",
                "our steps / train images",
                "our accuracy",
                "our train s",
            ],
            _anchor_rows(frame),
        ),
        "",
        f"Records from git commit `{frame['git_commit'].iloc[0]}`.",
    ]
    return "\n".join(parts).replace("\n\n\n", "\n\n") + "\n"


def reference_text(row) -> str:
    """The lane's worst distance from the float64 reference, in float32 units, beside its bounds."""
    if math.isnan(row.ref_grad_u):
        return "—"
    return (
        f"{row.ref_loss_u:.1f} / {row.ref_grad_u:.1f} (≤ {row.ref_loss_bound:.0f} / {row.ref_grad_bound:.0f})"
    )


def _ir(row) -> str:
    values = (row.ir_forward, row.ir_gradient, row.ir_step_total)
    return " / ".join(
        "—" if v is None or (isinstance(v, float) and math.isnan(v)) else str(int(v)) for v in values
    )


def _anchor_rows(frame: pd.DataFrame) -> list[list[str]]:
    rows = []
    by_lane = {row.lane: row for row in frame.itertuples()}
    for anchor in ANCHORS:
        ours = by_lane.get(anchor["ours"])
        steps = f"{anchor['steps']:,}" if anchor.get("steps") else f"{anchor['epochs']} epochs"
        mine = ("not in this run", "—", "—", "—")
        if ours is not None:
            size = f"{ours.steps:,} / {ours.train_images:,}"
            mine = (
                (f"`{ours.lane}`", size, accuracy_text(ours.correct, ours.tested), _num(ours.train_s_mean, 2))
                if ours.status == "ok"
                else (f"`{ours.lane}` ({ours.status})", size, "—", "—")
            )
        rows.append(
            [
                anchor["source"],
                anchor["experiment"],
                steps,
                f"{anchor['train_images']:,}",
                _num(anchor["wall_s"]),
                f"{anchor['accuracy']:.2f} % of {anchor['test_images']:,}",
                *mine,
            ]
        )
    return rows
