"""The committed mutation record is current, and the report is what the record says.

A mutation run takes hours where the interpreter's rules are in it, so CI does not run it; instead
results/checks/mutation.json keeps, per module, the SHA-256 of the source it was measured at, and
this test fails when a listed module has changed since (or was never measured): the module's
score is then unknown until `tools/mutation.py --modules NAME` re-measures it. The rest checks
tools/mutation.py's own bookkeeping on made-up statuses.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gradlanes_tools_mutation", REPO / "tools" / "mutation.py")
mutation = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = mutation  # dataclasses look their module up while the class is made
spec.loader.exec_module(mutation)


def current_hashes(listed: dict[str, str]) -> dict[str, str]:
    return {module: mutation.source_sha256(file) for module, file in listed.items()}


# ---- the committed record ------------------------------------------------------------------------
def test_every_listed_module_was_measured_at_its_current_source():
    listed, record = mutation.listed_modules(), mutation.Record.load()
    stale = [
        f"{module} ({file})"
        for module, file in sorted(listed.items())
        if module not in record.modules
        or record.modules[module].source_sha256 != mutation.source_sha256(file)
    ]
    assert not stale, (
        "changed since their mutation score was measured, or never measured: "
        + ", ".join(stale)
        + "; run `.venv/bin/python tools/mutation.py --stale` (make mutation) and commit "
        "results/checks/mutation.json and mutation.md"
    )


def test_the_committed_report_is_the_record_rendered_and_meets_the_target():
    listed = mutation.listed_modules()
    unmutated = {module: mutation.unmutated_functions(file) for module, file in listed.items()}
    verdict = mutation.render(
        mutation.Record.load(), listed, current_hashes(listed), mutation.load_equivalent(),
        mutation.named_mutants(), unmutated,
    )  # fmt: skip
    assert mutation.REPORT.read_text() == verdict.text, "run `.venv/bin/python tools/mutation.py --render`"
    assert verdict.ok, (
        "results/checks/mutation.md lists a module under target, an unexplained survivor "
        "or a named mutant not killed"
    )


def test_every_equivalent_mutant_names_a_survivor_of_the_record():
    """An explanation whose mutant is gone (renumbered after a change) would excuse nothing."""
    record = mutation.Record.load()
    survivors = {name for entry in record.modules.values() for name in entry.survivors}
    assert sorted(set(mutation.load_equivalent()) - survivors) == []


# ---- the bookkeeping -----------------------------------------------------------------------------
def entry(statuses: dict[str, int], survivors=(), sha="a" * 64) -> mutation.ModuleRecord:
    return mutation.ModuleRecord(
        file="src/pkg/mod.py", source_sha256=sha, measured="2026-12-02", mutmut="3.8.1",
        statuses=statuses, survivors={name: {"status": "survived", "diff": "-a\n+b"} for name in survivors},
    )  # fmt: skip


def test_no_rule_of_the_interpreter_escapes_mutation():
    """Rules register with a call after their def, not a decorator, so that mutmut mutates them."""
    listed = mutation.listed_modules()
    rules = {m: f for m, f in listed.items() if m.startswith("gradlanes.program.rules.")}
    assert rules, "no interpreter rule module is listed in [tool.mutmut]"
    allowed = {"KeyArray.key_shape", "KeyArray.shape", "KeyArray.ndim", "KeyArray.impl_name"}
    escaped = {m: set(mutation.unmutated_functions(f)) - allowed for m, f in rules.items()}
    assert not any(escaped.values()), f"decorated, so never mutated: {escaped}"


def test_unmutated_functions_are_the_decorated_ones_and_lambdas_outside_functions(tmp_path, monkeypatch):
    monkeypatch.setattr(mutation, "REPO", tmp_path)
    (tmp_path / "m.py").write_text(
        "import functools\n"
        "def plain(): return lambda: 0\n"
        "@functools.cache\ndef cached(): pass\n"
        "class A:\n"
        "    @property\n    def p(self): pass\n"
        "    @staticmethod\n    def s(): pass\n"
        "    @classmethod\n    def c(cls): pass\n"
        "    def m(self):\n        @rule('x')\n        def inner(): pass\n"
        "    key = lambda self: 1\n"
        "TABLE = {'a': (len, lambda x: x)}\n"
    )
    assert mutation.unmutated_functions("m.py") == [
        "cached", "A.p", "A.m.inner", "A.<lambda> (line 15)", "<lambda> (line 16)"
    ]  # fmt: skip
    verdict = render(mutation.Record(), unmutated={"pkg.mod": ["A.p"], "pkg.other": []})
    assert "## Not mutated" in verdict.text and "- `pkg.mod`: `A.p`" in verdict.text
    assert "pkg.other" not in verdict.text.split("## Not mutated")[1].split("## Named")[0]


def test_module_names_follow_the_listed_paths():
    assert mutation.module_name("src/gradlanes/run/records.py") == "gradlanes.run.records"
    assert mutation.module_name("gradlanes/run/records.py") == "gradlanes.run.records"
    assert mutation.module_of("gradlanes.data.idx.x_parse_idx__mutmut_3") == "gradlanes.data.idx"
    assert mutation.module_of("gradlanes.run.records.xǁRecordǁcheck__mutmut_12") == "gradlanes.run.records"


def test_statuses_are_read_from_mutmut_results():
    text = "    pkg.mod.x_f__mutmut_1: killed\n    pkg.mod.x_f__mutmut_2: no tests\nnoise: here\n"
    assert mutation.statuses(text) == {"pkg.mod.x_f__mutmut_1": "killed", "pkg.mod.x_f__mutmut_2": "no tests"}


def test_score_counts_timeouts_and_crashes_as_detected_and_no_tests_as_not():
    record = entry({"killed": 6, "timeout": 2, "no tests": 1, "survived": 1}, survivors=["m1", "m2"])
    assert (record.total, record.detected) == (10, 8)
    assert record.score({}) == 0.8
    assert record.score({"m1": "why"}) == 8 / 9
    crashed = entry({"killed": 6, "segfault": 1, "survived": 1}, survivors=["m1"])
    assert (crashed.total, crashed.detected, crashed.score({})) == (8, 7, 7 / 8)
    assert entry({"survived": 1}, survivors=["m1"]).score({"m1": "why"}) == 1.0


def test_module_records_keep_every_undetected_mutant_with_its_diff(tmp_path, monkeypatch):
    monkeypatch.setattr(mutation, "REPO", tmp_path)
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    found = {
        "pkg.mod.x_f__mutmut_1": "killed",
        "pkg.mod.x_f__mutmut_2": "survived",
        "pkg.mod.xǁCǁg__mutmut_1": "timeout",
        "pkg.mod.x_h__mutmut_1": "no tests",
        "pkg.mod.x_k__mutmut_1": "segfault",
        "pkg.other.x_f__mutmut_1": "survived",
    }
    records = mutation.module_records(
        found, {"pkg.mod": "src/pkg/mod.py"}, lambda name: f"diff of {name}", "2026-12-02", "3.8.1"
    )
    assert list(records) == ["pkg.mod"]
    got = records["pkg.mod"]
    assert got.statuses == {"killed": 1, "no tests": 1, "segfault": 1, "survived": 1, "timeout": 1}
    assert got.survivors == {
        "pkg.mod.x_f__mutmut_2": {"status": "survived", "diff": "diff of pkg.mod.x_f__mutmut_2"},
        "pkg.mod.x_h__mutmut_1": {"status": "no tests", "diff": "diff of pkg.mod.x_h__mutmut_1"},
    }
    assert got.source_sha256 == mutation.hashlib.sha256(b"x = 1\n").hexdigest()


@pytest.mark.parametrize(
    "found, message",
    [
        ({"pkg.other.x_f__mutmut_1": "killed"}, "no mutants of pkg.mod"),
        ({"pkg.mod.x_f__mutmut_1": "not checked"}, "1 mutants of pkg.mod were not checked"),
    ],
)
def test_a_module_mutmut_did_not_finish_is_refused(found, message):
    with pytest.raises(SystemExit, match=message):
        mutation.module_records(found, {"pkg.mod": "src/pkg/mod.py"}, str, "2026-12-02", "3.8.1")


def test_the_record_round_trips_and_refuses_another_schema(tmp_path):
    record = mutation.Record({"pkg.mod": entry({"killed": 3})}, {"named": "tests/t.py::test"})
    path = tmp_path / "mutation.json"
    path.write_text(record.dumps())
    assert mutation.Record.load(path) == record
    assert mutation.Record.load(tmp_path / "missing.json") == mutation.Record()
    path.write_text(json.dumps({"schema": 0, "modules": {}}))
    with pytest.raises(SystemExit, match="schema 0"):
        mutation.Record.load(path)


def render(record, sha="a" * 64, equivalent=None, named=(), unmutated=None):
    return mutation.render(
        record, {"pkg.mod": "src/pkg/mod.py"}, {"pkg.mod": sha}, equivalent or {}, list(named), unmutated
    )


def test_a_current_module_over_target_renders_ok():
    verdict = render(
        mutation.Record({"pkg.mod": entry({"killed": 9, "survived": 1}, ["m1"])}), equivalent={"m1": "same"}
    )
    assert verdict.ok
    assert "| `pkg.mod` | 2026-12-02 | 10 | 9 | 0 | 0 | 0 | 1 (1) | 90.0% | 100.0% |" in verdict.text
    assert "- `m1` (survived): equivalent: same" in verdict.text


@pytest.mark.parametrize(
    "record, sha, equivalent, shown",
    [
        (mutation.Record(), "a" * 64, {}, "`pkg.mod` has no record"),
        (
            mutation.Record({"pkg.mod": entry({"killed": 1})}),
            "b" * 64,
            {},
            "`pkg.mod` changed since it was measured",
        ),
        (
            mutation.Record({"pkg.mod": entry({"killed": 9, "survived": 1}, ["m1"])}),
            "a" * 64,
            {},
            "**UNEXPLAINED**",
        ),
        (
            mutation.Record({"pkg.mod": entry({"killed": 8, "no tests": 1, "survived": 1}, ["m1", "m2"])}),
            "a" * 64,
            {"m1": "same"},
            "88.9%",
        ),
        (
            mutation.Record({"pkg.mod": entry({"killed": 1}), "pkg.gone": entry({"killed": 1})}),
            "a" * 64,
            {},
            "`pkg.gone` has a record but is not listed",
        ),
    ],
    ids=["missing", "stale", "unexplained", "under-target", "unlisted"],
)
def test_what_makes_the_report_fail_is_shown(record, sha, equivalent, shown):
    verdict = render(record, sha, equivalent)
    assert not verdict.ok
    assert shown in verdict.text


@pytest.mark.parametrize(
    "killed_by, ok, shown",
    [
        ("tests/t.py::kills", True, "`tests/t.py::kills`"),
        (None, False, "**SURVIVED**"),
        ("absent", False, "**NOT RUN**"),
    ],
)
def test_named_mutants_must_each_be_killed(killed_by, ok, shown):
    named = mutation.NamedMutant("wrong", "breaks it", "src/pkg/mod.py", "a", "b")
    record = mutation.Record(
        {"pkg.mod": entry({"killed": 1})}, {} if killed_by == "absent" else {"wrong": killed_by}
    )
    verdict = render(record, named=[named])
    assert verdict.ok is ok
    assert f"| `wrong` | breaks it | `src/pkg/mod.py` | {shown} |" in verdict.text


def test_stale_chooses_the_changed_and_the_unmeasured_modules(tmp_path, monkeypatch):
    monkeypatch.setattr(mutation, "REPO", tmp_path)
    for name in ("same", "changed", "new"):
        (tmp_path / f"{name}.py").write_text(name)
    listed = {name: f"{name}.py" for name in ("same", "changed", "new")}
    record = mutation.Record({
        "same": entry({"killed": 1}, sha=mutation.source_sha256("same.py")),
        "changed": entry({"killed": 1}, sha="0" * 64),
    })  # fmt: skip
    stale = argparse.Namespace(modules=None, stale=True)
    assert mutation.chosen(stale, listed, record) == {"changed": "changed.py", "new": "new.py"}
    every = argparse.Namespace(modules=None, stale=False)
    assert mutation.chosen(every, listed, record) == listed
    with pytest.raises(SystemExit, match="not listed in pyproject.toml"):
        mutation.chosen(argparse.Namespace(modules=["nope"], stale=False), listed, record)


def test_a_suspicious_mutant_is_run_again_to_name_the_signal_that_ended_it(tmp_path, monkeypatch):
    """mutmut calls an exit code it has no name for "suspicious" (a SIGFPE among them); the tool
    runs the mutant's tests in mutmut's copy again and counts a death by signal as a crash."""
    tests = tmp_path / "mutants" / "tests"
    tests.mkdir(parents=True)
    (tests / "test_x.py").write_text(
        "import os, signal\n"
        "def test_x():\n"
        "    if os.environ.get('MUTANT_UNDER_TEST') == 'pkg.mod.x_f__mutmut_1':\n"
        "        os.kill(os.getpid(), signal.SIGFPE)\n"
    )
    monkeypatch.setattr(mutation, "REPO", tmp_path)
    monkeypatch.setattr(mutation, "selected_tests", lambda: ["tests/test_x.py"])
    env = dict(__import__("os").environ)
    assert mutation.crash_signal("pkg.mod.x_f__mutmut_1", env) == "SIGFPE"
    assert mutation.crash_signal("pkg.mod.x_f__mutmut_2", env) is None
    crashed = entry({"killed": 6, "crashed": 1, "suspicious": 1})
    assert (crashed.total, crashed.detected) == (8, 7)
    assert "| 8 | 6 | 0 | 1 | 0 |" in render(mutation.Record({"pkg.mod": crashed})).text


def test_a_recheck_moves_the_newly_killed_survivors_and_keeps_the_rest():
    """After tests are added, only the survivors run again: a killed one leaves the survivors and
    its count moves from survived to killed; the total and the detected mutants stay as they were."""
    before = entry({"killed": 7, "survived": 3}, ["m1", "m2", "m3"])
    after = mutation.rechecked(
        before, {"m1": "killed", "m2": "survived", "m3": "timeout"}, "3.8.1", "2026-12-06"
    )
    assert after.statuses == {"killed": 8, "survived": 1, "timeout": 1}
    assert after.total == before.total
    assert sorted(after.survivors) == ["m2"]
    assert after.survivors["m2"] == before.survivors["m2"]
    assert (after.measured, after.rechecked, after.source_sha256) == ("2026-12-02", "2026-12-06", "a" * 64)
    shown = render(mutation.Record({"pkg.mod": after}), equivalent={"m2": "same"}).text
    assert "| `pkg.mod` | 2026-12-02, survivors rerun 2026-12-06 | 10 | 8 | 1 | 0 | 0 | 1 (1) |" in shown


@pytest.mark.parametrize(
    "again, message",
    [
        ({"m1": "killed"}, "1 not run, 0 not survivors"),
        ({"m1": "killed", "m2": "killed", "x": "killed"}, "0 not run, 1 not survivors"),
    ],
)
def test_a_recheck_must_judge_exactly_the_survivors(again, message):
    with pytest.raises(SystemExit, match=message):
        mutation.rechecked(entry({"killed": 1, "survived": 2}, ["m1", "m2"]), again, "3.8.1", "2026-12-06")


def test_a_partial_recheck_keeps_the_survivors_it_did_not_run(tmp_path):
    """--survivors reruns some survivors: those keep their status, and the report says how many ran."""
    before = entry({"killed": 7, "survived": 3}, ["m1", "m2", "m3"])
    after = mutation.rechecked(before, {"m1": "killed"}, "3.8.1", "2026-12-06", partial=True)
    assert after.statuses == {"killed": 8, "survived": 2}
    assert sorted(after.survivors) == ["m2", "m3"]
    assert after.survivors["m3"] == before.survivors["m3"]
    assert after.rechecked_survivors == 1
    shown = render(mutation.Record({"pkg.mod": after}), equivalent={"m2": "same", "m3": "same"}).text
    assert "| `pkg.mod` | 2026-12-02, 1 survivors rerun 2026-12-06 | 10 | 8 |" in shown
    again = mutation.rechecked(after, {"m2": "killed"}, "3.8.1", "2026-12-07", partial=True)
    assert (again.rechecked_survivors, sorted(again.survivors), again.rechecked) == (2, ["m3"], "2026-12-07")
    saved = tmp_path / "mutation.json"
    saved.write_text(mutation.Record({"pkg.mod": after}).dumps())
    assert mutation.Record.load(saved).modules["pkg.mod"] == after
    with pytest.raises(SystemExit, match="1 not survivors"):
        mutation.rechecked(before, {"x": "killed"}, "3.8.1", "2026-12-06", partial=True)


def test_a_partial_recheck_names_a_pattern_that_matches_no_survivor(tmp_path, monkeypatch):
    monkeypatch.setattr(mutation, "REPO", tmp_path)
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    record = entry({"survived": 1}, ["m1"])
    monkeypatch.setattr(mutation, "source_sha256", lambda file: record.source_sha256)
    with pytest.raises(SystemExit, match="no recorded survivor of pkg.mod matches nope"):
        mutation.recheck(record, "pkg.mod", {}, 1, only=["nope"])


def test_a_recheck_refuses_a_record_of_another_source(tmp_path, monkeypatch):
    monkeypatch.setattr(mutation, "REPO", tmp_path)
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "mod.py").write_text("changed = True\n")
    with pytest.raises(SystemExit, match="measure it whole"):
        mutation.recheck(entry({"survived": 1}, ["m1"]), "pkg.mod", {}, 1)
