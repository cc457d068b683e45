"""The lane tables: one list of column specifications drives the Markdown and the terminal table."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from gradlanes.report import columns
from gradlanes.report.anchors import Anchor
from gradlanes.report.columns import Column
from gradlanes.report.summary import lane_rows, markdown
from gradlanes.report.tables import anchor_table, terminal_table

FINGERPRINT = "0123456789abcdef" * 4


def record(lane: str, seed: int = 0, status: str = "ok", engine: str = "xla", program: dict | None = None):
    """A lane record with the fields the summary reads; a lane that did not run measured nothing."""
    ran = status == "ok"
    measured = lambda value: value if ran else None  # noqa: E731
    return {
        "lane": lane,
        "engine": engine,
        "status": status,
        "reason": None if ran else "no such device here",
        "device_requested": "cpu",
        "platform": measured("cpu"),
        "device_kind": measured("cpu"),
        "config": {
            "model": "mlp",
            "hidden": 128,
            "loss": "mse",
            "optimizer": "adam",
            "learning_rate": 5e-4,
            "schedule": "constant",
            "seed": seed,
            "batch_size": "full",
            "steps": 1200,
            "epochs": 1200.0,
            "train_images": 4096,
        },
        "ir": {"forward": {"top": 7, "total": 9}, "gradient": {"top": 31, "total": 37}, "step": None},
        "compiles": {"train": measured(1), "total": measured(3)},
        "dispatches": measured(1213),
        "timing": {
            "compile_s": measured(0.5),
            "train_s": measured(7.5),
            "step_ms_median": measured(12.0 + seed),
            "images_per_s": measured(326551.0),
        },
        "loss": {"final": measured(0.0048)},
        "accuracy": {"correct": measured(9000 + seed), "total": measured(10000)},
        "numerics": {"matmul_precision": "highest"},
        "environment": {"git_commit": "abc123"},
        **({"program": program} if program is not None else {}),
    }


@pytest.fixture
def frame():
    program = {"id": "mlp-mse", "fingerprint": FINGERPRINT}
    records = [record("ran", seed, program=program) for seed in (1, 0)]
    records += [record("idle", seed, status="skipped") for seed in (0, 1)]
    return lane_rows(records, {"ran": "passed 3/3"})


def markdown_rows(text: str) -> dict[str, dict[str, str]]:
    """The lane table of a summary page, as {lane: {header: cell}}."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    header = lines[0].strip("| ").split(" | ")
    rows = [line.strip("| ").split(" | ") for line in lines[1:] if line.startswith("| `")]
    return {cells[0].strip("`"): dict(zip(header, cells, strict=True)) for cells in rows}


def terminal_rows(text: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines() if line.strip()]


def test_a_new_column_is_one_entry_in_both_tables(frame, monkeypatch):
    seeds = Column("seeds", "seeds run", lambda row: f"{row.seeds} seeds", cli_header="n seeds")
    markdown_only = Column("epochs", "epochs here", lambda row: f"{row.epochs:g} epochs")
    monkeypatch.setattr(columns, "LANE_COLUMNS", [*columns.LANE_COLUMNS, seeds, markdown_only])
    page = markdown_rows(markdown(frame))
    assert page["ran"]["seeds run"] == "2 seeds" and page["ran"]["epochs here"] == "1200 epochs"
    assert page["idle"]["seeds run"] == "—"
    header, _, ran, idle, _ = terminal_rows(terminal_table(frame))
    assert header[-1] == "n seeds" and "epochs here" not in header
    assert ran[-1] == "2 seeds" and idle[-1] == "—"


def test_dropping_a_column_drops_it_from_both_tables(frame, monkeypatch):
    monkeypatch.setattr(columns, "LANE_COLUMNS", [c for c in columns.LANE_COLUMNS if c.key != "agreement"])
    assert "agreement" not in markdown_rows(markdown(frame))["ran"]
    assert "agreement" not in terminal_rows(terminal_table(frame))[0]


def test_a_lane_that_ran_reads_as_before(frame):
    ran = markdown_rows(markdown(frame))["ran"]
    assert ran["ran on"] == "cpu (cpu)" and ran["steps"] == "1,200" and ran["train images"] == "4,096"
    assert ran["ms/step [95 % CI]"] == "12.500 [6.147, 18.853]"  # t(0.975, 1) = 12.706, sd = 0.707
    assert ran["test accuracy (all seeds)"] == "18,001 / 20,000 = 90.00 %"
    assert ran["compiles train / total"] == "1 / 3" and ran["dispatches"] == "1,213"
    assert ran["IR eqns fwd / grad / step"] == "9 / 37 / —" and ran["agreement"] == "passed 3/3"
    _, _, cells, _, _ = terminal_rows(terminal_table(frame))
    assert cells[:6] == ["ran", "xla", "cpu", "1,200", "full", "12.500"]
    assert cells[8] == "18,001/20,000 = 90.00 %"


def test_a_skipped_lane_shows_dashes_for_what_it_did_not_measure(frame):
    idle = markdown_rows(markdown(frame))["idle"]
    measured = [
        "train s",
        "ms/step [95 % CI]",
        "images/s",
        "compiles train / total",
        "dispatches",
        "test accuracy (all seeds)",
        "accuracy 95 % CI",
        "final loss",
        "float64-ref error, u: loss / grad (bound)",
    ]
    assert [idle[header] for header in measured] == ["—"] * len(measured)
    # What describes the lane still shows: where it asked to run, its setup and program.
    assert idle["ran on"] == "cpu: **skipped**" and idle["steps"] == "1,200"
    assert idle["IR eqns fwd / grad / step"] == "9 / 37 / —" and idle["agreement"] == "skipped"
    _, _, _, cells, _ = terminal_rows(terminal_table(frame))
    assert cells == ["idle", "xla", "cpu (skipped)", "1,200", "full", *["—"] * 6, "skipped"]
    assert "- `idle` was **skipped**: no such device here" in markdown(frame)


def test_program_fingerprint_is_in_the_frame_and_the_markdown_only(frame):
    fingerprints = frame.set_index("lane")["program_fingerprint"]
    assert fingerprints["ran"] == FINGERPRINT and pd.isna(fingerprints["idle"])  # null in the parquet
    page = markdown_rows(markdown(frame))
    assert page["ran"]["program (SHA-256)"] == f"`{FINGERPRINT[:12]}`"
    assert page["idle"]["program (SHA-256)"] == "—"
    assert "program" not in " ".join(terminal_rows(terminal_table(frame))[0])


def test_a_null_program_and_an_old_frame_show_no_fingerprint(frame):
    assert lane_rows([record("free", program=None) | {"program": None}], {})["program_fingerprint"][0] is None
    old = frame.drop(columns=["program_fingerprint", "ref_grad_u"])  # a summary written before both
    assert markdown_rows(markdown(old))["ran"]["program (SHA-256)"] == "—"


def test_every_column_shows_a_frame_column(frame):
    specs = columns.LANE_COLUMNS + columns.OUR_LANE_COLUMNS
    assert {column.key for column in specs} <= set(frame.columns)


def test_an_anchor_beside_a_lane_not_in_this_run(frame):
    absent = Anchor("Someone", "MLP", 512, 1000, None, 82.5, ours="gone", epochs=3)
    present = Anchor("Else", "MLP", 4096, 10000, 8.28, 93.66, ours="ran", steps=600)
    lines = anchor_table(frame, [absent, present]).splitlines()
    assert (
        lines[2] == "| Someone | MLP | 3 epochs | 512 | — | 82.50 % of 1,000 | not in this run | — | — | — |"
    )
    assert lines[3] == (
        "| Else | MLP | 600 | 4,096 | 8.28 | 93.66 % of 10,000 | `ran` | 1,200 / 4,096 | "
        "18,001 / 20,000 = 90.00 % | 7.50 |"
    )
