"""The one-shot GPU run: every GPU lane, check and benchmark row, in one call on a registry-less GPU machine.

The GPU machine is lent rarely and briefly and reaches no package registry, so this script is
prepared and tested on the CPU and run there unchanged (`bash tools/gpu/oneshot.sh OUT`), in stages,
each timed and kept in OUT/oneshot.json:

0. refuse at once, installing and running nothing, where no NVIDIA GPU is visible or JAX sees none;
   likewise where the carried folder .whl/ is missing (`bash tools/gpu/fetch_wheels.sh` fills it);
1. `install`: the carried wheels (.whl/*.whl) with pip --no-index --no-deps into a scratch folder on
   PYTHONPATH; gradlanes is registered by its metadata alone and runs from the checkout, so every
   record carries the checkout's git commit;
2. `inputs`: through snakemake, the DAG's own rules, with the MNIST archives of .whl/mnist/ as the
   mirror, the dataset, initial weights and captured programs of the `device: gpu` lanes, with JAX
   on the CPU (`JAX_PLATFORMS=cpu`: the initial weights are then the bits a CPU machine makes);
3. `lanes`: every seed of every gpu lane, through snakemake on the GPU;
4. `publish`: the rest of the DAG over them (`only_lanes`): the agreement checks against the float64
   reference, tables, figures, and rule publish into results/<dataset>-<device>/ (mnist-nvidia-h200),
   an experiment of its own: the GPU machine's JAX traces another program text than the CPU
   machine's, so its lanes are checked against, and published with, the programs captured there;
5. `bench`: the benchmark's GPU rows (`python -m gradlanes.bench.gpu`);
6. `gpu_tests`: the GPU-marked tests (tests/test_gpu.py: a GPU lane rerun is bit-identical);
7. `rerun`: one lane and seed trained again through snakemake (`--forcerun`), compared bit for bit.

The deliverables (records, the published experiment, benchmark rows) come first, so a run cut short
keeps them. OUT gets oneshot.log (everything printed), oneshot.json (stages, machine, each record's
headline numbers, the agreement verdict), gpu-run.tar.gz (results/<experiment>/ as published, the
work area, logs) and bench-gpu.json: four files, inside the device tool's limits on what comes back.
They are refreshed after every stage, so a run cut short still brings back what it finished. The
whole run keeps to BUDGET_S; a stage that would start past it is skipped and says so.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import threading
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "src"))  # gradlanes.engines.gpu needs nothing but the standard library

from gradlanes.engines import gpu  # noqa: E402

WHEELS = REPO / ".whl"
MNIST = WHEELS / "mnist"
FILL = "bash tools/gpu/fetch_wheels.sh"
SITE = Path(os.environ.get("GRADLANES_ONESHOT_SITE", "/tmp/gradlanes-oneshot/site"))
SCRATCH = SITE.parent
BUDGET_S = 480  # the 8 minutes, start to end
#: Seconds each stage may take at most (less where the budget has less left).
STAGE_LIMIT_S = {"install": 60, "inputs": 120, "lanes": 300, "publish": 120, "bench": 90, "gpu_tests": 120,
                 "rerun": 60}  # fmt: skip
RERUN = ("xla_gpu", 0)  # the lane and seed trained twice through snakemake and compared


class Run:
    """This run's log, stages and output folder: every line printed also goes to OUT/oneshot.log."""

    def __init__(self, out: Path, python: str):
        self.out, self.python = out, python
        self.started = time.monotonic()
        self.device_kind = "rehearsal"  # the GPU's kind once JAX has named it: it names the experiment
        self.targets: tuple[str, dict[str, list[int]], list[str]] | None = None  # set after install
        self.log_file = open(out / "oneshot.log", "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._printing = threading.Lock()  # a command's output arrives on a thread of its own
        self.summary: dict = {
            "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "budget_s": BUDGET_S,
            "stages": [],
        }

    def say(self, text: str) -> None:
        with self._printing:
            for stream in (sys.stdout, self.log_file):
                stream.write(text.rstrip("\n") + "\n")
                stream.flush()

    def left_s(self) -> float:
        return BUDGET_S - (time.monotonic() - self.started)

    def command(
        self, args: list[str], limit_s: float, env: dict | None = None, log: Path | None = None
    ) -> int:
        """Run `args` with its output streamed here (and to `log`); killed with its children at `limit_s`."""
        self.say(f"$ {shlex.join(args)}")
        process = subprocess.Popen(
            args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,  # its own process group, so a time-out stops its children too
        )  # fmt: skip
        copy = open(log, "w", encoding="utf-8") if log else None  # noqa: SIM115 - closed below

        def relay() -> None:
            for line in process.stdout:
                self.say(line)
                if copy:
                    copy.write(line)

        reader = threading.Thread(target=relay, daemon=True)
        reader.start()
        try:
            code = process.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            self.say(f"... stopped after {limit_s:.0f} s: its stage's time is up")
            os.killpg(process.pid, signal.SIGKILL)
            code = process.wait()
        reader.join(timeout=10)
        if copy:
            copy.close()
        return code

    def stage(self, name: str, step) -> bool:
        """Run one stage within its share of the budget; record how it went; refresh OUT."""
        limit = min(STAGE_LIMIT_S[name], self.left_s())
        entry = {"stage": name, "ok": False, "seconds": 0.0}
        if limit < 10:
            entry["detail"] = f"skipped: {self.left_s():.0f} s of the {BUDGET_S} s budget left"
            self.say(f"== {name}: {entry['detail']}")
        else:
            self.say(f"== {name} (at most {limit:.0f} s; {self.left_s():.0f} s of the budget left)")
            started = time.monotonic()
            try:
                entry["detail"] = step(limit)
                entry["ok"] = True
            except StageFailed as failed:
                entry["detail"] = str(failed)
            except Exception as error:  # noqa: BLE001 - a one-shot run keeps going and reports it
                entry["detail"] = f"crashed: {error!r}"
            entry["seconds"] = round(time.monotonic() - started, 1)
            self.say(
                f"== {name}: {'ok' if entry['ok'] else 'FAILED'} in {entry['seconds']} s: {entry['detail']}"
            )
        self.summary["stages"].append(entry)
        self.save()
        return entry["ok"]

    def save(self) -> None:
        self.summary["elapsed_s"] = round(time.monotonic() - self.started, 1)
        (self.out / "oneshot.json").write_text(json.dumps(self.summary, indent=2) + "\n")

    def close(self) -> None:
        self.log_file.close()


class StageFailed(Exception):
    """A stage did not do its job; the message says what happened (its output is in oneshot.log)."""


# ---- refusal: where the run cannot happen --------------------------------------------------------


@functools.lru_cache
def jax_gpu(python: str) -> tuple[str | None, str]:
    """The GPU JAX sees (its device kind) with this Python, or None and what JAX said."""
    probe = "import jax; print(jax.devices('gpu')[0].device_kind)"
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}  # a probe takes no GPU memory
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, str(error)
    if done.returncode != 0:
        return None, (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    return done.stdout.strip().splitlines()[-1], ""


def refusal(python: str, rehearse: bool) -> str | None:
    """Why this machine cannot do the run (nothing has been installed yet), or None."""
    if not rehearse:
        evidence = gpu.nvidia_gpu_evidence()
        if evidence is None:
            return (
                "no NVIDIA GPU is visible here (no nvidia-smi, no /dev/nvidia0, no NVIDIA driver): the "
                "one-shot GPU run needs one, so nothing was installed or run"
            )
        kind, said = jax_gpu(python)
        if kind is None:
            return (
                f"this machine has an NVIDIA GPU ({evidence}), but JAX ({python}) sees none: {said}. "
                "Nothing was installed or run; `python3 -c 'import jax; print(jax.devices())'` shows "
                "what JAX finds (docs/gpu.md)"
            )
    missing = [p.name for p in (WHEELS, MNIST) if not p.is_dir()] or (
        [] if any(WHEELS.glob("*.whl")) else ["*.whl"]
    )
    if missing:
        return (
            f"{WHEELS} is not filled (missing: {', '.join(missing)}): on a machine with PyPI, run "
            f"`{FILL}` and carry .whl with the device call (carry=['.whl'])"
        )
    return None


# ---- install -------------------------------------------------------------------------------------


def register_gradlanes(site: Path) -> Path:
    """A dist-info for gradlanes in `site`: its name, version and entry points, read from pyproject.toml.

    Engines are found through entry points, which need installed metadata; the code itself is
    imported from the checkout's src/ (first on PYTHONPATH), as an editable install would.
    """
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    info = site / f"{project['name']}-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    lines = []
    for group, points in project.get("entry-points", {}).items():
        lines += [f"[{group}]", *(f"{name} = {value}" for name, value in points.items()), ""]
    (info / "entry_points.txt").write_text("\n".join(lines))
    (info / "top_level.txt").write_text(f"{project['name']}\n")
    return info


def run_env(extra: dict | None = None) -> dict:
    path = os.pathsep.join(p for p in (str(REPO / "src"), str(SITE), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **(extra or {})}


def install(run: Run, limit: float) -> str:
    wheels = sorted(str(p) for p in WHEELS.glob("*.whl"))
    pip = [run.python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
           "--no-cache-dir", "--disable-pip-version-check", "--upgrade", "--target", str(SITE)]  # fmt: skip
    if run.command([*pip, *wheels], limit) != 0:
        raise StageFailed(f"pip could not install the {len(wheels)} carried wheels into {SITE}")
    register_gradlanes(SITE)
    check = (
        "import snakemake, jsonschema, gradlanes.engines.registry as r; "
        "print('snakemake', snakemake.__version__, '- engines:', ', '.join(r.engine_names()))"
    )
    if run.command([run.python, "-c", check], 60, env=run_env()) != 0:
        raise StageFailed("the installed set does not import (snakemake, jsonschema, gradlanes' engines)")
    return f"{len(wheels)} wheels into {SITE}; gradlanes from {REPO / 'src'}"


# ---- gpu_tests -----------------------------------------------------------------------------------


def shared_folder() -> Path:
    """A folder laid out as the tests expect the shared data (datasets/mnist/), pointing at .whl/mnist."""
    shared = SCRATCH / "shared"
    (shared / "datasets").mkdir(parents=True, exist_ok=True)
    link = shared / "datasets" / "mnist"
    if not link.exists():
        link.symlink_to(MNIST)
    return shared


def gpu_tests(run: Run, limit: float) -> str:
    report = SCRATCH / "pytest-gpu.xml"
    args = [run.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", "tests/test_gpu.py",
            f"--junitxml={report}"]  # fmt: skip
    rc = run.command(args, limit, env=run_env({"GRADLANES_SHARED": str(shared_folder())}),
                     log=SCRATCH / "pytest-gpu.log")  # fmt: skip
    counts = test_counts(report)
    run.summary["gpu_tests"] = counts
    ran = counts.get("tests", 0) - counts.get("skipped", 0)
    if run.summary.get("rehearsal") and rc == 0:  # no GPU: the tests are skipped, and say why
        return f"{ran} GPU tests passed, {counts.get('skipped', 0)} skipped (a rehearsal: no GPU)"
    if rc != 0 or ran == 0 or counts.get("skipped"):
        raise StageFailed(f"pytest exited {rc}: {counts} (output in oneshot.log and pytest-gpu.log)")
    return f"{ran} GPU tests passed"


def test_counts(report: Path) -> dict[str, int]:
    """tests, failures, errors and skipped, from pytest's JUnit XML report."""
    import xml.etree.ElementTree as ElementTree

    if not report.is_file():
        return {}
    suite = ElementTree.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    return {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}


# ---- inputs, lanes, rerun: through snakemake -----------------------------------------------------


def gpu_lane_targets(config_files: list[Path]) -> tuple[str, dict[str, list[int]], list[str]]:
    """The experiment, each gpu lane's seeds, and their record paths, from the merged config."""
    import yaml

    from gradlanes.config import lane_seeds
    from gradlanes.layout import default_experiment, work

    config: dict = {}
    for path in config_files:  # merged as snakemake merges --configfile: a later file's keys win
        config = merged(config, yaml.safe_load(path.read_text()))
    lanes = {
        lane: lane_seeds(config, lane) for lane, s in config["lanes"].items() if s.get("device") == "gpu"
    }
    if not lanes:
        raise StageFailed("config.yaml has no lane with `device: gpu`")
    experiment = default_experiment(config)
    layout = work(experiment)
    return experiment, lanes, [layout.record(lane, seed) for lane, seeds in lanes.items() for seed in seeds]


def merged(base: dict, update: dict) -> dict:
    out = dict(base)
    for key, value in update.items():
        out[key] = (
            merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def experiment_name(dataset: str, device_kind: str) -> str:
    """The experiment the GPU lanes publish: the dataset and the device, `mnist-nvidia-h200`.

    Apart from the CPU machine's experiment on purpose: the GPU machine's JAX is another release,
    which traces another program text, so its lanes are checked against the float64 reference of
    the programs captured there, and published with them, rather than joined to programs they did
    not run.
    """
    return f"{dataset}-{re.sub(r'[^a-z0-9]+', '-', device_kind.lower()).strip('-')}"


def override_file(run: Run) -> Path:
    """The config merged over config.yaml: the gpu lanes alone, their own experiment, the carried mirror.

    `replace_published` lets a second GPU run replace the first's published folder.
    """
    import yaml

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    gpu_lanes = [lane for lane, s in config["lanes"].items() if s.get("device") == "gpu"]
    override = {
        "experiment": experiment_name(config["dataset"]["name"], run.device_kind),
        "only_lanes": gpu_lanes,
        "dataset": {"mirrors": [str(MNIST)]},
        "replace_published": True,
    }
    path = SCRATCH / "oneshot-config.yaml"
    path.write_text(yaml.safe_dump(override))
    return path


def snakemake(run: Run, targets: list[str], *options: str) -> list[str]:
    """The snakemake command for `targets`; the targets go after `--`, where no option can take them."""
    configs = [str(REPO / "config.yaml"), str(override_file(run))]
    # greedy: the ILP scheduler needs PuLP, which is not carried (tools/gpu/h200-wheels.txt)
    return [run.python, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(REPO),
            "--configfile", *configs, "--cores", "all", "--scheduler", "greedy", "--keep-going",
            "--rerun-incomplete", *options, "--", *targets]  # fmt: skip


def inputs(run: Run, limit: float) -> str:
    _, lanes, targets = run.targets
    # Every job the records need but the gpu lanes' own: download, prepare, initial weights, programs.
    command = snakemake(run, targets, "--omit-from", *(f"train_{lane}" for lane in lanes))
    if run.command(command, limit, env=run_env({"JAX_PLATFORMS": "cpu"})) != 0:
        raise StageFailed("snakemake could not make the dataset, initial weights and programs")
    return f"dataset, initial weights and programs for {', '.join(lanes)} (JAX on the CPU)"


def lanes(run: Run, limit: float) -> str:
    experiment, lanes, targets = run.targets
    rc = run.command(snakemake(run, targets), limit, env=run_env())
    run.summary["records"] = headlines(experiment, lanes)
    done = [r for r in run.summary["records"] if r.get("status") == "ok"]
    if rc != 0 or len(done) != len(targets):
        raise StageFailed(
            f"{len(done)} of {len(targets)} gpu lane runs finished with status ok (snakemake {rc})"
        )
    return f"{len(done)} records with status ok: " + ", ".join(
        f"{lane} x{len(s)}" for lane, s in lanes.items()
    )


def publish(run: Run, limit: float) -> str:
    """The rest of the DAG over the gpu records: agreement, tables, figures, results/<experiment>/."""
    from gradlanes.layout import published, work

    experiment, _, _ = run.targets
    rc = run.command(snakemake(run, ["all"]), limit, env=run_env())
    agreement = REPO / work(experiment).agreement
    if agreement.is_file():
        report = json.loads(agreement.read_text())
        run.summary["agreement"] = {
            key: report[key] for key in ("passed", "counts", "worst_fraction_of_bound", "float64_reference")
        }
    if rc != 0:
        raise StageFailed(
            f"snakemake exited {rc}: the agreement checks, tables or figures of {experiment} failed "
            f"(logs/{experiment}/ in gpu-run.tar.gz)"
        )
    counts = run.summary["agreement"]["counts"]
    return (
        f"{published(experiment).root}/ published; agreement passed ({counts['ok']} checks ok, "
        f"{counts['skipped']} skipped)"
    )


def headlines(experiment: str, lanes: dict[str, list[int]]) -> list[dict]:
    """Each gpu record's numbers the closing note quotes."""
    from gradlanes.layout import work

    rows = []
    for lane, seeds in lanes.items():
        for seed in seeds:
            path = REPO / work(experiment).record(lane, seed)
            if not path.is_file():
                rows.append({"lane": lane, "seed": seed, "status": "missing"})
                continue
            record = json.loads(path.read_text())
            timing, compiles = record.get("timing") or {}, record.get("compiles") or {}
            rows.append(
                {
                    "lane": lane,
                    "seed": seed,
                    "status": record["status"],
                    "reason": record.get("reason"),
                    "platform": record.get("platform"),
                    "device_kind": record.get("device_kind"),
                    "accuracy_percent": (record.get("accuracy") or {}).get("percent"),
                    "final_loss": (record.get("loss") or {}).get("final"),
                    "step_ms_median": timing.get("step_ms_median"),
                    "train_s": timing.get("train_s"),
                    "compile_s": timing.get("compile_s"),
                    "compiles_train": compiles.get("train"),
                    "compiles_total": compiles.get("total"),
                    "xla_flags": record["numerics"]["xla_flags"],
                    "matmul_precision": record["numerics"]["matmul_precision"],
                    "program": (record.get("program") or {}).get("fingerprint"),
                }
            )
    return rows


def rerun(run: Run, limit: float) -> str:
    """Train RERUN again through snakemake and compare losses, weights and predictions bit for bit."""
    import numpy as np
    import pandas as pd

    from gradlanes.layout import work

    experiment, _, _ = run.targets
    lane, seed = RERUN
    layout = work(experiment)
    model, curve, record = (REPO / layout.model(lane, seed), REPO / layout.curve(lane, seed),
                            REPO / layout.record(lane, seed))  # fmt: skip
    if not model.is_file():
        raise StageFailed(f"{lane} seed {seed} has no first run to compare with ({model} is missing)")
    first = {"model": dict(np.load(model)), "losses": train_losses(pd.read_parquet(curve))}
    (SCRATCH / "rerun-first-record.json").write_text(record.read_text())
    command = snakemake(run, [layout.record(lane, seed)], "--forcerun", f"train_{lane}")
    rc = run.command(command, limit, env=run_env())
    if rc != 0:
        raise StageFailed(f"snakemake exited {rc} training {lane} seed {seed} again")
    second = {"model": dict(np.load(model)), "losses": train_losses(pd.read_parquet(curve))}
    differing = [k for k in first["model"] if first["model"][k].tobytes() != second["model"][k].tobytes()]
    same_losses = first["losses"].tobytes() == second["losses"].tobytes()
    run.summary["rerun"] = {
        "lane": lane,
        "seed": seed,
        "losses_identical": same_losses,
        "arrays_compared": sorted(first["model"]),
        "arrays_differing": differing,
    }
    if differing or not same_losses:
        raise StageFailed(f"the rerun differs: arrays {differing or 'none'}, losses identical {same_losses}")
    arrays, steps = len(first["model"]), len(first["losses"])
    return f"{lane} seed {seed} again: {steps} losses and {arrays} arrays bit-identical"


def train_losses(curve) -> object:
    return curve.loc[curve["kind"] == "train", "loss"].to_numpy()


# ---- bench: the GPU rows -------------------------------------------------------------------------


def bench(run: Run, limit: float) -> str:
    arrays = REPO / "resources" / "mnist" / "mnist.npz"
    if not arrays.is_file():
        raise StageFailed(f"{arrays} is missing: the lanes stage prepares it")
    out = run.out / "bench-gpu.json"
    command = [run.python, "-m", "gradlanes.bench.gpu", "--arrays", str(arrays), "--json", str(out)]
    if run.command(command, limit, env=run_env()) != 0 or not out.is_file():
        raise StageFailed("python -m gradlanes.bench.gpu failed")
    rows = json.loads(out.read_text())
    if rows["status"] != "ok":
        raise StageFailed(f"the GPU rows were skipped: {rows['reason']}")
    parts = [
        f"{r['engine']} {r['step_us_median']:.1f} µs/step"
        + (f" ({100 * r['fraction_of_limit']:.1f} % of the limit)" if r.get("fraction_of_limit") else "")
        for r in rows["rows"]
        if r["status"] == "ok"
    ]
    return "; ".join(parts)


# ---- what comes back -----------------------------------------------------------------------------


def machine(run: Run) -> dict:
    def output(args: list[str]) -> str | None:
        try:
            return subprocess.run(args, capture_output=True, text=True, timeout=30).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None

    return {
        "nvidia_smi": output(["nvidia-smi"]),
        "driver": gpu.driver_version(),
        "python": output([run.python, "-VV"]),
        "jax": output([run.python, "-c", "import jax, jaxlib; print(jax.__version__, jaxlib.__version__)"]),
        "cuda_plugins": gpu.installed_cuda_plugins(),
        # Records name the commit only where .git travelled with the checkout (carry it).
        "git_commit": output(["git", "-C", str(REPO), "rev-parse", "HEAD"]),
        "git_changes": output(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"]),
    }


def pack(run: Run) -> None:
    """OUT/gpu-run.tar.gz: the published experiment, the work area, logs, and this run's own notes."""
    members = [REPO / "work", REPO / "logs", REPO / ".snakemake" / "log"]
    if run.summary.get("experiment"):  # what rule publish wrote, to commit as it is
        members.append(REPO / "results" / run.summary["experiment"])
    notes = [SCRATCH / name for name in ("pytest-gpu.log", "pytest-gpu.xml", "rerun-first-record.json",
                                         "oneshot-config.yaml")]  # fmt: skip
    partial = run.out / "gpu-run.tar.gz.partial"
    with tarfile.open(partial, "w:gz") as archive:
        for root in members:
            for path in sorted(root.rglob("*")) if root.is_dir() else []:
                if path.is_file() and path.suffix != ".npz":  # weights stay behind: large, rebuilt by the DAG
                    archive.add(path, arcname=str(path.relative_to(REPO)))
        for path in notes:
            if path.is_file():
                archive.add(path, arcname=f"oneshot/{path.name}")
        digest = io.BytesIO(json.dumps(init_digests(), indent=2).encode())
        info = tarfile.TarInfo("oneshot/init-sha256.json")
        info.size = len(digest.getvalue())
        archive.addfile(info, digest)
    partial.replace(run.out / "gpu-run.tar.gz")


def init_digests() -> dict[str, str]:
    """SHA-256 of each initial-weights file, to compare with the CPU machine's (`work/*/init/`)."""
    return {
        str(path.relative_to(REPO)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted((REPO / "work").glob("*/init/*/*.npz"))
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/gpu/oneshot.sh", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the output folder ($OUT on the device machine)")
    parser.add_argument("--python", default=sys.executable, help="the Python with JAX (default: this one)")
    parser.add_argument(
        "--rehearse", action="store_true",
        help="run every stage on a machine without a GPU (the gpu lanes are then skipped, with the reason): "
        "a rehearsal of this script, not a GPU run",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    why = refusal(args.python, args.rehearse)
    if why:
        print(f"oneshot: refused: {why}", file=sys.stderr)
        (args.out / "oneshot.json").write_text(json.dumps({"refused": why}, indent=2) + "\n")
        return 2
    SCRATCH.mkdir(parents=True, exist_ok=True)
    run = Run(args.out, args.python)
    run.summary["rehearsal"] = args.rehearse
    if not args.rehearse:
        run.device_kind = jax_gpu(args.python)[0]  # asked already by the refusal: cached
    run.summary["device_kind"] = run.device_kind
    run.say(f"oneshot: {REPO} -> {args.out}; budget {BUDGET_S} s")
    run.summary["machine"] = machine(run)
    ok = run.stage("install", lambda limit: install(run, limit))
    if ok:
        sys.path.insert(0, str(SITE))  # the carried packages (yaml, jsonschema) for the steps below
        # the experiment, each gpu lane's seeds and their records, read once for every stage below
        run.targets = gpu_lane_targets([REPO / "config.yaml", override_file(run)])
        run.summary["experiment"] = run.targets[0]
        # The records and the benchmark rows first: a run cut short keeps the deliverables.
        steps = [
            ("inputs", inputs),
            ("lanes", lanes),
            ("publish", publish),
            ("bench", bench),
            ("gpu_tests", gpu_tests),
            ("rerun", rerun),
        ]
        for name, step in steps:
            ok = run.stage(name, lambda limit, step=step: step(run, limit)) and ok
            pack(run)
    run.say(f"oneshot: {'done' if ok else 'FINISHED WITH FAILURES'} in {run.summary['elapsed_s']} s")
    run.save()
    pack(run)
    run.close()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
