"""Is the wheel set the one-shot GPU run carries (.whl/) complete, single-versioned and for Python 3.12?

The H200 machine reaches no registry, so pip there installs the carried wheels with --no-deps and
nothing there checks that each wheel's own requirements are met. This does, here and offline:
every wheel listed in h200-wheels.txt must be in .whl/ at its pinned version (and nothing else:
two versions of one package stop pip's whole install); every requirement of every carried wheel,
as it applies to CPython 3.12 on x86-64 Linux, must be met by another carried wheel or by a package
the machine's image holds (h200-image.txt, at a version that satisfies it where the version is
known), unless it is left out on purpose (`OMITTED`, with the reason). `pip_dry_run` is the pip
command that resolves the set for Python 3.12 from .whl/ alone.

    python tools/gpu/wheelset.py            # exit 1 with one line per problem, else a summary
"""

from __future__ import annotations

import argparse
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WHEELS = REPO / ".whl"
MNIST = WHEELS / "mnist"
PINS = HERE / "h200-wheels.txt"
IMAGE = HERE / "h200-image.txt"
FILL = "bash tools/gpu/fetch_wheels.sh"

#: Requirements deliberately not carried, and why the one-shot run does not need them.
IREE_ONLY_ON_USE = "the iree lane runs on the CPU; its engine imports IREE only when a lane runs on it"
OMITTED = {
    "pulp": "snakemake imports it only for its ILP scheduler; the one-shot run passes --scheduler greedy",
    "iree-base-compiler": IREE_ONLY_ON_USE,
    "iree-base-runtime": IREE_ONLY_ON_USE,
}

#: The machine pip there installs for: marker values of CPython 3.12 on x86-64 Linux.
TARGET = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "implementation_version": "3.12.3",
    "platform_python_implementation": "CPython",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "sys_platform": "linux",
    "os_name": "posix",
}
#: Platform tags such a machine accepts (pip matches each tag exactly, so all are named).
PLATFORMS = [
    *(f"manylinux_2_{minor}_x86_64" for minor in range(39, 4, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
]


def read_list(path: Path) -> dict[str, str | None]:
    """`name==version` (or a bare name) per line, comments skipped: canonical name -> version or None."""
    entries = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        entries[canonicalize_name(name)] = version.strip() or None
    return entries


def carried(folder: Path = WHEELS) -> tuple[dict[str, Path], list[str]]:
    """The wheels in `folder` by canonical name, and the problems of the folder itself."""
    wheels, problems = {}, []
    for path in sorted(folder.glob("*.whl")):
        name = canonicalize_name(parse_wheel_filename(path.name)[0])
        if name in wheels:
            problems.append(f"two wheels of {name} in {folder} ({wheels[name].name}, {path.name}): keep one")
        wheels[name] = path
    return wheels, problems


def metadata_of(wheel: Path):
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(archive.read(name).decode("utf-8"))


def applies(requirement: Requirement) -> bool:
    """Whether a requirement binds on the target machine (no extras are installed there)."""
    return requirement.marker is None or requirement.marker.evaluate({**TARGET, "extra": ""})


def problems(folder: Path = WHEELS, pins: Path = PINS, image: Path = IMAGE) -> list[str]:
    """Every way the carried set falls short, one line each; empty when it is complete."""
    wanted, present = read_list(pins), read_list(image)
    wheels, found = carried(folder)
    for name, version in wanted.items():
        if name not in wheels:
            found.append(
                f"{name}=={version} is listed in {pins.name} but has no wheel in {folder}: run {FILL}"
            )
        elif Version(str(parse_wheel_filename(wheels[name].name)[1])) != Version(str(version)):
            found.append(f"{wheels[name].name} is not the pinned {name}=={version}: run {FILL}")
    found += [
        f"{path.name} is not listed in {pins.name}: run {FILL}"
        for n, path in wheels.items()
        if n not in wanted
    ]
    versions = {name: parse_wheel_filename(path.name)[1] for name, path in wheels.items()}
    needs = {"gradlanes": project_requirements()}
    for name, path in wheels.items():
        meta = metadata_of(path)
        python = meta.get("Requires-Python")
        if python and not SpecifierSet(python).contains(TARGET["python_full_version"]):
            found.append(f"{path.name} requires Python {python}, not 3.12")
        needs[name] = [Requirement(line) for line in meta.get_all("Requires-Dist") or []]
    for name, requirements in needs.items():
        for requirement in requirements:
            needed = canonicalize_name(requirement.name)
            if not applies(requirement) or needed in OMITTED:
                continue
            if needed in versions:
                have = versions[needed]
            elif needed in present:
                have = present[needed]
                if have is None:  # held by the image at a version nobody wrote down
                    continue
            else:
                found.append(f"{name} needs {requirement}, which is neither carried nor in {image.name}")
                continue
            if not requirement.specifier.contains(str(have), prereleases=True):
                found.append(
                    f"{name} needs {requirement}, but {needed} {have} is what the machine would have"
                )
    return found


def project_requirements() -> list[Requirement]:
    """What gradlanes itself needs there: its dependencies and the test tools the GPU tests run with."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    tests = [line for line in project["optional-dependencies"]["test"] if not line.startswith("ruff")]
    return [Requirement(line) for line in (*project["dependencies"], *tests)]


def pip_dry_run(
    target: Path, folder: Path = WHEELS, pins: Path = PINS, python: str = sys.executable
) -> list[str]:
    """pip resolving the listed set for CPython 3.12 x86-64 from `folder` alone, installing nothing."""
    platforms = [arg for tag in PLATFORMS for arg in ("--platform", tag)]
    return [python, "-m", "pip", "install", "--isolated", "--dry-run", "--no-index",
            "--find-links", str(folder), "--only-binary=:all:", "--no-deps", "--python-version", "3.12",
            "--implementation", "cp", "--abi", "cp312", *platforms, "--target", str(target),
            "-r", str(pins)]  # fmt: skip


def size_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, default=WHEELS, help="the folder of carried wheels")
    args = parser.parse_args(argv)
    if not any(args.wheels.glob("*.whl")):
        print(f"no wheels in {args.wheels}: run {FILL}", file=sys.stderr)
        return 1
    found = problems(args.wheels)
    for line in found:
        print(line, file=sys.stderr)
    if not found:
        count = len(list(args.wheels.glob("*.whl")))
        print(f"{count} wheels, complete for CPython 3.12 on the H200 image "
              f"({size_bytes(args.wheels) / 2**20:.1f} MiB with the MNIST archives)")  # fmt: skip
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
