"""What the numerics matrix measures: the files that decide its float results, and their digests.

Why: the full matrix is half an hour or more on two cores, so it is run when these files change,
not on every push. Its record (results/checks/numerics.json) keeps the SHA-256 of each file, and
tests/test_numerics_record.py fails when one changed since (or one was added or removed), naming
them. The list is what a cell runs: the CI-subset DAG up to its agreement rule (data, capture,
engines, training, the checks and their bounds, the glue that passes settings) and the tests
marked `numerics`, under the pinned libraries. The report, the benchmark and publishing are not
in it: they format and copy what the matrix measured, but compute none of it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: The test modules that hold tests marked `numerics` (a cell runs exactly these), and what they
#: import from tests/. tests/test_numerics_record.py checks the list against the marks.
NUMERICS_TEST_FILES = ("tests/test_numerics.py", "tests/test_capture.py", "tests/test_interpreter.py")
TEST_HELPERS = (
    "tests/lanes.py",
    "tests/float_bounds.py",
    "tests/test_rules_elementwise.py",
    "tests/oracle.py",
)

PATTERNS = (
    "src/gradlanes/program/**/*.py",
    "src/gradlanes/engines/**/*.py",
    "src/gradlanes/experiment/**/*.py",
    "src/gradlanes/run/**/*.py",
    "src/gradlanes/data/*.py",
    "src/gradlanes/config.py",
    "src/gradlanes/schemas/config.schema.yaml",
    "workflow/rules/common.smk",
    "workflow/rules/data.smk",
    "workflow/rules/program.smk",
    "workflow/rules/lanes.smk",
    "workflow/rules/checks.smk",
    "workflow/scripts/download_dataset.py",
    "workflow/scripts/prepare_dataset.py",
    "workflow/scripts/capture_program.py",
    "workflow/scripts/init_weights.py",
    "workflow/scripts/train_lane.py",
    "workflow/scripts/agreement.py",
    ".test/config.yaml",
    "requirements.lock",
    "tests/numerics/cells.py",  # the kernel choices themselves (matrix.py only schedules and reports)
    *NUMERICS_TEST_FILES,
    *TEST_HELPERS,
)


def source_files(repo: Path = REPO) -> list[str]:
    """The files the patterns match, relative to the repository, sorted."""
    found = {path for pattern in PATTERNS for path in repo.glob(pattern) if path.is_file()}
    return sorted(path.relative_to(repo).as_posix() for path in found if "__pycache__" not in path.parts)


def source_digests(repo: Path = REPO) -> dict[str, str]:
    """Each source file's SHA-256."""
    return {name: hashlib.sha256((repo / name).read_bytes()).hexdigest() for name in source_files(repo)}


def combined_digest(digests: dict[str, str]) -> str:
    """One SHA-256 over every file's name and digest: what a cell records it was measured at."""
    text = "".join(f"{name}\0{digest}\n" for name, digest in sorted(digests.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def changed(recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    """Files added, removed or changed between two digest maps, each with what happened to it."""
    names = sorted(set(recorded) | set(current))
    return [
        f"{name} ({'added' if name not in recorded else 'removed' if name not in current else 'changed'})"
        for name in names
        if recorded.get(name) != current.get(name)
    ]
