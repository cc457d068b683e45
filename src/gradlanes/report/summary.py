"""Summary tables from every record: one row per lane, replicates as mean and 95 % interval.

The `summarize` rule reads the per-seed records and the agreement report, builds a
machine-readable frame (written as Parquet and CSV) and a Markdown page with the lane table and
the table of published anchors (their figures on their hardware, set beside our comparable lane).

This module is the entry point the workflow and tests import; the work is split by concern:
`stats` (the interval), `rows` (records to frame), `columns` (how each column reads),
`anchors` (the published figures, from anchors.yaml) and `tables` (Markdown and terminal layout).
"""

from __future__ import annotations

from gradlanes.report.columns import LANE_COLUMNS, Column, accuracy_text, reference_text
from gradlanes.report.rows import agreement_verdicts, lane_rows, load_records, reference_errors
from gradlanes.report.stats import mean_ci
from gradlanes.report.tables import markdown, markdown_table, terminal_table

__all__ = [
    "LANE_COLUMNS",
    "Column",
    "accuracy_text",
    "agreement_verdicts",
    "lane_rows",
    "load_records",
    "markdown",
    "markdown_table",
    "mean_ci",
    "reference_errors",
    "reference_text",
    "terminal_table",
]
