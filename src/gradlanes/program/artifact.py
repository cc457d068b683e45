"""The captured program as an artifact: kept, fingerprinted, and loadable without gradlanes.

The `capture_program` rule writes, per program (`experiment.naming.program_id`), under
`work/<experiment>/programs/<id>/` (published with the experiment to `results/<experiment>/programs/<id>/`):
- `<name>.jaxpr.txt`: each traced program (forward, gradient, init_state, step, fused) as text;
- `<name>.jax_export`: its `jax.export` serialisation (StableHLO bytecode and calling convention,
  lowered for the CPU), which `jax.export.deserialize(...).call(...)` runs with no gradlanes code;
- `program.json`: every file's SHA-256, the input signature, the JAX that made it, and the
  *fingerprint*: the SHA-256 of the sorted list of file hashes.

A lane re-traces its program, proves it identical to the artifact (`verify`) and records the
fingerprint, so two records with one fingerprint ran one program. Engines that compile StableHLO
(IREE) compile the artifact's bytes. Traced without source locations (`without_source_locations`),
so the bytes do not depend on where the checkout lives.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import jax
import jaxlib

from gradlanes.atomic import atomic_path, write_json
from gradlanes.joblog import UserFacingError
from gradlanes.program.capture import CapturedProgram, capture
from gradlanes.program.jaxcompat import ClosedJaxpr, jaxpr_as_fun, without_source_locations

MANIFEST = "program.json"
PROGRAMS = ("forward", "gradient", "init_state", "step", "fused")
EXPORT_PLATFORMS = ("cpu",)


def capture_with_artifact(exp) -> CapturedProgram:
    """The experiment's captured programs with their artifact (files, fingerprint) attached."""
    program = capture(exp)
    program.artifact = ProgramArtifact.build(program, exp.program_id)
    return program


class ProgramMismatch(UserFacingError):
    """A lane traced a program that differs from its committed artifact."""


def jaxpr_text(program: ClosedJaxpr) -> str:
    """The jaxpr as JAX prints it, plus its (scalar) constants, which the printout only names."""
    consts = "".join(f"const {index}: {value!r}\n" for index, value in enumerate(program.consts))
    return f"{program}\n{consts}"


def export_program(name: str, program: ClosedJaxpr) -> bytes:
    """`jax.export` of one captured program, for the CPU; its StableHLO module is named `jit_<name>`."""
    run = jaxpr_as_fun(program)

    def named(*args):
        return run(*args)

    named.__name__ = named.__qualname__ = name
    specs = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in program.jaxpr.invars]
    with without_source_locations():
        # keep_unused: the exported module takes every program input, in order, even those the
        # program ignores (Adam init reads only shapes), so any runtime can call it as documented.
        exported = jax.export.export(jax.jit(named, keep_unused=True), platforms=EXPORT_PLATFORMS)(*specs)
    return bytes(exported.serialize())


def deserialize(data: bytes) -> jax.export.Exported:
    return jax.export.deserialize(bytearray(data))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _leaf_names(tree, prefix: str) -> list[str]:
    leaves = jax.tree_util.tree_unflatten(tree, list(range(tree.num_leaves)))
    return [
        f"{prefix}{jax.tree_util.keystr(path)}" for path, _ in jax.tree_util.tree_flatten_with_path(leaves)[0]
    ]


def input_signatures(program: CapturedProgram) -> dict[str, list[str]]:
    """Per program, each input's role and type, e.g. "params['w1']: float32[784, 128]", in call order."""
    params = _leaf_names(program.params_tree, "params")
    state = _leaf_names(program.state_tree, "opt_state")
    roles = {
        "forward": [*params, "images"],
        "gradient": [*params, "images", "labels"],
        "init_state": params,
        "step": [*params, *state, "images", "labels"],
        "fused": [*params, *state, "images", "labels"],
    }
    return {
        name: [
            f"{role}: {v.aval.dtype}{list(v.aval.shape)}"
            for role, v in zip(roles[name], getattr(program, name).jaxpr.invars, strict=True)
        ]
        for name in PROGRAMS
        if getattr(program, name) is not None
    }


@dataclass(frozen=True)
class ProgramArtifact:
    """The files of one captured program, in memory."""

    program_id: str
    files: dict[str, bytes]  # file name -> content

    @classmethod
    def build(cls, program: CapturedProgram, program_id: str) -> ProgramArtifact:
        files = {}
        for name in PROGRAMS:
            traced = getattr(program, name)
            if traced is not None:
                files[f"{name}.jaxpr.txt"] = jaxpr_text(traced).encode()
                files[f"{name}.jax_export"] = export_program(name, traced)
        return cls(program_id, files)

    @property
    def file_sha256(self) -> dict[str, str]:
        return {name: sha256(content) for name, content in sorted(self.files.items())}

    @property
    def fingerprint(self) -> str:
        """SHA-256 over every file's hash and name: equal fingerprints, equal programs."""
        listing = "".join(f"{digest}  {name}\n" for name, digest in self.file_sha256.items())
        return sha256(listing.encode())

    def export(self, name: str) -> bytes:
        """The `jax.export` serialisation of program `name` (step, forward, ...)."""
        return self.files[f"{name}.jax_export"]

    def manifest(self, program: CapturedProgram) -> dict:
        return {
            "program": self.program_id,
            "fingerprint": self.fingerprint,
            "files": {
                name: {"sha256": digest, "bytes": len(self.files[name])}
                for name, digest in self.file_sha256.items()
            },
            "inputs": input_signatures(program),
            "export": {
                "platforms": list(EXPORT_PLATFORMS),
                "calling_convention_version": deserialize(self.export("step")).calling_convention_version,
                "jax": jax.__version__,
                "jaxlib": jaxlib.__version__,
            },
        }

    def write(self, folder: str | Path, program: CapturedProgram) -> dict:
        """Every file atomically, the manifest last (so a manifest always has its files)."""
        folder = Path(folder)
        for name, content in self.files.items():
            with atomic_path(folder / name) as tmp:
                tmp.write_bytes(content)
        manifest = self.manifest(program)
        write_json(folder / MANIFEST, manifest)
        return manifest

    def verify(self, manifest_path: str | Path) -> None:
        """Raise `ProgramMismatch` unless this program is the one the artifact holds."""
        stored = json.loads(Path(manifest_path).read_text())
        if stored["fingerprint"] == self.fingerprint:
            return
        differing = sorted(
            name
            for name in set(stored["files"]) | set(self.files)
            if stored["files"].get(name, {}).get("sha256") != self.file_sha256.get(name)
        )
        raise ProgramMismatch(
            f"this lane traced program {self.program_id} with fingerprint {self.fingerprint[:12]}, but "
            f"{manifest_path} holds {stored['fingerprint'][:12]} (differing: {', '.join(differing)}; "
            f"captured with jax {stored['export']['jax']}, this is jax {jax.__version__}). The code or "
            "JAX changed since the program was captured: rerun `snakemake --cores all` to capture it again"
        )
