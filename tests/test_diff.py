"""`gradlanes diff`: two commits, a commit and the working tree, and two folders, on fake records in
throwaway git repositories and on the real committed records."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest

from gradlanes.report.diff import DiffError, add_diff_parser, compare, to_text

REPO = Path(__file__).resolve().parents[1]
FINGERPRINT = "12efc3abd878" + "0" * 52
OTHER_FINGERPRINT = "48c3b165529f" + "1" * 52
# The tests' git: no user or system config (hooks, signing) and an author of their own.
GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
GIT = ["git", "-c", "user.name=gradlanes tests", "-c", "user.email=tests@example.invalid"]


def fake_record(
    lane: str,
    seed: int,
    correct: int = 9366,
    step_ms: float = 12.0,
    fingerprint: str | None = FINGERPRINT,
    compiles: tuple[int, int] = (1, 3),
    status: str = "ok",
    cpu: str = "AMD EPYC",
    dataset: str = "mnist",
    **environment: object,
) -> dict:
    """A record with the fields `diff` reads; a lane that did not run measured nothing."""
    ran = status == "ok"
    return {
        "lane": lane,
        "engine": "xla",
        "status": status,
        "config": {"model": "mlp", "hidden": 128, "seed": seed, "steps": 600},
        "dataset": {"name": dataset},
        "program": None if fingerprint is None else {"id": "mlp128", "fingerprint": fingerprint},
        "compiles": {"train": compiles[0], "total": compiles[1]} if ran else {"train": None, "total": None},
        "timing": {"step_ms_median": step_ms if ran else None},
        "accuracy": {
            "correct": correct if ran else None,
            "total": 10000 if ran else None,
            "percent": round(100 * correct / 10000, 4) if ran else None,
        },
        "environment": {
            "python": "3.11.7",
            "jax": "0.10.2",
            "cpu": cpu,
            "cores": 2,
            "node": "vm",
            "git_commit": "c0ffee",
            "git_dirty": False,
        }
        | environment,
    }


#: Three lanes: each one's record fields at seed 0; seed 1 got one test image more right.
LANES = {
    "host": {"correct": 9366},
    "xla_cpu": {"correct": 9363, "step_ms": 11.0},
    "softmax_kernel": {"correct": 9204, "fingerprint": None},
}


def lanes(**changes: dict) -> dict[str, list[dict]]:
    """`LANES` over seeds 0 and 1; `changes` overrides fields of a lane's seed 0."""
    return {
        lane: [
            fake_record(lane, 0, **(fields | changes.get(lane, {}))),
            fake_record(lane, 1, **(fields | {"correct": fields["correct"] + 1})),
        ]
        for lane, fields in LANES.items()
    }


def write_records(runs_parent: Path, by_lane: dict[str, list[dict]]) -> None:
    """Each record at `<runs_parent>/runs/<lane>/seed-<n>/record.json`, replacing what was there."""
    shutil.rmtree(runs_parent / "runs", ignore_errors=True)
    for lane, records in by_lane.items():
        for record in records:
            path = runs_parent / "runs" / lane / f"seed-{record['config']['seed']}" / "record.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record, indent=2))


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        [*GIT, "-C", str(repo), *args], capture_output=True, text=True, env=GIT_ENV, check=True
    )
    return done.stdout


def commit_all(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


@pytest.fixture
def project(tmp_path) -> Path:
    """A git repository holding a config.yaml that names no experiment (so: the dataset's, mnist)."""
    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q")
    (root / "config.yaml").write_text("dataset:\n  name: mnist\n")
    return root


@pytest.fixture
def two_commits(project) -> Path:
    """Commit 1: the lanes; commit 2: host's seed 0 recounted (+34 images) and re-fingerprinted."""
    write_records(project / "results" / "mnist", lanes())
    commit_all(project, "first results")
    write_records(
        project / "results" / "mnist", lanes(host={"correct": 9400, "fingerprint": OTHER_FINGERPRINT})
    )
    commit_all(project, "host changed")
    return project


def run_diff(project: Path | None, *argv: str) -> str:
    """`gradlanes [--project P] diff ARGV`, through a parser built as cli's main builds it."""
    parser = argparse.ArgumentParser(prog="gradlanes")
    parser.add_argument("--project")
    add_diff_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([*(["--project", str(project)] if project else []), "diff", *argv])
    return args.run(args)


def diff_json(project: Path | None, *argv: str) -> dict:
    document = json.loads(run_diff(project, *argv, "--json"))
    return document | {"lanes": {row["lane"]: row for row in document["lanes"]}}


def table_rows(text: str) -> dict[str, str]:
    """The table's body lines by lane (the first word), header and rule left out."""
    lines = text.split("\n\n")[1].splitlines()
    return {line.split()[0]: line for line in lines[2:]}


def cells(line: str) -> list[str]:
    """A table line's cells: columns are two spaces or more apart, and a cell may hold one."""
    return re.split(r" {2,}", line.strip())


def committed_runs() -> Path:
    """The folder holding the real committed `runs/`: the experiment's folder, or results/ before it."""
    for folder in (REPO / "results" / "mnist", REPO / "results"):
        if (folder / "runs").is_dir():
            return folder
    pytest.fail(f"no committed records under {REPO / 'results'} (looked for mnist/runs/ and runs/)")


# --- two commits ---------------------------------------------------------------------------------


def test_two_commits_show_exactly_the_changed_lane(two_commits):
    document = diff_json(two_commits, "HEAD~1", "HEAD")
    assert document["a"].startswith("HEAD~1 (") and document["b"].startswith("HEAD (")
    assert set(document["lanes"]) == {"host", "xla_cpu", "softmax_kernel"}
    changed = {lane: row["changed"] for lane, row in document["lanes"].items() if row["changed"]}
    assert changed == {"host": ["accuracy", "fingerprint"]}
    host = document["lanes"]["host"]
    # Seed 0 went 93.66 -> 94.00 %, seed 1 stayed 93.67 %: the mean moved by 0.34 / 2 points.
    assert host["accuracy_percent"] == {"a": 93.665, "b": 93.835, "delta": 0.17}
    # Only seed 0 ran the other program: B's seeds name both.
    assert host["fingerprint"] == {"a": ["12efc3abd878"], "b": ["12efc3abd878", "48c3b165529f"]}
    assert host["step_ms"] == {"a": 12.0, "b": 12.0, "ratio": 1.0}
    assert document["lanes"]["xla_cpu"]["accuracy_percent"]["delta"] == 0

    rows = table_rows(run_diff(two_commits, "HEAD~1", "HEAD"))
    assert "+0.17" in rows["host"] and "12efc3abd878 → 12efc3abd878, 48c3b165529f" in rows["host"]
    assert rows["xla_cpu"].split()[1] == "same" and rows["softmax_kernel"].split()[1] == "same"


def test_only_changed_keeps_the_changed_lane_and_columns(two_commits):
    text = run_diff(two_commits, "HEAD~1", "HEAD", "--only-changed")
    assert list(table_rows(text)) == ["host"]
    header = text.split("\n\n")[1].splitlines()[0].split("  ")
    assert [cell.strip() for cell in header if cell.strip()] == [
        "lane",
        "changed",
        "seeds",  # the count the accuracy delta is over goes with it
        "acc % A",
        "acc % B",
        "Δ points",
        "fingerprint",
    ]
    assert list(diff_json(two_commits, "HEAD~1", "HEAD", "--only-changed")["lanes"]) == ["host"]


def test_head_against_the_working_tree(two_commits):
    results = two_commits / "results" / "mnist"
    write_records(
        results, lanes(host={"correct": 9400, "fingerprint": OTHER_FINGERPRINT}, xla_cpu={"correct": 9300})
    )
    document = diff_json(two_commits)  # the defaults: HEAD against the working tree
    assert document["a"].startswith("HEAD (") and document["b"].startswith("working tree")
    assert {lane for lane, row in document["lanes"].items() if row["changed"]} == {"xla_cpu"}
    # Exact: the means are fractions (93.00 + 93.64 against 93.63 + 93.64, halved) and the delta,
    # -63/200 points, is rounded once, as the literal is.
    assert document["lanes"]["xla_cpu"]["accuracy_percent"]["delta"] == -0.315
    # A revision alone is compared with the working tree too.
    older = diff_json(two_commits, "HEAD~1", "--only-changed")
    assert set(older["lanes"]) == {"host", "xla_cpu"}


def test_commits_before_the_experiment_folders(project):
    write_records(project / "results", lanes())  # the old place: results/runs/
    commit_all(project, "old layout")
    (project / "results" / "mnist").mkdir()
    git(project, "mv", "results/runs", "results/mnist/runs")
    write_records(project / "results" / "mnist", lanes(xla_cpu={"correct": 9463, "step_ms": 22.0}))
    commit_all(project, "moved into the experiment folder, xla_cpu changed")

    document = diff_json(project, "HEAD~1", "HEAD")
    assert {lane for lane, row in document["lanes"].items() if row["changed"]} == {"xla_cpu"}
    xla_cpu = document["lanes"]["xla_cpu"]
    assert xla_cpu["changed"] == ["accuracy", "step_ms"]
    assert xla_cpu["accuracy_percent"]["delta"] == 0.5 and xla_cpu["step_ms"]["ratio"] == 1.5


def test_an_old_commit_holds_no_other_experiment(project):
    """The old results/runs/ held the dataset-named experiment only: not fashion_mnist's records."""
    write_records(project / "results", lanes())  # MNIST's records, in the old place
    commit_all(project, "old layout")
    (project / "results" / "mnist").mkdir()
    git(project, "mv", "results/runs", "results/mnist/runs")
    fashion = {
        lane: [fake_record(lane, seed, correct=8800, dataset="fashion_mnist") for seed in (0, 1)]
        for lane in LANES
    }
    write_records(project / "results" / "fashion_mnist", fashion)
    commit_all(project, "experiment folders, and a fashion_mnist experiment")

    with pytest.raises(
        DiffError,
        match=r"holds no records of experiment 'fashion_mnist': looked for results/fashion_mnist/runs/.*"
        r"and results/runs/.* \(the layout before the experiment folders, .*6 records are of dataset "
        r"mnist, not 'fashion_mnist'; pass --experiment mnist to compare them\)",
    ):
        run_diff(project, "HEAD~1", "HEAD", "--experiment", "fashion_mnist")
    # The experiment the old layout did hold still compares, old commit against new.
    document = diff_json(project, "HEAD~1", "HEAD", "--experiment", "mnist")
    assert document["lanes"] and not any(row["changed"] for row in document["lanes"].values())


def test_an_old_results_folder_holds_no_other_experiment(tmp_path):
    old, new = tmp_path / "old-results", tmp_path / "new-results"
    write_records(old, lanes())  # a results folder from before the experiment folders: runs/
    fashion = {lane: [fake_record(lane, 0, dataset="fashion_mnist")] for lane in LANES}
    write_records(new / "fashion_mnist", fashion)
    with pytest.raises(
        DiffError, match=r"in .*old-results: .*records are of dataset mnist, not 'fashion_mnist'"
    ):
        run_diff(None, "--folders", str(old), str(new), "--experiment", "fashion_mnist")
    # An experiment's own folder holds its records whatever their dataset is called: one named
    # after the experiment, or one that `publish` wrote (its receipt), under any name.
    wide = tmp_path / "wide"
    write_records(wide, lanes())
    assert diff_json(None, "--folders", str(wide), str(wide), "--experiment", "wide")["lanes"]
    (old / "published.json").write_text("{}")
    assert diff_json(None, "--folders", str(old), str(wide), "--experiment", "wide")["lanes"]


def test_a_lane_added_and_a_lane_removed(project):
    write_records(project / "results" / "mnist", lanes())
    commit_all(project, "three lanes")
    after = lanes()
    del after["softmax_kernel"]
    after["iree_cpu"] = [fake_record("iree_cpu", seed, step_ms=25.0) for seed in (0, 1)]
    write_records(project / "results" / "mnist", after)
    commit_all(project, "iree in, softmax out")

    document = diff_json(project, "HEAD~1", "HEAD")
    presence = {lane: row["presence"] for lane, row in document["lanes"].items()}
    assert presence == {"host": "both", "iree_cpu": "added", "softmax_kernel": "removed", "xla_cpu": "both"}
    assert document["lanes"]["iree_cpu"]["accuracy_percent"] == {"a": None, "b": 93.66, "delta": None}
    rows = table_rows(run_diff(project, "HEAD~1", "HEAD", "--only-changed"))
    assert set(rows) == {"iree_cpu", "softmax_kernel"}
    assert rows["iree_cpu"].split()[1] == "added" and rows["softmax_kernel"].split()[1] == "removed"


# --- folders -------------------------------------------------------------------------------------


def test_folders_of_the_real_records_one_altered(tmp_path):
    runs = committed_runs() / "runs"
    a = tmp_path / "machine-a" / "results"  # a results folder holding mnist/runs/
    b = tmp_path / "machine-b" / "mnist"  # an experiment folder holding runs/
    shutil.copytree(runs, a / "mnist" / "runs")
    shutil.copytree(runs, b / "runs")
    record_path = b / "runs" / "host" / "seed-0" / "record.json"
    record = json.loads(record_path.read_text())
    record["accuracy"]["correct"] -= 30
    record["accuracy"]["percent"] = round(
        100 * record["accuracy"]["correct"] / record["accuracy"]["total"], 4
    )
    record_path.write_text(json.dumps(record))

    document = diff_json(None, "--folders", str(a), str(b), "--experiment", "mnist")
    assert document["a"] == str(a) and document["b"] == str(b)
    assert set(document["lanes"]) == {path.name for path in runs.iterdir()}
    assert {lane for lane, row in document["lanes"].items() if row["changed"]} == {"host"}
    host = document["lanes"]["host"]
    seeds = host["seeds_ok"]["a"]
    # Exact: 30 images of 10000 on one seed, averaged over the seeds in fractions, rounded once.
    assert host["changed"] == ["accuracy"]
    assert host["accuracy_percent"]["delta"] == float(Fraction(-3, 10 * seeds))
    text = run_diff(None, "--folders", str(a), str(b), "--experiment", "mnist", "--only-changed")
    assert list(table_rows(text)) == ["host"]
    assert list(
        diff_json(None, "--folders", str(a), str(b), "--experiment", "mnist", "--only-changed")["lanes"]
    ) == ["host"]


def test_the_real_results_folder_against_a_copy_of_itself(tmp_path):
    """The committed results/ as it is (records in runs/ or in mnist/runs/) reads, and equals a copy."""
    copy = tmp_path / "copy" / "mnist"
    shutil.copytree(committed_runs() / "runs", copy / "runs")
    results = str(REPO / "results")
    document = diff_json(None, "--folders", results, str(copy), "--experiment", "mnist")
    assert document["lanes"] and not any(row["changed"] for row in document["lanes"].values())
    # Every record's accuracy, recounted here, is what the diff reports per lane.
    for lane, row in document["lanes"].items():
        records = [json.loads(path.read_text()) for path in (copy / "runs" / lane).glob("seed-*/record.json")]
        ok = [record["accuracy"] for record in records if record["status"] == "ok"]
        expected = sum(Fraction(100 * a["correct"], a["total"]) for a in ok) / len(ok) if ok else None
        assert row["accuracy_percent"]["a"] == (None if expected is None else float(expected))
    text = run_diff(None, "--folders", results, str(copy), "--experiment", "mnist", "--only-changed")
    assert text.endswith("no lane differs (ms/step within ±5 %)")


def test_environment_differences_are_reported(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_records(a, lanes())
    other_cpu = {
        lane: [{**r, "environment": {**r["environment"], "cpu": "Intel Xeon"}} for r in rs]
        for lane, rs in lanes().items()
    }
    write_records(b, other_cpu)
    document = diff_json(None, "--folders", str(a), str(b), "--experiment", "mnist")
    for row in document["lanes"].values():
        assert row["changed"] == ["environment"]
        assert row["environment"] == {"cpu": {"a": ["AMD EPYC"], "b": ["Intel Xeon"]}}
    text = run_diff(None, "--folders", str(a), str(b), "--experiment", "mnist", "--only-changed")
    assert all(row.split()[-1] == "cpu" for row in table_rows(text).values())
    assert "  cpu: AMD EPYC → Intel Xeon  (every lane)" in text.splitlines()


def test_json_holds_the_numbers_the_table_shows(two_commits):
    text_rows = table_rows(run_diff(two_commits, "HEAD~1", "HEAD"))
    document = diff_json(two_commits, "HEAD~1", "HEAD")
    for lane, row in document["lanes"].items():
        cells = text_rows[lane].split()
        accuracy = row["accuracy_percent"]
        if accuracy["a"] is not None:
            assert f"{accuracy['a']:.2f}" in cells and f"{accuracy['b']:.2f}" in cells
        assert f"{row['step_ms']['a']:.4g}" in cells and f"{row['step_ms']['ratio']:.2f}" in cells


# --- what differs, per aspect --------------------------------------------------------------------


def test_time_counts_as_changed_beyond_the_tolerance():
    a = {("xla_cpu", 0): fake_record("xla_cpu", 0, step_ms=10.0)}
    b = {("xla_cpu", 0): fake_record("xla_cpu", 0, step_ms=10.4)}
    (row,) = compare(a, b)
    assert row.step_ratio == 10.4 / 10.0 and row.changed == ()  # exact: one seed, one division
    (row,) = compare(a, b, time_tolerance=0.03)
    assert row.changed == ("step_ms",)


def test_compile_counts_that_differ_across_seeds_show_as_a_set():
    a = {("x", seed): fake_record("x", seed) for seed in (0, 1)}
    b = {("x", 0): fake_record("x", 0), ("x", 1): fake_record("x", 1, compiles=(0, 0))}
    (row,) = compare(a, b)
    assert row.compiles_b == ((0, 0), (1, 3)) and row.changed == ("compiles",)
    assert "1/3 → 0/0, 1/3" in to_text_of(row)


def test_a_lane_that_starts_running_changes_status_and_measurements():
    a = {("gpu", 0): fake_record("gpu", 0, status="skipped")}
    b = {("gpu", 0): fake_record("gpu", 0)}
    (row,) = compare(a, b)
    assert row.changed == ("status", "accuracy", "step_ms", "compiles")
    assert "1 skipped → 1 ok" in to_text_of(row)


def test_deltas_are_over_the_seeds_both_sides_completed():
    """3 seeds against 5: B's two extra seeds would move its mean; only the three both have count."""
    a = {("x", seed): fake_record("x", seed, correct=9300 + seed) for seed in range(3)}
    b = {("x", seed): fake_record("x", seed, correct=9300 + seed) for seed in range(3)}
    b |= {("x", seed): fake_record("x", seed, correct=9500, step_ms=30.0) for seed in (3, 4)}
    (row,) = compare(a, b)
    assert row.seeds_compared == (0, 1, 2) and (row.seeds_a, row.seeds_b) == ((0, 1, 2), tuple(range(5)))
    # Exact: (93.00 + 93.01 + 93.02) / 3 is 93.01 in fractions, rounded once, as the literal is.
    assert row.accuracy_delta == 0 and row.accuracy_a == row.accuracy_b == 93.01
    assert row.step_ratio == 1.0 and row.step_ms_b == 12.0
    assert row.changed == ("seeds",)
    text = to_text_of(row)
    assert cells(table_rows(text)["x"])[1:4] == ["seeds", "3 ok → 5 ok", "3 of 3/5"]
    assert "  3 → 5 (0, 1, 2 → 0, 1, 2, 3, 4)  (every lane)" in text.splitlines()
    assert "over those shared seeds" in " ".join(text.split())


def test_a_seed_that_failed_on_one_side_leaves_the_comparison():
    a = {("x", 0): fake_record("x", 0), ("x", 1): fake_record("x", 1, correct=9000, step_ms=40.0)}
    b = {("x", 0): fake_record("x", 0), ("x", 1): fake_record("x", 1, status="failed")}
    (row,) = compare(a, b)
    # Same seeds, another status on one of them; seed 0 alone is compared, and it did not move.
    assert row.changed == ("status",) and row.seeds_compared == (0,)
    assert (row.accuracy_delta, row.step_ratio) == (0, 1.0)
    assert cells(table_rows(to_text_of(row))["x"])[1:4] == ["status", "2 ok → 1 failed, 1 ok", "1 of 2/1"]


def test_provenance_alone_changes_no_lane(tmp_path):
    """Another commit, another host, a dirty tree: every record says so, and no lane changed."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_records(a, lanes())
    moved = {
        lane: [
            {**r, "environment": {**r["environment"], "git_commit": "beef", "git_dirty": True}} for r in rs
        ]
        for lane, rs in lanes().items()
    }
    write_records(b, moved)
    argv = ("--folders", str(a), str(b), "--experiment", "mnist")
    document = diff_json(None, *argv)
    for row in document["lanes"].values():
        assert row["changed"] == [] and row["environment"] == {}
        assert row["provenance"] == {
            "git_commit": {"a": ["c0ffee"], "b": ["beef"]},
            "git_dirty": {"a": ["false"], "b": ["true"]},
        }
    assert diff_json(None, *argv, "--only-changed")["lanes"] == {}
    text = run_diff(None, *argv, "--only-changed")
    assert "no lane differs (ms/step within ±5 %)" in text
    # Still shown, once for all lanes.
    assert "  git_commit: c0ffee → beef  (every lane)" in text.splitlines()
    assert "  git_dirty: false → true  (every lane)" in text.splitlines()
    full = run_diff(None, *argv)
    assert all(row.split()[1] == "same" and row.split()[-1] == "same" for row in table_rows(full).values())
    assert "  git_commit: c0ffee → beef  (every lane)" in full.splitlines()


def test_another_cpu_changes_every_lane_beside_its_provenance():
    a = {("x", 0): fake_record("x", 0)}
    b = {("x", 0): fake_record("x", 0, cpu="Intel Xeon", git_commit="beef", node="ci-7")}
    (row,) = compare(a, b)
    assert row.changed == ("environment",)
    assert [change.key for change in row.environment] == ["cpu"]
    assert [change.key for change in row.provenance] == ["git_commit", "node"]
    text = to_text_of(row)
    assert table_rows(text)["x"].split()[-1] == "cpu"
    assert "  node: vm → ci-7  (every lane)" in text.splitlines()


def to_text_of(row) -> str:
    from gradlanes.report.diff import DiffReport

    return to_text(DiffReport("a", "b", "mnist", 0.05, (row,)))


# --- errors --------------------------------------------------------------------------------------


def test_an_unknown_revision_is_named(two_commits):
    with pytest.raises(DiffError, match=r"unknown revision 'no-such-tag'.*\(.*try `git log --oneline`\)"):
        run_diff(two_commits, "no-such-tag")
    with pytest.raises(DiffError, match=r"unknown revision 'HEAD~9'"):
        run_diff(two_commits, "HEAD", "HEAD~9")


def test_a_revision_without_records_says_where_it_looked(project):
    (project / "README").write_text("no results yet\n")
    commit_all(project, "nothing")
    with pytest.raises(DiffError, match=r"holds no records of experiment 'mnist'.*results/mnist/runs/<lane>"):
        run_diff(project, "HEAD")


def test_a_folder_without_records_says_where_it_looked(tmp_path):
    empty, full = tmp_path / "empty", tmp_path / "full"
    empty.mkdir()
    write_records(full, lanes())
    with pytest.raises(
        DiffError, match=rf"no records of experiment 'mnist' in {empty}: looked for .*runs/<lane>"
    ):
        run_diff(None, "--folders", str(empty), str(full), "--experiment", "mnist")
    with pytest.raises(DiffError, match=r"is not a folder"):
        run_diff(None, "--folders", str(full), str(tmp_path / "absent"), "--experiment", "mnist")


def test_revisions_and_folders_exclude_each_other(tmp_path, two_commits):
    with pytest.raises(DiffError, match=r"revisions or --folders A B, not both"):
        run_diff(two_commits, "HEAD~1", "--folders", str(tmp_path), str(tmp_path))


def test_a_project_outside_git_says_so(tmp_path):
    (tmp_path / "config.yaml").write_text("dataset:\n  name: mnist\n")
    with pytest.raises(DiffError, match=r"is not a git repository.*--folders A B"):
        run_diff(tmp_path)


def test_a_negative_tolerance_is_refused(two_commits, capsys):
    with pytest.raises(SystemExit):
        run_diff(two_commits, "--time-tolerance", "-0.1")
    assert "negative" in capsys.readouterr().err


# --- the real repository -------------------------------------------------------------------------


def test_the_previous_commit_of_this_repository():
    """`gradlanes diff HEAD~1 HEAD` on the real history; HEAD against itself in a shallow clone."""
    shallow = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", "HEAD~1"], capture_output=True
    ).returncode
    a, b = ("HEAD" if shallow else "HEAD~1"), "HEAD"
    document = diff_json(REPO, a, b, "--experiment", "mnist")
    # The committed records, read here with git itself: each side's lanes, and per lane the ok
    # seeds' accuracies from their counts, exact.
    sides = [_committed_accuracies(a), _committed_accuracies(b)]
    assert sides[1], "no committed records at HEAD"
    assert set(document["lanes"]) == set(sides[0]) | set(sides[1])
    for lane, row in document["lanes"].items():
        there = (lane in sides[0], lane in sides[1])
        presence = {(True, True): "both", (True, False): "removed", (False, True): "added"}[there]
        assert row["presence"] == presence, lane
        if there != (True, True):
            continue
        # Over the seeds ok on both sides; with none shared, each side over its own, and no delta.
        shared = sorted(sides[0][lane].keys() & sides[1][lane].keys())
        over = [shared or sorted(side[lane]) for side in sides]
        means = [
            sum((side[lane][seed] for seed in seeds), Fraction(0)) / len(seeds) if seeds else None
            for side, seeds in zip(sides, over, strict=True)
        ]
        expected = [None if mean is None else float(mean) for mean in means]
        # Exact: both are the fractions' means, rounded once; the delta too.
        assert [row["accuracy_percent"]["a"], row["accuracy_percent"]["b"]] == expected, lane
        delta = float(means[1] - means[0]) if shared else None
        assert row["accuracy_percent"]["delta"] == delta, lane
        assert ("accuracy" in row["changed"]) == (means[0] != means[1]), lane


def _committed_accuracies(rev: str) -> dict[str, dict[int, Fraction]]:
    """Per lane, the ok seeds' test accuracy (per cent, exact) of the records committed at `rev`."""

    def show(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True)
        return done.stdout

    # The experiment folder's records (the layout since results/<experiment>/ exists; the diff
    # reads results/runs/ only at commits from before it, which HEAD~1 no longer is).
    paths = show("ls-tree", "-r", "--name-only", rev, "results/mnist/runs").splitlines()
    pattern = re.compile(r"results/mnist/runs/([^/]+)/seed-(\d+)/record\.json")
    found: dict[str, dict[int, Fraction]] = {}
    for path in paths:
        match = pattern.fullmatch(path)
        if not match:
            continue
        record = json.loads(show("show", f"{rev}:{path}"))
        seeds = found.setdefault(match[1], {})
        if record["status"] == "ok":
            accuracy = record["accuracy"]
            if isinstance(accuracy.get("correct"), int) and accuracy.get("total"):
                seeds[int(match[2])] = Fraction(100 * accuracy["correct"], accuracy["total"])
            elif accuracy.get("percent") is not None:  # the rounded percent, through its decimal text
                seeds[int(match[2])] = Fraction(repr(float(accuracy["percent"])))
    return found
