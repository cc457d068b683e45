"""`gradlanes diff`: what changed in the results between two commits, or between two machines.

A rerun rewrites every record, so `git diff` of the records is noise: timings and timestamps always
move. The questions a reviewer asks are narrower. Per lane: did the accuracy move, and by how many
points; is a step slower or faster; did it compile differently; did it run another program; on what
other environment, with what other config? This module answers them for two sources of records, as
DVC's `metrics diff` and `exp show --only-changed` do for theirs:

    gradlanes diff                     HEAD against the working tree
    gradlanes diff HEAD~1              HEAD~1 against the working tree
    gradlanes diff v1 v2               two commits
    gradlanes diff --folders A B       two folders on disk, e.g. one experiment run on two machines

Where the records are (`gradlanes.layout`): `results/<experiment>/runs/<lane>/seed-<n>/record.json`.
Commits before the experiment folders hold them at `results/runs/<lane>/seed-<n>/record.json`; every
source looks there when the experiment's folder holds no record, so old commits compare with new ones.
That layout only ever held one experiment, the default one named after its dataset, so from there
only the records whose `dataset.name` is the experiment's name count: `--experiment fashion_mnist`
against an old commit finds no records, rather than MNIST's labelled fashion_mnist.

Per lane, A against B over the seeds whose status is "ok" on both sides, paired by seed as
`gradlanes.report.paired` pairs lanes: each side's mean accuracy (exact: each seed's is correct /
total) and their difference, each side's median of the seeds' median ms/step and their ratio. Over
whatever seeds each side has, a default that went from 3 seeds to 5 would compare means over other
seeds, and the difference would carry the seeds' spread (tenths of a point) rather than the change.
The `seeds` column gives the count compared, "3 of 3/5" where A had 3 ok seeds and B 5. A lane in
one source only, or sharing no ok seed, shows each side's own ok seeds and no difference. Over each
side's ok seeds: the distinct compile counts. Over all of the lane's seeds (a skipped lane still
names its program and ran on some machine): the status counts, the distinct program fingerprints,
and per environment / config key the distinct values.

What counts as changed (`--only-changed` keeps those lanes, and the columns where any kept lane
changed): seeds when the sides hold other seeds, whatever their status; status when a seed that both
hold has another status; accuracy when the means differ at all; ms/step when B/A differs from 1 by
more than `--time-tolerance` (default 5 %: the seeds of one run on one machine spread by a few per
cent); compile counts, fingerprints, config and environment values when they are not equal.
`git_commit`, `git_dirty` and `node` are provenance, not environment: records of two commits always
differ in the commit, so counting it would mark every lane changed and leave `--only-changed`
nothing to drop. They are shown in a provenance line under the table ("git_commit: a → b (every
lane)") and change nothing; the other environment keys (python, jax, jaxlib, numpy, cpu, cores,
platform) are what a result can depend on, and count. A lane in one source only is "added" (only in
B) or "removed" (only in A), and counts as changed in every column.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Protocol, TypeVar

from gradlanes.layout import PUBLISHED_RECEIPT, RESULTS, default_experiment, name_errors, published

DEFAULT_TIME_TOLERANCE = 0.05
FINGERPRINT_CHARS = 12
DASH = "—"
ARROW = "→"
#: What a lane can differ in, in the order the table shows them.
ASPECTS = ("status", "seeds", "accuracy", "step_ms", "compiles", "fingerprint", "config", "environment")
#: Config keys that differ between the seeds of one lane by design.
PER_SEED_CONFIG = frozenset({"seed"})
#: Environment keys that say where a record was made, not what it was made with: shown, never "changed".
PROVENANCE = frozenset({"git_commit", "git_dirty", "node"})
RECORD_SHAPE = "runs/<lane>/seed-<n>/record.json"

#: (lane, seed) -> the record as JSON.
Records = dict[tuple[str, int], dict]

_RUN_RECORD = re.compile(r"^runs/([^/]+)/seed-(\d+)/record\.json$")

T = TypeVar("T")


class DiffError(ValueError):
    """What the user asked for cannot be compared; the message says what is wrong and what to do.

    A ValueError, so `gradlanes`' main prints it as `gradlanes: <message>` and exits with 2.
    """


# --- where the records come from ---------------------------------------------------------------


class Source(Protocol):
    """Somewhere that holds an experiment's records: a git revision or a folder on disk."""

    @property
    def label(self) -> str: ...

    def records(self, experiment: str) -> Records: ...


def _records_under(paths: Iterable[str], prefix: str) -> dict[tuple[str, int], str]:
    """The paths among `paths` shaped `<prefix>runs/<lane>/seed-<n>/record.json`, by (lane, seed)."""
    found = {}
    for path in paths:
        match = path.startswith(prefix) and _RUN_RECORD.match(path[len(prefix) :])
        if match:
            found[(match[1], int(match[2]))] = path
    return found


def _dataset_name(record: dict) -> Any:
    return (record.get("dataset") or {}).get("name")


def of_experiment(old_layout: Records, experiment: str) -> Records:
    """The records of `experiment` among those of the layout before the experiment folders.

    That layout held one experiment, the default, named after its dataset; so its records are
    `experiment`'s only where their dataset has that name, and another experiment has none there.
    """
    return {key: record for key, record in old_layout.items() if _dataset_name(record) == experiment}


def _old_layout_note(old_layout: Records, experiment: str) -> str:
    """Why the old layout's records were not taken, for the error that finds none; "" without any."""
    found = {_dataset_name(record) for record in old_layout.values()}
    if not found:
        return ""
    names = sorted(map(_text, found))
    only = next(iter(found)) if len(found) == 1 else None
    named = isinstance(only, str) and not name_errors(only)
    suggestion = f"; pass --experiment {only} to compare them" if named else ""
    return (
        f" (the layout before the experiment folders, which held only the experiment named after its "
        f"dataset: its {len(old_layout)} records are of dataset {', '.join(names)}, not {experiment!r}"
        f"{suggestion})"
    )


def _parse(text: bytes, where: str) -> dict:
    try:
        record = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DiffError(f"{where} is not a JSON record ({error}); was it cut short?") from error
    if not isinstance(record, dict):
        raise DiffError(f"{where} holds {type(record).__name__}, not a record (a JSON object)")
    return record


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=120)
    except OSError as error:
        raise DiffError(f"cannot run git ({error}); compare two folders with --folders A B") from error


def _stderr(done: subprocess.CompletedProcess[bytes]) -> str:
    return done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"


@dataclass(frozen=True)
class GitRevision:
    """The records committed at `commit` (which `rev` names) in the repository `repo`."""

    repo: Path
    rev: str
    commit: str

    @property
    def label(self) -> str:
        return f"{self.rev} ({self.commit[:7]})"

    def records(self, experiment: str) -> Records:
        listing = _git(self.repo, "ls-tree", "-r", "-z", "--name-only", self.commit, "--", f"{RESULTS}/")
        if listing.returncode != 0:
            raise DiffError(f"cannot list {RESULTS}/ at {self.label}: {_stderr(listing)}")
        paths = [path for path in listing.stdout.decode().split("\0") if path]
        if found := _records_under(paths, f"{published(experiment).root}/"):
            return self._read_all(found)
        # Commits before the experiment folders kept the runs in results/.
        old_layout = self._read_all(_records_under(paths, f"{RESULTS}/"))
        if kept := of_experiment(old_layout, experiment):
            return kept
        raise DiffError(
            f"revision {self.label} holds no records of experiment {experiment!r}: looked for "
            f"{published(experiment).root}/{RECORD_SHAPE} and {RESULTS}/{RECORD_SHAPE}"
            f"{_old_layout_note(old_layout, experiment)}; "
            f"check --experiment, or list what it holds with `git ls-tree -r --name-only {self.rev}`"
        )

    def _read_all(self, paths: Mapping[tuple[str, int], str]) -> Records:
        return {key: self._read(path) for key, path in sorted(paths.items())}

    def _read(self, path: str) -> dict:
        shown = _git(self.repo, "show", f"{self.commit}:{path}")
        if shown.returncode != 0:
            raise DiffError(f"cannot read {path} at {self.label}: {_stderr(shown)}")
        return _parse(shown.stdout, f"{self.rev}:{path}")


def git_revision(repo: Path, rev: str) -> GitRevision:
    """`rev` resolved to its commit in `repo`, or a DiffError saying why it names none."""
    if rev.startswith("-"):  # git would read it as an option
        raise DiffError(f"unknown revision {rev!r}: no revision starts with '-' (try `git log --oneline`)")
    resolved = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if resolved.returncode == 0:
        return GitRevision(repo, rev, resolved.stdout.decode().strip())
    inside = _git(repo, "rev-parse", "--git-dir")
    if inside.returncode != 0:
        raise DiffError(
            f"{repo} is not a git repository ({_stderr(inside)}); pass --project, "
            "or compare two folders with --folders A B"
        )
    raise DiffError(
        f"unknown revision {rev!r}: no commit of that name in {repo} "
        "(a shallow clone lacks older commits; try `git log --oneline`)"
    )


@dataclass(frozen=True)
class ResultsFolder:
    """Records on disk. `path` is a results folder holding `<experiment>/runs/`, an experiment's
    folder holding `runs/`, or a results folder from before the experiment folders (`runs/` too).

    The last two look alike. A folder named after the experiment, or holding the receipt `publish`
    leaves, is the experiment's, and all its records count; any other is taken for the old layout,
    which holds the experiment's records only where their dataset bears its name (`of_experiment`).
    """

    path: Path
    label: str

    def records(self, experiment: str) -> Records:
        if not self.path.is_dir():
            raise DiffError(f"{self.path} is not a folder; pass a results folder or an experiment's folder")
        if found := self._found(f"{experiment}/"):
            return self._read_all(found)
        flat = self._read_all(self._found(""))
        if self.path.name == experiment or (self.path / PUBLISHED_RECEIPT).is_file():
            old_layout, kept = {}, flat
        else:
            old_layout, kept = flat, of_experiment(flat, experiment)
        if not kept:
            raise DiffError(
                f"no records of experiment {experiment!r} in {self.path}: looked for "
                f"{self.path}/{experiment}/{RECORD_SHAPE} and {self.path}/{RECORD_SHAPE}"
                f"{_old_layout_note(old_layout, experiment)}; pass a results folder or an experiment's "
                "folder (the one holding runs/), or check --experiment"
            )
        return kept

    def _found(self, prefix: str) -> dict[tuple[str, int], str]:
        pattern = f"{prefix}{RECORD_SHAPE}".replace("<lane>", "*").replace("<n>", "*")
        paths = [found.relative_to(self.path).as_posix() for found in self.path.glob(pattern)]
        return _records_under(paths, prefix)

    def _read_all(self, paths: Mapping[tuple[str, int], str]) -> Records:
        return {key: self._read(path) for key, path in sorted(paths.items())}

    def _read(self, path: str) -> dict:
        return _parse((self.path / path).read_bytes(), str(self.path / path))


def results_folder(path: Path | str) -> ResultsFolder:
    return ResultsFolder(Path(path), str(path))


def working_tree(root: Path) -> ResultsFolder:
    """The project's results/ as they are on disk now, committed or not."""
    return ResultsFolder(root / RESULTS, f"working tree ({root / RESULTS})")


# --- one lane of one source --------------------------------------------------------------------


def _text(value: Any) -> str:
    """A record value as the table shows it; JSON for anything but a string, so 2 and "2" differ."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _accuracy(record: dict) -> Fraction | None:
    """The seed's test accuracy in per cent, exactly: correct / total, else the rounded percent."""
    accuracy = record.get("accuracy") or {}
    correct, total = accuracy.get("correct"), accuracy.get("total")
    if isinstance(correct, int) and isinstance(total, int) and total > 0:
        return Fraction(100 * correct, total)
    percent = accuracy.get("percent")
    # Through its decimal text: 93.66 is 93.66, not the binary float nearest it.
    return None if percent is None else Fraction(repr(float(percent)))


def _values_by_key(mappings: Iterable[Mapping[str, Any]], skip: frozenset[str] = frozenset()) -> dict:
    """For each key in any of `mappings`: its distinct values as text, sorted (a missing key is null)."""
    mappings = list(mappings)
    keys = sorted({key for mapping in mappings for key in mapping} - skip)
    return {key: tuple(sorted({_text(mapping.get(key)) for mapping in mappings})) for key in keys}


def _sort_key(pair: tuple[int | None, int | None]) -> tuple[int, int]:
    return tuple(-1 if count is None else count for count in pair)


@dataclass(frozen=True)
class LaneSummary:
    """One lane of one source: its seeds' measurements one by one, the rest over its seeds.

    The measurements stay per seed so that A and B are compared over the seeds both completed.
    """

    lane: str
    statuses: tuple[tuple[str, int], ...]  # (status, seeds), by status
    status_by_seed: Mapping[int, str]  # every seed the source holds, whatever its status
    accuracy_by_seed: Mapping[int, Fraction]  # ok seeds with an accuracy: per cent, exact
    step_ms_by_seed: Mapping[int, float]  # ok seeds with a timing: the seed's median ms/step
    compiles: tuple[tuple[int | None, int | None], ...]  # distinct (train, total) over ok seeds
    fingerprints: tuple[str, ...]  # distinct program fingerprints over all seeds; () without a program
    config: Mapping[str, tuple[str, ...]]  # key -> distinct values over all seeds, the engine included
    environment: Mapping[str, tuple[str, ...]]  # key -> distinct values over all seeds

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(sorted(self.status_by_seed))

    @property
    def seeds_ok(self) -> tuple[int, ...]:
        return tuple(seed for seed in self.seeds if self.status_by_seed[seed] == "ok")


def summarise_lane(lane: str, by_seed: Mapping[int, dict]) -> LaneSummary:
    """The lane from its records by seed."""
    records = [by_seed[seed] for seed in sorted(by_seed)]
    ok = {seed: record for seed, record in sorted(by_seed.items()) if record.get("status") == "ok"}
    compiles = {
        ((r.get("compiles") or {}).get("train"), (r.get("compiles") or {}).get("total")) for r in ok.values()
    }
    programs = [record.get("program") or {} for record in records]
    return LaneSummary(
        lane=lane,
        statuses=tuple(sorted(Counter(str(record.get("status")) for record in records).items())),
        status_by_seed={seed: str(record.get("status")) for seed, record in sorted(by_seed.items())},
        accuracy_by_seed={seed: value for seed, r in ok.items() if (value := _accuracy(r)) is not None},
        step_ms_by_seed={
            seed: float(ms)
            for seed, r in ok.items()
            if (ms := (r.get("timing") or {}).get("step_ms_median")) is not None
        },
        compiles=tuple(sorted(compiles, key=_sort_key)),
        fingerprints=tuple(sorted({p["fingerprint"] for p in programs if p.get("fingerprint")})),
        config=_values_by_key(
            ({"engine": record.get("engine")} | (record.get("config") or {}) for record in records),
            skip=PER_SEED_CONFIG,
        ),
        environment=_values_by_key(record.get("environment") or {} for record in records),
    )


def summarise(records: Records) -> dict[str, LaneSummary]:
    by_lane: dict[str, dict[int, dict]] = defaultdict(dict)
    for (lane, seed), record in sorted(records.items()):
        by_lane[lane][seed] = record
    return {lane: summarise_lane(lane, by_seed) for lane, by_seed in by_lane.items()}


# --- one lane, A against B ---------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One environment or config key whose values differ between A and B."""

    key: str
    a: tuple[str, ...]
    b: tuple[str, ...]


@dataclass(frozen=True)
class LaneDiff:
    """One lane of the diff: A's and B's numbers side by side, and what differs between them.

    Accuracy and ms/step are over `seeds_compared`, the seeds ok on both sides; where there are none
    (a lane in one source only, say) each side's are over its own ok seeds, and there is no delta.
    """

    lane: str
    presence: str  # "both", "added" (only in B) or "removed" (only in A)
    status_a: tuple[tuple[str, int], ...]
    status_b: tuple[tuple[str, int], ...]
    seeds_a: tuple[int, ...]  # every seed, whatever its status
    seeds_b: tuple[int, ...]
    seeds_ok_a: tuple[int, ...]
    seeds_ok_b: tuple[int, ...]
    seeds_compared: tuple[int, ...]  # ok on both sides: what the deltas are over
    accuracy_a: float | None
    accuracy_b: float | None
    accuracy_delta: float | None  # B - A, points
    step_ms_a: float | None
    step_ms_b: float | None
    step_ratio: float | None  # B / A
    compiles_a: tuple[tuple[int | None, int | None], ...]
    compiles_b: tuple[tuple[int | None, int | None], ...]
    fingerprint_a: tuple[str, ...]  # the first FINGERPRINT_CHARS hex digits
    fingerprint_b: tuple[str, ...]
    config: tuple[Change, ...]
    environment: tuple[Change, ...]  # keys beside PROVENANCE
    provenance: tuple[Change, ...] = field(default=())  # PROVENANCE keys: shown, never "changed"
    changed: tuple[str, ...] = field(default=())  # the ASPECTS that differ

    @property
    def is_changed(self) -> bool:
        return bool(self.changed)


def _changes(a: Mapping[str, tuple[str, ...]], b: Mapping[str, tuple[str, ...]]) -> tuple[Change, ...]:
    missing = (_text(None),)  # a key one side lacks reads as null, as a record missing it would
    return tuple(
        Change(key, a.get(key, missing), b.get(key, missing))
        for key in sorted(a.keys() | b.keys())
        if a.get(key, missing) != b.get(key, missing)
    )


def _mean(values: Sequence[Fraction]) -> Fraction:
    return sum(values, Fraction(0)) / len(values)


def _side_by_side(
    a: Mapping[int, T], b: Mapping[int, T], compared: Collection[int], average: Callable[[list[T]], T]
) -> tuple[T | None, T | None]:
    """A's and B's average of a per-seed measurement: over the compared seeds where both sides have
    it, so that the two averages are over the same seeds; with no compared seed, each over its own."""
    if compared:
        seeds = [seed for seed in sorted(compared) if seed in a and seed in b]
        values_a, values_b = [a[seed] for seed in seeds], [b[seed] for seed in seeds]
    else:
        values_a, values_b = list(a.values()), list(b.values())
    return (average(values_a) if values_a else None, average(values_b) if values_b else None)


def _accuracies(
    a: LaneSummary | None, b: LaneSummary | None, compared: Collection[int]
) -> tuple[Fraction | None, Fraction | None]:
    """A's and B's mean accuracy, exact, so that equal accuracies give a delta of exactly 0."""
    return _side_by_side(a.accuracy_by_seed if a else {}, b.accuracy_by_seed if b else {}, compared, _mean)


def _step_times(
    a: LaneSummary | None, b: LaneSummary | None, compared: Collection[int]
) -> tuple[float | None, float | None]:
    """A's and B's median of the per-seed median ms/step; B/A is the ratio of the two.

    The median, not the geometric mean of per-seed ratios: step time shares no randomness with the
    seed, and seed k of A and seed k of B were not run together (other commits, maybe other
    machines), so pairing them by seed cancels nothing. The median of each side shrugs off one run
    slowed by a neighbour, and the ratio is that of the two numbers the table shows beside it.
    """
    return _side_by_side(
        a.step_ms_by_seed if a else {}, b.step_ms_by_seed if b else {}, compared, statistics.median
    )


def _time_changed(a: float | None, b: float | None, tolerance: float) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    if a == 0:
        return b != 0
    return abs(b / a - 1) > tolerance


def _split_provenance(changes: tuple[Change, ...]) -> tuple[tuple[Change, ...], tuple[Change, ...]]:
    """The environment changes that count, and those of PROVENANCE: another commit, another host or
    a dirty tree differs in them on every lane without any result having changed."""
    return (
        tuple(change for change in changes if change.key not in PROVENANCE),
        tuple(change for change in changes if change.key in PROVENANCE),
    )


def _status_changed(a: LaneSummary, b: LaneSummary) -> bool:
    """Whether a seed both sides hold has another status; seeds only one side holds are "seeds"."""
    shared = a.status_by_seed.keys() & b.status_by_seed.keys()
    return any(a.status_by_seed[seed] != b.status_by_seed[seed] for seed in shared)


def diff_lane(lane: str, a: LaneSummary | None, b: LaneSummary | None, time_tolerance: float) -> LaneDiff:
    """Lane `lane` of A against B; `a` or `b` is None where that source lacks the lane."""
    present = [side for side in (a, b) if side is not None]
    if not present:
        raise ValueError(f"lane {lane!r} is in neither source")

    def short(side: LaneSummary | None) -> tuple[str, ...]:
        return tuple(fingerprint[:FINGERPRINT_CHARS] for fingerprint in side.fingerprints) if side else ()

    both = a is not None and b is not None
    compared = tuple(sorted(set(a.seeds_ok) & set(b.seeds_ok))) if both else ()
    accuracy_a, accuracy_b = _accuracies(a, b, compared)
    step_a, step_b = _step_times(a, b, compared)
    environment, provenance = _split_provenance(_changes(a.environment, b.environment) if both else ())
    if both:
        differs = {
            "status": _status_changed(a, b),
            "seeds": a.seeds != b.seeds,
            "accuracy": accuracy_a != accuracy_b,  # exact fractions: one image is a change
            "step_ms": _time_changed(step_a, step_b, time_tolerance),
            "compiles": a.compiles != b.compiles,
            "fingerprint": a.fingerprints != b.fingerprints,
            "config": dict(a.config) != dict(b.config),
            "environment": bool(environment),
        }
        changed = tuple(aspect for aspect in ASPECTS if differs[aspect])
    else:  # a lane in one source only: all of it is new, or gone
        changed = ASPECTS
    paired = bool(compared)  # a delta only between averages over the same seeds
    delta = float(accuracy_b - accuracy_a) if paired and None not in (accuracy_a, accuracy_b) else None
    return LaneDiff(
        lane=lane,
        presence="both" if both else ("removed" if b is None else "added"),
        status_a=a.statuses if a else (),
        status_b=b.statuses if b else (),
        seeds_a=a.seeds if a else (),
        seeds_b=b.seeds if b else (),
        seeds_ok_a=a.seeds_ok if a else (),
        seeds_ok_b=b.seeds_ok if b else (),
        seeds_compared=compared,
        accuracy_a=None if accuracy_a is None else float(accuracy_a),
        accuracy_b=None if accuracy_b is None else float(accuracy_b),
        accuracy_delta=delta,
        step_ms_a=step_a,
        step_ms_b=step_b,
        step_ratio=step_b / step_a if paired and step_a and step_b is not None else None,
        compiles_a=a.compiles if a else (),
        compiles_b=b.compiles if b else (),
        fingerprint_a=short(a),
        fingerprint_b=short(b),
        config=_changes(a.config, b.config) if both else (),
        environment=environment,
        provenance=provenance,
        changed=changed,
    )


def compare(a: Records, b: Records, time_tolerance: float = DEFAULT_TIME_TOLERANCE) -> tuple[LaneDiff, ...]:
    """Every lane of either source, by name."""
    lanes_a, lanes_b = summarise(a), summarise(b)
    return tuple(
        diff_lane(lane, lanes_a.get(lane), lanes_b.get(lane), time_tolerance)
        for lane in sorted(lanes_a.keys() | lanes_b.keys())
    )


@dataclass(frozen=True)
class DiffReport:
    """The whole comparison: what A and B are, and one row per lane."""

    a: str
    b: str
    experiment: str
    time_tolerance: float
    lanes: tuple[LaneDiff, ...]

    def shown(self, only_changed: bool) -> tuple[LaneDiff, ...]:
        return tuple(row for row in self.lanes if row.is_changed) if only_changed else self.lanes


def diff_sources(
    a: Source, b: Source, experiment: str, time_tolerance: float = DEFAULT_TIME_TOLERANCE
) -> DiffReport:
    lanes = compare(a.records(experiment), b.records(experiment), time_tolerance)
    return DiffReport(a.label, b.label, experiment, time_tolerance, lanes)


# --- text ---------------------------------------------------------------------------------------


def _pair(a: str, b: str) -> str:
    """One cell for a value that is usually the same on both sides: A, or A → B when they differ."""
    return a if a == b else f"{a} {ARROW} {b}"


def _status_text(statuses: tuple[tuple[str, int], ...]) -> str:
    return ", ".join(f"{seeds} {status}" for status, seeds in statuses) or DASH


def _seeds_cell(row: LaneDiff) -> str:
    """How many seeds the deltas are over: "5" where that is every ok seed of both sides, else
    "3 of 3/5", 3 compared of A's 3 and B's 5 ok seeds."""
    compared, a, b = len(row.seeds_compared), len(row.seeds_ok_a), len(row.seeds_ok_b)
    return str(compared) if compared == a == b else f"{compared} of {a}/{b}"


def _compiles_text(compiles: tuple[tuple[int | None, int | None], ...]) -> str:
    def count(value: int | None) -> str:
        return "?" if value is None else str(value)

    return ", ".join(f"{count(train)}/{count(total)}" for train, total in compiles) or DASH


def _percent(value: float | None) -> str:
    return DASH if value is None else f"{value:.2f}"


def _delta(value: float | None) -> str:
    if value is None:
        return DASH
    if value == 0:
        return "0"
    text = f"{value:+.2f}"
    # One image over several seeds can be under 0.005 points: show it rather than "+0.00".
    return f"{value:+.2g}" if float(text) == 0 else text


def _ms(value: float | None) -> str:
    return DASH if value is None else f"{value:.4g}"


def _ratio(value: float | None) -> str:
    return DASH if value is None else f"{value:.2f}"


def _fingerprints_text(fingerprints: tuple[str, ...]) -> str:
    return ", ".join(fingerprints) or DASH


def _a_or_a_to_b(render: Callable[[Any], str], name: str) -> Callable[[LaneDiff], str]:
    """The cell of the row's `<name>_a` and `<name>_b`, rendered: A's, or A → B where they differ."""
    return lambda row: _pair(render(getattr(row, f"{name}_a")), render(getattr(row, f"{name}_b")))


def _keys(changes: tuple[Change, ...], row: LaneDiff) -> str:
    if row.presence != "both":
        return DASH
    return ", ".join(change.key for change in changes) or "same"


def _changed_cell(row: LaneDiff) -> str:
    if row.presence != "both":
        return row.presence
    return ", ".join(row.changed) or "same"


@dataclass(frozen=True)
class DiffColumn:
    """One column of the text table: its header, its cell, and the aspects that make it "changed"
    (`--only-changed` drops a column none of whose aspects a shown lane changed; (): always shown)."""

    header: str
    cell: Callable[[LaneDiff], str]
    aspects: tuple[str, ...] = ()
    right_align: bool = False


DIFF_COLUMNS: tuple[DiffColumn, ...] = (
    DiffColumn("lane", lambda row: row.lane),
    DiffColumn("changed", _changed_cell),
    DiffColumn("status", _a_or_a_to_b(_status_text, "status"), ("status",)),
    # The count a delta is over goes with the delta.
    DiffColumn("seeds", _seeds_cell, ("seeds", "accuracy", "step_ms"), right_align=True),
    DiffColumn("acc % A", lambda row: _percent(row.accuracy_a), ("accuracy",), right_align=True),
    DiffColumn("acc % B", lambda row: _percent(row.accuracy_b), ("accuracy",), right_align=True),
    DiffColumn("Δ points", lambda row: _delta(row.accuracy_delta), ("accuracy",), right_align=True),
    DiffColumn("ms/step A", lambda row: _ms(row.step_ms_a), ("step_ms",), right_align=True),
    DiffColumn("ms/step B", lambda row: _ms(row.step_ms_b), ("step_ms",), right_align=True),
    DiffColumn("B/A", lambda row: _ratio(row.step_ratio), ("step_ms",), right_align=True),
    DiffColumn("compiles", _a_or_a_to_b(_compiles_text, "compiles"), ("compiles",)),
    DiffColumn("fingerprint", _a_or_a_to_b(_fingerprints_text, "fingerprint"), ("fingerprint",)),
    DiffColumn("config", lambda row: _keys(row.config, row), ("config",)),
    DiffColumn("environment", lambda row: _keys(row.environment, row), ("environment",)),
)


def _aligned(cells: list[str], widths: list[int], right: list[bool]) -> str:
    padded = (cell.rjust(w) if r else cell.ljust(w) for cell, w, r in zip(cells, widths, right, strict=True))
    return "  ".join(padded).rstrip()


def table(rows: Sequence[LaneDiff], only_changed: bool) -> str:
    """The rows aligned with spaces, as `gradlanes table` prints; only the changed aspects' columns
    when `only_changed`."""
    shown = [
        column
        for column in DIFF_COLUMNS
        if not only_changed
        or not column.aspects
        or any(aspect in row.changed for row in rows for aspect in column.aspects)
    ]
    header = [column.header for column in shown]
    body = [[column.cell(row) for column in shown] for row in rows]
    widths = [max(len(cells[i]) for cells in [header, *body]) for i in range(len(shown))]
    right = [column.right_align for column in shown]
    lines = [_aligned(header, widths, [False] * len(shown)), "  ".join("-" * width for width in widths)]
    return "\n".join(lines + [_aligned(cells, widths, right) for cells in body])


def _notes(title: str, rows: Sequence[LaneDiff], lines_of: Callable[[LaneDiff], Iterable[str]]) -> list[str]:
    """Each of the rows' lines once, naming the lanes it holds for ("every lane" when all of them)."""
    lanes_by_line: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        for line in lines_of(row):
            lanes_by_line[line].append(row.lane)
    if not lanes_by_line:
        return []
    compared = [row.lane for row in rows if row.presence == "both"]
    lines = [f"{title}, A {ARROW} B:"]
    for line, lanes in lanes_by_line.items():
        lines.append(f"  {line}  ({'every lane' if lanes == compared else ', '.join(lanes)})")
    return lines


def _change_lines(changes: tuple[Change, ...]) -> list[str]:
    return [f"{change.key}: {', '.join(change.a)} {ARROW} {', '.join(change.b)}" for change in changes]


def _seed_lines(row: LaneDiff) -> list[str]:
    if row.presence != "both" or row.seeds_a == row.seeds_b:
        return []
    listed = f"{', '.join(map(str, row.seeds_a))} {ARROW} {', '.join(map(str, row.seeds_b))}"
    return [f"{len(row.seeds_a)} {ARROW} {len(row.seeds_b)} ({listed})"]


def _provenance_notes(report: DiffReport) -> list[str]:
    """Where the records were made, over every lane, changed or not: a reader should see that B is
    another commit even where `--only-changed` shows no lane."""
    title = f"provenance (not counted as a change; {', '.join(sorted(PROVENANCE))})"
    return _notes(title, report.lanes, lambda row: _change_lines(row.provenance))


def to_text(report: DiffReport, only_changed: bool = False) -> str:
    rows = report.shown(only_changed)
    head = [f"A: {report.a}", f"B: {report.b}", f"experiment: {report.experiment}", ""]
    tolerance = f"{report.time_tolerance * 100:.4g} %"
    provenance = _provenance_notes(report)
    if not rows:
        what = "no lane differs" if only_changed else "no lanes"
        return "\n".join(
            [*head, f"{what} (ms/step within ±{tolerance})", *([""] if provenance else []), *provenance]
        )
    notes = [
        *_notes("seeds", rows, _seed_lines),
        *_notes("config", rows, lambda row: _change_lines(row.config)),
        *_notes("environment", rows, lambda row: _change_lines(row.environment)),
        *provenance,
    ]
    legend = (
        "seeds: how many ok on both sides, of A's/B's ok seeds; acc %, Δ, ms/step and B/A are over those "
        "shared seeds (a lane without any: each side's own, no Δ). accuracy: the mean; ms/step: the median "
        f"of the per-seed medians, changed beyond ±{tolerance} (--time-tolerance); compiles: train/total; "
        "fingerprint: the program's."
    )
    return "\n".join([*head, table(rows, only_changed), "", *notes, *([""] if notes else []), legend])


# --- JSON ---------------------------------------------------------------------------------------


def _sides(a: Any, b: Any, **more: Any) -> dict:
    return {"a": a, "b": b, **more}


def _compiles_json(compiles: tuple[tuple[int | None, int | None], ...]) -> list[dict]:
    return [{"train": train, "total": total} for train, total in compiles]


def _changes_json(changes: tuple[Change, ...]) -> dict:
    return {change.key: _sides(list(change.a), list(change.b)) for change in changes}


def row_json(row: LaneDiff) -> dict:
    """One lane as plain JSON: the same numbers as the table, unrounded."""
    return {
        "lane": row.lane,
        "presence": row.presence,
        "changed": list(row.changed),
        "status": _sides(dict(row.status_a), dict(row.status_b)),
        "seeds": _sides(list(row.seeds_a), list(row.seeds_b), compared=list(row.seeds_compared)),
        "seeds_ok": _sides(len(row.seeds_ok_a), len(row.seeds_ok_b)),
        "accuracy_percent": _sides(row.accuracy_a, row.accuracy_b, delta=row.accuracy_delta),
        "step_ms": _sides(row.step_ms_a, row.step_ms_b, ratio=row.step_ratio),
        "compiles": _sides(_compiles_json(row.compiles_a), _compiles_json(row.compiles_b)),
        "fingerprint": _sides(list(row.fingerprint_a), list(row.fingerprint_b)),
        "config": _changes_json(row.config),
        "environment": _changes_json(row.environment),
        "provenance": _changes_json(row.provenance),
    }


def to_json(report: DiffReport, only_changed: bool = False) -> str:
    """Machine-readable: `--only-changed` keeps the changed lanes, each with all its fields."""
    document = {
        "a": report.a,
        "b": report.b,
        "experiment": report.experiment,
        "time_tolerance": report.time_tolerance,
        "only_changed": only_changed,
        "lanes": [row_json(row) for row in report.shown(only_changed)],
    }
    return json.dumps(document, indent=2, ensure_ascii=False)


# --- the command --------------------------------------------------------------------------------


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a fraction such as 0.05") from None
    if not value >= 0:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{text} is negative; give a fraction such as 0.05 (5 %)")
    return value


def sources(args: argparse.Namespace, root: Path) -> tuple[Source, Source]:
    """A and B as the command line names them: two folders, or a revision and a revision or the
    working tree."""
    if args.folders:
        if args.rev_a or args.rev_b:
            raise DiffError("give revisions or --folders A B, not both")
        return results_folder(args.folders[0]), results_folder(args.folders[1])
    a = git_revision(root, args.rev_a or "HEAD")
    return a, (git_revision(root, args.rev_b) if args.rev_b else working_tree(root))


def diff(args: argparse.Namespace) -> str:
    """`gradlanes diff`: the comparison, as text or JSON."""
    # cli registers this command, so its helpers are imported here, when the command runs.
    from gradlanes.report.cli import _config, _project

    root = _project(getattr(args, "project", None))
    experiment = args.experiment or default_experiment(_config(root))
    if errors := name_errors(experiment):
        raise DiffError(f"--experiment: {'; '.join(errors)}")
    a, b = sources(args, root)
    report = diff_sources(a, b, experiment, args.time_tolerance)
    return to_json(report, args.only_changed) if args.json else to_text(report, args.only_changed)


def add_diff_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `diff` on `gradlanes`' subcommands; its handler is `args.run`."""
    parser = subparsers.add_parser(
        "diff",
        help="compare the results of two commits, or of two folders (e.g. two machines)",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("rev_a", nargs="?", help="the revision A (default: HEAD)")
    parser.add_argument("rev_b", nargs="?", help="the revision B (default: the working tree's results/)")
    parser.add_argument(
        "--folders",
        nargs=2,
        metavar=("A", "B"),
        help="compare two folders instead: results folders, or experiment folders holding runs/",
    )
    parser.add_argument("--experiment", help="the experiment to compare (default: config.yaml's)")
    parser.add_argument(
        "--only-changed", action="store_true", help="only the lanes, and the columns, where something differs"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--time-tolerance",
        type=_tolerance,
        default=DEFAULT_TIME_TOLERANCE,
        metavar="FRACTION",
        help=f"ms/step counts as changed when B/A differs from 1 by more (default {DEFAULT_TIME_TOLERANCE})",
    )
    parser.set_defaults(run=diff)
    return parser
