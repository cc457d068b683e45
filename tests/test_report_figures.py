"""Figure styles come from the config's lane order and each lane's experiment, never from names."""

from __future__ import annotations

import re

import yaml

from gradlanes.report import figures
from gradlanes.report.figures import PALETTE, lane_styles, style
from workflow import REPO

EXPERIMENTS = ["tlaloc", "tlaloc", "tlaloc", "softmax", "softmax", "stream"]


def test_distinct_lanes_get_distinct_colours():
    lanes = [f"lane_{i}" for i in range(len(PALETTE))]
    styles = lane_styles(lanes, {lane: lane for lane in lanes})
    assert len({colour for colour, _ in styles.values()}) == len(lanes)
    assert {dash for _, dash in styles.values()} == {"-"}  # no lane repeats another's experiment


def test_styles_depend_on_position_and_experiment_not_name():
    first, second = ["a", "b", "c", "d", "e", "f"], ["zeta", "host", "xla_gpu", "q", "softmax_xla", "w"]
    one = lane_styles(first, dict(zip(first, EXPERIMENTS, strict=True)))
    two = lane_styles(second, dict(zip(second, EXPERIMENTS, strict=True)))
    assert list(one.values()) == list(two.values())
    # the first lane of each experiment solid, lanes repeating it dashed
    assert [dash for _, dash in one.values()] == ["-", "--", "--", "-", "--", "-"]


def test_a_lane_keeps_its_colour_whichever_lanes_ran():
    lanes = ["a", "b", "c"]
    styles = lane_styles(lanes, dict.fromkeys(lanes, "one experiment"))
    # cost_and_accuracy draws only the lanes that ran: "c" keeps its config colour, not position 0.
    assert style("c", 0, styles) == styles["c"] != style("a", 0, styles)
    assert style("unknown", 1) == (PALETTE[1], "-")


def test_report_code_names_no_lane_of_the_config():
    lanes = yaml.safe_load((REPO / "config.yaml").read_text())["lanes"]
    for path in (REPO / "src/gradlanes/report").glob("*.py"):
        text = path.read_text()
        named = [lane for lane in lanes if re.search(rf"[\"']{lane}[\"']", text)]
        assert not named, f"{path.name} names lanes {named}; lane names belong in config.yaml"
    assert not hasattr(figures, "STYLE")
