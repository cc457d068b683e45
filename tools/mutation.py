"""`make mutation`: mutmut over the modules that make claims, one record per module, and the report.

Why a record per module: a mutation run is hours where the interpreter's rules are in it (each
mutant runs the XLA-oracle tests that reach it), so a module is measured on its own and its
result kept until its source changes. results/checks/mutation.json holds, per module listed in
pyproject.toml [tool.mutmut] `only_mutate`, the SHA-256 of the source it was measured at, the
date, every status count and every survivor with its diff. tests/test_mutation_record.py fails
when a listed module's source no longer matches its record: changing a module means re-measuring
it (`--modules NAME`) and committing the record, which is how the report stays true.

    python tools/mutation.py                       # every listed module (long)
    python tools/mutation.py --stale               # the modules whose source changed, or never measured
    python tools/mutation.py --modules gradlanes.program.rules.linalg
    python tools/mutation.py --render              # rewrite mutation.md from the record, run nothing
    python tools/mutation.py --modules NAME --recheck   # after adding tests: run its survivors again
    python tools/mutation.py --modules NAME --recheck --survivors '*x__igammac__mutmut_9'   # some of them

Each run: `mutmut run` on the chosen modules' mutants (the tests it runs them against are the
selection in [tool.mutmut]; mutmut picks, per mutated function, the tests that call it), then every
status from `mutmut results --all true`. Detected: killed, or timed out (the tests hung on it);
"no tests" (no selected test calls the function) and "survived" are not. A survivor is either
equivalent (tools/mutation-equivalent.yaml says why no test can tell it from the original) or
UNEXPLAINED: a missing test. Then the named mutants of those modules (tools/mutation-named.yaml):
wrong results written by hand, which mutmut's one-token changes do not make, each applied to a
copy of src/ that the same test selection imports; the report names the first test that fails.

Exit 1 when any module is under the target, a survivor is unexplained, a named mutant survives or
a listed module's record is missing or stale. The record and the report are written to temporary
files and renamed, so a failed or interrupted run leaves the last ones intact.
"""

from __future__ import annotations

import argparse
import ast
import collections
import fnmatch
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import yaml

from gradlanes.atomic import write_text

REPO = Path(__file__).resolve().parents[1]
MUTMUT = Path(sys.executable).with_name("mutmut")
EQUIVALENT = REPO / "tools" / "mutation-equivalent.yaml"
NAMED = REPO / "tools" / "mutation-named.yaml"
RECORD = REPO / "results" / "checks" / "mutation.json"
REPORT = REPO / "results" / "checks" / "mutation.md"
#: Statuses that mean the tests noticed the mutant. A segfault is the test process dying (a
#: mutant that hands NumPy a bad pointer): the suite fails as loudly as a failed assert. So is
#: "crashed": mutmut calls an exit it has no name for "suspicious", and tools/mutation.py runs
#: each such mutant again to find the signal that ended it (SIGFPE: a mutant that unmasks
#: floating-point exceptions).
DETECTED = ("killed", "timeout", "segfault", "crashed")
CRASHES = ("segfault", "crashed")
TARGET = 0.90  # the floor: at least 90 % of each module's non-equivalent mutants detected
SCHEMA = 1
#: How the tool runs the selected tests itself: to the first failure, in file order.
PYTEST = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]


# ---- what is listed, and what its source is ------------------------------------------------------
def settings(pyproject: Path = REPO / "pyproject.toml") -> dict:
    return tomllib.loads(pyproject.read_text())["tool"]["mutmut"]


def module_name(path: str) -> str:
    """`src/gradlanes/run/records.py` -> `gradlanes.run.records`."""
    parts = Path(path).with_suffix("").parts
    return ".".join(parts[1:] if parts[0] == "src" else parts)


def listed_modules(pyproject: Path = REPO / "pyproject.toml") -> dict[str, str]:
    """Module name -> its file (relative to the repository), as [tool.mutmut] lists them."""
    return {module_name(path): path for path in settings(pyproject)["only_mutate"]}


def source_sha256(file: str) -> str:
    return hashlib.sha256((REPO / file).read_bytes()).hexdigest()


def unmutated_functions(file: str) -> list[str]:
    """Functions mutmut leaves unmutated: every decorated one but @staticmethod/@classmethod, and
    every lambda outside a function.

    mutmut wraps each function in a trampoline that picks the mutant at call time, and it does
    not do so for decorated functions (the decorator runs at import: @property, @rule(...),
    @contextmanager...) nor for code outside a function, a module-level lambda included (one
    inside a function is mutated with it). Their bodies are in no mutation score; the report
    lists them, a lambda by its line.
    """
    tree = ast.parse((REPO / file).read_text())
    found = []

    def visit(node: ast.AST, prefix: str, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", in_function)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                plain = all(
                    isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")
                    for d in child.decorator_list
                )
                if not plain:
                    found.append(f"{prefix}{child.name}")
                visit(child, f"{prefix}{child.name}.", True)
            else:
                if isinstance(child, ast.Lambda) and not in_function:
                    found.append(f"{prefix}<lambda> (line {child.lineno})")
                visit(child, prefix, in_function)

    visit(tree, "", False)
    return found


def module_of(mutant: str) -> str:
    """`gradlanes.data.idx.x_parse_idx__mutmut_3` (or a method's `xǁClassǁname`) -> its module."""
    return re.split(r"\.xǁ|\.x_", mutant, maxsplit=1)[0]


# ---- the record ----------------------------------------------------------------------------------
@dataclass
class ModuleRecord:
    """One module's measurement: counts per mutmut status, and every undetected mutant's diff."""

    file: str
    source_sha256: str
    measured: str  # the UTC date of the run
    mutmut: str
    statuses: dict[str, int]
    survivors: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> status, diff
    rechecked: str | None = None  # the UTC date its survivors were last run again (--recheck)
    #: how many of its survivors the reruns since the measurement ran (--survivors picks some); None: all
    rechecked_survivors: int | None = None

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    @property
    def detected(self) -> int:
        return sum(self.statuses.get(status, 0) for status in DETECTED)

    def explained(self, equivalent: dict[str, str]) -> int:
        return sum(name in equivalent for name in self.survivors)

    def score(self, equivalent: dict[str, str]) -> float:
        """Detected over the mutants that are not equivalent (1.0 when all are)."""
        real = self.total - self.explained(equivalent)
        return self.detected / real if real else 1.0


@dataclass
class Record:
    modules: dict[str, ModuleRecord] = field(default_factory=dict)
    named: dict[str, str | None] = field(default_factory=dict)  # named mutant -> first failing test

    @classmethod
    def load(cls, path: Path = RECORD) -> Record:
        if not path.is_file():
            return cls()
        data = json.loads(path.read_text())
        if data.get("schema") != SCHEMA:
            raise SystemExit(
                f"{path} has schema {data.get('schema')!r}, not {SCHEMA}: rerun tools/mutation.py"
            )
        modules = {name: ModuleRecord(**entry) for name, entry in data["modules"].items()}
        return cls(modules, dict(data.get("named", {})))

    def dumps(self) -> str:
        modules = {name: asdict(self.modules[name]) for name in sorted(self.modules)}
        return json.dumps({"schema": SCHEMA, "modules": modules, "named": self.named}, indent=1) + "\n"


# ---- running mutmut ------------------------------------------------------------------------------
def mutmut(*args: str, env: dict) -> str:
    done = subprocess.run([str(MUTMUT), *args], cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # `results` exits 1 where mutants survived
        raise SystemExit(f"mutmut {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def statuses(text: str) -> dict[str, str]:
    """`mutmut results --all true` lines (`    name: status`) -> name -> status."""
    found = {}
    for line in text.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and "__mutmut_" in name:
            found[name] = status.strip()
    return found


def diff_of(mutant: str, env: dict) -> str:
    shown = mutmut("show", mutant, env=env)
    return "\n".join(
        line for line in shown.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))
    )


def module_records(
    found: dict[str, str], files: dict[str, str], diff, measured: str, version: str
) -> dict[str, ModuleRecord]:
    """One record per module of `files` from mutmut's statuses; `diff(name)` gives a survivor's."""
    records = {}
    for module, file in files.items():
        mine = {name: status for name, status in found.items() if module_of(name) == module}
        if not mine:
            raise SystemExit(f"mutmut reported no mutants of {module} ({file}): did it run?")
        unchecked = sorted(name for name, status in mine.items() if status == "not checked")
        if unchecked:
            raise SystemExit(f"{len(unchecked)} mutants of {module} were not checked (first: {unchecked[0]})")
        survivors = {
            name: {"status": status, "diff": diff(name)}
            for name, status in sorted(mine.items())
            if status not in DETECTED
        }
        records[module] = ModuleRecord(
            file=file,
            source_sha256=source_sha256(file),
            measured=measured,
            mutmut=version,
            statuses=dict(sorted(collections.Counter(mine.values()).items())),
            survivors=survivors,
        )
    return records


def measure(modules: dict[str, str], env: dict, max_children: int, reuse: bool) -> dict[str, ModuleRecord]:
    if not reuse:
        # a fresh copy: mutmut re-tests only functions changed since its last run, so a test
        # added since would not reach the mutants it already judged
        shutil.rmtree(REPO / "mutants", ignore_errors=True)
        patterns = [f"{module}.*" for module in modules]
        done = subprocess.run(
            [str(MUTMUT), "run", "--max-children", str(max_children), *patterns], cwd=REPO, env=env
        )
        if done.returncode != 0:
            raise SystemExit(
                f"mutmut run exited {done.returncode} (its output is above): the record is unchanged. "
                "A failed stats or clean run means a selected test fails in mutmut's copy (mutants/): "
                "run it there with pytest to see why"
            )
    found = statuses(mutmut("results", "--all", "true", env=env))
    for name, status in found.items():
        if status == "suspicious" and module_of(name) in modules and crash_signal(name, env):
            found[name] = "crashed"
    return module_records(
        found,
        modules,
        lambda name: diff_of(name, env),
        measured=datetime.now(UTC).strftime("%Y-%m-%d"),
        version=metadata.version("mutmut"),
    )


def recheck(
    record: ModuleRecord,
    module: str,
    env: dict,
    max_children: int,
    reuse: bool = False,
    only: list[str] | None = None,
) -> ModuleRecord:
    """`record` with its survivors run again against today's tests; its detected mutants kept.

    Why this is sound: the record stands for the module's source at `source_sha256`, and a test
    added since can only kill more of its mutants, so only the survivors need running again. A
    whole module with the interpreter's tests behind it is hours; its survivors are minutes.
    `only` (fnmatch patterns of mutant names) runs just the survivors a new test aims at, for the
    same reason: the rest keep their verdict and their explanation.
    """
    if record.source_sha256 != source_sha256(record.file):
        raise SystemExit(
            f"{module}'s record was measured at another source of {record.file}: "
            f"measure it whole (--modules {module}), not --recheck"
        )
    if not record.survivors:
        return record
    names = sorted(record.survivors)
    if only:
        names = [name for name in names if any(fnmatch.fnmatchcase(name, pattern) for pattern in only)]
        if not names:
            raise SystemExit(f"no recorded survivor of {module} matches {' '.join(only)}")
    if not reuse:  # with reuse: mutmut's last run (mutants/) judged these survivors already
        shutil.rmtree(REPO / "mutants", ignore_errors=True)
        done = subprocess.run(
            [str(MUTMUT), "run", "--max-children", str(max_children), *names], cwd=REPO, env=env
        )
        if done.returncode != 0:
            raise SystemExit(
                f"mutmut run exited {done.returncode} (its output is above): the record is unchanged"
            )
    found = statuses(mutmut("results", "--all", "true", env=env))
    missing = [name for name in names if found.get(name, "not checked") == "not checked"]
    if missing:
        raise SystemExit(f"{len(missing)} survivors of {module} were not run again (first: {missing[0]})")
    for name in names:
        if found[name] == "suspicious" and crash_signal(name, env):
            found[name] = "crashed"
    return rechecked(
        record,
        {name: found[name] for name in names},
        metadata.version("mutmut"),
        datetime.now(UTC).strftime("%Y-%m-%d"),
        partial=bool(only),
    )


def rechecked(
    record: ModuleRecord, again: dict[str, str], version: str, date: str, partial: bool = False
) -> ModuleRecord:
    """`record` with each survivor's status replaced by `again[name]`, its counts moved to match.

    `partial`: `again` judges some of the survivors; the others keep their status."""
    not_run, strangers = set(record.survivors) - set(again), set(again) - set(record.survivors)
    if (not_run and not partial) or strangers:
        raise SystemExit(
            f"a recheck must judge exactly the recorded survivors of {record.file}: "
            f"{len(not_run)} not run, {len(strangers)} not survivors"
        )
    counts = collections.Counter(record.statuses)
    for name, status in again.items():
        counts[record.survivors[name]["status"]] -= 1
        counts[status] += 1
    return ModuleRecord(
        file=record.file,
        source_sha256=record.source_sha256,
        measured=record.measured,
        mutmut=version,
        statuses=dict(sorted((status, n) for status, n in counts.items() if n)),
        survivors={
            name: {"status": status, "diff": record.survivors[name]["diff"]}
            for name, status in sorted(
                {**{n: record.survivors[n]["status"] for n in not_run}, **again}.items()
            )
            if status not in DETECTED
        },
        rechecked=date,
        # partial reruns add up (each names other survivors); a full one covers them all
        rechecked_survivors=len(again) + (record.rechecked_survivors or 0) if not_run else None,
    )


def crash_signal(mutant: str, env: dict, timeout_s: int = 1800) -> str | None:
    """The signal that ends the selected tests on `mutant` in mutmut's copy (mutants/), or None
    when they end by themselves (or outlast `timeout_s`: then the mutant stays suspicious)."""
    copy = REPO / "mutants"
    mutated_env = {**env, "MUTANT_UNDER_TEST": mutant, "PYTHONPATH": str(copy / "src")}
    try:
        done = subprocess.run(
            [*PYTEST, *selected_tests()], cwd=copy, env=mutated_env, capture_output=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return None
    return signal.Signals(-done.returncode).name if done.returncode < 0 else None


# ---- named mutants -------------------------------------------------------------------------------
@dataclass(frozen=True)
class NamedMutant:
    name: str
    why: str
    file: str
    original: str
    mutant: str

    def apply(self, root: Path) -> None:
        path = root / self.file
        text = path.read_text()
        if text.count(self.original) != 1:
            raise SystemExit(
                f"named mutant {self.name!r}: its original occurs {text.count(self.original)} times in "
                f"{self.file} (must be once); update tools/mutation-named.yaml to the code"
            )
        path.write_text(text.replace(self.original, self.mutant))


def named_mutants(path: Path = NAMED) -> list[NamedMutant]:
    return [NamedMutant(**entry) for entry in yaml.safe_load(path.read_text())]


def selected_tests() -> list[str]:
    return list(settings()["pytest_add_cli_args_test_selection"])


def run_named(mutant: NamedMutant, env: dict) -> str | None:
    """The first test that fails on `mutant`, or None when every selected test passes."""
    with tempfile.TemporaryDirectory(prefix="gradlanes-mutant-") as scratch:
        shutil.copytree(REPO / "src", Path(scratch) / "src")
        mutant.apply(Path(scratch))
        mutated_env = {
            **env,
            "PYTHONPATH": os.pathsep.join([str(Path(scratch) / "src"), env.get("PYTHONPATH", "")]),
        }
        where = subprocess.run(
            [sys.executable, "-c", "import gradlanes; print(gradlanes.__file__)"],
            env=mutated_env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not where.startswith(scratch):
            raise SystemExit(f"the mutated copy is not what the tests import (they import {where})")
        done = subprocess.run(
            [*PYTEST, *selected_tests()], cwd=REPO, env=mutated_env, capture_output=True, text=True
        )
    if done.returncode == 0:
        return None
    failed = re.findall(r"^FAILED (.+?)(?: - .*)?$", done.stdout, flags=re.MULTILINE)
    if done.returncode != 1 or not failed:
        raise SystemExit(
            f"pytest on named mutant {mutant.name!r} did not run (exit {done.returncode}):\n"
            f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return failed[0]


# ---- the report ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    text: str
    ok: bool


def render(
    record: Record,
    listed: dict[str, str],
    current: dict[str, str],
    equivalent: dict[str, str],
    named: list[NamedMutant],
    unmutated: dict[str, list[str]] | None = None,
) -> Verdict:
    """mutation.md from the record; `current` is each listed module's source SHA-256 now and
    `unmutated` its functions mutmut does not mutate (`unmutated_functions`)."""
    lines = [
        "# Mutation testing",
        "",
        "Written by `tools/mutation.py` (mutmut) from `results/checks/mutation.json`, one record per "
        "module, each measured on the date shown at the source whose SHA-256 it keeps. Each mutant is "
        "one small change to a module (an operator, a constant, a condition); the tests that reach "
        "it (pyproject.toml, [tool.mutmut]) run against it. Detected: killed, timed out (the tests "
        "hung on it), or crashed (the test process died: a segfault, or a signal such as SIGFPE found by "
        "running a mutant mutmut calls suspicious again). Not detected: survived, suspicious, or no "
        "test calls the function (no tests). An equivalent mutant computes what the original does, "
        'or, where its reason begins "not the same bits", differs from it by less than the bound '
        "the tests derive for that result; why is given for each.",
        "",
        "| module | measured | mutants | killed | timed out | crashed | no tests | survived (equivalent) "
        "| score | without equivalents |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    ok, problems = True, []
    for module in sorted(listed):
        entry = record.modules.get(module)
        if entry is None:
            ok = False
            problems.append(f"`{module}` has no record: run `tools/mutation.py --modules {module}`")
            continue
        if entry.source_sha256 != current[module]:
            ok = False
            problems.append(
                f"`{module}` changed since it was measured: run `tools/mutation.py --modules {module}`"
            )
        counts = entry.statuses
        crashed = sum(counts.get(status, 0) for status in CRASHES)
        survived = len(entry.survivors) - counts.get("no tests", 0)
        score, real = entry.detected / entry.total, entry.score(equivalent)
        ok &= real >= TARGET
        rerun = "survivors" if entry.rechecked_survivors is None else f"{entry.rechecked_survivors} survivors"
        when = entry.measured + (f", {rerun} rerun {entry.rechecked}" if entry.rechecked else "")
        lines.append(
            f"| `{module}` | {when} | {entry.total} | {counts.get('killed', 0)} "
            f"| {counts.get('timeout', 0)} | {crashed} | {counts.get('no tests', 0)} "
            f"| {survived} ({entry.explained(equivalent)}) | {score:.1%} | {real:.1%} |"
        )
    stray = sorted(set(record.modules) - set(listed))
    problems += [f"`{module}` has a record but is not listed in [tool.mutmut]" for module in stray]
    ok &= not stray
    lines += ["", f"Target: at least {TARGET:.0%} of each module's non-equivalent mutants detected.", ""]
    if problems:
        lines += ["**Not current:**", "", *(f"- {problem}" for problem in problems), ""]
    survivors = sorted(
        (name, found) for module in sorted(listed) if module in record.modules
        for name, found in record.modules[module].survivors.items()
    )  # fmt: skip
    if survivors:
        lines += ["## Survivors", ""]
    for name, found in survivors:
        why = equivalent.get(name)
        ok &= why is not None
        lines += [
            f"- `{name}` ({found['status']}): " + (f"equivalent: {why}" if why else "**UNEXPLAINED**"),
            "",
            "  ```diff",
            *(f"  {line}" for line in found["diff"].splitlines()),
            "  ```",
            "",
        ]
    skipped = {module: names for module, names in sorted((unmutated or {}).items()) if names}
    if skipped:
        lines += [
            "## Not mutated",
            "",
            "mutmut does not mutate decorated functions (other than static and class methods) nor "
            "lambdas outside a function: their bodies are in no score above, so the listed modules "
            "keep them to one-line hand-overs to functions that are mutated.",
            "",
            *(f"- `{module}`: " + ", ".join(f"`{n}`" for n in names) for module, names in skipped.items()),
            "",
        ]
    lines += [
        "## Named mutants",
        "",
        "Wrong results written by hand (tools/mutation-named.yaml), each applied alone to a copy of "
        "src/ and run against the same tests; the first test that fails is named.",
        "",
        "| mutant | what it breaks | file | killed by |",
        "| --- | --- | --- | --- |",
    ]
    for mutant in named:
        if mutant.name not in record.named:
            verdict, ok = "**NOT RUN**", False
        elif record.named[mutant.name] is None:
            verdict, ok = "**SURVIVED**", False
        else:
            verdict = f"`{record.named[mutant.name]}`"
        lines.append(f"| `{mutant.name}` | {mutant.why} | `{mutant.file}` | {verdict} |")
    return Verdict("\n".join(lines).rstrip() + "\n", ok)


def load_equivalent(path: Path = EQUIVALENT) -> dict[str, str]:
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


# ---- the command ---------------------------------------------------------------------------------
def chosen(args: argparse.Namespace, listed: dict[str, str], record: Record) -> dict[str, str]:
    if args.modules:
        unknown = [module for module in args.modules if module not in listed]
        if unknown:
            raise SystemExit(
                f"not listed in pyproject.toml [tool.mutmut] only_mutate: {', '.join(unknown)} "
                f"(listed: {', '.join(sorted(listed))})"
            )
        return {module: listed[module] for module in args.modules}
    if args.stale:
        return {
            module: file
            for module, file in listed.items()
            if module not in record.modules or record.modules[module].source_sha256 != source_sha256(file)
        }
    return dict(listed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--modules", nargs="+", metavar="MODULE", help="measure these listed modules only")
    which.add_argument("--stale", action="store_true", help="measure the modules whose record is not current")
    which.add_argument("--render", action="store_true", help="rewrite the report from the record only")
    parser.add_argument("--reuse", action="store_true", help="read mutmut's last run instead of running it")
    parser.add_argument(
        "--recheck",
        action="store_true",
        help="with --modules: run only the recorded survivors again (after adding tests), keep the rest",
    )
    parser.add_argument(
        "--survivors",
        nargs="+",
        metavar="PATTERN",
        help="with --recheck: rerun only the survivors whose names match these fnmatch patterns",
    )
    parser.add_argument(
        "--named-only", action="store_true", help="run only the named mutants, print, write nothing"
    )
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    env = dict(os.environ)
    # mutmut runs the tests from its copy of the project (mutants/): the shared data is beside the
    # checkout, not beside that copy
    env.setdefault("GRADLANES_SHARED", str(REPO.parent / "shared"))
    # a failing property test stops at its first failing example (tests/conftest.py): shrinking it
    # changes nothing about the verdict and, with an XLA compile per try, can outlast the timeout
    env["GRADLANES_MUTATION"] = "1"
    named = named_mutants()
    if args.named_only:
        for mutant in named:
            print(f"named mutant {mutant.name}: killed by {run_named(mutant, env) or 'nothing: it SURVIVED'}")
        return 0
    listed, record = listed_modules(), Record.load()
    if not args.render:
        modules = chosen(args, listed, record)
        if args.survivors and not args.recheck:
            raise SystemExit("--survivors takes --recheck")
        if args.recheck:
            if not args.modules:
                raise SystemExit("--recheck takes --modules NAME ...")
            unmeasured = [module for module in modules if module not in record.modules]
            if unmeasured:
                raise SystemExit(f"no record to recheck for {', '.join(unmeasured)}: measure it first")
            for module in modules:
                record.modules[module] = recheck(
                    record.modules[module], module, env, args.max_children, args.reuse, args.survivors
                )
        elif modules:
            record.modules.update(measure(modules, env, args.max_children, args.reuse))
        files = set(modules.values())
        for mutant in (m for m in named if m.file in files):
            record.named[mutant.name] = run_named(mutant, env)
            print(
                f"named mutant {mutant.name}: killed by {record.named[mutant.name] or 'nothing: it SURVIVED'}"
            )
        record.named = {name: test for name, test in record.named.items() if name in {m.name for m in named}}
        write_text(RECORD, record.dumps())
    current = {module: source_sha256(file) for module, file in listed.items()}
    unmutated = {module: unmutated_functions(file) for module, file in listed.items()}
    verdict = render(record, listed, current, load_equivalent(), named, unmutated)
    write_text(REPORT, verdict.text)
    print(verdict.text)
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
