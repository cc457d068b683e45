"""The lane tables' columns, written once: each entry says which frame column it shows, under
which header, and how a cell reads, in the Markdown summary and in the `gradlanes table` terminal.

Both tables are rendered from `LANE_COLUMNS` (see `tables`), so a new column is one new entry
here; the frame itself (`rows.lane_rows`) is the machine-readable record and knows no formatting.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: One row of the lane frame, as `DataFrame.itertuples()` yields it.
Row = Any
Format = Callable[[Row], str]

DASH = "—"


def dash(row: Row) -> str:
    """The cell of a measurement a lane did not make."""
    return DASH


#: `Column.skipped` for a column that describes the lane, not a run of it: skipped lanes show it too.
AS_RAN = None


@dataclass(frozen=True)
class Column:
    """One column of the lane tables.

    `key` is the frame column the cell mainly shows; without `format` the cell is that value as
    text. The terminal table shows only the columns with a `cli_header`, and where its cells are
    terser than the Markdown's, `cli_format` / `cli_skipped` say how.
    """

    key: str
    header: str
    format: Format | None = None  # the cell of a lane that ran
    skipped: Format | None = dash  # a lane whose status is not "ok"; AS_RAN: as `format`
    cli_header: str | None = None  # None: not in the terminal table
    cli_format: Format | None = None  # None: the Markdown cell
    cli_skipped: Format | None = None  # None: as the Markdown decides for a skipped lane
    right_align: bool = False  # in the terminal, so that digits line up

    def cell(self, row: Row, terminal: bool = False) -> str:
        ran = (terminal and self.cli_format) or self.format or self._value
        if row.status == "ok" or self.skipped is AS_RAN:
            return ran(row)
        return ((terminal and self.cli_skipped) or self.skipped)(row)

    def _value(self, row: Row) -> str:
        return str(getattr(row, self.key))


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def number(value: float | None, digits: int = 2) -> str:
    return DASH if _missing(value) else f"{value:,.{digits}f}"


def interval(low: float, high: float, digits: int = 2) -> str:
    return DASH if math.isnan(low) else f"[{low:,.{digits}f}, {high:,.{digits}f}]"


def accuracy_text(correct: int, tested: int) -> str:
    return f"{correct:,} / {tested:,} = {100 * correct / tested:.2f} %" if tested else DASH


def reference_text(row: Row) -> str:
    """The lane's worst distance from the float64 reference, in float32 units, beside its bounds."""
    # Summaries written before the float64 reference existed have no ref_ columns.
    if math.isnan(getattr(row, "ref_grad_u", math.nan)):
        return DASH
    return (
        f"{row.ref_loss_u:.1f} / {row.ref_grad_u:.1f} (≤ {row.ref_loss_bound:.0f} / {row.ref_grad_bound:.0f})"
    )


def ir_sizes(row: Row) -> str:
    values = (row.ir_forward, row.ir_gradient, row.ir_step_total)
    return " / ".join(DASH if _missing(v) else str(int(v)) for v in values)


def program_fingerprint(row: Row) -> str:
    """Enough of the SHA-256 to tell programs apart by eye; the frame keeps all 64 digits."""
    # Missing in records from before programs were fingerprinted, and for lanes that run none.
    fingerprint = getattr(row, "program_fingerprint", None)
    return f"`{fingerprint[:12]}`" if isinstance(fingerprint, str) else DASH


def _terminal_interval(row: Row) -> str:
    low, high = row.accuracy_ci_low, row.accuracy_ci_high
    return DASH if math.isnan(low) else f"{low:.2f}–{high:.2f}"


LANE_COLUMNS: list[Column] = [
    Column(
        "lane",
        "lane",
        lambda row: f"`{row.lane}`",
        AS_RAN,
        cli_header="lane",
        cli_format=lambda row: row.lane,
    ),
    Column("engine", "engine", skipped=AS_RAN, cli_header="engine"),
    Column(
        "platform",
        "ran on",
        lambda row: f"{row.platform} ({row.device_kind})",
        lambda row: f"{row.device_requested}: **{row.status}**",
        cli_header="ran on",
        cli_format=lambda row: row.platform,
        cli_skipped=lambda row: f"{row.device_requested} ({row.status})",
    ),
    Column("model", "model", skipped=AS_RAN),
    Column("loss", "loss", skipped=AS_RAN),
    Column("optimizer", "optimizer", skipped=AS_RAN),
    Column("steps", "steps", lambda row: f"{row.steps:,}", AS_RAN, cli_header="steps", right_align=True),
    Column("train_images", "train images", lambda row: f"{row.train_images:,}", AS_RAN),
    Column("batch", "batch", skipped=AS_RAN, cli_header="batch"),
    Column("train_s_mean", "train s", lambda row: number(row.train_s_mean, 1)),
    Column(
        "step_ms_mean",
        "ms/step [95 % CI]",
        lambda row: f"{number(row.step_ms_mean, 3)} {interval(row.step_ms_ci_low, row.step_ms_ci_high, 3)}",
        cli_header="ms/step",
        cli_format=lambda row: f"{row.step_ms_mean:.3f}",
        right_align=True,
    ),
    Column(
        "images_per_s_mean",
        "images/s",
        lambda row: number(row.images_per_s_mean, 0),
        cli_header="images/s",
        right_align=True,
    ),
    Column(
        "compiles_train",
        "compiles train / total",
        lambda row: f"{int(row.compiles_train)} / {int(row.compiles_total)}",
        cli_header="compiles",
        cli_format=lambda row: str(int(row.compiles_train)),
        right_align=True,
    ),
    Column("dispatches", "dispatches", lambda row: f"{int(row.dispatches):,}"),
    Column("ir_step_total", "IR eqns fwd / grad / step", ir_sizes, AS_RAN),
    Column("program_fingerprint", "program (SHA-256)", program_fingerprint, AS_RAN),
    Column(
        "correct",
        "test accuracy (all seeds)",
        lambda row: accuracy_text(row.correct, row.tested),
        cli_header="test accuracy",
        cli_format=lambda row: f"{row.correct:,}/{row.tested:,} = {100 * row.correct / row.tested:.2f} %",
    ),
    Column(
        "accuracy_ci_low",
        "accuracy 95 % CI",
        lambda row: interval(row.accuracy_ci_low, row.accuracy_ci_high),
        cli_header="95 % CI",
        cli_format=_terminal_interval,
    ),
    Column("final_loss_mean", "final loss", lambda row: number(row.final_loss_mean, 5)),
    Column(
        "ref_grad_u",
        "float64-ref error, u: loss / grad (bound)",
        reference_text,
        cli_header="f64-ref u: loss / grad",
    ),
    Column("agreement", "agreement", skipped=AS_RAN, cli_header="agreement"),
]

#: Our side of the published-anchors table: the lane an anchor is compared with.
OUR_LANE_COLUMNS: list[Column] = [
    Column("lane", "our lane", lambda row: f"`{row.lane}`", lambda row: f"`{row.lane}` ({row.status})"),
    Column(
        "steps",
        "our steps / train images",
        lambda row: f"{row.steps:,} / {row.train_images:,}",
        AS_RAN,
    ),
    Column("correct", "our accuracy", lambda row: accuracy_text(row.correct, row.tested)),
    Column("train_s_mean", "our train s", lambda row: number(row.train_s_mean, 2)),
]
