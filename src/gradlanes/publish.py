"""Publish one experiment: what passed goes into results/<experiment>/, all of it at once.

Why a step of its own: Snakemake deletes a failed job's outputs and rewrites a rerun job's outputs
in place, so if lanes and checks wrote into results/ directly, a diverged lane or a failed check
would delete committed records, and a killed run would leave a mix of old and new files. Instead
every job writes the work area (`gradlanes.layout`), and `publish`, which Snakemake runs only after
the agreement check passed, copies the experiment's files into a staging folder beside the target,
hashes them into a receipt (`published.json`) and swaps the staging folder in for the old one
(`atomic.replace_folder`). Files of the old folder that this run does not produce go with it.

Publishing refuses to replace a folder that holds another experiment: a different dataset, or
another set of lanes or seeds, as a `--configfile` run of another experiment under the default name
would. The message says how to name the new experiment, or how to say that replacing is meant.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from gradlanes.atomic import recover_folder, replace_folder, write_json
from gradlanes.hashing import sha256_file
from gradlanes.joblog import UserFacingError
from gradlanes.layout import PUBLISHED_RECEIPT

RECEIPT_VERSION = 1
PROGRAM_MANIFEST = "program.json"


class PublishRefused(UserFacingError):
    """The target folder holds something this run must not replace; nothing was changed."""


@dataclass(frozen=True)
class Identity:
    """What makes two runs the same experiment: the data, the lanes and the seeds each lane ran."""

    experiment: str
    dataset: str
    dataset_sha256: Mapping[str, str]
    lanes: tuple[str, ...]
    seeds: tuple[int, ...]
    lane_seeds: Mapping[str, Sequence[int]] | None = None  # lane -> its seeds; None: every lane all

    def seeds_of(self) -> dict[str, list[int]]:
        given = self.lane_seeds or {}
        return {lane: sorted(int(s) for s in given.get(lane, self.seeds)) for lane in self.lanes}

    def as_dict(self) -> dict:
        return {**asdict(self), "dataset_sha256": dict(self.dataset_sha256), "lanes": list(self.lanes),
                "seeds": list(self.seeds), "lane_seeds": self.seeds_of()}  # fmt: skip


def with_program_files(files: Mapping[str, Path]) -> dict[str, Path]:
    """Add every file a captured program's manifest lists beside it (the rule declares only the
    manifest), after checking each against the SHA-256 the manifest holds."""
    expanded = dict(files)
    for name, path in files.items():
        if Path(name).name != PROGRAM_MANIFEST:
            continue
        manifest = json.loads(Path(path).read_text())
        for member, entry in manifest["files"].items():
            source = Path(path).parent / member
            if not source.is_file() or sha256_file(source) != entry["sha256"]:
                raise PublishRefused(
                    f"{source} is missing or differs from its manifest {path}; rerun "
                    f"`snakemake --forcerun capture_program` to capture the program again"
                )
            expanded[str(Path(name).parent / member)] = source
    return expanded


def conflicts(published: Mapping, identity: Identity) -> list[str]:
    """How the experiment published in a folder differs from the run about to replace it.

    Lanes and seeds compare as sets: reordering the config is the same experiment. A lane whose
    settings changed is the same experiment, rerun (its records say what it ran).
    """
    mine = identity.as_dict()
    theirs_identity = dict(published.get("identity", {}))
    if "lane_seeds" not in theirs_identity:  # receipts from before lanes had seeds of their own
        theirs_identity["lane_seeds"] = {
            lane: theirs_identity.get("seeds") for lane in theirs_identity.get("lanes", [])
        }
    problems = []
    for key, what in (("dataset", "dataset"), ("dataset_sha256", "dataset content"),
                      ("lanes", "lanes"), ("seeds", "seeds"), ("lane_seeds", "seeds per lane")):  # fmt: skip
        theirs = theirs_identity.get(key)
        if key in ("lanes", "seeds"):
            same = sorted(theirs or []) == sorted(mine[key])
        elif key == "lane_seeds":
            same = {lane: sorted(seeds or []) for lane, seeds in (theirs or {}).items()} == mine[key]
        else:
            same = theirs == mine[key]
        if not same and not (key == "lane_seeds" and problems):  # lanes or seeds differing says it
            problems.append(f"{what}: published {theirs!r}, this run {mine[key]!r}")
    return problems


def check_replaceable(target: Path, identity: Identity, replace: bool) -> None:
    """Refuse, before anything is written, to overwrite another experiment's published folder."""
    if replace or not target.exists():
        return
    receipt = target / PUBLISHED_RECEIPT
    how = (
        f"Give this run its own name (`--config experiment=NAME`, or `experiment: NAME` in its config "
        f"file) or, if it is meant to replace {target}, rerun with `--config replace_published=true`."
    )
    if not receipt.is_file():
        raise PublishRefused(
            f"{target} exists but was not written by publish (no {PUBLISHED_RECEIPT}). {how}"
        )
    differences = conflicts(json.loads(receipt.read_text()), identity)
    if differences:
        raise PublishRefused(
            f"{target} holds another experiment than this run ({'; '.join(differences)}). {how}"
        )


def stage(files: Mapping[str, Path], staging: Path, about: Mapping) -> dict:
    """Copy `files` (name inside the experiment folder -> source) into `staging`; return the receipt."""
    shutil.rmtree(staging, ignore_errors=True)
    listed = {}
    for name, source in sorted(files.items()):
        destination = staging / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, destination)
        with open(destination, "rb") as handle:  # on disk before the swap makes it the published copy
            os.fsync(handle.fileno())
        listed[name] = {"sha256": sha256_file(destination), "bytes": destination.stat().st_size}
    receipt = {"version": RECEIPT_VERSION, **about, "files": listed}
    write_json(staging / PUBLISHED_RECEIPT, receipt)
    return receipt


def publish(files: Mapping[str, Path], target: Path, identity: Identity, replace: bool = False) -> dict:
    """Replace `target` with exactly `files` plus a receipt, in one swap; return the receipt."""
    target = Path(target)
    recover_folder(target)  # before the check: a publish killed between two renames left it aside
    files = with_program_files(files)
    check_replaceable(target, identity, replace)
    return publish_folder(files, target, {"identity": identity.as_dict()})


def publish_folder(files: Mapping[str, Path], target: Path, about: Mapping | None = None) -> dict:
    """Replace folder `target` with exactly `files` plus a receipt (`about` and every file's
    SHA-256), in one swap; return the receipt. Nothing is checked: callers check first."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    recover_folder(target)  # publish() recovered already; the benchmark's publish comes straight here
    staging = target.with_name(f".{target.name}.publishing")
    try:
        receipt = stage(files, staging, about or {})
        replace_folder(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return receipt
