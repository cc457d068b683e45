"""Rendering the lane frame: the Markdown summary page and the `gradlanes table` terminal table.

Both walk the one list of column specifications, `columns.LANE_COLUMNS` (read at call time, so a
test can swap it), and differ only in layout: Markdown pipes versus space-aligned text.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from gradlanes.report import columns
from gradlanes.report.anchors import Anchor, load_anchors
from gradlanes.report.columns import DASH, number

INTRO = (
    "One row per lane; each number is over {seeds}: the mean, with a Student-t "
    "95 % interval across seeds. Accuracy pools every seed's test predictions. Times are this "
    "machine's, on the day the records were made; see `runs/` beside this summary for each seed's record. "
    "The float64-reference error is the worst over seeds, at the initial and the trained weights, "
    "of the lane's loss and gradient against the float64 evaluation of its own captured program, in "
    "float32 units (u = 2^-24 times the quantity's error scale; README: Why these bounds)."
)

#: The anchor's own side of the published-anchors table; ours is `columns.OUR_LANE_COLUMNS`.
ANCHOR_CELLS: list[tuple[str, Callable[[Anchor], str]]] = [
    ("source", lambda anchor: anchor.source),
    ("experiment", lambda anchor: anchor.experiment),
    ("steps", lambda anchor: anchor.length),
    ("train images", lambda anchor: f"{anchor.train_images:,}"),
    ("wall s", lambda anchor: number(anchor.wall_s)),
    ("accuracy (published)", lambda anchor: f"{anchor.accuracy:.2f} % of {anchor.test_images:,}"),
]


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def lane_table(frame: pd.DataFrame) -> str:
    """The lane table in Markdown: every column of `LANE_COLUMNS`, one row per lane."""
    shown = columns.LANE_COLUMNS
    return markdown_table(
        [column.header for column in shown],
        [[column.cell(row) for column in shown] for row in frame.itertuples()],
    )


def seed_counts(frame: pd.DataFrame) -> str:
    """How many seeds the lanes that ran pooled: '5 seeds', or '5 seeds (3 for `cnn_xla`, `cnn_host`)'."""
    ran = frame.loc[frame["status"] == "ok"]
    counts = ran.groupby("seeds")["lane"].apply(list)
    if counts.empty:
        return "no seeds"
    usual = max(counts.index, key=lambda n: (len(counts[n]), n))
    others = [f"{n} for {', '.join(f'`{lane}`' for lane in counts[n])}" for n in counts.index if n != usual]
    plural = "seed" if usual == 1 else "seeds"
    return f"{usual} {plural}" + (f" ({'; '.join(others)})" if others else "")


def markdown(frame: pd.DataFrame, paired: str = "") -> str:
    """The summary page: the lane table, why lanes did not run, the paired comparisons (`paired`,
    a Markdown section from `report.paired`) and the published anchors."""
    skipped = [
        f"- `{row.lane}` was **{row.status}**: {row.reason}"
        for row in frame.itertuples()
        if row.status != "ok"
    ]
    parts = [
        "# gradlanes results",
        "",
        INTRO.format(seeds=seed_counts(frame)),
        "",
        lane_table(frame),
        "",
        *skipped,
        "",
        paired,
        "",
        "## Published anchors (their figures, on their hardware, not ours)",
        "",
        anchor_table(frame, load_anchors()),
        "",
        f"Records from git commit `{frame['git_commit'].iloc[0]}`.",
    ]
    return "\n".join(parts).replace("\n\n\n", "\n\n") + "\n"


def anchor_table(frame: pd.DataFrame, anchors: list[Anchor]) -> str:
    """Each published anchor beside the lane it names, or 'not in this run' where that lane is absent."""
    ours = columns.OUR_LANE_COLUMNS
    by_lane = {row.lane: row for row in frame.itertuples()}
    rows = []
    for anchor in anchors:
        lane = by_lane.get(anchor.ours)
        mine = (
            ["not in this run"] + [DASH] * (len(ours) - 1)
            if lane is None
            else [column.cell(lane) for column in ours]
        )
        rows.append([cell(anchor) for _, cell in ANCHOR_CELLS] + mine)
    return markdown_table([header for header, _ in ANCHOR_CELLS] + [column.header for column in ours], rows)


def terminal_table(frame: pd.DataFrame) -> str:
    """The lane table for a terminal: the columns with a `cli_header`, aligned with spaces."""
    shown = [column for column in columns.LANE_COLUMNS if column.cli_header is not None]
    header = [column.cli_header for column in shown]
    body = [[column.cell(row, terminal=True) for column in shown] for row in frame.itertuples()]
    widths = [max(len(cells[i]) for cells in [header, *body]) for i in range(len(shown))]
    right = [column.right_align for column in shown]
    lines = [_aligned(header, widths, [False] * len(shown)), "  ".join("-" * width for width in widths)]
    lines += [_aligned(cells, widths, right) for cells in body]
    seeds = int(frame.loc[frame["status"] == "ok", "seeds"].max())
    lines.append(
        f"\n{seeds} seed(s) per lane; ms/step is the mean of per-seed medians; compiles during training."
    )
    return "\n".join(lines)


def _aligned(cells: list[str], widths: list[int], right: list[bool]) -> str:
    padded = (cell.rjust(w) if r else cell.ljust(w) for cell, w, r in zip(cells, widths, right, strict=True))
    return "  ".join(padded).rstrip()
