"""The committed figures: loss curves, accuracy per epoch, a digit grid, and cost/accuracy bars.

Each function takes already-loaded data and writes one PNG atomically; the `figures` rule feeds
them from the records, curves and trained models.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from gradlanes.atomic import atomic_path  # noqa: E402

#: Lane colours in config order (matplotlib's tab10); more lanes than colours reuse them in turn.
PALETTE = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]
LaneStyle = tuple[str, str]  # (colour, matplotlib line style)


def lane_styles(lanes: Sequence[str], experiments: Mapping[str, Hashable]) -> dict[str, LaneStyle]:
    """Each lane's colour and dash, from where it stands in the config and what it trains.

    The colour is the lane's position in `lanes` (config order) in `PALETTE`, so it is the same in
    every figure whichever lanes ran. A lane running the same experiment as a lane before it (equal
    `experiments` keys: the same model, data and optimizer on another engine) is dashed: where the
    two curves lie on top of each other, the dashes let the first one show through. Neither lane
    names nor engine names play a part.
    """
    seen: set[Hashable] = set()
    styles = {}
    for index, lane in enumerate(lanes):
        styles[lane] = (PALETTE[index % len(PALETTE)], "--" if experiments[lane] in seen else "-")
        seen.add(experiments[lane])
    return styles


def style(lane: str, index: int, styles: Mapping[str, LaneStyle] | None = None) -> LaneStyle:
    """The lane's style from `lane_styles`, else the `index`-th palette colour, solid."""
    if styles and lane in styles:
        return styles[lane]
    return PALETTE[index % len(PALETTE)], "-"


def _save(fig, path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=130, bbox_inches="tight")
    plt.close(fig)


def loss_curves(
    curves: dict[str, pd.DataFrame],
    steps_per_epoch: dict[str, int],
    path,
    styles: Mapping[str, LaneStyle] | None = None,
) -> None:
    """Training loss per step, every lane on one log-log chart; noisy mini-batch losses smoothed."""
    fig, ax = plt.subplots(figsize=(9, 5.2))
    for index, (lane, curve) in enumerate(curves.items()):
        train = curve.loc[curve["kind"] == "train"].sort_values("step")
        loss = train["loss"].to_numpy()
        label = lane
        window = max(1, steps_per_epoch.get(lane, 1) // 10)
        if steps_per_epoch.get(lane, 1) > 1 and window > 1:
            loss = pd.Series(loss).rolling(window, min_periods=1).mean().to_numpy()
            label += f" (running mean of {window} steps)"
        color, dash = style(lane, index, styles)
        solid = dash == "-"
        # Dashed lines go on top, so that the solid line they overlap shows through their gaps.
        ax.plot(
            train["step"],
            loss,
            dash,
            color=color,
            label=label,
            linewidth=1.6 if solid else 2.2,
            zorder=2 if solid else 3,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("training loss (MSE or cross-entropy, log scale)")
    ax.set_title("Training loss per step, seed 0: lanes that run the same program overlap")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower left")
    _save(fig, path)


def accuracy_per_epoch(
    curves: dict[str, list[pd.DataFrame]], path, styles: Mapping[str, LaneStyle] | None = None
) -> None:
    """Test accuracy after each epoch of the mini-batch lanes: mean over seeds, min-max band."""
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for index, (lane, per_seed) in enumerate(curves.items()):
        tests = [c.loc[(c["kind"] == "test") & (c["step"] > 0)].sort_values("step") for c in per_seed]
        epochs = tests[0]["epoch"].to_numpy()
        accuracy = np.vstack([100 * t["test_accuracy"].to_numpy() for t in tests])
        color, dash = style(lane, index, styles)
        ax.plot(
            epochs,
            accuracy.mean(0),
            dash,
            marker="o",
            markersize=3,
            color=color,
            label=f"{lane} (mean of {len(per_seed)} seeds)",
        )
        ax.fill_between(epochs, accuracy.min(0), accuracy.max(0), color=color, alpha=0.15)
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("Test accuracy per epoch, mini-batch lanes (band: min to max over seeds)")
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize=8, loc="lower right")
    _save(fig, path)


def digit_grid(
    pixels: np.ndarray, labels: np.ndarray, predictions: dict[str, np.ndarray], path, columns: int = 12
) -> None:
    """Rows are lanes, columns test digits: the first digits, then ones some lane got wrong."""
    lanes = list(predictions)
    if not lanes:  # every lane was skipped (a GPU run's lanes on a machine without one): say so
        fig, ax = plt.subplots(figsize=(6, 1.5))
        ax.axis("off")
        ax.text(0.5, 0.5, "No lane ran (every lane was skipped): no predictions to show", ha="center")
        _save(fig, path)
        return
    wrong_any = np.flatnonzero(np.any([predictions[lane] != labels for lane in lanes], axis=0))
    first = list(range(columns // 2))
    picked = first + [int(i) for i in wrong_any if i not in first][: columns - len(first)]
    fig, axes = plt.subplots(
        len(lanes), len(picked), figsize=(1.05 * len(picked) + 1.6, 1.2 * len(lanes) + 0.8), squeeze=False
    )
    for row, lane in enumerate(lanes):
        for col, index in enumerate(picked):
            ax = axes[row][col]
            ax.imshow(pixels[index], cmap="gray_r", vmin=0, vmax=255)
            ax.set_xticks([])
            ax.set_yticks([])
            predicted = int(predictions[lane][index])
            correct = predicted == labels[index]
            ax.set_title(
                f"{predicted}" if correct else f"{predicted} ✗",
                fontsize=9,
                color="black" if correct else "#d62728",
                pad=2,
            )
            for spine in ax.spines.values():
                spine.set_edgecolor("#cccccc" if correct else "#d62728")
                spine.set_linewidth(1 if correct else 2.5)
            if col == 0:
                ax.set_ylabel(lane, rotation=0, ha="right", va="center", fontsize=9)
            if row == len(lanes) - 1:
                ax.set_xlabel(f"#{index}\nlabel {labels[index]}", fontsize=8)
    fig.suptitle(
        "Test digits and each lane's prediction (seed 0; red ✗ = wrong). "
        "Left: the first test digits; right: digits some lane got wrong",
        fontsize=10,
    )
    fig.tight_layout()
    _save(fig, path)


def cost_and_accuracy(summary: pd.DataFrame, path, styles: Mapping[str, LaneStyle] | None = None) -> None:
    """ms/step (log scale) and test accuracy per lane, mean over seeds with 95 % CI whiskers."""
    ok = summary.loc[summary["status"] == "ok"].reset_index(drop=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6))
    positions = np.arange(len(ok))
    colors = [style(lane, i, styles)[0] for i, lane in enumerate(ok["lane"])]
    for ax, key, label in (
        (left, "step_ms", "median ms per training step (log scale)"),
        (right, "accuracy", "test accuracy (%)"),
    ):
        mean = ok[f"{key}_mean"].to_numpy()
        low = ok[f"{key}_ci_low"].to_numpy()
        high = ok[f"{key}_ci_high"].to_numpy()
        errors = np.vstack([np.where(np.isnan(low), 0, mean - low), np.where(np.isnan(high), 0, high - mean)])
        ax.bar(positions, mean, color=colors, yerr=errors, capsize=4, edgecolor="black", linewidth=0.5)
        ax.set_xticks(positions, ok["lane"], rotation=30, ha="right")
        ax.set_ylabel(label)
        ax.grid(True, axis="y", alpha=0.25)
        tops = np.where(np.isnan(high), mean, high)  # label above the whisker, not on it
        for x, value, top in zip(positions, mean, tops, strict=True):
            text = f"{value:.3g}" if key == "step_ms" else f"{value:.2f}"
            ax.annotate(text, (x, top), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=8)
    left.set_yscale("log")
    if len(ok):
        low_acc = np.nanmin(ok["accuracy_ci_low"].fillna(ok["accuracy_mean"]))
        right.set_ylim(math.floor(low_acc) - 2, 100)
    else:  # every lane was skipped: empty axes that say so
        for ax in (left, right):
            ax.text(0.5, 0.5, "no lane ran", ha="center", transform=ax.transAxes)
    seeds = int(ok["seeds"].max()) if len(ok) else 0
    fig.suptitle(
        f"Cost and accuracy per lane (mean of {seeds} seeds, whiskers: 95 % Student-t CI)", fontsize=11
    )
    fig.tight_layout()
    _save(fig, path)
