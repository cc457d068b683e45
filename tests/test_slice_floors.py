"""The CI-subset floors are what tests/numerics/floors.py derives from the committed measurements.

Nobody edits a floor by hand: the committed slice-floors.json must equal the derivation from the
values it records, those values must be the committed numerics matrix's, and each floor must sit
within a few points under seed 0's measured accuracy (a floor far below it would let a real
regression pass).
"""

from __future__ import annotations

import json

import pytest
from numerics.floors import FLOORS, NUMERICS, derive, experiment_of, floor_of, margin_points, subset_lanes

A_FEW_POINTS = 3.0  # the "a few points at most" under what was measured


@pytest.fixture(scope="module")
def committed() -> dict:
    return json.loads(FLOORS.read_text())


def test_the_committed_floors_are_the_derivation_from_their_values(committed):
    derived = derive(committed["cell_accuracy"], committed["seeds"], margin_points())
    assert derived == committed["experiments"]
    assert committed["margin_points"] == margin_points()


def test_the_floors_come_from_the_committed_numerics_matrix(committed):
    matrix = {cell["cell"]: cell["accuracy"] for cell in json.loads(NUMERICS.read_text())["cells"]}
    assert committed["cell_accuracy"] == matrix
    assert committed["cells"] == len(matrix) >= 6, "a floor proven on a handful of kernels is no floor"


def test_every_cpu_experiment_of_the_subset_has_a_floor_a_few_points_under_seed_0(committed):
    experiments = committed["experiments"]
    cpu = {experiment_of(s) for s in subset_lanes().values() if s.get("device", "cpu") == "cpu"}
    assert cpu <= set(experiments)
    for name, entry in experiments.items():
        below = entry["seed0_min"] - entry["floor"]
        # In decimals below >= the margin exactly; in floats seed0_min and the floor (k / 10) each
        # carry half an ulp of [64, 128), 2**-47, the subtraction is exact (Sterbenz) and the
        # margin's own half ulp is 2**-55: 2**-45 covers all three.
        assert margin_points() <= below + 2**-45 < A_FEW_POINTS, name
        assert entry["seeds_min"] is not None, f"{name}: no seed sweep recorded beside its floor"


@pytest.mark.parametrize(
    ("values", "margin", "floor"),
    [([79.5, 79.6], 0.3, 79.2), ([64.0], 0.3, 63.7), ([66.95], 0.3, 66.6), ([70.0, 69.9], 0.5, 69.4)],
)
def test_a_floor_is_the_lowest_value_less_the_margin_rounded_down(values, margin, floor):
    assert floor_of(values, margin) == floor


def test_lanes_no_cell_ran_have_no_floor_and_others_pool_by_experiment():
    lanes = subset_lanes()
    cells = {"a": {lane: None for lane in lanes}, "b": {lane: None for lane in lanes}}
    cells["a"]["xla_cpu"], cells["b"]["xla_cpu"], cells["a"]["host"] = 80.0, 79.5, 79.8
    derived = derive(cells, {"xla_cpu": {"0": 80.0, "1": 77.0}, "host": {"0": 79.8}}, 0.3)
    assert list(derived) == ["mlp/mse"]
    entry = derived["mlp/mse"]
    assert entry["lanes"] == ["xla_cpu", "host"] and entry["floor"] == 79.2
    assert (entry["seed0_min"], entry["seed0_max"], entry["seed0_values"]) == (79.5, 80.0, 3)
    assert (entry["seeds_min"], entry["seeds_max"]) == (77.0, 80.0)
