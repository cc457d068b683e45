"""`make mutation`: mutmut over the modules that make claims, and the report of what survived.

Runs `mutmut run` (the modules and the tests it runs them against are in pyproject.toml,
[tool.mutmut]), reads every mutant's status from `mutmut results --all true`, and writes
results/checks/mutation.md: per module the mutants, how many the tests killed (a time-out counts
as killed: the mutant made the tests hang), how many survived, and the score; then every survivor
with its diff and either the reason it is equivalent (tools/mutation-equivalent.yaml, mutant name ->
why no test can tell it from the original) or UNEXPLAINED. A survivor that is not equivalent is a
missing test: write it, then rerun.

Then the named mutants (tools/mutation-named.yaml): wrong results written by hand, which mutmut's
one-token changes do not make. Each is applied to a copy of src/ that the same test selection
imports (PYTHONPATH puts the copy before the editable install); the report names the first test
that fails on it, and a named mutant that no test kills fails the run.

The report is written to a temporary file and renamed, so a failed run leaves the last one intact.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
MUTMUT = Path(sys.executable).with_name("mutmut")
EQUIVALENT = REPO / "tools" / "mutation-equivalent.yaml"
NAMED = REPO / "tools" / "mutation-named.yaml"
REPORT = REPO / "results" / "checks" / "mutation.md"
#: Statuses that mean the tests noticed the mutant.
DETECTED = {"killed", "timeout"}
TARGET = 0.90  # the floor: at least 90 % of each module's mutants detected


def mutmut(*args: str, env: dict) -> str:
    done = subprocess.run([str(MUTMUT), *args], cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # `results` exits 1 where mutants survived
        raise SystemExit(f"mutmut {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def module_of(mutant: str) -> str:
    """`gradlanes.data.idx.x_parse_idx__mutmut_3` (or a method's `xǁClassǁname`) -> its module."""
    return re.split(r"\.xǁ|\.x_", mutant, maxsplit=1)[0]


def statuses(text: str) -> dict[str, str]:
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


def report(found: dict[str, str], equivalent: dict[str, str], env: dict) -> tuple[str, bool]:
    per_module: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for name, status in found.items():
        per_module[module_of(name)][status] += 1
    lines = [
        "# Mutation testing",
        "",
        f"Written by `make mutation` (`tools/mutation.py`, mutmut) on "
        f"{datetime.now(UTC).strftime('%Y-%m-%d')}. Each mutant is one small change to a module "
        "(an operator, a constant, a condition); the tests that reach it (pyproject.toml, "
        "[tool.mutmut]) run against it. Detected: killed, or timed out (the tests hung on it). "
        "An equivalent mutant computes what the original does; why is given for each.",
        "",
        "| module | mutants | killed | timed out | survived (equivalent) | score | without equivalents |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    ok = True
    for module in sorted(per_module):
        counts = per_module[module]
        total = sum(counts.values())
        detected = sum(counts[s] for s in DETECTED)
        survivors = [n for n, s in found.items() if module_of(n) == module and s not in DETECTED]
        explained = sum(n in equivalent for n in survivors)
        score = detected / total
        real = detected / (total - explained) if total > explained else 1.0
        ok &= real >= TARGET
        lines.append(
            f"| `{module}` | {total} | {counts['killed']} | {counts['timeout']} | {len(survivors)} "
            f"({explained}) | {score:.1%} | {real:.1%} |"
        )
    lines += ["", f"Target: at least {TARGET:.0%} of each module's non-equivalent mutants detected.", ""]
    survivors = sorted(n for n, s in found.items() if s not in DETECTED)
    if survivors:
        lines += ["## Survivors", ""]
    for name in survivors:
        why = equivalent.get(name)
        ok &= why is not None
        lines += [
            f"- `{name}` ({found[name]}): " + (f"equivalent: {why}" if why else "**UNEXPLAINED**"),
            "",
            "  ```diff",
            *(f"  {line}" for line in diff_of(name, env).splitlines()),
            "  ```",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n", ok


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


@dataclass(frozen=True)
class NamedOutcome:
    mutant: NamedMutant
    killed_by: str | None  # the first failing test, or None when every test passed


def selected_tests() -> list[str]:
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]
    return list(settings["pytest_add_cli_args_test_selection"])


def run_named(mutant: NamedMutant, env: dict) -> NamedOutcome:
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
            [
                sys.executable,
                "-m",
                "pytest",
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:randomly",
                *selected_tests(),
            ],
            cwd=REPO,
            env=mutated_env,
            capture_output=True,
            text=True,
        )
    if done.returncode == 0:
        return NamedOutcome(mutant, None)
    failed = re.findall(r"^FAILED (.+?)(?: - .*)?$", done.stdout, flags=re.MULTILINE)
    if done.returncode != 1 or not failed:
        raise SystemExit(
            f"pytest on named mutant {mutant.name!r} did not run (exit {done.returncode}):\n"
            f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return NamedOutcome(mutant, failed[0])


def named_section(outcomes: list[NamedOutcome]) -> tuple[str, bool]:
    lines = [
        "## Named mutants",
        "",
        "Wrong results written by hand (tools/mutation-named.yaml), each applied alone to a copy of "
        "src/ and run against the same tests; the first test that fails is named.",
        "",
        "| mutant | what it breaks | file | killed by |",
        "| --- | --- | --- | --- |",
    ]
    for outcome in outcomes:
        verdict = f"`{outcome.killed_by}`" if outcome.killed_by else "**SURVIVED**"
        lines.append(
            f"| `{outcome.mutant.name}` | {outcome.mutant.why} | `{outcome.mutant.file}` | {verdict} |"
        )
    return "\n".join(lines) + "\n", all(outcome.killed_by for outcome in outcomes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reuse", action="store_true", help="report mutmut's last run without running it")
    parser.add_argument(
        "--named-only", action="store_true", help="run only the named mutants, print, write nothing"
    )
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    env = dict(os.environ)
    # mutmut runs the tests from its copy of the project (mutants/): the shared data is beside the
    # checkout, not beside that copy
    env.setdefault("GRADLANES_SHARED", str(REPO.parent / "shared"))
    if args.named_only:
        named = [NamedMutant(**entry) for entry in yaml.safe_load(NAMED.read_text())]
        section, named_ok = named_section([run_named(mutant, env) for mutant in named])
        print(section)
        return 0 if named_ok else 1
    if not args.reuse:
        # a fresh copy: mutmut re-tests only functions changed since its last run, so a test
        # added since would not reach the mutants it already judged
        shutil.rmtree(REPO / "mutants", ignore_errors=True)
        subprocess.run([str(MUTMUT), "run", "--max-children", str(args.max_children)], cwd=REPO, env=env)
    found = statuses(mutmut("results", "--all", "true", env=env))
    if not found:
        raise SystemExit("mutmut reported no mutants: is [tool.mutmut] in pyproject.toml, and did it run?")
    equivalent = (yaml.safe_load(EQUIVALENT.read_text()) or {}) if EQUIVALENT.is_file() else {}
    text, ok = report(found, equivalent, env)
    named = [NamedMutant(**entry) for entry in yaml.safe_load(NAMED.read_text())]
    outcomes = []
    for mutant in named:
        outcomes.append(run_named(mutant, env))
        print(f"named mutant {mutant.name}: killed by {outcomes[-1].killed_by or 'nothing: it SURVIVED'}")
    section, named_ok = named_section(outcomes)
    text, ok = text + "\n" + section, ok and named_ok
    partial = REPORT.with_name(f".{REPORT.name}.part")
    partial.write_text(text)
    partial.replace(REPORT)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
