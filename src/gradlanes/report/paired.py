"""Paired comparisons between lanes: per-seed differences where lanes share a seed's randomness.

The lane table gives each lane a mean over seeds with a Student-t interval; with a few seeds those
intervals are wide, because they carry the spread between seeds (initial weights, batch order), and
two lanes' intervals overlap even where the lanes differ consistently. But lanes that train the same
model from the same initial weights on the same batch order see *the same* randomness on a seed, so
their per-seed difference cancels the seed-to-seed spread. This module finds those lanes, computes
each pair's per-seed accuracy difference and ms/step ratio with 95 % intervals, says in words whether
each is distinguishable from no difference, and renders them as a Markdown section, as rows for a
JSON/CSV table, and as a figure.

A lane is a *reference* or *candidate* only by where it stands in the given lane order (the config's):
the earlier lane of a pair is the reference. Lane names never appear in this code.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402

from gradlanes.atomic import atomic_path  # noqa: E402
from gradlanes.experiment.naming import model_key  # noqa: E402
from gradlanes.report.columns import DASH  # noqa: E402
from gradlanes.report.figures import LaneStyle, style  # noqa: E402
from gradlanes.report.stats import geometric_mean_ci, mean_ci  # noqa: E402
from gradlanes.report.tables import markdown_table  # noqa: E402

MINUS = "\u2212"  # the typographic minus, so that signed numbers line up with unsigned ones


@dataclass(frozen=True)
class PairingKey:
    """What two records must share for their seed's randomness to be the same.

    - `weights`: `naming.model_key(model, hidden, init)`, the initial-weights file a lane loads;
      with the seed it fixes the initial weights (the hidden width counts only for the MLP).
    - `train_images`, `batch_images`, `steps`: the arguments, beside the seed, of
      `batching.batch_order`, which fixes which images each step sees. `batch_images` is the
      resolved batch size (`batch_size: full` is `train_images`). Epochs and steps per epoch are
      left out: they follow from these three (`spec.resolve`), and the rounded `epochs` could only
      split lanes that see the same batches.
    - `test_images`: not randomness, but an accuracy difference is paired only over one test set.
    - `dataset`: the SHA-256 of the dataset's files, so that indices point at the same images.

    Loss, optimizer, learning rate, precision and engine are *not* in the key: lanes differing in
    them still share the seed's randomness, and their paired difference measures that setting.
    """

    weights: str
    train_images: int
    batch_images: int
    steps: int
    test_images: int
    dataset: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Estimate:
    """A mean over seeds with its 95 % interval; `low`/`high` are nan with fewer than two seeds."""

    value: float
    low: float
    high: float

    @property
    def has_interval(self) -> bool:
        return not math.isnan(self.low)


@dataclass(frozen=True)
class PairedComparison:
    """One lane pair over the seeds both completed (status "ok").

    `accuracy_differences` are candidate − reference test accuracy per seed, in percentage points;
    `step_ms_ratios` candidate / reference median ms per step per seed (above 1: the candidate is
    slower). `accuracy` is their mean with a Student-t interval; `step_ms_ratio` the geometric mean
    with the interval computed on log ratios.
    """

    reference: str
    candidate: str
    seeds: tuple[int, ...]
    accuracy_differences: tuple[float, ...]
    step_ms_ratios: tuple[float, ...]
    accuracy: Estimate
    step_ms_ratio: Estimate

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def accuracy_verdict(self) -> str:
        return accuracy_verdict(self)

    @property
    def speed_verdict(self) -> str:
        return speed_verdict(self)

    def as_row(self) -> dict[str, object]:
        """The pair as flat values (see `ROW_COLUMNS`), for a JSON or CSV table."""
        return {column.name: column.value(self) for column in ROW_COLUMNS}


# --- grouping -----------------------------------------------------------------------------------


def pairing_key(record: dict) -> PairingKey:
    """The record's `PairingKey`, from its `config` block (and dataset hashes, where present)."""
    cfg = record["config"]
    return PairingKey(
        weights=model_key(cfg["model"], cfg.get("hidden"), cfg["init"]),
        train_images=int(cfg["train_images"]),
        batch_images=_batch_images(cfg),
        steps=int(cfg["steps"]),
        test_images=int(cfg["test_images"]),
        dataset=tuple(sorted((record.get("dataset") or {}).get("sha256", {}).items())),
    )


def _batch_images(cfg: dict) -> int:
    # Records name the resolved size `batch_images`; `batch_size` alone is "full" or that number.
    if "batch_images" in cfg:
        return int(cfg["batch_images"])
    return int(cfg["train_images"]) if cfg["batch_size"] == "full" else int(cfg["batch_size"])


def paired_groups(records: Iterable[dict], lanes: Sequence[str] = ()) -> dict[PairingKey, tuple[str, ...]]:
    """Lanes that share initial weights and batch order, whatever their records' status.

    Lanes come in `lanes` order (then any others in the order their first record comes), and so do
    the groups, by their first lane. A lane whose records disagree in key (stale records from an
    older config) appears in each of its groups. A lane alone in its group has no pair.
    """
    records = list(records)
    order = _lane_order(records, lanes)
    groups: dict[PairingKey, set[str]] = defaultdict(set)
    for record in records:
        groups[pairing_key(record)].add(record["lane"])
    ordered = {key: tuple(sorted(members, key=order.index)) for key, members in groups.items()}
    return dict(sorted(ordered.items(), key=lambda item: order.index(item[1][0])))


def _lane_order(records: list[dict], lanes: Sequence[str]) -> list[str]:
    order = list(lanes)
    for record in records:
        if record["lane"] not in order:
            order.append(record["lane"])
    return order


def paired_comparisons(records: Iterable[dict], lanes: Sequence[str] = ()) -> list[PairedComparison]:
    """Every pair of lanes in one group, over the seeds both completed (status "ok").

    The reference is the pair's lane earlier in `lanes`. A pair with one shared seed gets its single
    difference and no interval; a pair with none (e.g. a lane skipped on every seed) is left out.
    """
    records = list(records)
    ok: dict[tuple[PairingKey, str], dict[int, dict]] = defaultdict(dict)
    for record in records:
        if record["status"] == "ok":
            ok[pairing_key(record), record["lane"]][int(record["config"]["seed"])] = record
    pairs = []
    for key, members in paired_groups(records, lanes).items():
        for reference, candidate in combinations(members, 2):
            pair = compare(reference, candidate, ok[key, reference], ok[key, candidate])
            if pair is not None:
                pairs.append(pair)
    return pairs


def compare(
    reference: str, candidate: str, reference_runs: Mapping[int, dict], candidate_runs: Mapping[int, dict]
) -> PairedComparison | None:
    """The pair's comparison from each lane's ok records by seed; None if they share no seed."""
    seeds = tuple(sorted(set(reference_runs) & set(candidate_runs)))
    if not seeds:
        return None
    differences = tuple(
        float(_accuracy(candidate_runs[seed]) - _accuracy(reference_runs[seed])) for seed in seeds
    )
    ratios = tuple(_step_ms(candidate_runs[seed]) / _step_ms(reference_runs[seed]) for seed in seeds)
    return PairedComparison(
        reference=reference,
        candidate=candidate,
        seeds=seeds,
        accuracy_differences=differences,
        step_ms_ratios=ratios,
        accuracy=Estimate(*mean_ci(differences)),
        step_ms_ratio=Estimate(*geometric_mean_ci(ratios)),
    )


def _accuracy(record: dict) -> Fraction:
    """Test accuracy in percent, from the counts (as the lane table does), not the rounded percent.

    Exact, so that seeds differing by the same count of images give the very same difference:
    in floats 93.1 − 93.0 and 93.2 − 93.1 differ in the last bits, and `accuracy_verdict` could
    not tell that the differences do not spread at all.
    """
    return Fraction(100 * record["accuracy"]["correct"], record["accuracy"]["total"])


def _step_ms(record: dict) -> float:
    return float(record["timing"]["step_ms_median"])


# --- words ------------------------------------------------------------------------------------


def signed(value: float, digits: int = 2) -> str:
    """`+0.12`, `−0.12`, and a plain `0.00` for an exact zero (no direction to show)."""
    if value == 0:
        return f"{0:.{digits}f}"
    return f"{value:+.{digits}f}".replace("-", MINUS)


def _no_spread(values: Sequence[float]) -> bool:
    """Two or more per-seed values, all equal: their interval has zero width."""
    return len(values) > 1 and len(set(values)) == 1


def accuracy_verdict(pair: PairedComparison) -> str:
    """Whether the candidate's accuracy differs from the reference's, in words."""
    if all(d == 0 for d in pair.accuracy_differences):
        return "identical on every seed" if pair.n > 1 else "identical on the one shared seed"
    estimate, higher = pair.accuracy, pair.accuracy.value > 0
    by = f"{pair.candidate} is {'higher' if higher else 'lower'} than {pair.reference} by"
    if not estimate.has_interval:
        return f"{by} {abs(estimate.value):.2f} points on the one shared seed; one seed gives no interval"
    if _no_spread(pair.accuracy_differences):
        # A zero-width interval, "(0.10 … 0.10)", would read as a measured certainty; it is only
        # that every seed moved by the same count of images.
        return f"{by} {abs(pair.accuracy_differences[0]):.2f} points on every seed (no spread)"
    if estimate.low <= 0 <= estimate.high:
        interval = f"{signed(estimate.low)} … {signed(estimate.high)}"
        return f"not distinguishable from zero (interval {interval} points)"
    near, far = sorted((abs(estimate.low), abs(estimate.high)))
    return f"{by} {abs(estimate.value):.2f} points ({near:.2f} … {far:.2f})"


def speed_verdict(pair: PairedComparison) -> str:
    """Whether the candidate's ms/step differs from the reference's, as a factor in words.

    A ratio below 1 is told as its inverse, "1.25× faster", not "0.8× slower".
    """
    estimate = pair.step_ms_ratio
    if not estimate.has_interval:
        return f"{_factor(pair, estimate.value)} on the one shared seed; one seed gives no interval"
    if _no_spread(pair.step_ms_ratios):
        # Timings that repeat to the last bit (equal, or rounded in the records) give a zero-width
        # interval, as equal accuracy differences do; say so rather than print "(1.20 … 1.20)".
        ratio = pair.step_ms_ratios[0]
        if ratio == 1:
            return "equal ms/step on every seed"
        return f"{_factor(pair, ratio)} on every seed (no spread)"
    if estimate.low <= 1 <= estimate.high:
        return f"not distinguishable from 1× (interval {estimate.low:.2f}× … {estimate.high:.2f}×)"
    near, far = sorted((_slowness(estimate.low), _slowness(estimate.high)))
    return f"{_factor(pair, estimate.value)} ({near:.2f} … {far:.2f})"


def _slowness(ratio: float) -> float:
    return ratio if ratio >= 1 else 1 / ratio


def _factor(pair: PairedComparison, ratio: float) -> str:
    word = "slower" if ratio >= 1 else "faster"
    return f"{pair.candidate} is {_slowness(ratio):.2f}× {word} than {pair.reference}"


# --- tables -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowColumn:
    """One column of the machine-readable pair table: its name, meaning, and value."""

    name: str
    description: str
    value: Callable[[PairedComparison], object]


def _or_none(value: float) -> float | None:
    # JSON has no nan; a missing interval is null there (and NaN again in a pandas frame).
    return None if math.isnan(value) else value


def _joined(values: Iterable[object]) -> str:
    return " ".join(str(v) for v in values)


#: The columns of `as_rows`, documented once. Intervals are 95 %; they are null below two seeds.
ROW_COLUMNS: tuple[RowColumn, ...] = (
    RowColumn("reference", "the pair's lane earlier in the config", lambda p: p.reference),
    RowColumn("candidate", "the pair's later lane", lambda p: p.candidate),
    RowColumn("seeds", "the seeds both lanes completed, space-separated", lambda p: _joined(p.seeds)),
    RowColumn("n", "how many such seeds", lambda p: p.n),
    RowColumn(
        "accuracy_diff_mean",
        "mean over seeds of candidate − reference test accuracy, percentage points",
        lambda p: p.accuracy.value,
    ),
    RowColumn("accuracy_diff_ci_low", "its Student-t interval, low end", lambda p: _or_none(p.accuracy.low)),
    RowColumn("accuracy_diff_ci_high", "its high end", lambda p: _or_none(p.accuracy.high)),
    RowColumn(
        "accuracy_diffs",
        "the per-seed differences, in seed order, space-separated",
        lambda p: _joined(f"{d:.4f}" for d in p.accuracy_differences),
    ),
    RowColumn("accuracy_verdict", "whether the difference is distinguishable from 0", accuracy_verdict),
    RowColumn(
        "step_ms_ratio_gmean",
        "geometric mean over seeds of candidate / reference median ms per step (> 1: slower)",
        lambda p: p.step_ms_ratio.value,
    ),
    RowColumn(
        "step_ms_ratio_ci_low",
        "its interval's low end, a Student-t interval on the log ratios, exponentiated",
        lambda p: _or_none(p.step_ms_ratio.low),
    ),
    RowColumn("step_ms_ratio_ci_high", "its high end", lambda p: _or_none(p.step_ms_ratio.high)),
    RowColumn(
        "step_ms_ratios",
        "the per-seed ratios, in seed order, space-separated",
        lambda p: _joined(f"{r:.4f}" for r in p.step_ms_ratios),
    ),
    RowColumn("speed_verdict", "whether the ratio is distinguishable from 1", speed_verdict),
)


def as_rows(pairs: Iterable[PairedComparison]) -> list[dict[str, object]]:
    """One flat dict per pair, keys as `ROW_COLUMNS`: `pandas.DataFrame(as_rows(pairs))` is the table."""
    return [pair.as_row() for pair in pairs]


@dataclass(frozen=True)
class PairCell:
    """One column of the Markdown pair table."""

    header: str
    cell: Callable[[PairedComparison], str]


def _difference_cell(pair: PairedComparison) -> str:
    estimate = pair.accuracy
    interval = f"[{signed(estimate.low)}, {signed(estimate.high)}]" if estimate.has_interval else DASH
    return f"{signed(estimate.value)} {interval}"


def _ratio_cell(pair: PairedComparison) -> str:
    estimate = pair.step_ms_ratio
    interval = f"[{estimate.low:.3f}, {estimate.high:.3f}]" if estimate.has_interval else DASH
    return f"{estimate.value:.3f}× {interval}"


PAIR_CELLS: tuple[PairCell, ...] = (
    PairCell("candidate vs reference", lambda p: f"`{p.candidate}` vs `{p.reference}`"),
    PairCell("seeds", lambda p: ", ".join(map(str, p.seeds))),
    PairCell("Δ accuracy, points [95 % CI]", _difference_cell),
    PairCell("accuracy", accuracy_verdict),
    PairCell("ms/step ratio [95 % CI]", _ratio_cell),
    PairCell("speed", speed_verdict),
)

EXPLANATION = (
    "Lanes that train the same model from the same initial weights on the same batch order (equal "
    "model, hidden width, init, training images, batch size, steps and test images) are compared seed "
    "by seed. Such lanes see the same randomness on a seed, so the per-seed accuracy difference removes "
    "the seed-to-seed variation of accuracy that widens each lane's own interval above. Step time shares "
    "no randomness with the seed; for speed, the per-seed ratio compares runs made back to back on the "
    "same machine. Δ accuracy is candidate − reference test accuracy in percentage points, averaged over "
    "the seeds both lanes completed; the ms/step ratio is candidate / reference median step time, "
    "averaged geometrically. Intervals are 95 % Student-t with n − 1 degrees of freedom over the "
    "per-seed values (for the ratio, over their logarithms, then exponentiated); with one shared seed "
    "there is none. Each pair's interval is a 95 % interval on its own: there is no correction for "
    "making several comparisons, so across many pairs one may exclude zero (or 1×) by chance. The "
    "reference is the lane listed first in the config; pairs without a seed both lanes completed are "
    "left out."
)


def paired_section(pairs: Sequence[PairedComparison]) -> str:
    """The summary's "## Paired comparisons" section: the explanation and one table row per pair."""
    parts = ["## Paired comparisons", "", EXPLANATION, ""]
    if pairs:
        parts.append(
            markdown_table(
                [column.header for column in PAIR_CELLS],
                [[column.cell(pair) for column in PAIR_CELLS] for pair in pairs],
            )
        )
    else:
        parts.append("No two lanes that share initial weights and batch order completed a common seed.")
    return "\n".join(parts) + "\n"


# --- figure -------------------------------------------------------------------------------------

PER_PAIR_INCHES = 1.5  # the height of one pair's row of panels
#: Round factors the ratio axis may end at (and label halfway to, on the log scale).
NICE_FACTORS = (1.01, 1.02, 1.05, 1.1, 1.2, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0)


def paired_figure(pairs: Sequence[PairedComparison], styles: Mapping[str, LaneStyle] | None = None):
    """The figure of `paired_differences`, not saved: one row per pair, two panels per row."""
    rows = max(1, len(pairs))
    fig, axes = plt.subplots(rows, 2, figsize=(11, 1.0 + PER_PAIR_INCHES * rows), squeeze=False)
    for index, (pair, (left, right)) in enumerate(zip(pairs, axes, strict=False)):
        color = style(pair.candidate, index, styles)[0]
        _draw_differences(left, pair, color)
        _draw_ratios(right, pair, color)
        left.set_ylabel(f"{pair.candidate}\nvs {pair.reference}", rotation=0, ha="right", va="center")
    if not pairs:
        for ax in axes[0]:
            ax.set_axis_off()
        axes[0][0].text(0.5, 0.5, "no lanes to pair", ha="center", va="center")
    axes[-1][0].set_xlabel("test accuracy, candidate − reference (percentage points)")
    axes[-1][1].set_xlabel("ms per step, candidate / reference (log scale)")
    fig.suptitle(
        "Paired differences per seed (dots), mean and 95 % Student-t interval (bar): "
        "lanes sharing initial weights and batch order",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def paired_differences(
    pairs: Sequence[PairedComparison], path, styles: Mapping[str, LaneStyle] | None = None
) -> None:
    """Write the paired-differences figure as a PNG, atomically.

    Per pair, left: the per-seed accuracy differences with their mean and interval, beside a zero
    line; right: the per-seed ms/step ratios on a log axis, beside a 1× line. `styles` (from
    `figures.lane_styles`) colours a pair by its candidate, as the lane's colour elsewhere.
    """
    fig = paired_figure(pairs, styles)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=130, bbox_inches="tight")
    plt.close(fig)


def _draw_differences(ax, pair: PairedComparison, color: str) -> None:
    estimate = pair.accuracy
    _draw_pair_row(ax, np.asarray(pair.accuracy_differences), estimate, color, neutral=0.0)
    span = max(
        [abs(v) for v in (*pair.accuracy_differences, estimate.low, estimate.high) if not math.isnan(v)]
    )
    # Symmetric about zero, so that the side a difference falls on reads at a glance.
    limit = 1.15 * max(span, 0.05)
    ax.set_xlim(-limit, limit)


def _draw_ratios(ax, pair: PairedComparison, color: str) -> None:
    estimate = pair.step_ms_ratio
    ax.set_xscale("log")
    _draw_pair_row(ax, np.asarray(pair.step_ms_ratios), estimate, color, neutral=1.0)
    values = (*pair.step_ms_ratios, estimate.low, estimate.high)
    span = math.exp(1.15 * max(abs(math.log(v)) for v in values if not math.isnan(v)))
    # Symmetric about 1× on the log axis, to a round factor; fixed ticks, since a narrow log range
    # holds no decade for matplotlib to label.
    outer = next((f for f in NICE_FACTORS if f >= span), span)
    inner = max((f for f in NICE_FACTORS if f * f <= outer * 1.0001), default=1.0)
    ax.set_xlim(1 / outer, outer)
    ticks = sorted({1 / outer, 1 / inner, 1.0, inner, outer})
    ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(ticks))
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:.3g}×"))


def _draw_pair_row(ax, values: np.ndarray, estimate: Estimate, color: str, neutral: float) -> None:
    """Per-seed dots spread slightly in height (so equal values stay countable), mean and bar below."""
    heights = np.linspace(0.15, 0.45, len(values)) if len(values) > 1 else np.array([0.3])
    ax.axvline(neutral, color="black", linewidth=0.8)
    ax.scatter(values, heights, color=color, s=22, zorder=3)
    if estimate.has_interval:
        ax.errorbar(
            [estimate.value],
            [-0.2],
            xerr=[[estimate.value - estimate.low], [estimate.high - estimate.value]],
            fmt="D",
            color="black",
            capsize=4,
            markersize=5,
        )
    else:
        ax.plot([estimate.value], [-0.2], "D", color="black", markersize=5)
    ax.set_ylim(-0.5, 0.7)
    ax.set_yticks([])
    ax.grid(True, axis="x", alpha=0.25)
