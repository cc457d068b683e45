"""The committed numerics matrix is current, and CI's share of it covers what the matrix found.

The full matrix is half an hour or more (`make test-numerics`), so CI runs a covering set of its
cells (`make test-numerics-ci`) and the full matrix is run when the files it measures change.
results/checks/numerics.json keeps the SHA-256 of each of those files (tests/numerics/sources.py);
the first test fails when one changed since, or when a cell of the record was measured at other
sources than the rest, as the mutation records do for their modules. The others check the
covering set's choice on made-up results and on the committed ones.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "numerics"))  # the matrix's modules import each other by name
from cells import all_cells  # noqa: E402
from cover import covering_cells  # noqa: E402
from matrix import markdown  # noqa: E402
from sources import NUMERICS_TEST_FILES, changed, combined_digest, source_digests  # noqa: E402

RECORD = REPO / "results" / "checks" / "numerics.json"
REMEASURE = (
    "run `make test-numerics`, then `python tests/numerics/floors.py --reuse-seeds`, and commit "
    "results/checks/numerics.{json,md} and slice-floors.{json,md}"
)


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(RECORD.read_text())


def test_the_committed_matrix_measured_the_current_sources(record):
    current = source_digests()
    stale = changed(record.get("sources", {}), current)
    assert not stale, f"changed since the numerics matrix was measured: {', '.join(stale)}; {REMEASURE}"
    digest = combined_digest(current)
    older = [cell["cell"] for cell in record["cells"] if cell.get("sources_sha256") != digest]
    assert not older, f"cells measured at other sources than the record's: {older}; {REMEASURE}"


def test_the_cells_run_every_test_marked_numerics():
    mark = re.compile(r"^(@pytest\.mark\.numerics\b|pytestmark = .*pytest\.mark\.numerics\b)", re.M)
    marked = {
        path.relative_to(REPO).as_posix()
        for path in (REPO / "tests").glob("test_*.py")
        if mark.search(path.read_text())
    }
    assert marked == set(NUMERICS_TEST_FILES)


def test_the_committed_report_is_the_record_rendered(record):
    skipped = {
        cell: why for cell in all_cells() for name, why in record["skipped"].items() if cell.name == name
    }
    assert (REPO / "results/checks/numerics.md").read_text() == markdown(
        record["cells"], skipped, record["machine"]
    )


# ---- the covering set ----------------------------------------------------------------------------
def results_of(record: dict) -> dict[str, tuple]:
    return {cell["cell"]: (cell["numpy_product"], cell["xla_product"]) for cell in record["cells"]}


def threads_of(names) -> dict[str, int]:
    return {name: int(name.rsplit("-", 1)[1].removesuffix("t")) for name in names}


def covered(cells: list[str], results: dict[str, tuple]) -> tuple[set, set]:
    return {results[c][0] for c in cells}, {results[c][1] for c in cells}


def test_on_the_recorded_cpu_the_cover_runs_each_recorded_result_once_in_as_few_cells(record):
    recorded = results_of(record)
    cover = covering_cells(recorded, recorded, threads_of(recorded))
    numpy, xla = covered(cover.cells, recorded)
    assert numpy == {r[0] for r in recorded.values()} and xla == {r[1] for r in recorded.values()}
    # No cell computes two NumPy results, so no cover can be smaller than the count of them.
    assert len(cover.cells) == len(numpy)
    assert cover.out_of_reach == [] and all("the first to compute" in why for why in cover.reasons.values())


def test_results_make_test_ran_under_the_default_kernels_need_no_cell(record):
    recorded = results_of(record)
    default = recorded["SkylakeX-xla_default-2t"]  # this project's machine's own kernels, at 2 cores
    cover = covering_cells(recorded, recorded, threads_of(recorded), tested=default)
    numpy, xla = covered(cover.cells, recorded)
    assert numpy | {default[0]} == {r[0] for r in recorded.values()} and default[0] not in numpy
    assert xla | {default[1]} == {r[1] for r in recorded.values()}
    assert len(cover.cells) == len({r[0] for r in recorded.values()}) - 1


def test_a_cell_whose_result_the_record_lacks_always_runs():
    recorded = {"A-AVX-1t": ("n1", "x1"), "A-AVX-2t": ("n2", "x1"), "B-AVX2-1t": ("n1", "x2")}
    here = {**recorded, "B-AVX2-1t": ("n3", "x2")}  # a new CPU: this cell's NumPy product is new
    cover = covering_cells(recorded, here, threads_of(here))
    assert cover.cells[0] == "B-AVX2-1t" and "NumPy `n3`" in cover.reasons["B-AVX2-1t"]
    assert "record does not hold" in cover.reasons["B-AVX2-1t"]
    numpy, xla = covered(cover.cells, here)
    assert numpy == {"n1", "n2", "n3"} and xla == {"x1", "x2"}
    assert cover.out_of_reach == []


def test_results_no_cell_here_computes_are_reported_not_hidden():
    recorded = {"A-AVX-1t": ("n1", "x1"), "S-AVX-1t": ("n9", "x1")}
    here = {"A-AVX-1t": ("n1", "x1")}  # this CPU cannot run S's kernels
    cover = covering_cells(recorded, here, threads_of(here))
    assert cover.cells == ["A-AVX-1t"] and cover.out_of_reach == ["NumPy `n9`"]


def test_among_cells_that_add_as_much_the_one_on_fewer_cores_is_taken():
    here = {"A-AVX-2t": ("n1", "x1"), "A-AVX-1t": ("n1", "x1")}
    cover = covering_cells(here, here, threads_of(here))
    assert cover.cells == ["A-AVX-1t"]
